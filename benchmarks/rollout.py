"""Tokens per second of grouprl's rollout engine against vLLM's LLM.generate on the same
requests.

    built-in arith train split ──► chat-rendered prompt ids, P per round, the same
                                    rounds on both sides
          ┌─────────────────────────────────┴─────────────────────────────────┐
          ▼ (one side at a time: build, warm up, time, close)                 ▼
    grouprl: make_engine (as train.run builds it)     raw vLLM: vllm.LLM with the same
    make_rollout ─► VLLMEngine.generate               engine arguments; llm.generate(
      (TokensPrompt, per-sample seeds, processed lps,   TokensPrompt list, one
       n per prompt, Completion objects)                SamplingParams(n, logprobs=0))
          └──────────────────────────► report ◄───────────────────────────────┘
           last line: grouprl / raw vLLM tokens/s: 0.NN  (1.00: our layer costs nothing)

Equal work: the same model directory, dtype (float32), max_model_len, KV cache size,
chunked prefill (off, as VLLMEngine sets on CPU), enforce_eager, logprobs_mode
(processed_logprobs) and engine seed; the same prompts in the same order; every completion
is exactly --completion-len tokens (ignore_eos on both sides), temperature 1, top-p 1,
one logprob (the sampled token's). The engine settings of both sides are read back from
the live engines and compared in the header.

What differs is what our layer adds: a SamplingParams per prompt with its own seed (so
results do not depend on batching), flat logprobs, and turning vLLM's outputs into
``Completion`` objects with checks; and how texts are made: both sides return every
completion's text, the raw call through vLLM's token-by-token detokenizer (its default),
ours by one ``batch_decode`` after the call (``detokenize=False``). ``--raw-params
ours`` gives the raw side those same SamplingParams, isolating the Python around the
call. The grouprl figure is the ``VLLMEngine.generate`` call; the rollout step minus
rewards (the run's rollout function, ``rollout/setup.make_rollout``, over the single-turn
environment with a reward function that returns zeros: generate plus building the
Trajectory records) is shown beside it. Warmup rounds are run and not
counted. Both engines in one process would double memory and threads, so the sides run
one after the other (``--order``). Two engines built one after the other differ by up to
~15% on a busy machine, so ``--interleave`` runs both calls on grouprl's engine instead
(its ``vllm.LLM`` for the raw call), alternating which goes first each round and
emptying the prefix cache before each call. Run it from the repo root:

    .venv/bin/python benchmarks/rollout.py [--model tiny|25m --prompts 16 --group 8 ...]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from machine import add_smoke, cpu_model, pin_threads
from models import SIZES, resolve_model
from step_time import process_tree_cpu_seconds, vllm_version

SHUTDOWN_TIMEOUT_S = 10.0
MAX_PROMPT_TOKENS = 128
RECIPE = "tiny-arith"
"""The recipe whose engine settings (KV cache size, seed) both sides use."""


@dataclass(frozen=True)
class Settings:
    model: Path
    model_name: str  # as --model gave it
    prompts: int
    group: int
    completion_len: int
    rounds: int
    warmup: int
    threads: int
    raw_params: str
    interleave: bool

    @property
    def max_model_len(self) -> int:
        return MAX_PROMPT_TOKENS + self.completion_len

    @property
    def rows_needed(self) -> int:
        return self.prompts * (self.warmup + self.rounds)


@dataclass
class SideResult:
    """Per measured round (warmup excluded): wall seconds, CPU seconds, tokens generated."""

    name: str
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    collect_s: list[float] = field(default_factory=list)  # grouprl: the rollout function
    engine: dict[str, object] = field(default_factory=dict)
    processes: int = 1

    def tokens_per_s(self) -> float:
        return statistics.median(self.tokens) / statistics.median(self.wall_s)

    def line(self) -> str:
        med = statistics.median
        return (
            f"{self.name:14s} {self.tokens_per_s():9.0f} tokens/s   {med(self.wall_s):7.3f} s/round"
            f"   {med(self.cpu_s):7.2f} CPU-s/round   {med(self.tokens):6.0f} tokens/round"
            f"   (CPU-s over {self.processes} processes)"
        )


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model",
        default="builtin:tiny-arith",
        help=f"builtin:NAME, a size from models.py ({'|'.join(SIZES)}) or a model dir",
    )
    p.add_argument("--prompts", type=int, default=16, help="prompts per round")
    p.add_argument("--group", type=int, default=8, help="samples per prompt (n)")
    p.add_argument("--completion-len", type=int, default=64, help="tokens per completion")
    p.add_argument("--rounds", type=int, default=5, help="measured generate calls per side")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured calls first, per side")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="compute threads")
    p.add_argument(
        "--order",
        choices=["grouprl-first", "raw-first"],
        default="grouprl-first",
        help="which side runs first (alternate between runs: the machine drifts)",
    )
    p.add_argument(
        "--interleave",
        action="store_true",
        help="one engine (grouprl's): each round runs both calls, alternating which is first",
    )
    p.add_argument(
        "--raw-params",
        choices=["plain", "ours"],
        default="plain",
        help="raw side's SamplingParams: one shared, unseeded (plain) or grouprl's per-prompt",
    )
    add_smoke(
        p,
        interleave=True,
        prompts=2,
        group=2,
        completion_len=4,
        rounds=1,
        warmup=0,
        threads=1,
    )
    args = p.parse_args()
    if args.group < 1 or args.rounds < 1 or args.warmup < 0 or args.prompts < 1:
        p.error("need --group >= 1, --rounds >= 1, --warmup >= 0, --prompts >= 1")
    if args.threads < 1:
        p.error("need --threads >= 1")
    return args


def log(message: str) -> None:
    print(f"[rollout] {message}", file=sys.stderr, flush=True)


# --- shared ----------------------------------------------------------------------------------


def run_config(s: Settings):
    from grouprl.config.loader import load_config

    return load_config(
        RECIPE,
        [
            f"model.path={s.model}",
            "model.dtype=float32",
            "rollout.engine=vllm",
            f"rollout.n={s.group}",
            f"rollout.max_tokens={s.completion_len}",
            "rollout.ignore_eos=true",
            f"rollout.max_model_len={s.max_model_len}",
            f"data.max_prompt_tokens={MAX_PROMPT_TOKENS}",
            "train.device=cpu",
            f"train.num_threads={s.threads}",
        ],
    )


def prompt_rounds(s: Settings) -> list:
    """``warmup + rounds`` PromptSets of ``prompts`` rows each: the arith train split in
    order, rendered with the model's chat template as the trainer renders it."""
    from grouprl.config.model_data import DataConfig, DataSource, ModelConfig
    from grouprl.rollout.setup import load_prompt_set
    from grouprl.workers.model import load_tokenizer

    source = DataSource(source="builtin:arith", split="train", limit=s.rows_needed)
    data = DataConfig(train=source, eval=None, max_prompt_tokens=MAX_PROMPT_TOKENS)
    tokenizer = load_tokenizer(ModelConfig(path=str(s.model)))
    prompts = load_prompt_set(source, tokenizer=tokenizer, data=data, config_key="data.train")
    if len(prompts) < s.rows_needed:
        sys.exit(f"the arith split has {len(prompts)} usable rows; the rounds need {s.rows_needed}")
    starts = range(0, s.rows_needed, s.prompts)
    return [prompts.take(list(range(i, i + s.prompts))) for i in starts]


