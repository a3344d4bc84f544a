"""Memory per GPU of a run, estimated from config.json and the run config alone (no torch).

``grouprl plan`` shows every term and ``plan.check_run`` rejects a run whose estimated
peak exceeds ``cluster.gpu``. These are estimates, calibrated against two measured runs
(issue 18: Qwen2.5-0.5B and -1.5B shapes, rollout.engine=hf, one H100); NCCL buffers and
FSDP2's padding are not counted. Each term's formula is in the module named beside it::

    one training GPU
      CUDA context     0.5 GiB (the trainer process)
      the trainer      its held states, its passes and its optimizer step
                       (``plan/trainer_memory.py``)
      hf engine        rollout.engine=hf: its weights, held throughout; its KV cache and
                       generation tensors while it generates (``plan/hf_memory.py``). In
                       the trainer's process with one rank; in an actor's process, which
                       holds all of it throughout, when the engines are Ray actors
      vLLM engine      a replica on the GPUs of tensor_parallel_size training ranks
                       (rollout.gpus=0, colocated; asleep while training) or on GPUs of its
                       own (rollout.gpus > 0, dedicated): ``plan/engine_memory.py``
    phases (live bytes)
      training         context + the trainer's held memory + the larger of its pass and
                       its optimizer step (+ an hf actor's process)
      generation       colocated: context + the trainer's held memory + the engine's
                       claim, or the hf engine's KV cache and generation tensors;
                       dedicated: the engine's GPU
    the allocator (``plan/allocator.py``)
      fragmentation    FRAGMENTATION x the trainer process's peak allocated: a calibration
      cached KV blocks the hf engine's KV tensors leave cached segments as they grow; held
                       as reserved memory but given back to CUDA when a request fails
      peak reserved    the trainer process's peak allocated + fragmentation + cached KV
                       blocks: what torch.cuda.max_memory_reserved reports (no context)
      peak per GPU     the larger phase + fragmentation: what must fit cluster.gpu

``problems`` (which ``plan.check_run`` raises): the peak per GPU over the GPU's size, with
the changes that bring it under (``plan/fixes.py``, each planned again); the engine's
weights over its claim; a KV cache smaller than one rollout.max_model_len sequence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grouprl.config.checks import derived_numbers
from grouprl.config.errors import ConfigError, show
from grouprl.config.schema import RunConfig
from grouprl.plan import fixes
from grouprl.plan.allocator import FRAGMENTATION
from grouprl.plan.engine_memory import Engine, GiB, engine_plan, engine_problems
from grouprl.plan.hf_memory import HfEngine, hf_plan
from grouprl.plan.memory import MemoryRow, SizeUnknown, human_bytes, model_config
from grouprl.plan.trainer_memory import trainer_memory

if TYPE_CHECKING:
    from grouprl.config.checks import Derived

MiB = 1024**2
CUDA_CONTEXT = GiB // 2

# total memory as nvidia-smi reports it
GPU_MEMORY: dict[str, int] = {
    "H100": 81559 * MiB,
    "H100-80GB": 81559 * MiB,
    "H200": 143771 * MiB,
    "A100-80GB": 81920 * MiB,
    "A100-40GB": 40960 * MiB,
    "L40S": 46068 * MiB,
    "L4": 23034 * MiB,
    "A10G": 23028 * MiB,
    "B200": 183359 * MiB,
}
SIZE_UNITS = {
    **{f"{p}b": 1000**i for i, p in enumerate("kmgt", start=1)},
    **{f"{p}ib": 1024**i for i, p in enumerate("kmgt", start=1)},
}
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]i?b)", re.IGNORECASE)


def parse_gpu(text: str) -> tuple[str, int]:
    """``(label, bytes)`` of a ``cluster.gpu`` value: a name in ``GPU_MEMORY`` (any case)
    or a size such as ``80GiB``, ``48GB`` or ``24000MiB``."""
    names = {name.lower(): name for name in GPU_MEMORY}
    if text.strip().lower() in names:
        name = names[text.strip().lower()]
        return name, GPU_MEMORY[name]
    match = SIZE.fullmatch(text.strip())
    if match and float(match[1]) > 0:
        return text.strip(), int(float(match[1]) * SIZE_UNITS[match[2].lower()])
    raise ConfigError(
        f"cluster.gpu={show(text)} is neither a GPU the memory planner knows "
        f"({', '.join(GPU_MEMORY)}) nor a size; set cluster.gpu to one of those names, to a "
        "size such as 80GiB, 48GB or 24000MiB (KB/MB/GB/TB or KiB/MiB/GiB/TiB), or to null "
        "(no memory check)."
    )


@dataclass(frozen=True)
class GpuPlan:
    """One training GPU and, with rollout.gpus > 0, one generation GPU; estimates."""

    gpu: str  # label: a GPU name or the size as written
    gpu_bytes: int
    training_gpu: list[MemoryRow]  # with the engine's rows when colocated
    generation_gpu: list[MemoryRow]  # the engine's own GPU (rollout.gpus > 0), else []
    training_phase: int  # the training GPU while training, live bytes
    generation_phase: int  # colocated: the training GPU while generating; else the engine's
    trainer_peak: int  # the trainer process's peak allocated (no CUDA context)
    fragmentation: int  # FRAGMENTATION x trainer_peak, reserved by the trainer's allocator
    cached_kv: int  # an in-process hf engine's cached KV blocks (reserved, given back)
    colocated: bool
    engine: Engine | None  # the vLLM engine
    hf: HfEngine | None  # the hf engine
    problems: list[str]

    @property
    def reserved(self) -> int:
        """The trainer process's peak reserved: torch.cuda.max_memory_reserved's figure."""
        return self.trainer_peak + self.fragmentation + self.cached_kv

    @property
    def peak(self) -> int:
        """What must fit one GPU: the larger phase and the trainer's fragmentation (on the
        training GPU, in both phases: the allocator keeps what it reserved)."""
        training = self.training_phase + self.fragmentation
        if not self.colocated:
            return max(training, self.generation_phase)
        return max(training, self.generation_phase + self.fragmentation)

    @property
    def fits(self) -> bool:
        return self.peak <= self.gpu_bytes


def gpu_name_problems(cfg: RunConfig) -> list[str]:
    """The message for a ``cluster.gpu`` that ``parse_gpu`` does not understand."""
    if cfg.cluster.gpu is None:
        return []
    try:
        parse_gpu(cfg.cluster.gpu)
    except ConfigError as err:
        return [str(err)]
    return []


def gpu_memory_problems(cfg: RunConfig, derived: Derived) -> list[str]:
    """The planner's problems; none without cluster.gpu, on CPU, or when a model's
    config.json is unknown (``grouprl plan`` says the check was skipped)."""
    if cfg.cluster.gpu is None or cfg.train.device == "cpu":
        return []
    try:
        return plan_for_run(cfg, derived).problems
    except SizeUnknown:
        return []


def plan_for_run(cfg: RunConfig, derived: Derived, *, advise: bool = True) -> GpuPlan:
    """``plan_gpu_memory`` with the policy's (and critic's) config.json found on disk or in
    ``plan/known_models.py``; ``SizeUnknown`` when one is not. ``advise=False``: the
    terms alone (a peak over the GPU is no problem then, and no fix is searched for)."""
    config, _ = model_config(cfg.model.path, revision=cfg.model.revision)
    critic_config = None
    if cfg.critic is not None and cfg.critic.path != cfg.model.path:
        critic_config, _ = model_config(cfg.critic.path)
    return plan_gpu_memory(cfg, derived, config=config, critic_config=critic_config, advise=advise)


def planned_reserved(cfg: RunConfig) -> int | None:
    """The plan's peak reserved estimate of one training rank's process (``GpuPlan.reserved``),
    or None when a model's config.json is unknown. It does not depend on the GPU's size, so
    a run without cluster.gpu is planned on an H100."""
    if cfg.cluster.gpu is None:
        cfg = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"gpu": "H100"})})
    try:
        return plan_for_run(cfg, derived_numbers(cfg), advise=False).reserved
    except SizeUnknown:
        return None


def peak_memory_line(peaks: list[int], *, planned: int | None) -> str:
    """The end of a GPU run's line: the largest of the ranks' peak reserved bytes (from
    ``torch.cuda.max_memory_reserved``) beside the plan's estimate."""
    rank = max(range(len(peaks)), key=peaks.__getitem__)
    where = f"rank {rank}" + (f" of {len(peaks)}" if len(peaks) > 1 else "")
    line = f"GPU memory: peak reserved {human_bytes(peaks[rank])} ({where}), "
    if planned is None:
        return line + "not planned (a model's config.json is unknown to grouprl plan)"
    off = peaks[rank] / planned - 1
    planned_text = f"planned {human_bytes(planned)} (grouprl plan's peak reserved"
    return line + f"{planned_text}; measured {off:+.0%})"


