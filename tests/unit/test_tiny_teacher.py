"""The shipped tiny teacher (scripts/make_tiny_teacher.py: tiny-arith after the packaged
GRPO recipe) is the student's format, so the distillation checks pass, and on problems
its held-out figures did not use it scores worked answers above the student's lazy habit
(what distillation teaches)."""

import filecmp
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grouprl.assets import ASSETS_DIR, builtin_models, resolve_model_path
from grouprl.assets.arith import arith_split
from grouprl.config.loader import load_config
from grouprl.config.teacher_checks import teacher_problems
from grouprl.engines.hf_engine import HFEngine
from grouprl.engines.placement import in_driver
from grouprl.engines.teacher import Teacher

pytestmark = pytest.mark.unit
TEACHER = ASSETS_DIR / "tiny-arith-teacher"
STUDENT = ASSETS_DIR / "tiny-arith"


def test_the_teacher_is_shipped_in_the_students_format():
    assert "tiny-arith-teacher" in builtin_models()
    assert resolve_model_path("builtin:tiny-arith-teacher") == str(TEACHER)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert filecmp.cmp(TEACHER / name, STUDENT / name, shallow=False), name
    assert (TEACHER / "model.safetensors").stat().st_size < 6_000_000
    record = json.loads((TEACHER / "TRAINING.json").read_text())
    assert record["held_out_accuracy_after"] >= 0.85 > record["held_out_accuracy_before"]
    assert abs(record["exported_held_out_accuracy"] - record["held_out_accuracy_after"]) < 0.02
    cfg = load_config(
        "tiny-arith", ["teacher.path=builtin:tiny-arith-teacher", "algo.name=distill"]
    )
    assert teacher_problems(cfg) == []


def test_the_teacher_scores_worked_answers_above_the_students_lazy_habit():
    """Through the teacher API (one forward pass each): the student's habit is the lazy
    answer (the first step's result, make_tiny_model.py), which GRPO trained out of the
    teacher. The teacher gives worked answers a higher logprob than the student does, and
    prefers them to lazy ones where the student does not: the per-token signal
    distillation trains on. (Greedy accuracy: TRAINING.json, measured by the script.)"""
    tok = AutoTokenizer.from_pretrained(STUDENT)
    problems = arith_split("test")[200:240]  # past the 200 the held-out figures used
    prompts = [
        tok(
            tok.apply_chat_template(
                [{"role": "user", "content": p.question}],
                add_generation_prompt=True,
                tokenize=False,
            ),
            add_special_tokens=False,
        ).input_ids
        for p in problems
    ]

    def lazy(answer: str) -> str:
        first = answer.split(". ")[0].rstrip(".")
        return f"{first}.\n#### {first.split(' = ')[-1]}"

    def answers(texts: list[str]) -> list[list[int]]:
        return [
            [*ids, *tok(t, add_special_tokens=False).input_ids, tok.eos_token_id]
            for ids, t in zip(prompts, texts, strict=True)
        ]

    worked, lazy_ones = (
        answers([p.answer for p in problems]),
        answers([lazy(p.answer) for p in problems]),
    )
    starts = [len(ids) for ids in prompts]
    mean, prefers = {}, {}
    for name, path in (("student", STUDENT), ("teacher", TEACHER)):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        teacher = Teacher(in_driver(HFEngine(model, tok, device="cpu")))
        good = [sum(x) for x in teacher.token_logprobs(worked, starts)]
        bad = [sum(x) for x in teacher.token_logprobs(lazy_ones, starts)]
        teacher.close()
        mean[name] = sum(good) / len(good)
        prefers[name] = sum(g > b for g, b in zip(good, bad, strict=True))
    # measured: mean -1.02 (teacher) vs -1.15 (student); worked > lazy in 37 vs 11 of 40
    assert mean["teacher"] > mean["student"], mean
    assert prefers["teacher"] >= 0.8 * len(problems) > 0.5 * len(problems) > prefers["student"]
