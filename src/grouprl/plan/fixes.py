"""The changes a memory error offers: each one re-planned, and offered only when it brings
the estimated peak per GPU under ``cluster.gpu`` (no torch).

A lever is one kind of change with its options, mildest first (``train.micro_batch_size``
halved, then quartered, ...)::

    levers in order    offload_optimizer, offload, activation checkpointing, micro-batch,
                       vLLM's GPU share, a GPU of the engine's own, more nodes, LoRA,
                       shorter completions
    single changes     each lever's mildest option that fits, for every lever that has one
    else combinations  the fewest levers that fit together (up to MAX_LEVERS), each relaxed
                       to its mildest option that still fits; at most MAX_OFFERED of them
    else the nearest   the combination with the lowest peak, and how far over it stays

A change is kept only if it adds no problem to the config's checks (more nodes must still
divide the mini-batch; the engine must still hold a sequence): ``Replan`` returns None
then. More nodes take a smaller ``train.micro_batch_size`` along when the rank's share of
a mini-batch shrinks below it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from pydantic import BaseModel

from grouprl.config.checks import Derived, config_problems, derived_numbers
from grouprl.config.errors import show
from grouprl.config.schema import RunConfig
from grouprl.plan.memory import human_bytes

Replan = Callable[[RunConfig, Derived], tuple[int, list[str]]]
"""The estimated peak per GPU of a changed config (and its derived numbers), with the
engine's problems."""

LORA_RANK = 64
MAX_LEVERS = 4  # combinations of up to this many levers
MAX_OFFERED = 3  # combinations offered


@dataclass(frozen=True)
class Change:
    key: str  # dotted config key
    value: object

    @property
    def text(self) -> str:
        return f"{self.key}={show(self.value)}"


Option = tuple[Change, ...]


@dataclass(frozen=True)
class Lever:
    options: list[Option]  # mildest first
    why: str  # what the change does, for the message


@dataclass(frozen=True)
class Fix:
    changes: Option  # with the micro-batch more nodes take along
    peak: int
    why: list[str]


@dataclass(frozen=True)
class Advice:
    fixes: list[Fix]  # changes that fit
    together: bool  # the fixes are combinations: no single change fits
    nearest: Fix | None  # nothing fits: the lowest peak found (None: no change applies)


def with_changes(cfg: RunConfig, changes: Sequence[Change]) -> RunConfig:
    """``cfg`` with each dotted key set (no validation: the values come from ``levers``)."""
    for change in changes:
        cfg = _set(cfg, change.key.split("."), change.value)
    return cfg


def _set(model: BaseModel, parts: list[str], value: object) -> Any:
    if len(parts) == 1:
        return model.model_copy(update={parts[0]: value})
    inner = _set(getattr(model, parts[0]), parts[1:], value)
    return model.model_copy(update={parts[0]: inner})


