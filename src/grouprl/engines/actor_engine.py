"""A rollout engine in a Ray actor of its own: one replica of ``replicas.ReplicaSet``.

    driver ──generate(prompts)──────► RolloutHost actor ─► the configured engine (vllm,
    node's leader rank ──stage(bucket)─►   hf) built inside it, on the GPUs it shares with
    driver ──apply(v)────────────────►    training ranks (colocated: it sleeps while they
                                          train), on GPUs of its own, or on CPU

Stage calls run in the actor's ``push`` concurrency group (a thread of their own), so a
replica takes the next weights while it generates; ``apply_weights`` runs in the
default group with ``generate``, which Ray runs one at a time: on the actor's side too a
push never goes live in the middle of a generation (the driver's push gate orders them
already: ``ReplicaSet.pushing``).

``ActorEngine`` is the handle, a ``RolloutEngine`` like the others. It pickles (a
Ray actor handle and a name), so the training rank on the replica's node can push
weights to it directly; every failure and timeout names the replica. Each call is bounded
(``config/replica_timeouts.py``: ``rollout.timeout_s``, or from the call's work), since a
replica that is alive but stuck (a hung GPU, a stopped process) answers nothing: past
the bound the actor is killed and the step fails (or the run restarts, with
``trainer.max_restarts``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from torch import Tensor

from grouprl.config.replica_timeouts import Bound, generation_bound, other_call_bound, push_bound
from grouprl.config.schema import RunConfig
from grouprl.device import DeviceName
from grouprl.engines.base import NamedTensors, SamplingSettings, TopLogprobs, TwoStepPush
from grouprl.types import Completion

if TYPE_CHECKING:
    from ray import ObjectRef

Bucket: TypeAlias = "dict[str, Tensor] | ObjectRef"
"""One bucket of a push: the tensors, or a Ray reference to them in the node's object
store (read by every replica of the node)."""


class RolloutHost:
    """The actor's body: builds the configured engine where Ray placed it."""

    def __init__(
        self,
        cfg: RunConfig,
        *,
        model_dir: str,
        cache_dir: str | None,
        device: DeviceName,
        sleeps: bool,
    ) -> None:
        from transformers import AutoTokenizer

        from grouprl.device import resolve_device
        from grouprl.engines.build import make_engine

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.engine = make_engine(
            cfg,
            model_dir=model_dir,
            tokenizer=tokenizer,
            device=resolve_device(device),
            cache_dir=cache_dir,
            sleeps=sleeps,
        )
        self._released: AbstractContextManager[None] | None = None

    def generate(self, prompts: list[list[int]], settings: SamplingSettings):
        return self.engine.generate(prompts, settings)

    def token_logprobs(self, ids: list[list[int]], starts: list[int]) -> list[list[float]]:
        """The engine's logprobs of given tokens (a teacher replica: ``engines/teacher.py``)."""
        return self.engine.token_logprobs(ids, starts)  # type: ignore[attr-defined]

    def top_logprobs(self, ids: list[list[int]], starts: list[int], k: int) -> list[TopLogprobs]:
        """The same, with the top ``k`` at each position (``Teacher.top_logprobs``)."""
        return self.engine.top_logprobs(ids, starts, k)  # type: ignore[attr-defined]

    def stage_weights(
        self, weights: dict[str, Tensor], version: int, last: bool, lora_scaling: float | None
    ) -> int:
        """One bucket of a push (called in the ``push`` concurrency group: it may run while
        ``generate`` does, on another thread); returns the bytes it staged."""
        self.engine.stage_weights(
            weights.items(), version=version, last=last, lora_scaling=lora_scaling
        )
        return sum(t.numel() * t.element_size() for t in weights.values())

    def apply_weights(self, version: int) -> int:
        """Makes the staged push live (in the default group, as ``generate``: the two never
        run at once here); returns the version the engine serves."""
        self.engine.apply_weights(version)
        return self.engine.weight_version

    def sleep(self) -> None:
        self._released = self.engine.released()
        self._released.__enter__()

    def wake(self) -> None:
        released, self._released = self._released, None
        if released is not None:
            released.__exit__(None, None, None)

    def close(self) -> None:
        self.engine.close()


PUSH_GROUP = "push"  # staging calls' thread (the module docstring)
CONCURRENCY_GROUPS = {PUSH_GROUP: 1}


