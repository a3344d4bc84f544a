"""Whether a hub name that is no local path can load, asked once before anything loads.

transformers retries an unreachable hub (five tries, about a minute without network)
and ends with "Check your internet connection". A name given where a local directory
was meant (a run typed in the wrong directory) should cost one short try instead:

    in the hub cache                  None (transformers reads the cache)
    HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set, not cached
                                      no local directory here, offline: no try
    one HEAD of its config.json, ``TRY_S`` timeout, no retries:
      answered                        None
      gated                           no local directory here, the model gated
      no such repo, no config.json    no local directory here, no such hub model
      anything else (no network)      no local directory here, the hub unreachable
"""

from __future__ import annotations

from pathlib import Path

TRY_S = 10.0  # huggingface_hub's own timeout of such a HEAD (HF_HUB_ETAG_TIMEOUT)


def hub_problem(
    name: str, *, key: str, allowed: str, revision: str | None = None, endpoint: str | None = None
) -> str | None:
    """Why the hub model ``name`` (NAME or ORG/NAME, no local path here) cannot load, as
    a message naming ``key``, that no local directory of that name is here (the working
    directory) and what the hub said, ending with ``allowed`` (the fix); None when it is
    in the hub cache or the hub has it. One request at most, never retried."""
    from huggingface_hub import (
        constants,
        get_hf_file_metadata,
        hf_hub_url,
        try_to_load_from_cache,
    )
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        RepositoryNotFoundError,
    )

    if isinstance(try_to_load_from_cache(name, "config.json", revision=revision), str):
        return None
    here = f"{key}={name!r}: no local directory {name} here ({Path.cwd()})"
    if constants.is_offline_mode():  # HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE
        return (
            f"{here}, and HF_HUB_OFFLINE is set with no copy of hub model {name} in the hub "
            "cache, so it was not looked up (a hub model needs the network once, without "
            f"HF_HUB_OFFLINE). Fix: {allowed}"
        )
    url = hf_hub_url(name, "config.json", revision=revision, endpoint=endpoint)
    try:
        get_hf_file_metadata(url, timeout=TRY_S, retry_on_errors=False)
    except GatedRepoError:
        return (
            f"{here}, and hub model {name} is gated: this machine's token may not read it "
            f"(accept the model's terms on the hub and set HF_TOKEN). Fix: {allowed}"
        )
    except (RepositoryNotFoundError, EntryNotFoundError) as err:
        return (
            f"{here}, and the Hugging Face hub has no model {name} with a config.json "
            f"({type(err).__name__}; a private model needs HF_TOKEN). Fix: {allowed}"
        )
    except Exception as err:  # no network, DNS, a proxy, a timeout: one try, no retries
        said = str(err).splitlines()[0][:200] if str(err) else ""
        return (
            f"{here}, and the Hugging Face hub could not be reached in one try of {TRY_S:g} s "
            f"({type(err).__name__}: {said}): a hub name needs the network (with "
            f"HF_HUB_OFFLINE=1 a model downloaded before loads from the cache). Fix: {allowed}"
        )
    return None
