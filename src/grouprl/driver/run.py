"""`grouprl train`: build the components, resume if asked, run the loop, report."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from rich.text import Text
from torch import Tensor

from grouprl.algo.entropy import EntropyController
from grouprl.algo.kl import KLController
from grouprl.ckpt.checkpointer import Checkpointer
from grouprl.ckpt.preempt import Preempted, Preemption
from grouprl.config.checks import (
    Derived,
    raise_problems,
    staleness_layout_problems,
    steps_for_epochs,
)
from grouprl.config.redact import redacted_dict, save_resolved
from grouprl.config.schema import RunConfig
from grouprl.data.sampler import PromptSampler
from grouprl.device import resolve_device
from grouprl.driver.checkpointing import (
    finished_run,
    make_checkpointer,
    note_validation,
    resume,
    save,
    small_files,
)
from grouprl.driver.components import Components, RunState
from grouprl.driver.loop import one_step, run_validation
from grouprl.driver.preflight import check_before_loading
from grouprl.driver.rollouts import generate_round, sample_records
from grouprl.driver.source import Generate, Generated, RolloutSource
from grouprl.driver.stopping import Stopping
from grouprl.driver.stream import Stream
from grouprl.engines.replicas import ReplicaSet
from grouprl.metrics.progress import TrainProgress
from grouprl.metrics.report import write_report
from grouprl.metrics.samples import SamplesWriter
from grouprl.metrics.sinks import NO_CHECKPOINT, make_sinks
from grouprl.metrics.telemetry import GiB, Hardware
from grouprl.plan.gpu_memory import peak_memory_line, planned_reserved
from grouprl.rewards.failures import CannotTrain
from grouprl.rollout.builder import RolloutBuilder, RolloutParts
from grouprl.runtime import (
    check_new_run,
    console,
    quiet_libraries,
    run_dir_of,
    seed_everything,
    show_logs,
)
from grouprl.types import TrainingBatch
from grouprl.workers.critic import CriticWorker
from grouprl.workers.group import LocalGroup, Role, WorkerGroup
from grouprl.workers.model import load_tokenizer
from grouprl.workers.policy import PolicyWorker
from grouprl.workers.reference import ReferenceWorker


@contextmanager
def build(cfg: RunConfig) -> Iterator[Components]:
    """The run's parts, for the ``with`` block: the rollout side (``RolloutBuilder``) and
    the training ranks, each closed when the block exits, by an error or not, the newest
    first. A part that fails to start leaves none of the others running, and its error
    reaches the caller unchanged."""
    derived = check_before_loading(cfg)
    quiet_libraries()
    seed_everything(cfg.train)
    device = _device(cfg)
    _check_staleness(cfg, device)
    console.log(f"loading tokenizer and data (model {cfg.model.path}, device {device})")
    tokenizer = load_tokenizer(cfg.model)
    cache_dir = run_dir_of(cfg) / "cache"
    with RolloutBuilder(cfg, tokenizer=tokenizer, device=device, cache_dir=cache_dir) as side:
        env = side.environment()
        train_set = side.prompt_set(cfg.data.train, config_key="data.train")
        eval_set = None
        if cfg.data.eval is not None:
            eval_set = side.prompt_set(cfg.data.eval, config_key="data.eval")
        total_steps = _total_steps(cfg, derived, rows=len(train_set))
        trainers = _start_trainers(cfg, derived, total_steps=total_steps, closing=side.closing)
        parts = _start_rollout(cfg, side, trainers.group)
        policy = trainers.policy
        hardware = _hardware(policy)
        sampler = PromptSampler(len(train_set), seed=cfg.train.seed, shuffle=cfg.data.shuffle)

        # built after the parts and closed before them; its rounds need ``c`` (late-bound)
        def generate(rows: list[int], index: int, attempt: int = 0) -> Generated:
            return generate_round(c, rows, index, attempt)

        source = _source(cfg, generate, sampler, total_steps=total_steps, engine=parts.engine)
        side.closing(source)
        c = Components(
            cfg=cfg,
            tokenizer=tokenizer,
            group=trainers.group,
            policy=policy,
            reference_logprobs=_reference_logprobs(
                cfg, policy=policy, reference=trainers.reference
            ),
            critic=trainers.critic,
            engine=parts.engine,
            train_set=train_set,
            eval_set=eval_set,
            score=parts.score,
            rollout=parts.rollout,
            mini_batch_size=derived.mini_batch_size,
            total_steps=total_steps,
            state=RunState(
                sampler=sampler,
                kl=KLController(
                    cfg.algo.beta, target=cfg.algo.kl_target, horizon=cfg.algo.kl_horizon
                ),
                entropy=EntropyController(
                    cfg.algo.entropy_coef,
                    target=cfg.algo.entropy_target,
                    delta=cfg.algo.entropy_coef_delta,
                ),
            ),
            checkpoint_files=small_files(cfg, policy=policy, tokenizer=tokenizer),
            hardware=hardware,
            rollouts=source,
            env=env,
            teacher=parts.teacher,
        )
        yield c


def _total_steps(cfg: RunConfig, derived: Derived, *, rows: int) -> int:
    """``train.steps``, or ``train.epochs`` over ``rows`` (unknown before loading)."""
    if derived.total_steps is not None:
        return derived.total_steps
    assert cfg.train.epochs is not None
    return steps_for_epochs(epochs=cfg.train.epochs, rows=rows, batch_size=cfg.data.batch_size)


def _start_rollout(cfg: RunConfig, side: RolloutBuilder, group: WorkerGroup) -> RolloutParts:
    """The rollout engines, the reward functions and the rollout, beside the ranks."""
    replicas = cfg.rollout_replicas
    console.log(
        f"starting the {cfg.rollout.engine} rollout engine"
        + (f" ({replicas} replicas)" if replicas > 1 else "")
    )
    parts = side.start(places=group.places, teacher=True)
    _log_weight_routes(parts.engine, group)
    return parts


def _source(
    cfg: RunConfig,
    generate: Generate,
    sampler: PromptSampler,
    *,
    total_steps: int,
    engine: ReplicaSet,
) -> RolloutSource:
    """Where the steps' batches come from (``driver/source.py``): rounds taken inline
    (rollout.max_staleness=0), or the rollout stream (``driver/stream.py``), whose
    producer starts at the first step, after a resume has put back the checkpoint's."""
    algo, batch_size = cfg.algo, cfg.data.batch_size
    max_rounds = algo.max_sampling_rounds if algo.dynamic_sampling else 1
    if not cfg.rollout.max_staleness:
        return RolloutSource(generate, sampler, batch_size=batch_size, max_rounds=max_rounds)
    return Stream(
        generate,
        sampler,
        batch_size=batch_size,
        max_staleness=cfg.rollout.max_staleness,
        policy=cfg.rollout.staleness_policy,
        max_rounds=max_rounds,
        max_groups=total_steps * batch_size,
        stopping=Stopping.of(cfg, abort=engine.aborting, on_gpu=_device(cfg).type == "cuda"),
    )


