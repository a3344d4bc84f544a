"""The rollout engine seam: generate groups of samples, take new weights in place."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from torch import Tensor

from grouprl.types import Completion


@dataclass(frozen=True)
class SamplingSettings:
    group_size: int = 1
    """Completions per prompt (``rollout.n`` in training; 1 for validation)."""
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 256
    """Tokens per completion at most; with ``max_tokens_each``, the largest of them."""
    max_tokens_each: tuple[int, ...] | None = None
    """Each prompt's own ``max_tokens``, aligned with the prompts of the ``generate`` call
    (the gateway's requests, one per episode, each with the room its context leaves);
    None: ``max_tokens`` for every prompt."""
    seed: int | None = None
    """Base seed; sample j of prompt i draws from seed + i * group_size + j (as vLLM seeds a
    request's children), so results do not depend on how prompts are batched."""
    ignore_eos: bool = False
    """Generate ``max_tokens`` tokens even past EOS (benchmarks): every completion then has
    exactly ``max_tokens`` tokens and finish reason ``length``."""

    @property
    def is_greedy(self) -> bool:
        """Temperature below 1e-5 means argmax decoding (vLLM's threshold); engines then
        decode once per prompt and return ``group_size`` copies."""
        return self.temperature < 1e-5

    def prompt_max_tokens(self, count: int) -> list[int]:
        """The ``max_tokens`` of each of the call's ``count`` prompts."""
        if self.max_tokens_each is None:
            return [self.max_tokens] * count
        if len(self.max_tokens_each) != count:
            raise ValueError(
                f"SamplingSettings.max_tokens_each has {len(self.max_tokens_each)} values for "
                f"{count} prompts; give one per prompt, or None"
            )
        return list(self.max_tokens_each)


class RolloutEngine(Protocol):
    """Generates completions with the current policy weights.

    ``generate`` returns, for each prompt, ``settings.group_size`` completions of at most
    that prompt's max_tokens (``settings.prompt_max_tokens``: one call serves prompts of
    different lengths, as the gateway sends them) with the sampled-token logprobs under
    the engine's weights, of the distribution each token was drawn from (logits /
    temperature, then top-k and top-p; vLLM's ``processed_logprobs``), which the
    trainer's ``log_softmax(logits / T)`` equals when top-k and top-p are off.
    ``update_weights`` replaces the weights in place (no reload, no disk round trip
    visible to the caller) and records ``version``; ``weight_version`` says which weights
    the next ``generate`` uses.
    """

    @property
    def weight_version(self) -> int: ...

    def generate(
        self, prompts: list[list[int]], settings: SamplingSettings
    ) -> list[list[Completion]]: ...

    def update_weights(
        self, named_tensors: Iterable[tuple[str, Tensor]], *, version: int
    ) -> None: ...

    def released(self) -> AbstractContextManager[None]:
        """A block during which the engine gives its accelerator memory back to training
        (a colocated engine on GPU sleeps); a no-op where there is nothing to give."""
        ...

    def close(self) -> None: ...


class WeightVersion:
    """``RolloutEngine.weight_version`` for an engine whose ``update_weights`` records the
    version it now serves in ``_version`` (0 before the first push)."""

    _version: int = 0

    @property
    def weight_version(self) -> int:
        return self._version
