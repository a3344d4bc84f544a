"""Config-time checks of ``reward_model`` entries (``driver/preflight.input_problems``):
read from files, before anything loads, in milliseconds (no torch, no transformers).

Each refusal names ``reward.functions.<i>.args.<key>``, the value, what is allowed and the
fix:

    path         missing; not a directory here, not shipped; its config.json not a
                 sequence classifier (``architectures``) of one label (``num_labels``,
                 ``id2label``)
    path         a tokenizer other than the policy's (``model.path``): refused, see below
    normalize    true, with no ``mean`` and ``std`` in config.json
    device       cuda on a machine without a GPU (no nvidia-smi, no /proc/driver/nvidia,
                 or ``CUDA_VISIBLE_DEVICES`` empty)
    max_length   past the model's ``max_position_embeddings``

A hub name that is not downloaded cannot be read here: its checks run when the workers
load it (a failure there fails its calls: reward failures, never 0).

Why another tokenizer is refused rather than warned about: the model reads the policy's
prompt as rendered by the policy's chat template, re-tokenized by its own tokenizer. That
works in principle, but a reward model learned its scores on its own family's template and
special tokens; given another's, what its score measures is unknown, and nothing in a run
shows it. A reward model trained from the policy (as ``builtin:tiny-arith-rm`` is) or on
its tokenizer reads exactly what it was trained on.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from grouprl.assets import ModelPathError, resolve_model_path
from grouprl.assets.tokenizers import vocab_difference
from grouprl.rewards.args import with_args
from grouprl.rewards.reward_model import RewardModel


def gpu_present() -> bool:
    """Whether this process sees an NVIDIA GPU, without torch: its driver's /proc entry or
    nvidia-smi on the PATH (``plan/target.py`` asks the latter too), and no
    ``CUDA_VISIBLE_DEVICES`` that hides every GPU (empty, or -1)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip() in ("", "-1"):
        return False
    return Path("/proc/driver/nvidia/gpus").is_dir() or shutil.which("nvidia-smi") is not None


def reward_model_problems(
    functions: list[Any], *, policy: str, missing_ok: bool = False
) -> list[str]:
    """Why each ``reward_model`` entry of ``functions`` (``RewardFunction`` records) would
    not score the policy's (``policy``: ``model.path``) samples as asked, as messages.
    ``missing_ok``: the job's machine, not this one, has the files and the GPU."""
    from grouprl.rewards.registry import REWARD_FUNCTIONS

    problems = []
    for i, entry in enumerate(functions):
        fn = REWARD_FUNCTIONS.get(entry.name)
        if not isinstance(fn, RewardModel):
            continue
        try:
            model = with_args(fn, dict(entry.args))
        except (TypeError, ValueError):  # reward_problems names the bad args
            continue
        problems += _entry_problems(model, index=i, policy=policy, missing_ok=missing_ok)
    return problems


def _entry_problems(model: RewardModel, *, index: int, policy: str, missing_ok: bool) -> list[str]:
    key = f"reward.functions.{index}.args"
    if not model.path:
        return [
            f"{key}.path is not set: reward_model needs the reward model to score with. Fix: "
            f"set {key}.path to a local directory, builtin:tiny-arith-rm, or a Hugging Face "
            "hub name of a sequence-classification model with one label"
        ]
    problems = []
    if model.device == "cuda" and not missing_ok and not gpu_present():
        problems.append(
            f"{key}.device='cuda', but this machine shows no GPU (no /proc/driver/nvidia, no "
            "nvidia-smi, or CUDA_VISIBLE_DEVICES hides them): the reward model would have to "
            "run on the CPU, which was not asked for. Allowed: auto, cpu, cuda. Fix: "
            f"{key}.device=auto (the GPU where there is one, else the CPU) or cpu, or run on "
            "a machine with a GPU"
        )
    config = _config(model.path, key=f"{key}.path", missing_ok=missing_ok)
    if isinstance(config, str):
        return [*problems, config]
    if config is None:
        return problems  # a hub name not downloaded: checked as the workers load it
    problems += _config_problems(model, config, key=key)
    if (differ := vocab_difference(model.path, policy)) is not None:
        problems.append(
            f"{key}.path={model.path!r}: its tokenizer is not the policy's "
            f"(model.path={policy!r}): {differ}. It would read the policy's prompts and "
            "answers as another model's text, a different model from the one it was "
            "trained as (docs/reward-models.md). Fix: use a reward model trained on the "
            "policy's tokenizer (scripts/make_tiny_reward_model.py shows how), or a "
            "policy of the reward model's family"
        )
    return problems


def _config_problems(model: RewardModel, config: dict[str, Any], *, key: str) -> list[str]:
    """Architecture, labels, stored normalisation and length of a readable config.json."""
    problems = []
    path = f"{key}.path={model.path!r}"
    archs = config.get("architectures") or []
    if not any(str(a).endswith("ForSequenceClassification") for a in archs):
        problems.append(
            f"{path}: its config.json's architectures are {archs}, not a sequence "
            "classifier (e.g. Qwen2ForSequenceClassification, LlamaForSequenceClassification, "
            "which AutoModelForSequenceClassification loads). A causal LM is no reward model: "
            "its head would be new, random weights. Fix: name a reward model"
        )
    labels = config.get("num_labels") or len(config.get("id2label") or {}) or 2
    if not problems and labels != 1:  # (not a classifier: its labels say nothing more)
        problems.append(
            f"{path}: it has {labels} labels (config.json's id2label), and a reward model "
            "has one: the score is its single logit. Fix: name a reward model with "
            "num_labels 1 (a classifier of several classes scores no sample)"
        )
    if model.normalize and not (_number(config.get("mean")) and _number(config.get("std"))):
        problems.append(
            f"{key}.normalize=True, but {model.path!r} stores no mean and std in its "
            "config.json (the keys OpenRLHF's reward-model training writes). Fix: "
            f"{key}.normalize=false, or add the mean and std of its scores over its training "
            "samples to config.json (scripts/make_tiny_reward_model.py writes them)"
        )
    elif model.normalize and not config["std"] > 0:
        problems.append(f"{key}.normalize=True, but {model.path!r} stores std={config['std']}")
    limit = config.get("max_position_embeddings")
    if model.max_length is not None and isinstance(limit, int) and model.max_length > limit:
        problems.append(
            f"{key}.max_length={model.max_length}: {model.path!r} reads {limit} tokens at "
            f"most (max_position_embeddings). Fix: {key}.max_length={limit} or less, or "
            "leave it unset"
        )
    return problems


def _config(path: str, *, key: str, missing_ok: bool) -> dict[str, Any] | str | None:
    """The model's config.json; a message when a local or shipped path has none; None
    for a hub name (nothing to read here), or a path absent here with ``missing_ok``."""
    try:
        local = Path(resolve_model_path(path, key=key)).expanduser()
    except ModelPathError as err:
        return None if missing_ok else str(err)
    if not local.is_dir():
        return None  # a hub name: transformers resolves it as the workers load
    found = local / "config.json"
    try:
        config = json.loads(found.read_text())
    except (OSError, ValueError) as err:
        return (
            f"{key}={path!r}: {found} cannot be read ({err}); a Hugging Face model "
            f"directory has one. Fix: point {key} at the reward model's directory"
        )
    return config if isinstance(config, dict) else f"{key}={path!r}: {found} is no object"


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