def _check_staleness(cfg: RunConfig, device: torch.device) -> None:
    """Where train.device=auto found a GPU: the config's check, with the device known."""
    raise_problems(staleness_layout_problems(cfg, training_on_gpu=device.type == "cuda"))


@dataclass(frozen=True)
class Trainers:
    """The training ranks and the roles built on every rank."""

    group: WorkerGroup
    policy: Role[PolicyWorker]
    reference: Role[ReferenceWorker] | None
    critic: Role[CriticWorker] | None


def _start_trainers(
    cfg: RunConfig,
    derived: Derived,
    *,
    total_steps: int,
    closing: Callable[[WorkerGroup], WorkerGroup],
) -> Trainers:
    """The ranks (``make_group``), handed to ``closing`` before any role loads on them, so
    that a role that fails to load closes them too (the Ray actors with it)."""
    models = (
        ["policy"] + ["reference"] * derived.reference_model + ["critic"] * derived.critic_model
    )
    where = "here" if derived.world_size == 1 else f"on {derived.world_size} Ray workers"
    console.log(f"loading {', '.join(models)} ({where})")
    group = closing(make_group(cfg))
    # the policy's schedule starts when it starts learning, after the critic's warmup
    learning_steps = total_steps - derived.critic_warmup_steps
    policy = group.add("policy", PolicyWorker, cfg=cfg, learning_steps=learning_steps)
    reference = None
    if derived.reference_model:
        reference = group.add("reference", ReferenceWorker, cfg=cfg)
    critic = group.add("critic", CriticWorker, cfg=cfg) if cfg.critic is not None else None
    return Trainers(group=group, policy=policy, reference=reference, critic=critic)


