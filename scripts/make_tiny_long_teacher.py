"""Build the tiny teacher of ``benchmarks/distill.py --task long`` (not shipped).

    python scripts/make_tiny_long_teacher.py [--out DIR] [--steps N]
    python benchmarks/distill.py --task long --teacher runs/tiny-arith-long-teacher

The teacher of the sparse task (``builtin:arith-long``: four or five operations). The
shipped student (``builtin:tiny-arith``) never saw an answer past three steps and gets 8%
of these right; GRPO's reward is sparse for it. This teacher is the student fine-tuned
on worked solutions (every step, no lazy habit) of both tasks' train splits, half each,
so it keeps the student's architecture, tokenizer and chat format (the distillation
checks pass by construction): the student's directory is copied and only the weights
(and config.json, generation_config.json) are written anew.

Seeded; CPU only, 13 minutes on 2 cores. Greedy held-out accuracy on 200 problems of
each task goes in TRAINING.json (2026-12-02: arith 0.38 -> 0.995, arith-long 0.08 -> 0.95).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from pathlib import Path

import torch
from make_tiny_model import encode_pair, greedy_accuracy, sft_batches
from tiny_models import train_sft
from transformers import AutoTokenizer, Qwen2ForCausalLM

from grouprl.assets.arith import arith_split
from grouprl.assets.arith_long import arith_long_split

ROOT = Path(__file__).resolve().parents[1]
STUDENT = ROOT / "src/grouprl/assets/tiny-arith"
DEFAULT_OUT = ROOT / "runs/tiny-arith-long-teacher"
WRITTEN = ("model.safetensors", "config.json", "generation_config.json", "TRAINING.json")
SEED = 0
MAX_NEW_TOKENS = 80  # the longest worked answer is 60 tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--examples", type=int, default=10_000, help="from each task")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval-every", type=int, default=100)
    args = parser.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    rng = random.Random(SEED)
    tok = AutoTokenizer.from_pretrained(STUDENT)
    model = Qwen2ForCausalLM.from_pretrained(STUDENT, dtype=torch.float32)
    problems = arith_split("train", size=args.examples)
    problems += arith_long_split("train", size=args.examples)
    examples = [encode_pair(tok, p.question, p.answer) for p in problems]
    batches = sft_batches(examples, batch_size=args.batch_size, pad_id=tok.pad_token_id, rng=rng)
    held_out = {"arith": arith_split("test")[:200], "arith-long": arith_long_split("test")[:200]}

    def accuracy() -> dict[str, float]:
        return {
            task: greedy_accuracy(model, tok, items, max_new_tokens=MAX_NEW_TOKENS)[0]
            for task, items in held_out.items()
        }

    before = accuracy()
    print(f"the student, held-out greedy accuracy: {before}", flush=True)
    last: dict[str, float] = {}

    def report(step: int, loss: float, seconds: float) -> None:
        last.update(accuracy())
        print(f"step {step}: loss {loss:.3f}  held-out greedy accuracy {last}  ({seconds:.0f}s)")

    train_sft(
        model, batches, steps=args.steps, lr=args.lr, eval_every=args.eval_every, report=report
    )

    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(STUDENT, out, ignore=shutil.ignore_patterns(*WRITTEN))
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    record = {
        "script": "scripts/make_tiny_long_teacher.py",
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "seed": SEED,
        "student": "builtin:tiny-arith",
        "held_out_greedy_accuracy_before": before,
        "held_out_greedy_accuracy_after": last,
        "tokenizer_files": "the student's, copied byte for byte",
    }
    (out / "TRAINING.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
