"""The shipped tiny reward model (scripts/make_tiny_reward_model.py) loads as any Hugging
Face reward model does, and on problems it never saw prefers a worked answer to the lazy one
the shipped policy gets wrong (it stops after the first step). What it has not learned is
arithmetic: a worked answer whose last number is off scores about as a right one (chance:
20 of 40 here): a policy trained against it alone could learn that."""

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from grouprl.assets import resolve_model_path
from grouprl.assets.arith import arith_split

pytestmark = pytest.mark.unit


def test_the_tiny_reward_model_prefers_a_worked_answer_to_a_lazy_one():
    path = resolve_model_path("builtin:tiny-arith-rm")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    assert model.config.num_labels == 1

    def score(question: str, answer: str) -> float:
        # as a run shows a sample: the generation prompt, the completion, its end token.
        # (The chat template's assistant turn adds a newline after it, and the model reads
        # its score at the last token: that text is one it never saw.)
        prompt = [{"role": "user", "content": question}]
        text = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        text += answer + tok.eos_token
        ids = tok(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            return float(model(**ids).logits[0, 0])

    problems = arith_split("test")[200:240]  # past the 200 its held-out figures used
    preferred = 0
    for p in problems:
        first = p.answer.split(". ")[0].rstrip(".")  # the lazy habit (make_tiny_model.py)
        lazy = f"{first}.\n#### {first.split(' = ')[-1]}"
        preferred += score(p.question, p.answer) > score(p.question, lazy)
    assert preferred >= 0.9 * len(problems), f"{preferred} of {len(problems)}"  # 40 of 40