def _hardware(policy: Role[PolicyWorker]) -> Hardware:
    """The model's shape and the device's peak, which MFU is measured against."""
    hardware = policy.call(PolicyWorker.hardware)
    console.log(
        f"MFU is measured against {hardware.peak_flops / 1e12:.3g} TFLOP/s per device "
        f"({hardware.peak_source})"
    )
    return hardware


def _log_weight_routes(engine: ReplicaSet, group: WorkerGroup) -> None:
    """With several replicas: which training rank pushes the weights to which."""
    if len(engine) > 1:
        routes = engine.targets(group.leaders())
        console.log(
            "weight pushes: "
            + "; ".join(
                f"rank {rank} -> replicas {[k for k, _ in t]}" for rank, t in routes.items()
            )
        )


def _device(cfg: RunConfig) -> torch.device:
    """Where the training ranks run: this process's device for one rank; with Ray
    workers, the cluster's GPUs or CPUs (the driver itself needs no GPU then)."""
    if cfg.world_size == 1:
        return resolve_device(cfg.train.device)
    return torch.device("cuda" if cfg.cluster.gpus_per_node else "cpu")


def make_group(cfg: RunConfig) -> WorkerGroup:
    """The training ranks: this process for world size 1, else Ray actors (``cluster``)."""
    if cfg.world_size == 1:
        return LocalGroup(str(resolve_device(cfg.train.device)))
    from grouprl.workers.ray_group import RayGroup

    return RayGroup.start(cfg, run_dir=run_dir_of(cfg))


def _reference_logprobs(
    cfg: RunConfig, *, policy: Role[PolicyWorker], reference: Role[ReferenceWorker] | None
) -> Callable[[TrainingBatch], Tensor] | None:
    """The KL reference's logprobs of a batch: a frozen copy's (``ReferenceWorker``), or
    the LoRA policy's with its adapters off; None when algo.beta is 0."""
    if reference is not None:
        return partial(reference.gather, ReferenceWorker.logprobs)
    if cfg.algo.beta > 0 and cfg.train.lora.rank:
        return partial(policy.gather, PolicyWorker.logprobs, adapters=False)
    return None


def train(cfg: RunConfig) -> dict[str, Any]:
    """Trains to ``train.steps`` (or ``trainer.stop_after`` steps this session).
    Returns the summary also written to ``RUN/summary.json``. A dead training rank
    restarts the ranks from the newest checkpoint up to ``trainer.max_restarts`` times."""
    from grouprl.cluster.connection import WorkerFailed

    restarts = 0
    while True:
        try:
            return _train_session(cfg)
        except WorkerFailed as err:
            if restarts == cfg.trainer.max_restarts:
                raise
            restarts += 1
            console.log(
                Text(str(err), style="yellow"),
                "\nrestarting the training ranks from the newest checkpoint (restart "
                f"{restarts} of trainer.max_restarts={cfg.trainer.max_restarts})",
            )
            cfg = cfg.model_copy(
                update={"trainer": cfg.trainer.model_copy(update={"resume": "auto"})}
            )