def engine_settings(llm) -> dict[str, object]:
    """What the live engine was built with (read back, so both sides can be compared)."""
    c = llm.llm_engine.vllm_config
    return {
        "dtype": str(c.model_config.dtype),
        "max_model_len": c.model_config.max_model_len,
        "seed": c.model_config.seed,
        "enforce_eager": c.model_config.enforce_eager,
        "logprobs_mode": str(c.model_config.logprobs_mode),
        "kv_cache_memory_bytes": c.cache_config.kv_cache_memory_bytes,
        "prefix_caching": c.cache_config.enable_prefix_caching,
        "chunked_prefill": c.scheduler_config.enable_chunked_prefill,
        "max_num_seqs": c.scheduler_config.max_num_seqs,
        "max_num_batched_tokens": c.scheduler_config.max_num_batched_tokens,
    }


@dataclass(frozen=True)
class Measured:
    """One generate call: tokens, wall and process-tree CPU seconds."""

    tokens: int
    wall_s: float
    cpu_s: float


def record(side: SideResult, s: Settings, i: int, m: Measured) -> None:
    """Checks round ``i``'s token count, logs it, and keeps it unless it is a warmup."""
    expected = s.prompts * s.group * s.completion_len
    if m.tokens != expected:
        sys.exit(f"{side.name}: {m.tokens} tokens generated, expected {expected}")
    measuring = i >= s.warmup
    extra = ""
    if side.collect_s:
        extra = f", collect {side.collect_s[-1]:.3f} s"
        if not measuring:
            side.collect_s.pop()
    log(
        f"{side.name} round {i + 1} ({'measured' if measuring else 'warmup'}): "
        f"generate {m.wall_s:.3f} s{extra}, {m.cpu_s:.2f} CPU-s, {m.tokens} tokens"
    )
    if measuring:
        side.wall_s.append(m.wall_s)
        side.cpu_s.append(m.cpu_s)
        side.tokens.append(m.tokens)


