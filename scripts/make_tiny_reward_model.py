"""Build the tiny reward model shipped in ``src/grouprl/assets/tiny-arith-rm``.

    python scripts/make_tiny_reward_model.py [--out DIR] [--problems N] [--samples K]

Three seeded stages, all on CPU in a few minutes:

1. completions: the shipped tiny-arith policy answers N problems of the train split K
   times each (temperature 1, the rollouts' own sampling), and the run's checker
   (``math_answer``: the ``#### N`` line against the reference) labels each one 1 or 0;
2. a Qwen2 sequence classifier with one output (the score: a logit, read at the last
   token) starts from the policy's own weights (the head is new) and learns those labels
   with a logistic loss, on prompt + completion exactly as a run shows them;
3. held out: the same for problems of the test split, never trained on: the accuracy of
   "score > 0" against the checker, and the pairwise agreement within each problem's
   completions (of two completions the checker tells apart, the share the model orders
   the same way).

4. normalisation: the mean and std of its scores over the training completions, stored in
   ``config.json`` as ``mean`` and ``std`` (OpenRLHF's keys), which ``reward_model``'s
   ``normalize: true`` reads. ``--stats-only`` computes just these for the model already
   in ``--out`` (stage 1 draws the same completions: the same seed), leaving its weights
   and held-out figures as they are.

The result loads with ``AutoModelForSequenceClassification.from_pretrained(DIR)`` like any
Hugging Face reward model. It has learned what the checker rewards only as far as these
samples show it, so a policy trained against it can learn to please it instead: a run
logs its agreement with the checker to show that.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch
from tiny_models import sampled_answers
from transformers import AutoTokenizer, Qwen2ForCausalLM, Qwen2ForSequenceClassification

from grouprl.assets.arith import arith_split
from grouprl.rewards.math import math_answer

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "src/grouprl/assets/tiny-arith"
DEFAULT_OUT = ROOT / "src/grouprl/assets/tiny-arith-rm"
SEED = 0


def sample(policy, tok, problems, *, samples: int):
    """(prompt + completion ids, label, problem index) for K sampled answers to each problem."""
    rows = []
    for i, prompt, completion in sampled_answers(policy, tok, problems, samples=samples):
        text = tok.decode(completion, skip_special_tokens=True)
        rows.append((prompt + completion, math_answer(text, reference=problems[i].answer), i))
    return rows


def batches(rows, *, batch_size: int, pad_id: int, rng: random.Random):
    while True:
        order = list(range(len(rows)))
        rng.shuffle(order)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield collate([rows[i] for i in order[start : start + batch_size]], pad_id=pad_id)


def collate(rows, *, pad_id: int):
    width = max(len(ids) for ids, _, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for b, (ids, _, _) in enumerate(rows):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        attention[b, : len(ids)] = 1
    labels = torch.tensor([float(label) for _, label, _ in rows])
    return input_ids, attention, labels


def scores(model, rows, *, pad_id: int) -> list[float]:
    model.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(rows), 128):
            input_ids, attention, _ = collate(rows[start : start + 128], pad_id=pad_id)
            out += model(input_ids=input_ids, attention_mask=attention).logits[:, 0].tolist()
    model.train()
    return out


def agreement(rows, values: list[float]) -> tuple[float, float]:
    """Accuracy of "score > 0" against the labels, and the pairwise agreement within each
    problem's completions (pairs with different labels only)."""
    right = sum((v > 0) == (label > 0.5) for (_, label, _), v in zip(rows, values, strict=True))
    by_problem: dict[int, list[tuple[float, float]]] = {}
    for (_, label, i), v in zip(rows, values, strict=True):
        by_problem.setdefault(i, []).append((label, v))
    same = pairs = 0
    for group in by_problem.values():
        for a, (label_a, v_a) in enumerate(group):
            for label_b, v_b in group[a + 1 :]:
                if label_a != label_b:
                    pairs += 1
                    same += (label_a > label_b) == (v_a > v_b)
    return right / len(rows), same / max(pairs, 1)


def store_stats(out: Path, model, rows, *, pad_id: int) -> tuple[float, float]:
    """The mean and (population) std of ``model``'s scores of ``rows``, written into
    ``out/config.json`` as ``mean`` and ``std``."""
    values = torch.tensor(scores(model, rows, pad_id=pad_id))
    mean, std = values.mean().item(), values.std(correction=0).item()
    path = out / "config.json"
    config = json.loads(path.read_text())
    config["mean"], config["std"] = mean, std
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return mean, std


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--problems", type=int, default=1500)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--held-out", type=int, default=200)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--stats-only", action="store_true", help="only stage 4, on --out")
    args = parser.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    rng = random.Random(SEED)
    tok = AutoTokenizer.from_pretrained(POLICY)
    policy = Qwen2ForCausalLM.from_pretrained(POLICY)
    train = sample(policy, tok, arith_split("train")[: args.problems], samples=args.samples)
    if args.stats_only:
        model = Qwen2ForSequenceClassification.from_pretrained(args.out)
        mean, std = store_stats(args.out, model, train, pad_id=tok.pad_token_id)
        print(f"{len(train)} training completions: mean {mean:.4f}, std {std:.4f}")
        return
    held = sample(policy, tok, arith_split("test")[: args.held_out], samples=args.samples)
    right = sum(label for _, label, _ in train) / len(train)
    print(f"{len(train)} completions to learn from ({right:.2f} right), {len(held)} held out")

    model = Qwen2ForSequenceClassification.from_pretrained(POLICY, num_labels=1)
    model.config.pad_token_id = tok.pad_token_id
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    model.train()
    for step, (input_ids, attention, labels) in enumerate(
        batches(train, batch_size=args.batch_size, pad_id=tok.pad_token_id, rng=rng), start=1
    ):
        logits = model(input_ids=input_ids, attention_mask=attention).logits[:, 0]
        loss = loss_fn(logits, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == args.steps:
            accuracy, pairwise = agreement(held, scores(model, held, pad_id=tok.pad_token_id))
            print(
                f"step {step}: loss {loss.item():.3f}  held-out accuracy {accuracy:.3f}  "
                f"pairwise {pairwise:.3f}",
                flush=True,
            )
        if step == args.steps:
            break

    n_params = sum(p.numel() for p in model.parameters())
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    record = json.dumps(
        {
            "script": "scripts/make_tiny_reward_model.py",
            "args": vars(args) | {"out": None},
            "seed": SEED,
            "params": n_params,
            "policy": "builtin:tiny-arith",
            "train_completions": len(train),
            "train_right_share": right,
            "held_out_accuracy": accuracy,
            "held_out_pairwise_agreement": pairwise,
        },
        indent=2,
    )
    (args.out / "TRAINING.json").write_text(record)
    mean, std = store_stats(args.out, model, train, pad_id=tok.pad_token_id)
    print(f"scores over the training completions: mean {mean:.4f}, std {std:.4f}")
    print(f"saved to {args.out}")


if __name__ == "__main__":
    main()
