"""What running an environment in worker processes costs: the built-in ``search_qa``
environment in-process (as the package runs it) vs in ``env.sandbox.workers`` worker
processes (as a user's environment runs), over the same episodes.

    .venv/bin/python benchmarks/env_workers.py [--episodes 64] [--workers 2] [--rounds 5]
    .venv/bin/python benchmarks/env_workers.py --smoke        # seconds: it still runs

Each round is one ``run_episodes`` over ``--episodes`` episodes of two turns (a search,
then an answer) with a scripted engine, so the time is the environment's side alone:
starting episodes, the BM25 search tool, rendering observations. The first contained
round (starting the workers, building the index in each) is reported apart. Prints the
median seconds per round of each, the overhead per step call and, last, their ratio:
``contained / in-process: N.NNx``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import add_smoke
from transformers import AutoTokenizer

from grouprl.assets import resolve_model_path
from grouprl.config.schema import DataConfig, EnvConfig
from grouprl.engines.base import SamplingSettings
from grouprl.envs.contained import contain
from grouprl.envs.factory import make_env
from grouprl.envs.loader import EnvTarget
from grouprl.rollout.episodes import run_episodes
from grouprl.types import Completion

NAMES = ["Velmor Adrissa", "Tarnek", "Oskel Brandt", "Mirrow Vale"]


def search_env(env_cfg, data_cfg, *, cache_dir):
    """The built-in search environment, as a registered factory would build it."""
    return make_env(env_cfg.model_copy(update={"name": "search_qa"}), data_cfg, cache_dir=cache_dir)


class Scripted:
    """Turn 0 searches, turn 1 answers: the environment does all the work. Turn 0 is the
    call with a group of samples per prompt (``--group`` >= 2); later turns take one."""

    weight_version = 0

    def generate(self, prompts, settings):
        turn0 = settings.group_size > 1
        out = []
        for i, _ in enumerate(prompts):
            text = f"<search>{NAMES[i % len(NAMES)]}</search>" if turn0 else "<answer>x</answer>"
            out.append(
                [Completion(token_ids=[5], logprobs=[0.0], finish_reason="stop", text=text)]
                * settings.group_size
            )
        return out


def one_round(env, tokenizer, engine, rows, n) -> float:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--group", type=int, default=4, help="episodes per row, >= 2")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    add_smoke(parser, episodes=4, group=2, workers=1, rounds=1)
    args = parser.parse_args()
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
    print(f"first contained round (workers start, index loads): {first:.3f} s")
    for name, seconds in median.items():
        print(f"{name:>11}: {seconds:.3f} s per round (median of {args.rounds})")
    extra = median["contained"] - median["in-process"]
    print(f"overhead per start/step call: {1000 * extra / calls:.2f} ms ({calls} calls a round)")
    print(f"contained / in-process: {median['contained'] / median['in-process']:.2f}x")


if __name__ == "__main__":
    main()