def process_count() -> int:
    import psutil

    return 1 + len(psutil.Process().children(recursive=True))


# --- grouprl ---------------------------------------------------------------------------------


class TimedEngine:
    """The engine as ``runner.collect`` sees it; keeps the last ``generate`` call's
    wall and process-tree CPU seconds."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.last = Measured(0, 0.0, 0.0)

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    def generate(self, prompts, settings):
        t0, cpu0 = time.perf_counter(), process_tree_cpu_seconds()
        groups = self.engine.generate(prompts, settings)
        wall, cpu = time.perf_counter() - t0, process_tree_cpu_seconds() - cpu0
        tokens = sum(len(c.token_ids) for group in groups for c in group)
        self.last = Measured(tokens, wall, cpu)
        return groups


def no_rewards(*, completions: list[str], rows: list[dict], **kwargs):
    from grouprl.rewards.scoring import RewardScores

    return RewardScores(total=[0.0] * len(completions), parts={})


def grouprl_engine(s: Settings, work: Path):
    import torch

    from grouprl.engines.build import make_engine

    started = time.perf_counter()
    engine = make_engine(
        run_config(s),
        model_dir=str(s.model),
        tokenizer=None,
        device=torch.device("cpu"),
        cache_dir=work,
    )
    log(f"grouprl engine built in {time.perf_counter() - started:.1f} s")
    return engine


def grouprl_round(s: Settings, engine, side: SideResult):
    """``(round index, prompt set) -> Measured``: one rollout as the run makes it
    (``make_rollout`` over the single-turn environment, rewards zero), its ``generate``
    call measured; the rollout's own seconds go to ``side.collect_s``."""
    from grouprl.engines.base import SamplingSettings
    from grouprl.envs.single_turn import SingleTurnEnv
    from grouprl.rollout.setup import make_rollout
    from grouprl.seeds import step_seed

    timed = TimedEngine(engine)
    cfg = run_config(s)
    seed = cfg.train.seed
    env = SingleTurnEnv.from_data(cfg.data)
    rollout = make_rollout(cfg, engine=timed, tokenizer=None, score=no_rewards, env=env)

    def one_round(i: int, prompt_set) -> Measured:
        settings = SamplingSettings(
            group_size=s.group,
            temperature=1.0,
            max_tokens=s.completion_len,
            seed=step_seed(seed, i + 1),
            ignore_eos=True,
        )
        t0 = time.perf_counter()
        trajectories, _ = rollout(prompt_set, settings)
        side.collect_s.append(time.perf_counter() - t0)
        assert sum(t.generated_tokens for t in trajectories) == timed.last.tokens
        return timed.last

    return one_round


