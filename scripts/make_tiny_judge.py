"""Build the tiny judge model shipped in ``src/grouprl/assets/tiny-arith-judge``.

    python scripts/make_tiny_judge.py [--out DIR] [--problems N] [--samples K]

A reference-guided judge: shown a problem's worked reference solution and a completion
(``TEMPLATE``, the packaged recipe's ``llm_judge`` template), it answers ``yes`` when the
completion's final answer is the reference's and ``no`` otherwise. Three seeded stages,
on CPU in about ten minutes:

1. completions: the shipped tiny-arith policy answers N problems of the train split K
   times each (temperature 1, the rollouts' own sampling), and the run's checker
   (``math_answer``) labels each one right or wrong;
2. the judge starts from the policy's own weights and learns to answer those labels
   (next-token loss on the answer word and ``<|im_end|>`` only), the question sent as one
   user message through the chat template, as ``llm_judge`` sends it;
3. held out: the same for problems of the test split, never trained on: greedy answers,
   read as ``llm_judge``'s ``labels: {yes: 1, no: 0}`` reads them, against the checker
   (agreement; answers that are neither word count against it and are reported apart).

The judge has learned the checker only as far as these samples show it: a policy trained
against it can find answers it misjudges, which is why the recipe keeps ``math_answer``
as ``reward.correct_function`` (accuracy stays the checker's).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch
from tiny_models import sampled_answers
from transformers import AutoTokenizer, Qwen2ForCausalLM

from grouprl.assets.arith import arith_split
from grouprl.rewards.judge import LLMJudge
from grouprl.rewards.judge_client import JudgeError
from grouprl.rewards.math import math_answer

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "src/grouprl/assets/tiny-arith"
DEFAULT_OUT = ROOT / "src/grouprl/assets/tiny-arith-judge"
SEED = 0
TEMPLATE = (
    "Reference answer: {reference}\nCompletion: {completion}\n"
    "Is the completion's final answer the reference? Answer yes or no."
)
"""The judge's question; ``src/grouprl/recipes/tiny-arith-judge.yaml`` sends the same."""


def completions(policy, tok, problems, *, samples: int):
    """(completion text, reference, label) for K sampled answers to each problem."""
    out = []
    for i, _, completion in sampled_answers(policy, tok, problems, samples=samples):
        text = tok.decode(completion, skip_special_tokens=True)
        right = math_answer(text, reference=problems[i].answer) > 0.5
        out.append((text, problems[i].answer, right))
    return out


def question(tok, text: str, reference: str) -> list[int]:
    """The judge's prompt ids: the template as one user message, chat-templated."""
    content = TEMPLATE.format(reference=reference, completion=text)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    return tok.encode(prompt, add_special_tokens=False)


def examples(tok, samples):
    """(prompt ids + answer ids, the index where the answer starts) per sample."""
    end = tok.convert_tokens_to_ids("<|im_end|>")
    out = []
    for text, reference, label in samples:
        prompt = list(question(tok, text, reference))
        answer = [*tok.encode("yes" if label else "no", add_special_tokens=False), end]
        out.append((prompt + answer, len(prompt)))
    return out


def batch(rows, *, pad_id: int):
    """Right-padded ids, attention mask and labels (-100 but on the answer)."""
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100)
    for b, (ids, start) in enumerate(rows):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        attention[b, : len(ids)] = 1
        labels[b, start : len(ids)] = torch.tensor(ids[start:])
    return input_ids, attention, labels


def judged(model, tok, samples) -> list[str]:
    """The judge's greedy answer to each sample's question (a few tokens, decoded)."""
    model.eval()
    tok.padding_side = "left"
    answers = []
    with torch.no_grad():
        for start in range(0, len(samples), 64):
            chunk = samples[start : start + 64]
            prompts = [
                tok.apply_chat_template(
                    [
                        {
                            "role": "user",
                            "content": TEMPLATE.format(reference=ref, completion=text),
                        }
                    ],
                    add_generation_prompt=True,
                    tokenize=False,
                )
                for text, ref, _ in chunk
            ]
            enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
            out = model.generate(
                **enc,
                max_new_tokens=4,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
            width = enc["input_ids"].shape[1]
            answers += tok.batch_decode(out[:, width:], skip_special_tokens=True)
    tok.padding_side = "right"
    model.train()
    return answers


def agreement(samples, answers: list[str]) -> tuple[float, float]:
    """The share of answers that ``llm_judge``'s labels rule (the recipe's) reads as the
    checker's label (``yes``: right, ``no``: wrong), and the share it cannot read: neither
    word leads the answer (a reward failure in a run)."""
    rule = LLMJudge(path=str(POLICY), template=TEMPLATE, labels={"yes": 1, "no": 0})
    right = unread = 0
    for answer, (_, _, label) in zip(answers, samples, strict=True):
        try:
            right += rule.score(answer) == float(label)
        except JudgeError:
            unread += 1
    return right / len(samples), unread / len(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--problems", type=int, default=1500)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--held-out", type=int, default=200)
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    rng = random.Random(SEED)
    tok = AutoTokenizer.from_pretrained(POLICY)
    policy = Qwen2ForCausalLM.from_pretrained(POLICY)
    train = completions(policy, tok, arith_split("train")[: args.problems], samples=args.samples)
    held = completions(policy, tok, arith_split("test")[: args.held_out], samples=args.samples)
    right = sum(label for _, _, label in train) / len(train)
    print(f"{len(train)} completions to learn from ({right:.2f} right), {len(held)} held out")

    model = policy  # the judge starts from the policy's weights
    rows = examples(tok, train)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    model.train()
    order: list[int] = []
    for step in range(1, args.steps + 1):
        if len(order) < args.batch_size:
            order = list(range(len(rows)))
            rng.shuffle(order)
        chosen, order = order[: args.batch_size], order[args.batch_size :]
        input_ids, attention, labels = batch([rows[i] for i in chosen], pad_id=tok.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0:
            print(f"step {step}: loss {loss.item():.3f}", flush=True)
        if step % 200 == 0 or step == args.steps:
            accuracy, neither = agreement(held, judged(model, tok, held))
            print(
                f"step {step}: loss {loss.item():.3f}  held-out agreement {accuracy:.3f}  "
                f"neither word {neither:.3f}",
                flush=True,
            )

    n_params = sum(p.numel() for p in model.parameters())
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    record = json.dumps(
        {
            "script": "scripts/make_tiny_judge.py",
            "args": vars(args) | {"out": None},
            "seed": SEED,
            "params": n_params,
            "policy": "builtin:tiny-arith",
            "template": TEMPLATE,
            "train_completions": len(train),
            "train_right_share": right,
            "held_out_completions": len(held),
            "held_out_right_share": sum(label for _, _, label in held) / len(held),
            "held_out_agreement": accuracy,
            "held_out_neither_word": neither,
        },
        indent=2,
    )
    (args.out / "TRAINING.json").write_text(record)
    print(f"saved to {args.out}")


if __name__ == "__main__":
    main()
