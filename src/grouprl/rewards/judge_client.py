"""How ``llm_judge`` asks its judge, in a reward worker: an OpenAI-compatible server over
HTTP (``ask_server``: the standard library's ``urllib``, nothing to install), or a local
model (``local_judge``: transformers, imported here on first use, never at the driver).

A request's failures, each a ``JudgeError`` of its kind (``failures.FailureKind``)::

    past timeout_s (connect or read)        timeout      retried
    HTTP 429                                rate_limit   retried (Retry-After honoured)
    HTTP 5xx                                http         retried
    HTTP 4xx but 429                        http         not retried: the request is wrong
    connection refused, no route, DNS       unreachable  not retried: the server is down
    a body that is not chat completions     bad_response not retried

Retry k (from 0) waits ``backoff_s * 2**k`` first (a 429's ``Retry-After`` instead when it
is longer and below ``timeout_s``).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from grouprl.rewards.failures import FailureKind, SampleFailed


class JudgeError(Exception):
    """One sample the judge could not score: ``kind`` (``failures.FailureKind``) says how."""

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        error_type: str = "JudgeError",
        *,
        retry: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind
        self.error_type = error_type
        self.retry = retry
        """Worth another try (a timeout, a 5xx, a 429)."""
        self.retry_after = retry_after
        """A 429's ``Retry-After`` seconds, where it gave them."""

    def failed(self) -> SampleFailed:
        return SampleFailed(self.kind, self.error_type, str(self))


_LOCAL: dict[str, LocalJudge] = {}
"""The worker's loaded local judges, by path."""


def ask_server(
    question: str,
    *,
    url: str,
    model: str,
    max_tokens: int,
    temperature: float,
    timeout_s: float,
    retries: int,
    backoff_s: float,
) -> str | JudgeError:
    """The answer of the server at ``url`` (a base URL, ``.../v1``) serving ``model`` to
    ``question`` (one user message), or the ``JudgeError`` of the last try (module
    docstring: which are retried, and the waits)."""
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
    ).encode()
    endpoint = f"{url.rstrip('/')}/chat/completions"
    error = JudgeError("unreachable", "no request was made")
    for attempt in range(retries + 1):
        if attempt:
            wait = backoff_s * 2 ** (attempt - 1)
            after = error.retry_after  # a 429's Retry-After: when longer, within reason
            time.sleep(after if after is not None and wait < after < timeout_s else wait)
        try:
            return _post(endpoint, body, timeout_s)
        except JudgeError as err:
            error = err
            if not err.retry:
                return err
    return error


def _post(url: str, body: bytes, timeout_s: float) -> str:
    """One chat-completions request: the first choice's message content, or raises a
    ``JudgeError`` (``retry`` set on those worth another try)."""
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as err:
        detail = err.read(300).decode(errors="replace") if err.fp is not None else ""
        raise JudgeError(
            "rate_limit" if err.code == 429 else "http",
            f"HTTP {err.code} from {url}: {detail!r}",
            "JudgeHTTPError",
            retry=err.code == 429 or err.code >= 500,
            retry_after=_seconds(err.headers.get("Retry-After")),
        ) from None
    except TimeoutError as err:
        raise _timeout(url, timeout_s, err) from None
    except urllib.error.URLError as err:
        if isinstance(err.reason, TimeoutError):
            raise _timeout(url, timeout_s, err) from None
        raise JudgeError(
            "unreachable",
            f"{url} did not answer the connection ({err.reason}). Fix: start the judge "
            "server, or correct the url (and reward.network: true)",
            "JudgeUnreachable",
        ) from None
    except (ConnectionError, OSError) as err:
        raise JudgeError("unreachable", f"{url}: {err}", "JudgeUnreachable") from None
    return _content(raw, url)


def _timeout(url: str, timeout_s: float, err: BaseException) -> JudgeError:
    return JudgeError(
        "timeout",
        f"{url} did not answer within timeout_s={timeout_s:g}s ({err})",
        "JudgeTimeout",
        retry=True,
    )


def _content(raw: bytes, url: str) -> str:
    try:
        content = json.loads(raw)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise JudgeError(
            "bad_response",
            f"{url} answered {raw[:200]!r}, not a chat completion (choices[0].message)",
            "JudgeBadResponse",
        ) from None
    return "" if content is None else str(content)


def _seconds(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:  # an HTTP date: the backoff instead
        return None


def local_judge(path: str) -> LocalJudge:
    """The local judge at ``path`` in this worker, loaded on first use."""
    if path not in _LOCAL:
        _LOCAL[path] = _load(path)
    return _LOCAL[path]


@dataclass(frozen=True)
class LocalJudge:
    """A causal LM on this worker's CPU that answers questions greedily."""

    model: Any
    tokenizer: Any

    def answer(self, questions: list[str], max_tokens: int) -> list[str | JudgeError]:
        """Each question as one user message through the model's chat template, answered
        greedily in one batch (left-padded), up to ``max_tokens`` tokens or its eos."""
        import torch

        tok = self.tokenizer
        prompts = [
            tok.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
            )
            for q in questions
        ]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            out = self.model.generate(
                **enc,
                max_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        width = enc["input_ids"].shape[1]
        return list(tok.batch_decode(out[:, width:], skip_special_tokens=True))


def _load(path: str) -> LocalJudge:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grouprl.assets import resolve_model_path

    local = resolve_model_path(path, key="reward.functions.i.args.path")
    tokenizer = AutoTokenizer.from_pretrained(local)
    tokenizer.padding_side = "left"  # generation continues each row's last token
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(local).eval()
    return LocalJudge(model, tokenizer)