def _train_session(cfg: RunConfig) -> dict[str, Any]:
    check_new_run(cfg)  # a fresh run never lands on another's metrics or checkpoints
    run_dir = run_dir_of(cfg)
    if (done := finished_run(cfg, run_dir)) is not None:  # before any file or model
        console.print(Text(done.message, style="yellow"), soft_wrap=True)
        return done.summary
    run_dir.mkdir(parents=True, exist_ok=True)
    save_resolved(cfg, run_dir / "config.yaml")
    show_logs()
    with ExitStack() as stack:
        ckpt = make_checkpointer(cfg, run_dir)  # before loading models: a bad bucket fails fast
        # the loop waited for its final save; an upload still running here is cut short by
        # an error or a preemption past its grace period, so it is not awaited. Closed once:
        # last if the build fails, else before the ranks its writer may still be using
        closes_ckpt = stack.enter_context(ExitStack())
        closes_ckpt.callback(ckpt.close, abandon_uploads=True)
        c = stack.enter_context(build(cfg))
        stack.callback(closes_ckpt.close)
        roles = ["policy"] + ["critic"] * (c.critic is not None)
        ckpt.attach(c.group, roles)  # a memory tier on the ranks' nodes
        eval_before = resume(c, ckpt, run_dir)
        sinks = make_sinks(
            cfg.metrics,
            run_dir=run_dir,
            run_name=cfg.name,
            config_dict=redacted_dict(cfg),
            # no checkpoint: lines a session killed before its first save wrote all go
            resume_step=c.state.step if eval_before is not None else NO_CHECKPOINT,
        )
        stack.callback(sinks.close)
        with Preemption(cfg.checkpoint.grace_period_s) as preemption, _stop_recorded(c, run_dir):
            summary = _loop(c, ckpt, run_dir, sinks, eval_before=eval_before, preemption=preemption)
        _log_peak_memory(c)
    if cfg.metrics.report:
        write_report(run_dir, run_name=cfg.name)
    return summary


def _loop(
    c: Components,
    ckpt: Checkpointer,
    run_dir: Path,
    sinks,
    *,
    eval_before: dict[str, float] | None,
    preemption: Preemption,
):
    cfg = c.cfg
    samples = SamplesWriter(run_dir)
    samples.truncate_after(c.state.step)
    with TrainProgress(
        total_steps=c.total_steps, start_step=c.state.step, show_bar=cfg.metrics.progress
    ) as progress:
        if eval_before is None:
            eval_before = _validate_before(c, sinks, progress)
        done_this_session, metrics = 0, {}
        while c.state.step < c.total_steps:
            trajectories, metrics = one_step(c, c.state.step + 1)
            done_this_session += 1
            last = c.state.step == c.total_steps
            best = _validate_step(c, metrics, last=last)
            stopping = (
                cfg.trainer.stop_after is not None and done_this_session >= cfg.trainer.stop_after
            )
            # read once: a signal landing after this line is taken at the next step, since
            # the save below would not be the final one it waits for
            preempted = preemption.requested
            final = last or stopping or preempted
            if final:  # the stream's round in flight stops during the save
                c.rollouts.stop()
            # before the save, so a resumed run (which drops the lines past its checkpoint)
            # has every prompt it counts as trained in samples.jsonl and every step's line
            # in metrics.jsonl. The line has the figures of the saves finished by now
            # (earlier steps'); the session's last save's go to the log (_show_last_save)
            samples.write(
                c.state.step,
                sample_records(
                    trajectories, c.tokenizer, n=cfg.trainer.log_samples, group_size=cfg.rollout.n
                ),
            )
            metrics.update(ckpt.drain_metrics())
            sinks.log(c.state.step, metrics)
            save(c, ckpt, eval_before=eval_before, final=final, best=best)
            progress.update(c.state.step, metrics)
            if preempted:
                _finish_preempted(ckpt, preemption, step=c.state.step)
            if final:
                ckpt.wait()
                _show_last_save(ckpt, step=c.state.step)
            if stopping and not last:
                progress.log(
                    f"stopped after {done_this_session} steps (trainer.stop_after); "
                    "continue with trainer.resume=auto"
                )
                break
    return _summarize(c, run_dir, eval_before=eval_before, metrics=metrics)


def _validate_step(c: Components, metrics: dict[str, float], *, last: bool) -> bool:
    """Validation at the last step and every ``trainer.eval_every``, into ``metrics``;
    whether it is the best so far (``checkpoint.keep_best``: that step saves to disk)."""
    every = c.cfg.trainer.eval_every
    if not (last or (every and c.state.step % every == 0)):
        return False
    validation = run_validation(c)
    metrics.update(validation)
    return note_validation(c, validation)


