"""The rollout engine seam: generate groups of samples, take new weights in place.

One name per concept around pushes: a *push* is one weight version reaching an engine.
It is *staged* (``stage_weights``, bucket by bucket, while the engine generates; what a
node's stage moved is a ``Staged``: ``engines/push.py``), then *applied*
(``apply_weights``: live, under the push gate); ``update_weights`` is both in one call.
``TwoStepPush`` holds stage-then-apply for every engine (and the replicas' handles),
``PushLedger`` what an engine has staged, and ``OneCallPush`` puts an engine that takes
``update_weights`` only behind the two steps.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Protocol

from torch import Tensor

from grouprl.engines.lora_push import AdapterMerge
from grouprl.types import Completion

NamedTensors = Iterable[tuple[str, Tensor]]
"""A push's tensors by name (one bucket, or the whole push)."""


OnGroup = Callable[[int, list[Completion]], None]
"""``on_group(i, completions)``: prompt i's group has finished (``generate``'s argument,
on engines that stream groups: ``streams_groups``)."""

TopLogprobs = tuple[list[float], list[list[int]], list[list[float]]]
"""A teacher's answer for one sequence (``Teacher.top_logprobs``): from the start on, the
logprob of each given token, and at each position the ids and logprobs of the k most
likely tokens (most likely first; no positions with k = 0)."""


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


def replicate(completion: Completion, n: int) -> list[Completion]:
    """``n`` independent copies, their lists too (greedy decoding gives every sample of a
    group the same tokens)."""
    return [
        replace(
            completion,
            token_ids=list(completion.token_ids),
            logprobs=list(completion.logprobs),
            versions=list(completion.versions),
        )
        for _ in range(n)
    ]


class RolloutEngine(Protocol):
    """Generates completions with the current policy weights.

    ``generate`` returns, for each prompt, ``settings.group_size`` completions of at most
    that prompt's max_tokens (``settings.prompt_max_tokens``) with the sampled-token
    logprobs of the distribution each token was drawn from (``engines/vllm_engine.py``).
    ``update_weights`` replaces the weights in place (no reload, no disk round trip
    visible to the caller) and records ``version``; ``weight_version`` says which weights
    the next ``generate`` uses. It is ``stage_weights`` then ``apply_weights``:

    - ``stage_weights`` may be called while ``generate`` runs on another thread (the
      staged copy is one that generation never reads) and more than once for one push
      (buckets, in any order, each name once; the ``last=True`` call after the others),
      and raises at that last call unless the push's calls together hold every weight
      (all or nothing: a layer left out would keep serving the old weights). A failed
      stage is dropped. ``lora_scaling``: a LoRA push (``engines/lora_push.py``), which
      the engine merges into the base weights it keeps.
    - ``apply_weights(version, nbytes=...)`` makes the finished stage of ``version`` live
      and records the version; it raises if no finished stage of ``version`` is there.
      ``nbytes``: the push's full weights in bytes (``Staged.weight_bytes``; 0: unknown),
      which bound the apply of an engine in another process. The caller makes sure no
      generation runs meanwhile (``ReplicaSet.pushing``).
    """

    @property
    def weight_version(self) -> int: ...

    def generate(
        self, prompts: list[list[int]], settings: SamplingSettings
    ) -> list[list[Completion]]: ...

    def update_weights(
        self, named_tensors: Iterable[tuple[str, Tensor]], *, version: int
    ) -> None: ...

    def stage_weights(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        *,
        version: int,
        last: bool = True,
        lora_scaling: float | None = None,
    ) -> None: ...

    def apply_weights(self, version: int, *, nbytes: int = 0) -> None: ...

    def released(self) -> AbstractContextManager[None]:
        """A block during which the engine gives its accelerator memory back to training
        (a colocated engine on GPU sleeps); a no-op where there is nothing to give."""
        ...

    def close(self) -> None: ...


class PushLedger:
    """Which push an engine has staged: its version, the names (with shapes) staged so far,
    and whether its last call came and passed the completeness check (``ready``).

    A stage call for another version than the one being staged, or after a finished or
    failed push, starts a new push (``names`` empty)."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.version: int | None = None
        self.names: dict[str, tuple[int, ...]] = {}
        self.open = False  # buckets of ``version`` are coming
        self.ready = False  # finished and checked, not applied yet

    @contextmanager
    def stage(self, version: int, *, last: bool) -> Iterator[bool]:
        """One stage call of ``version``'s push: yields whether it starts a new push; the
        call's failure drops the push, its success with ``last`` finishes it."""
        new = self.part(version)
        try:
            yield new
        except BaseException:
            self.drop()
            raise
        if last:
            self.finish()

    def part(self, version: int) -> bool:
        """Called at the start of each stage call; returns whether it starts a new push."""
        new = not self.open or self.version != version
        if new:
            self.version, self.names, self.open, self.ready = version, {}, True, False
        return new

    def add(self, name: str, shape: tuple[int, ...]) -> None:
        """Records a staged tensor; a name staged twice in one push raises."""
        if name in self.names:
            raise ValueError(
                f"weight {name!r} given twice in the push of version {self.version} to the "
                f"{self.engine} engine; each name goes in one bucket"
            )
        self.names[name] = shape

    def finish(self) -> None:
        """The push's last call passed its checks: it may be applied."""
        self.open, self.ready = False, True

    def drop(self) -> None:
        """A stage call failed: nothing of it may be applied."""
        self.version, self.names, self.open, self.ready = None, {}, False, False

    def take(self, version: int) -> None:
        """Before an apply: raises unless the push of ``version`` is staged whole."""
        if not self.ready or self.version != version:
            got = "nothing" if self.version is None else f"version {self.version}"
            state = "staged whole" if self.ready else "not finished (no last=True call)"
            raise RuntimeError(
                f"apply_weights({version}) on the {self.engine} engine: it has {got} "
                f"{state if self.version is not None else 'staged'}; call "
                "stage_weights(..., last=True) for this version first"
            )
        self.ready = False


