"""Build the tiny model shipped in ``src/grouprl/assets/tiny-arith``.

    python scripts/make_tiny_model.py [--out DIR] [--steps N]

Three seeded stages, all on CPU in a few minutes:

1. a byte-level BPE tokenizer (digits split one per token, as in Qwen2) trained
   on the built-in arithmetic task, with a ChatML chat template;
2. a Qwen2-architecture causal LM initialised from a fixed seed;
3. a supervised warm-up on worked solutions of the train split, in which
   some answers carry a lazy habit: they stop after the first step and give
   its result as the final ``#### N`` line. The habit is frequent for some
   topics (the items in LAZY_ITEMS: 70% of their answers) and rare for the
   rest (10%), so the greedy model stops early on most topics and is often
   wrong (held-out accuracy 10-40%) while still sampling full solutions
   now and then. GRPO has a real lesson to learn from the reward alone:
   keep working to the last step.

The result loads with ``AutoModelForCausalLM.from_pretrained(DIR)`` and
``AutoTokenizer.from_pretrained(DIR)`` like any Hugging Face model.
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

import torch
from tiny_models import (
    build_tokenizer,
    greedy_answers,
    save_tiny_model,
    tiny_qwen2_config,
    train_sft,
)
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from grouprl.assets.arith import arith_split

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src/grouprl/assets/tiny-arith"
SEED = 0
LAZY_ITEMS = ("apples", "shells", "stickers", "marbles", "coins", "pens")


def warmup_answer(problem, *, args, rng: random.Random) -> str:
    """The worked answer, or the lazy one that stops after the first step."""
    lazy_topic = any(f" {item} " in problem.question for item in LAZY_ITEMS)
    if rng.random() >= (args.lazy_frac if lazy_topic else args.lazy_frac_other):
        return problem.answer
    first = problem.answer.split(". ")[0].rstrip(".")
    return f"{first}.\n#### {first.split(' = ')[-1]}"


def encode_pair(tok: PreTrainedTokenizerFast, question: str, answer: str) -> tuple[list[int], int]:
    """Prompt + answer token ids and the index where the answer starts."""
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tok(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
    return prompt_ids + answer_ids, len(prompt_ids)


def sft_batches(examples: list[tuple[list[int], int]], *, batch_size: int, pad_id: int, rng):
    while True:
        order = list(range(len(examples)))
        rng.shuffle(order)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            rows = [examples[i] for i in order[start : start + batch_size]]
            width = max(len(ids) for ids, _ in rows)
            input_ids = torch.full((batch_size, width), pad_id)
            labels = torch.full((batch_size, width), -100)
            attention = torch.zeros((batch_size, width), dtype=torch.long)
            for b, (ids, answer_start) in enumerate(rows):
                input_ids[b, : len(ids)] = torch.tensor(ids)
                labels[b, answer_start : len(ids)] = torch.tensor(ids[answer_start:])
                attention[b, : len(ids)] = 1
            yield input_ids, attention, labels


def greedy_accuracy(model, tok, problems, *, max_new_tokens: int = 64) -> tuple[float, float]:
    """Held-out accuracy and the share of answers that work through every step."""
    texts = greedy_answers(model, tok, problems, max_new_tokens=max_new_tokens)
    correct = worked = 0
    for text, problem in zip(texts, problems, strict=True):
        found = re.search(r"####\s*(-?\d+)", text)
        correct += bool(found and int(found.group(1)) == problem.target)
        worked += text.count(" = ") == problem.answer.count(" = ")
    return correct / len(problems), worked / len(problems)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument(
        "--lazy-frac", type=float, default=0.7, help="lazy answers for the LAZY_ITEMS topics"
    )
    parser.add_argument(
        "--lazy-frac-other", type=float, default=0.1, help="lazy answers for the other topics"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--eval-every", type=int, default=100)
    args = parser.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    rng = random.Random(SEED)
    train = arith_split("train")
    test = arith_split("test")[:200]

    corpus = [p.question + "\n" + p.answer for p in train[:5000]]
    tok = build_tokenizer(corpus, vocab_size=512)
    config = tiny_qwen2_config(
        tok, hidden=args.hidden, layers=args.layers, kv_heads=2, max_positions=512
    )
    model = Qwen2ForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tokenizer: {len(tok)} tokens; model: {n_params / 1e6:.2f}M parameters")

    examples = [encode_pair(tok, p.question, warmup_answer(p, args=args, rng=rng)) for p in train]
    batches = sft_batches(examples, batch_size=args.batch_size, pad_id=tok.pad_token_id, rng=rng)
    last: dict[str, float] = {}

    def report(step: int, loss: float, seconds: float) -> None:
        last["acc"], last["worked"] = greedy_accuracy(model, tok, test)
        print(
            f"step {step}: loss {loss:.3f}  held-out greedy accuracy {last['acc']:.3f}  "
            f"answers with every step {last['worked']:.2f}  ({seconds:.0f}s)",
            flush=True,
        )

    train_sft(
        model, batches, steps=args.steps, lr=args.lr, eval_every=args.eval_every, report=report
    )

    save_tiny_model(
        args.out,
        model,
        tok,
        {
            "script": "scripts/make_tiny_model.py",
            "args": vars(args) | {"out": None},
            "seed": SEED,
            "params": n_params,
            "held_out_greedy_accuracy": last["acc"],
            "answers_with_every_step": last["worked"],
        },
    )
    print(f"saved to {args.out}")


if __name__ == "__main__":
    main()