def _validate_before(c: Components, sinks, progress: TrainProgress) -> dict[str, float]:
    """The initial model's validation (``trainer.eval_before_train``), logged as step 0."""
    if not c.cfg.trainer.eval_before_train:
        return {}
    if c.eval_set is not None and len(c.eval_set) > 0:  # data.eval=null: none
        progress.log("validating the initial model")
    eval_before = run_validation(c)
    sinks.log(0, eval_before)
    progress.update(0, eval_before)
    return eval_before


@contextmanager
def _stop_recorded(c: Components, run_dir: Path) -> Iterator[None]:
    """An error that ends the loop (``CannotTrain``, a preemption, any other) leaves
    ``summary.json`` saying why: ``"finished": false`` and ``"stopped"``, its ``kind``
    (``CannotTrain.kind``, else the error's class), ``step`` (the steps trained by then)
    and ``reason`` (the message). The error goes on to the caller unchanged; the run's
    checkpoints and metrics so far stay as they are."""
    try:
        yield
    except BaseException as err:
        kind = err.kind if isinstance(err, CannotTrain) else type(err).__name__
        summary = {
            "run_dir": str(run_dir),
            "step": c.state.step,
            "total_steps": c.total_steps,
            "finished": False,
            "stopped": {
                "kind": kind,
                "step": c.state.step,
                "reason": str(err) or repr(err),
            },
        }
        try:
            (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        except OSError as write_error:  # the run's own error is the one to raise
            console.log(f"summary.json not written: {write_error}")
        raise


def _log_peak_memory(c: Components) -> None:
    """On GPUs: the ranks' peak reserved memory beside the memory plan's estimate."""
    if _device(c.cfg).type != "cuda":
        return
    # the allocator gives nothing back unless a request fails, so the last step's peak
    # reserved (the telemetry resets peaks each step) is the run's
    peaks = [round(m["peak_reserved_gib"] * GiB) for m in c.policy.each(PolicyWorker.memory)]
    console.log(peak_memory_line(peaks, planned=planned_reserved(c.cfg)))


def _finish_preempted(ckpt: Checkpointer, preemption: Preemption, *, step: int) -> None:
    """After the emergency save has started: wait for it within the grace period."""
    if not ckpt.wait(timeout=preemption.time_left()):
        raise Preempted(f"preempted at step {step}; the save did not finish in time")
    raise Preempted(f"preempted at step {step}; checkpoint saved, resume with trainer.resume=auto")


def _show_last_save(ckpt: Checkpointer, *, step: int) -> None:
    """The figures (``ckpt/*``) of the saves finished since the last step's line, the
    session's last save's among them, in the log. Not in metrics.jsonl: each of its lines
    comes before its step's checkpoint (a line after it is one a kill can lose), and one
    line per step is what readers of the file expect."""
    saved = ckpt.drain_metrics()
    if saved:
        shown = ", ".join(f"{name.removeprefix('ckpt/')} {v:.4g}" for name, v in saved.items())
        console.log(f"checkpoint saves finished since step {step}'s metrics: {shown}")


def _summarize(c: Components, run_dir: Path, *, eval_before: dict[str, float], metrics) -> dict:
    summary: dict[str, Any] = {
        "run_dir": str(run_dir),
        "step": c.state.step,
        "total_steps": c.total_steps,
        "finished": c.state.step == c.total_steps,
    }
    before, after = eval_before.get("eval/accuracy"), metrics.get("eval/accuracy")
    summary["held_out_accuracy_before"] = before
    summary["held_out_accuracy_after"] = after if summary["finished"] else None
    if c.state.best is not None:  # checkpoint.keep_best
        summary["best"] = asdict(c.state.best)
    if not summary["finished"]:  # the loop ends early only at trainer.stop_after
        reason = f"trainer.stop_after={c.cfg.trainer.stop_after}: continue with trainer.resume=auto"
        summary["stopped"] = {"kind": "stop_after", "step": c.state.step, "reason": reason}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    if before is not None and summary["held_out_accuracy_after"] is not None:
        line = f"held-out accuracy: {before:.2f} -> {after:.2f}"
        (run_dir / "held_out.txt").write_text(line + "\n")
        print(line)
    return summary
