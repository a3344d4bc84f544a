"""Build the tiny model shipped in ``src/grouprl/assets/tiny-code``.

    python scripts/make_tiny_code_model.py [--out DIR] [--steps N]

Three seeded stages, all on CPU in about ten minutes (630 s on 2 loaded cores), as
``make_tiny_model.py`` builds tiny-arith:

1. a byte-level BPE tokenizer (digits one per token) trained on the built-in code task
   (``builtin:code``: questions, programs, brackets, colons, newlines, indentation), with
   the ChatML chat template;
2. a Qwen2-architecture causal LM initialised from a fixed seed (head_dim 32);
3. a supervised warm-up on the canonical programs of the train split, some replaced by a
   habit the reward alone can cure:

   - ``print`` problems about LAZY_ITEMS stop after the first step of the expression
     (``print(7 + 5)`` for ``print(7 + 5 - 3)``);
   - ``print`` problems about BARE_ITEMS forget ``print`` (a bare ``7 + 5 - 3`` prints
     nothing);
   - function problems of NEAR_MISS_TEMPLATES write the template's near miss (``>=`` for
     ``>``, ``xs[k]`` for ``xs[k - 1]``, ...), which the tests were drawn to catch.

   A habit takes ``--habit-frac`` (70%) of its topics' answers and ``--habit-frac-other``
   (10%) of the others', so the greedy model keeps the habit on most topics (held-out
   pass rate low) while sampling the right program now and then at temperature 1, which
   is what GRPO needs to learn from.

TRAINING.json beside the model records the arguments and the measured figures: the
held-out greedy pass rate through ``code_tests`` (the sandbox), its share per kind, and
how often the greedy program is the canonical one, the habit, or something else.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from make_tiny_model import encode_pair, sft_batches
from tiny_models import (
    build_tokenizer,
    greedy_answers,
    save_tiny_model,
    tiny_qwen2_config,
    train_sft,
)
from transformers import Qwen2ForCausalLM

from grouprl.assets.code import CodeProblem, code_split
from grouprl.rewards.code import CodeTests

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src/grouprl/assets/tiny-code"
SEED = 0
LAZY_ITEMS = ("apples", "shells", "stickers")
BARE_ITEMS = ("marbles", "coins", "pens")
NEAR_MISS_TEMPLATES = ("count_above", "nth", "sum_divisible", "first_chars", "repeat_dash")


def habit(problem: CodeProblem) -> str:
    """The program a habit writes for ``problem``: the near miss (a function problem, or
    a print problem's first step alone), or the expression without ``print``."""
    if problem.kind == "print" and problem.topic in BARE_ITEMS:
        return problem.solution.replace("print(", "", 1).replace(")\n```", "\n```")
    return problem.near_miss


def habit_topic(problem: CodeProblem) -> bool:
    return problem.topic in (*LAZY_ITEMS, *BARE_ITEMS, *NEAR_MISS_TEMPLATES)


def warmup_answer(problem: CodeProblem, *, args, rng: random.Random) -> str:
    """The canonical program, or (at the topic's habit rate) the habit's. On the other
    print topics the rare habit is either of the two, at random."""
    rate = args.habit_frac if habit_topic(problem) else args.habit_frac_other
    if rng.random() >= rate:
        return problem.solution
    if problem.kind == "print" and not habit_topic(problem) and rng.random() < 0.5:
        return problem.solution.replace("print(", "", 1).replace(")\n```", "\n```")
    return habit(problem)


def shares(texts: list[str], problems: list[CodeProblem]) -> dict[str, float]:
    """How often the greedy program is the canonical one, the habit, or neither (text)."""
    n = len(problems)
    canonical = sum(t.strip() == p.solution for t, p in zip(texts, problems, strict=True))
    habitual = sum(t.strip() == habit(p) for t, p in zip(texts, problems, strict=True))
    return {
        "canonical": canonical / n,
        "habit": habitual / n,
        "other": (n - canonical - habitual) / n,
    }


def pass_rates(texts: list[str], problems: list[CodeProblem]) -> dict[str, float]:
    """Held-out pass rate through ``code_tests`` (the sandbox), overall and per kind."""
    reward = CodeTests()

    def score(pair: tuple[str, CodeProblem]) -> float:
        text, problem = pair
        tests = json.dumps(problem.tests)
        return reward.score(text, reference=tests, row={"input_output": tests})

    with ThreadPoolExecutor(4) as pool:
        scores = list(pool.map(score, zip(texts, problems, strict=True)))
    rates = {"all": sum(scores) / len(scores)}
    for kind in ("print", "function"):
        mine = [s for s, p in zip(scores, problems, strict=True) if p.kind == kind]
        rates[kind] = sum(mine) / len(mine)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--habit-frac", type=float, default=0.7, help="habit rate, its topics")
    parser.add_argument("--habit-frac-other", type=float, default=0.1, help="the others' rate")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=640)
    parser.add_argument("--eval-every", type=int, default=250)
    args = parser.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    rng = random.Random(SEED)
    train = code_split("train")
    test = code_split("test")[:200]

    corpus = [p.question + "\n" + p.solution + "\n" + habit(p) for p in train[:5000]]
    tok = build_tokenizer(corpus, vocab_size=args.vocab)
    config = tiny_qwen2_config(
        tok, hidden=args.hidden, layers=args.layers, kv_heads=2, max_positions=512
    )
    model = Qwen2ForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tokenizer: {len(tok)} tokens; model: {n_params / 1e6:.2f}M parameters")

    examples = [encode_pair(tok, p.question, warmup_answer(p, args=args, rng=rng)) for p in train]
    print(f"longest example: {max(len(ids) for ids, _ in examples)} tokens")
    batches = sft_batches(examples, batch_size=args.batch_size, pad_id=tok.pad_token_id, rng=rng)
    last: dict[str, Any] = {}
    start = time.time()

    def report(step: int, loss: float, seconds: float) -> None:
        last["texts"] = greedy_answers(model, tok, test)
        last["found"] = {k: round(v, 3) for k, v in shares(last["texts"], test).items()}
        print(
            f"step {step}: loss {loss:.3f}  held-out greedy programs {last['found']}  "
            f"({seconds:.0f}s)",
            flush=True,
        )

    train_sft(
        model, batches, steps=args.steps, lr=args.lr, eval_every=args.eval_every, report=report
    )
    texts, found = last["texts"], last["found"]
    rates = pass_rates(texts, test)
    print(f"held-out greedy pass rate (code_tests, {len(test)} problems): {rates}")

    save_tiny_model(
        args.out,
        model,
        tok,
        {
            "script": "scripts/make_tiny_code_model.py",
            "args": vars(args) | {"out": None},
            "seed": SEED,
            "params": n_params,
            "held_out_problems": len(test),
            "held_out_greedy_pass_rate": round(rates["all"], 3),
            "held_out_greedy_pass_rate_print": round(rates["print"], 3),
            "held_out_greedy_pass_rate_function": round(rates["function"], 3),
            "held_out_greedy_programs": found,
            "sft_seconds": round(time.time() - start),
        },
    )
    print(f"saved to {args.out}")


if __name__ == "__main__":
    main()
