"""What running an environment in worker processes costs: the built-in ``search_qa``
environment in-process (as the package runs it) vs in ``env.sandbox.workers`` worker
processes (as a user's environment runs), over the same episodes; and what running the
steps of different episodes at once in a worker (``env.concurrency``) gains.

    .venv/bin/python benchmarks/env_workers.py [--episodes 64] [--workers 2] [--rounds 5]
    .venv/bin/python benchmarks/env_workers.py --nap-episodes 128 --nap 0.2
    .venv/bin/python benchmarks/env_workers.py --smoke        # seconds: it still runs

Each round is one ``run_episodes`` over ``--episodes`` episodes of two turns (a search,
then an answer) with a scripted engine, so the time is the environment's side alone:
starting episodes, the BM25 search tool, rendering observations. The first contained
round (starting the workers, building the index in each) is reported apart. Prints the
median seconds per round of each, the overhead per step call and, last, their ratio:
``contained / in-process: N.NNx``.

Before that, the concurrency case: ``--nap-episodes`` one-step episodes whose step sleeps
``--nap`` seconds (a slow tool call), contained in the same workers, run one step at a time
per worker (``env.concurrency=1``) and at the default ``env.concurrency``; one round each,
after a warm-up round that starts the workers. Prints both and the speedup.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import add_smoke

from grouprl.envs import Step

# Each worker process imports this script again (spawn): what only the driver needs
# (torch, transformers) is imported in the functions that use it, so workers start fast.

NAMES = ["Velmor Adrissa", "Tarnek", "Oskel Brandt", "Mirrow Vale"]


def search_env(env_cfg, data_cfg, *, cache_dir):
    """The built-in search environment, as a registered factory would build it."""
    from grouprl.envs.factory import make_env

    return make_env(env_cfg.model_copy(update={"name": "search_qa"}), data_cfg, cache_dir=cache_dir)


class Scripted:
    """Turn 0 searches, turn 1 answers: the environment does all the work. Turn 0 is the
    call with a group of samples per prompt (``--group`` >= 2); later turns take one."""

    weight_version = 0

    def generate(self, prompts, settings):
        from grouprl.types import Completion

        turn0 = settings.group_size > 1
        out = []
        for i, _ in enumerate(prompts):
            text = f"<search>{NAMES[i % len(NAMES)]}</search>" if turn0 else "<answer>x</answer>"
            out.append(
                [Completion(token_ids=[5], logprobs=[0.0], finish_reason="stop", text=text)]
                * settings.group_size
            )
        return out


class Napping:
    """An environment whose one step sleeps ``nap_s`` seconds, as a slow tool call waits."""

    def __init__(self, nap_s: float) -> None:
        self.nap_s = nap_s

    def episode(self, row):
        return Nap(self.nap_s)


class Nap:
    def __init__(self, nap_s: float) -> None:
        self.nap_s = nap_s

    def start(self):
        return [{"role": "user", "content": "wait"}]

    def step(self, model_text):
        time.sleep(self.nap_s)
        return Step(done=True)


def nap_env(env_cfg, data_cfg, *, cache_dir):
    return Napping(env_cfg.args["nap_s"])


def one_round(env, tokenizer, engine, rows, n) -> float:
    from grouprl.engines.base import SamplingSettings
    from grouprl.rollout.episodes import run_episodes

    started = time.perf_counter()
    trajectories = run_episodes(
        engine=engine,
        env=env,
        tokenizer=tokenizer,
        rows=rows,
        prompts=[[1, 2, 3]] * len(rows),
        settings=SamplingSettings(group_size=n, max_tokens=16),
        max_turns=2,
        max_model_len=4096,
    )
    seconds = time.perf_counter() - started
    assert all(t.stop_reason == "answered" for t in trajectories), [
        t.stop_reason for t in trajectories
    ]
    return seconds


def nap_seconds(args, tokenizer, engine, data, cache: Path) -> dict[int, float]:
    """Seconds of one round of the napping episodes at each ``env.concurrency`` (1, default)."""
    from grouprl.config.env import EnvConfig
    from grouprl.envs.contained import contain
    from grouprl.envs.loader import EnvTarget

    default = EnvConfig().concurrency
    rows = [{"_index": i} for i in range(args.nap_episodes // args.group)]
    seconds: dict[int, float] = {}
    for concurrency in (1, default):
        cfg = EnvConfig(
            name="napping",
            args={"nap_s": args.nap},
            concurrency=concurrency,
            sandbox={"workers": args.workers},
        )
        target = EnvTarget(kind="registered", name="napping", factory=nap_env)
        env = contain(target, cfg, data, cache_dir=str(cache))
        try:
            one_round(env, tokenizer, engine, rows[:1], args.group)  # the workers start
            seconds[concurrency] = one_round(env, tokenizer, engine, rows, args.group)
        finally:
            env.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--group", type=int, default=4, help="episodes per row, >= 2")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nap-episodes", type=int, default=128, help="the concurrency case")
    parser.add_argument("--nap", type=float, default=0.2, help="seconds each step sleeps")
    add_smoke(parser, episodes=4, group=2, workers=1, rounds=1, nap_episodes=8, nap=0.01)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from grouprl.assets import resolve_model_path
    from grouprl.config.env import EnvConfig
    from grouprl.config.model_data import DataConfig
    from grouprl.envs.contained import contain
    from grouprl.envs.factory import make_env
    from grouprl.envs.loader import EnvTarget

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("builtin:tiny-search"))
    tmp = tempfile.TemporaryDirectory(prefix="grouprl-bench-env-")
    cache = Path(tmp.name)
    data = DataConfig()
    cfg = EnvConfig(name="search_qa", sandbox={"workers": args.workers})
    rows = [
        {"_index": i, "question": f"Who is {NAMES[i % 4]}?", "answer": "x"}
        for i in range(args.episodes // args.group)
    ]
    engine = Scripted()
    in_process = make_env(cfg, data, cache_dir=cache)
    target = EnvTarget(kind="registered", name="search_qa (contained)", factory=search_env)
    contained = contain(target, cfg, data, cache_dir=str(cache))
    try:
        naps = nap_seconds(args, tokenizer, engine, data, cache)
        first = one_round(contained, tokenizer, engine, rows, args.group)
        timings: dict[str, list[float]] = {"in-process": [], "contained": []}
        for _ in range(args.rounds):
            timings["in-process"].append(one_round(in_process, tokenizer, engine, rows, args.group))
            timings["contained"].append(one_round(contained, tokenizer, engine, rows, args.group))
    finally:
        contained.close()
        tmp.cleanup()
    median = {k: statistics.median(v) for k, v in timings.items()}
    calls = 3 * args.episodes  # a start and two steps per episode
    print(
        f"search_qa, {args.episodes} episodes x 2 turns, {args.workers} workers, "
        f"python {sys.version.split()[0]}"
    )
    one, many = naps.values()
    concurrency = list(naps)[1]
    print(
        f"{args.nap_episodes} episodes of one {args.nap:g} s step, {args.workers} workers: "
        f"{one:.3f} s one step at a time per worker, {many:.3f} s at env.concurrency="
        f"{concurrency}: speedup {one / many:.2f}x"
    )
    print(f"first contained round (workers start, index loads): {first:.3f} s")
    for name, seconds in median.items():
        print(f"{name:>11}: {seconds:.3f} s per round (median of {args.rounds})")
    extra = median["contained"] - median["in-process"]
    print(f"overhead per start/step call: {1000 * extra / calls:.2f} ms ({calls} calls a round)")
    print(f"contained / in-process: {median['contained'] / median['in-process']:.2f}x")


if __name__ == "__main__":
    main()