class TwoStepPush(ABC):
    """``stage_weights`` and ``update_weights`` (stage, then apply) for an engine that
    implements ``_stage`` and ``apply_weights``; the push (``apply_weights``) records the
    version the engine now serves in ``_version`` (0 before the first)."""

    _lora: AdapterMerge | None = None
    _version: int = 0

    @property
    def weight_version(self) -> int:
        return self._version

    def stage_weights(
        self,
        named_tensors: NamedTensors,
        *,
        version: int,
        last: bool = True,
        lora_scaling: float | None = None,
    ) -> None:
        """``RolloutEngine.stage_weights``; ``lora_scaling`` (alpha / r): the tensors are a
        LoRA push (``engines/lora_push.py``: base weights and adapters, or adapters only)."""
        self._stage(named_tensors, version=version, last=last, lora_scaling=lora_scaling)

    def _merged(
        self, named_tensors: NamedTensors, *, version: int, last: bool, lora_scaling: float | None
    ) -> Iterable[tuple[str, Tensor]]:
        """A LoRA push merged into the base weights this engine keeps (an engine in this
        process stages what this yields); any other push as it is."""
        if lora_scaling is None:
            return named_tensors
        self._lora = self._lora or AdapterMerge()
        return self._lora.expand(named_tensors, scaling=lora_scaling, version=version, last=last)

    @abstractmethod
    def _stage(
        self, named_tensors: NamedTensors, *, version: int, last: bool, lora_scaling: float | None
    ) -> None: ...

    @abstractmethod
    def apply_weights(self, version: int, *, nbytes: int = 0) -> None: ...

    def update_weights(self, named_tensors: Iterable[tuple[str, Tensor]], *, version: int) -> None:
        """Stages the whole push in one call, then applies it."""
        self.stage_weights(named_tensors, version=version, last=True)
        self.apply_weights(version)

    def released(self) -> AbstractContextManager[None]:
        """Nothing to release (an engine whose memory is its own, or small)."""
        return nullcontext()


class OneCallPush(TwoStepPush):
    """An engine that takes a push in one call only (``update_weights``; a test's fake, a
    third party's engine) behind the two steps: ``stage_weights`` holds the tensors in
    this process and ``apply_weights`` hands them over whole, so its whole push waits
    for generation to stop. A LoRA push to it is merged here first."""

    def __init__(self, engine: RolloutEngine) -> None:
        self.engine = engine
        self._held: dict[str, Tensor] = {}
        self._ledger = PushLedger(type(engine).__name__)

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    @property
    def streams_groups(self) -> bool:
        """Whether the engine's ``generate`` takes ``on_group`` (``OnGroup``)."""
        return bool(getattr(self.engine, "streams_groups", False))

    def generate(
        self,
        prompts: list[list[int]],
        settings: SamplingSettings,
        on_group: OnGroup | None = None,
    ) -> list[list[Completion]]:
        if on_group is None:
            return self.engine.generate(prompts, settings)
        return self.engine.generate(prompts, settings, on_group=on_group)  # type: ignore[call-arg]

    def update_weights(self, named_tensors: Iterable[tuple[str, Tensor]], *, version: int) -> None:
        self.engine.update_weights(named_tensors, version=version)

    def _stage(
        self, named_tensors: NamedTensors, *, version: int, last: bool, lora_scaling: float | None
    ) -> None:
        named = self._merged(named_tensors, version=version, last=last, lora_scaling=lora_scaling)
        with self._ledger.stage(version, last=last) as new:
            self._held = {} if new else self._held
            for name, tensor in named:
                self._ledger.add(name, tuple(tensor.shape))
                self._held[name] = tensor

    def apply_weights(self, version: int, *, nbytes: int = 0) -> None:
        self._ledger.take(version)
        held, self._held = self._held, {}
        self.engine.update_weights(held.items(), version=version)

    def released(self) -> AbstractContextManager[None]:
        return self.engine.released()

    def close(self) -> None:
        self.engine.close()


def two_step(engine: RolloutEngine) -> RolloutEngine:
    """``engine``, or ``OneCallPush(engine)`` when it has no ``stage_weights``."""
    return engine if hasattr(engine, "apply_weights") else OneCallPush(engine)