def run_grouprl(s: Settings, rounds: list, work: Path) -> list[SideResult]:
    side = SideResult("grouprl")
    engine = grouprl_engine(s, work)
    try:
        side.engine = engine_settings(engine._llm)
        one_round = grouprl_round(s, engine, side)
        for i, prompt_set in enumerate(rounds):
            record(side, s, i, one_round(i, prompt_set))
        side.processes = process_count()
    finally:
        engine.close()
    return [side]


# --- raw vLLM --------------------------------------------------------------------------------


def raw_llm(s: Settings, work: Path):
    """A vllm.LLM with the engine arguments VLLMEngine passes on CPU for this config."""
    from grouprl.engines.vllm_engine import GiB, vllm_environment

    vllm_environment(cache_dir=str(work))
    from vllm import LLM

    cfg = run_config(s)
    r = cfg.rollout
    started = time.perf_counter()
    llm = LLM(
        model=str(s.model),
        dtype="float32",
        max_model_len=r.max_model_len,
        seed=cfg.train.seed,
        enforce_eager=True,
        logprobs_mode="processed_logprobs",
        use_tqdm_on_load=False,
        tensor_parallel_size=r.tensor_parallel_size,
        kv_cache_memory_bytes=int(r.cpu_kv_cache_gib * GiB),
        enable_chunked_prefill=False,
    )
    log(f"raw vLLM engine built in {time.perf_counter() - started:.1f} s")
    return llm


def raw_sampling_params(s: Settings, *, seed: int, prompts: int):
    from vllm import SamplingParams

    from grouprl.seeds import request_seed

    common = {
        "n": s.group,
        "temperature": 1.0,
        "max_tokens": s.completion_len,
        "ignore_eos": True,
        "logprobs": 0,
    }
    if s.raw_params == "plain":
        return SamplingParams(**common)
    # grouprl's: one per prompt, seeded as VLLMEngine seeds them, flat logprobs
    return [
        SamplingParams(**common, seed=request_seed(seed, i, s.group), flat_logprobs=True)
        for i in range(prompts)
    ]


def raw_round(s: Settings, llm):
    """``(round index, prompt set) -> Measured``: one ``llm.generate`` on the prompts."""
    from vllm.inputs import TokensPrompt

    from grouprl.seeds import step_seed

    seed = run_config(s).train.seed

    def one_round(i: int, prompt_set) -> Measured:
        t0, cpu0 = time.perf_counter(), process_tree_cpu_seconds()
        params = raw_sampling_params(s, seed=step_seed(seed, i + 1), prompts=len(prompt_set))
        prompts = [TokensPrompt(prompt_token_ids=list(p)) for p in prompt_set.prompts]
        outputs = llm.generate(prompts, params, use_tqdm=False)
        wall, cpu = time.perf_counter() - t0, process_tree_cpu_seconds() - cpu0
        tokens = sum(len(c.token_ids) for out in outputs for c in out.outputs)
        return Measured(tokens, wall, cpu)

    return one_round


def run_raw(s: Settings, rounds: list, work: Path) -> list[SideResult]:
    side = SideResult("raw vLLM")
    llm = raw_llm(s, work)
    try:
        side.engine = engine_settings(llm)
        one_round = raw_round(s, llm)
        for i, prompt_set in enumerate(rounds):
            record(side, s, i, one_round(i, prompt_set))
        side.processes = process_count()
    finally:
        llm.llm_engine.engine_core.shutdown(timeout=SHUTDOWN_TIMEOUT_S)
    return [side]


# --- both on one engine ----------------------------------------------------------------------


def run_interleaved(s: Settings, rounds: list, work: Path) -> list[SideResult]:
    """``--interleave``: grouprl's engine only; each round runs our ``generate`` and a raw
    ``llm.generate`` on the engine's own ``vllm.LLM``, in alternating order, the prefix
    cache emptied (untimed) before each call so neither reuses the other's prompts."""
    ours, raw = SideResult("grouprl"), SideResult("raw vLLM")
    engine = grouprl_engine(s, work)
    llm = engine._llm
    try:
        ours.engine = raw.engine = engine_settings(llm)
        calls = [(ours, grouprl_round(s, engine, ours)), (raw, raw_round(s, llm))]
        for i, prompt_set in enumerate(rounds):
            for side, one_round in calls if i % 2 == 0 else calls[::-1]:
                llm.reset_prefix_cache()
                record(side, s, i, one_round(i, prompt_set))
        ours.processes = raw.processes = process_count()
    finally:
        engine.close()
    return [ours, raw]