def plan_gpu_memory(
    cfg: RunConfig,
    derived: Derived,
    *,
    config: dict[str, Any],
    critic_config: dict[str, Any] | None = None,
    advise: bool = True,
) -> GpuPlan:
    """The memory of one training GPU and one generation GPU, with ``problems``.

    ``config`` is the policy's config.json; ``critic_config`` the critic's (None: the
    policy's). Needs ``cluster.gpu`` set. ``advise``: a peak over the GPU is a problem
    that offers the changes which fit (``plan/fixes.py``, re-planned with ``advise``
    false: then only the engine's problems are listed)."""
    assert cfg.cluster.gpu is not None, "plan_gpu_memory needs cluster.gpu"
    label, gpu_bytes = parse_gpu(cfg.cluster.gpu)
    trainer = trainer_memory(cfg, derived, config=config, critic_config=critic_config or config)
    context = MemoryRow("CUDA context", CUDA_CONTEXT, "the trainer process (about 0.5 GiB)")
    colocated = cfg.rollout.gpus == 0
    engine = hf = None
    if cfg.rollout.engine == "vllm":
        engine = engine_plan(cfg, config=config, gpu_bytes=gpu_bytes, gpu=label)
    if cfg.rollout.engine == "hf":
        hf = hf_plan(cfg, derived, config=config)
    # the hf engine in the trainer's process, or None
    local = hf if hf is not None and colocated and not cfg.rollout_in_actors else None
    held = trainer.held + (local.weights.bytes if local else 0)
    generating = local.generating if local else 0
    apart = [] if local else _engine_apart(engine, hf)
    training, generation = CUDA_CONTEXT + held + trainer.working, CUDA_CONTEXT + held + generating
    engine_bytes = engine.claim if engine else sum(r.bytes for r in apart)
    if colocated:  # an hf actor holds its share throughout; vLLM sleeps while training
        training += 0 if engine else engine_bytes
        generation += engine_bytes
    else:
        generation = engine_bytes
    trainer_peak = held + max(trainer.working, generating)
    hf_rows = [local.weights, local.kv_cache, local.generation] if local else []
    plan = GpuPlan(
        gpu=label,
        gpu_bytes=gpu_bytes,
        training_gpu=[context, *trainer.resident, *hf_rows, *trainer.passes]
        + (apart if colocated else []),
        generation_gpu=[] if colocated else apart,
        training_phase=training,
        generation_phase=generation,
        trainer_peak=trainer_peak,
        fragmentation=int(FRAGMENTATION * trainer_peak),
        cached_kv=local.cached.bytes if local else 0,
        colocated=colocated,
        engine=engine,
        hf=hf,
        problems=[],
    )
    plan.problems.extend(engine_problems(cfg, engine))
    if advise and not plan.fits:

        def replan(changed: RunConfig, changed_derived: Derived) -> tuple[int, list[str]]:
            again = plan_gpu_memory(
                changed, changed_derived, config=config, critic_config=critic_config, advise=False
            )
            return again.peak, again.problems

        advice = fixes.advise(cfg, gpu_bytes=gpu_bytes, replan=replan, known=plan.problems)
        plan.problems.append(_peak_problem(plan=plan, advice=advice))
    return plan