def levers(cfg: RunConfig) -> list[Lever]:
    """The changes that can lower a run's memory, in the order the message offers them;
    none repeats a current value."""
    c, t, r = cfg.cluster, cfg.train, cfg.rollout
    found = []
    if not c.offload and not c.offload_optimizer:
        why = "the AdamW moments wait in CPU memory except during each optimizer step"
        found.append(Lever([(Change("cluster.offload_optimizer", True),)], why))
    if not c.offload and cfg.world_size > 1:
        why = "weights, grads and AdamW states wait in CPU memory"
        found.append(Lever([(Change("cluster.offload", True),)], why))
    if not t.activation_checkpointing:
        why = "recomputes each layer's activations in the backward pass"
        found.append(Lever([(Change("train.activation_checkpointing", True),)], why))
    found += _micro_batch_levers(cfg)
    if r.engine == "vllm" and r.gpus == 0:
        share = [round(r.gpu_memory_utilization - 0.1 * k, 2) for k in range(1, 10)]
        options = [(Change("rollout.gpu_memory_utilization", u),) for u in share if u >= 0.1]
        if options:
            found.append(Lever(options, "a smaller share of each GPU for vLLM's KV cache"))
        if c.gpus_per_node > r.tensor_parallel_size:
            why = "the engine on GPUs of its own, off the training ranks"
            found.append(Lever([(Change("rollout.gpus", r.tensor_parallel_size),)], why))
    if c.gpus_per_node:
        options = [(Change("cluster.nodes", c.nodes * k),) for k in (2, 4, 8)]
        found.append(Lever(options, "the states shard over more ranks"))
    if not t.lora.rank:
        why = f"trains rank-{LORA_RANK} adapters, not every weight; the base stays frozen"
        found.append(Lever([(Change("train.lora.rank", LORA_RANK),)], why))
    if cfg.env.name == "single_turn" and r.max_tokens >= 2:
        options = [(Change("rollout.max_tokens", r.max_tokens // k),) for k in (2, 4)]
        found.append(Lever(options, "shorter completions: the model has less room to answer"))
    return found


def _micro_batch_levers(cfg: RunConfig) -> list[Lever]:
    t = cfg.train
    if t.micro_batch_tokens is None:
        sizes = _halved(t.micro_batch_size, floor=1)
        key, why = "train.micro_batch_size", "fewer samples per forward/backward, more passes"
    else:
        sample = derived_numbers(cfg).max_tokens_per_sample  # a longer sample goes alone
        sizes = _halved(t.micro_batch_tokens, floor=sample)
        key, why = "train.micro_batch_tokens", "fewer tokens per forward/backward, more passes"
    return [Lever([(Change(key, size),) for size in sizes], why)] if sizes else []


def _halved(value: int, *, floor: int) -> list[int]:
    """``value`` halved until ``floor``, ``floor`` included, largest first."""
    sizes, size = [], value // 2
    while size > floor:
        sizes.append(size)
        size //= 2
    return [*sizes, floor] if value > floor else []


def advise(cfg: RunConfig, *, gpu_bytes: int, replan: Replan, known: Sequence[str] = ()) -> Advice:
    """The changes of ``levers(cfg)`` that bring the peak under ``gpu_bytes`` and add no
    problem to the config's and to ``known`` (the engine's, as planned now)."""
    search, all_levers = _Search(cfg, gpu_bytes=gpu_bytes, replan=replan, known=known), levers(cfg)
    singles = []
    for lever in all_levers:
        mildest = next((option for option in lever.options if search.fits(option)), None)
        if mildest is not None:
            singles.append(search.fix([mildest], [lever.why]))
    if singles:
        return Advice(singles, together=False, nearest=None)
    for size in range(2, min(MAX_LEVERS, len(all_levers)) + 1):
        found = []
        for group in combinations(all_levers, size):
            chosen = [lever.options[-1] for lever in group]
            if not search.fits(_joined(chosen)):
                continue
            for i, lever in enumerate(group):  # relax each lever to its mildest that fits
                chosen[i] = next(o for o in lever.options if search.fits(_joined(chosen, i, o)))
            found.append(search.fix(chosen, [lever.why for lever in group]))
        if found:
            return Advice(found[:MAX_OFFERED], together=True, nearest=None)
    return Advice([], together=True, nearest=search.nearest())


class _Search:
    """The peak of ``cfg`` with each option applied, planned once per option."""

    def __init__(
        self, cfg: RunConfig, *, gpu_bytes: int, replan: Replan, known: Sequence[str]
    ) -> None:
        self.cfg, self.gpu_bytes, self.replan = cfg, gpu_bytes, replan
        self.before = {*config_problems(cfg), *known}
        self.peaks: dict[Option, int | None] = {}

    def peak(self, option: Option) -> int | None:
        """None: the option adds a problem to the config's checks or the engine's."""
        if option not in self.peaks:
            changed = _with_micro_batch(with_changes(self.cfg, option), option)
            self.peaks[option] = None
            if not set(config_problems(changed)) - self.before:
                found, problems = self.replan(changed, derived_numbers(changed))
                self.peaks[option] = None if set(problems) - self.before else found
        return self.peaks[option]

    def fits(self, option: Option) -> bool:
        found = self.peak(option)
        return found is not None and found <= self.gpu_bytes

    def fix(self, chosen: Sequence[Option], why: list[str]) -> Fix:
        option = _joined(chosen)
        changed = _with_micro_batch(with_changes(self.cfg, option), option)
        return Fix(_taken_along(self.cfg, changed, option), self.peak(option) or 0, why)

    def nearest(self) -> Fix | None:
        """The option planned with the lowest peak (the fewest changes among equals)."""
        tried = [(p, option) for option, p in self.peaks.items() if p is not None]
        if not tried:
            return None
        _, option = min(tried, key=lambda item: (item[0], len(item[1])))
        return self.fix([option], [])


def _joined(chosen: Sequence[Option], i: int | None = None, option: Option = ()) -> Option:
    parts = [option if j == i else part for j, part in enumerate(chosen)]
    return tuple(change for part in parts for change in part)


def _with_micro_batch(cfg: RunConfig, option: Option) -> RunConfig:
    """More ranks shrink each rank's share of a mini-batch: a micro-batch above the new
    share comes down to it."""
    if cfg.train.micro_batch_tokens is not None or not any(
        c.key in ("cluster.nodes", "rollout.gpus") for c in option
    ):
        return cfg
    mini = cfg.train.mini_batch_size or cfg.data.batch_size * cfg.rollout.n
    share = mini // cfg.world_size
    if 1 <= share < cfg.train.micro_batch_size:
        return with_changes(cfg, [Change("train.micro_batch_size", share)])
    return cfg


def _taken_along(cfg: RunConfig, changed: RunConfig, option: Option) -> Option:
    """``option`` with the micro-batch size ``_with_micro_batch`` took along."""
    micro = changed.train.micro_batch_size
    if micro == cfg.train.micro_batch_size or any(
        c.key == "train.micro_batch_size" for c in option
    ):
        return option
    return (*option, Change("train.micro_batch_size", micro))


def advice_text(advice: Advice, *, gpu: str, gpu_bytes: int) -> str:
    """The sentence a memory error ends with: the changes that fit, each with its peak."""

    def listed(fix: Fix) -> str:
        return f"{_overrides(fix)} ({human_bytes(fix.peak)}: {'; '.join(fix.why)})"

    if advice.fixes and not advice.together:
        items = "; ".join(listed(fix) for fix in advice.fixes)
        return f"Each of these alone fits (the estimated peak per GPU after it): {items}."
    if advice.fixes:
        items = "; or ".join(listed(fix) for fix in advice.fixes)
        return f"No single change fits; together these do (the peak per GPU after them): {items}."
    if advice.nearest is None:
        return "None of the simple changes (offload, micro-batch, more nodes, LoRA) applies."
    near = advice.nearest
    return (
        f"None of the simple changes fits cluster.gpu={gpu}, alone or up to {MAX_LEVERS} "
        f"together; the nearest, {_overrides(near)}, still needs {human_bytes(near.peak)} "
        f"({human_bytes(near.peak - gpu_bytes)} over)."
    )


def _overrides(fix: Fix) -> str:
    """The changes as command-line overrides: ``key=value key=value``, in backquotes."""
    return "`" + " ".join(change.text for change in fix.changes) + "`"