# --- report ----------------------------------------------------------------------------------


def header(s: Settings, *, params: int, sides: list[SideResult], load: float) -> list[str]:
    import torch

    lines = [
        f"machine: {os.cpu_count()} CPUs, {cpu_model()}, torch {torch.__version__}, "
        f"{vllm_version()}, {s.threads} thread{'s' if s.threads > 1 else ''} "
        f"(VLLM_CPU_OMP_THREADS_BIND={os.environ['VLLM_CPU_OMP_THREADS_BIND']}), "
        f"load average {load:.2f} at start",
        f"model: {s.model_name} ({params:,} parameters, float32, {s.model})",
        f"work per round: {s.prompts} prompts x {s.group} samples x {s.completion_len} tokens "
        f"(ignore_eos), temperature 1, logprobs=0; raw SamplingParams: {s.raw_params}",
        f"rounds: {s.warmup} warmup + {s.rounds} measured per side (median shown), "
        + (
            "interleaved on grouprl's engine (alternating first call, prefix cache reset)"
            if s.interleave
            else f"order: {' then '.join(side.name for side in sides)}, one engine each"
        ),
    ]
    settings = [side.engine for side in sides]
    if all(e == settings[0] for e in settings):
        shown = ", ".join(f"{k}={v}" for k, v in settings[0].items())
        lines.append(f"engine settings (both sides, read back): {shown}")
    else:
        for side in sides:
            lines.append(f"engine settings of {side.name}: {side.engine}")
        lines.append("WARNING: the two engines were built with different settings")
    if load > 0.5:
        lines.append(
            "WARNING: another process was using the CPU at start: timings are noisy; pass "
            "--threads no larger than the idle cores"
        )
    return lines


def model_parameters(model: Path) -> int:
    """Parameters in the model directory's safetensors files (headers only)."""
    import math

    from grouprl.engines.weights import checkpoint_shapes

    return sum(math.prod(shape) for shape in checkpoint_shapes(str(model)).values())


def main() -> None:
    args = parse_args()
    load_at_start = os.getloadavg()[0]
    pin_threads(args.threads)  # both sides' vLLM workers too
    with tempfile.TemporaryDirectory(prefix="grouprl-rollout-bench-") as tmp:
        work = Path(tmp)
        try:
            model = resolve_model(args.model, work)
        except ValueError as err:
            sys.exit(f"--model {args.model}: {err}")
        s = Settings(
            model=model,
            model_name=args.model,
            prompts=args.prompts,
            group=args.group,
            completion_len=args.completion_len,
            rounds=args.rounds,
            warmup=args.warmup,
            threads=args.threads,
            raw_params=args.raw_params,
            interleave=args.interleave,
        )
        rounds = prompt_rounds(s)
        runs = [run_grouprl, run_raw]
        if args.order == "raw-first":
            runs.reverse()
        if args.interleave:
            runs = [run_interleaved]
        sides = []
        for run in runs:
            sides += run(s, rounds, work)
            gc.collect()  # the closed engine's objects, before the next is built
        params = model_parameters(model)
    print("\n".join(header(s, params=params, sides=sides, load=load_at_start)))
    for side in sides:
        print(side.line())
    ours = next(side for side in sides if side.name == "grouprl")
    raw = next(side for side in sides if side.name != "grouprl")
    med = statistics.median
    print(
        f"grouprl rollout step minus rewards (make_rollout): {med(ours.collect_s):.3f} s/round,"
        f" {med(ours.tokens) / med(ours.collect_s):.0f} tokens/s"
    )
    print(f"grouprl / raw vLLM tokens/s: {ours.tokens_per_s() / raw.tokens_per_s():.2f}")


if __name__ == "__main__":
    main()