def _engine_apart(engine: Engine | None, hf: HfEngine | None) -> list[MemoryRow]:
    """The rows of an engine in a process of its own: vLLM's, or an hf actor's (its CUDA
    context, weights, KV cache, generation tensors and the KV blocks its allocator keeps,
    all held throughout)."""
    if engine is not None:
        return engine.rows
    if hf is None:
        return []
    context = MemoryRow("hf engine context", CUDA_CONTEXT, "its actor's process (about 0.5 GiB)")
    return [context, hf.weights, hf.kv_cache, hf.generation, hf.cached]


def _peak_problem(*, plan: GpuPlan, advice: fixes.Advice) -> str:
    phase = "training" if plan.training_phase >= plan.generation_phase else "generation"
    fits = fixes.advice_text(advice, gpu=plan.gpu, gpu_bytes=plan.gpu_bytes)
    return (
        f"estimated peak memory per GPU is {human_bytes(plan.peak)} ({phase} phase; training "
        f"{human_bytes(plan.training_phase)}, generation {human_bytes(plan.generation_phase)}, "
        f"+ {human_bytes(plan.fragmentation)} allocator fragmentation), "
        f"{human_bytes(plan.peak - plan.gpu_bytes)} more than cluster.gpu={plan.gpu} has "
        f"({human_bytes(plan.gpu_bytes)}); `grouprl plan` shows each term. {fits}"
    )