@dataclass
class ActorEngine(TwoStepPush):
    """The handle of one replica's actor. ``name`` says which replica it is and where
    (node, GPUs), for every message; ``timeout_s`` bounds each call (rollout.timeout_s;
    None: each call's bound follows from its work, at the rates of ``on_gpu``)."""

    actor: Any  # a Ray actor handle (its methods are untyped .remote proxies); None once closed
    name: str
    timeout_s: float | None
    sleeps: bool = False
    on_gpu: bool = False
    push_bytes: int = 0
    """The largest stage call's bytes seen by this handle (bounds an apply's time)."""
    _version: int = 0

    def generate(
        self, prompts: list[list[int]], settings: SamplingSettings
    ) -> list[list[Completion]]:
        n = settings.group_size
        bound = generation_bound(
            self.timeout_s,
            prefill_tokens=n * sum(map(len, prompts)),
            sequences=n * len(prompts),
            new_tokens=n * sum(settings.prompt_max_tokens(len(prompts))),
            on_gpu=self.on_gpu,
        )
        return self.get(self.actor.generate.remote(prompts, settings), "a generation", bound)

    def token_logprobs(self, ids: list[list[int]], starts: list[int]) -> list[list[float]]:
        """The replica's logprobs of given tokens (``engines/teacher.py``), bounded as a
        generation of one token per sequence."""
        ref = self.actor.token_logprobs.remote(ids, starts)
        return self.get(ref, "scoring tokens", self._scoring_bound(ids))

    def top_logprobs(self, ids: list[list[int]], starts: list[int], k: int) -> list[TopLogprobs]:
        """The same, with the top ``k`` at each position (``Teacher.top_logprobs``)."""
        ref = self.actor.top_logprobs.remote(ids, starts, k)
        return self.get(ref, "scoring tokens", self._scoring_bound(ids))

    def _scoring_bound(self, ids: list[list[int]]) -> Bound:
        return generation_bound(
            self.timeout_s,
            prefill_tokens=sum(map(len, ids)),
            sequences=len(ids),
            new_tokens=len(ids),
            on_gpu=self.on_gpu,
        )

    def _stage(
        self, named_tensors: NamedTensors, *, version: int, last: bool, lora_scaling: float | None
    ) -> None:
        """Sends one bucket (a dict pushed as it is) and waits for the replica to stage it
        (a LoRA push is merged in the replica's process)."""
        weights = {name: tensor.detach().cpu() for name, tensor in named_tensors}
        nbytes = sum(t.numel() * t.element_size() for t in weights.values())
        ref = self.start_stage(weights, version, last=last, lora_scaling=lora_scaling)
        self.wait_stage(ref, nbytes=nbytes)

    def apply_weights(self, version: int, *, nbytes: int = 0) -> None:
        """Has the replica make its staged push live, within the bound of the largest push
        this handle has seen (``nbytes``, or a stage's); records the version it reports."""
        self.push_bytes = max(self.push_bytes, nbytes)
        self._version = self.get(
            self.actor.apply_weights.remote(version),
            "applying a weight push",
            push_bound(self.timeout_s, nbytes=self.push_bytes),
        )

    def start_stage(
        self, weights: Bucket, version: int, *, last: bool, lora_scaling: float | None
    ) -> ObjectRef:
        """Starts staging ``weights`` (a dict, or a Ray reference to one already in the
        object store, shared by the node's replicas) in the actor's push group, which
        runs beside a generation; ``wait_stage`` waits for it."""
        method = self.actor.stage_weights.options(concurrency_group=PUSH_GROUP)
        return method.remote(weights, version, last, lora_scaling)

    def wait_stage(self, ref: ObjectRef, *, nbytes: int) -> int:
        """The bytes the replica staged once the stage call ``ref`` of ``nbytes`` is done,
        within the push's bound."""
        self.push_bytes = max(self.push_bytes, nbytes)
        return self.get(ref, "staging a weight push", push_bound(self.timeout_s, nbytes=nbytes))

    @contextmanager
    def released(self) -> Iterator[None]:
        """A colocated replica sleeps for the block (its GPU memory goes to training)."""
        if not self.sleeps:
            yield
            return
        self.get(self.actor.sleep.remote(), "sleep")
        try:
            yield
        finally:
            self.get(self.actor.wake.remote(), "wake up")

    def close(self) -> None:
        import ray

        if self.actor is None:
            return
        try:
            self.get(self.actor.close.remote(), "close")
        finally:
            ray.kill(self.actor)
            self.actor = None

    def get(self, ref: ObjectRef, what: str, bound: Bound | None = None) -> Any:
        """``ray.get(ref)`` within ``bound`` (default: a sleep's, wake-up's or close's); a
        timeout kills the actor; a failure or a timeout raises ``WorkerFailed`` naming the
        replica and the bound."""
        import ray
        import ray.exceptions

        from grouprl.cluster.connection import WorkerFailed, reason

        bound = bound or other_call_bound(self.timeout_s)
        try:
            return ray.get(ref, timeout=bound.seconds)
        except ray.exceptions.GetTimeoutError:
            ray.kill(self.actor)
            raise WorkerFailed(
                f"{self.name} did not finish {what} within {bound.seconds:.0f} s "
                f"({bound.rule}): stopped it"
            ) from None
        except Exception as err:
            raise WorkerFailed(f"{self.name} failed during {what}: {reason(err)}") from None
