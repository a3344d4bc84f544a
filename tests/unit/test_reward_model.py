"""The ``reward_model`` reward (rewards/reward_model.py) and what comes with it: the
agreement metric worked out by hand, normalisation, the config-time refusals with their
messages, the group scope it declares, the prompt text it reads (decoded from the ids the
engine was given), and its rows in ``grouprl plan``."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from grouprl.assets import resolve_model_path
from grouprl.assets.arith import arith_split
from grouprl.config.loader import load_config
from grouprl.config.reward import RewardConfig, RewardFunction
from grouprl.plan.reward_model_rows import reward_model_rows
from grouprl.rewards import reward_model_checks
from grouprl.rewards.registry import resolve_rewards
from grouprl.rewards.reward_model import RewardModel
from grouprl.rewards.reward_model_checks import reward_model_problems
from grouprl.rewards.scores import RewardScores, agreement, metrics
from grouprl.rollout.episode_scores import score_trajectories
from grouprl.types import Completion, Trajectory, Turn

pytestmark = pytest.mark.unit

RM = "builtin:tiny-arith-rm"
POLICY = "builtin:tiny-arith"


def test_agreement_by_hand():
    # one group of four: the checker says 1 0 1 0. Its pairs told apart, and the learned
    # scores' order: (0,1) 2>1 same: 1; (0,3) 2<3 other way: 0; (1,2) 1=1 tie: 1/2;
    # (2,3) 1<3 other way: 0. (0,2) and (1,3) the checker ties: no pair. 1.5 of 4.
    assert agreement([2.0, 1.0, 1.0, 3.0], [1.0, 0.0, 1.0, 0.0], [(0, 4)]) == (1.5, 4)
    # pairs never cross groups; an unscored sample (None: its call failed) is in none
    learned = [0.3, 0.1, None, 5.0, 4.0, 0.0]
    checker = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    # group (0,3): (0,1) 0.3>0.1 same: 1; sample 2 out. group (3,6): (3,4) checker 0<1,
    # learned 5>4: 0; (4,5) 1>0, 4>0: 1. 2 of 3.
    assert agreement(learned, checker, [(0, 3), (3, 6)]) == (2.0, 3)
    assert agreement([1.0, 2.0], [1.0, 1.0], [(0, 2)]) == (0.0, 0)  # nothing told apart


def test_agreement_metric_adds_up_over_calls_and_is_absent_without_pairs():
    parts = {"reward_model": [1.0, 0.0], "math_answer": [1.0, 0.0]}
    extras = {"reward_model": [{}, {}], "math_answer": [{}, {}]}
    first = RewardScores([1.0, 0.0], parts, extras=extras, agreement={"reward_model": (1.5, 4)})
    second = RewardScores([1.0, 0.0], parts, extras=extras, agreement={"reward_model": (1.0, 2)})
    out = metrics(RewardScores.concat([first, second]))
    assert out["reward/reward_model/agreement"] == pytest.approx(2.5 / 6)
    none = RewardScores([1.0, 0.0], parts, extras=extras, agreement={"reward_model": (0.0, 0)})
    assert "reward/reward_model/agreement" not in metrics(none)
    # a run without a learned reward logs no agreement at all
    plain = RewardScores([1.0, 0.0], {"math_answer": [1.0, 0.0]}, extras={"math_answer": [{}, {}]})
    assert not [k for k in metrics(plain) if k.endswith("agreement")]


def test_the_reward_model_is_called_per_group_without_scope_written():
    entries = [
        RewardFunction(name="reward_model", args={"path": RM}),
        # a saved config writes the default scope: the declared one still wins
        RewardFunction(name="reward_model", scope="sample", args={"path": RM, "batch_size": 4}),
        RewardFunction(name="math_answer", weight=0.0),
    ]
    rewards = resolve_rewards(entries)
    assert [(r.name, r.scope) for r in rewards] == [
        ("reward_model", "group"),
        ("reward_model_2", "group"),
        ("math_answer", "sample"),
    ]
    assert rewards[1].fn == RewardModel(path=RM, batch_size=4)


def test_the_scorer_is_given_the_context_of_the_last_turn_as_the_engine_saw_it():
    class Scorer:
        reads_prompts = True

        def __call__(self, **kwargs):
            self.kwargs = kwargs
            n = len(kwargs["completions"])
            return RewardScores([0.0] * n, {"reward_model": [0.0] * n}, extras={})

    def turn(ids: list[int], text: str, observation: list[int]) -> Turn:
        return Turn(Completion(ids, [0.0] * len(ids), "stop", text), observation_ids=observation)

    single = Trajectory(0, [1, 2, 3], [turn([7, 8], "a", [])], 0)
    multi = Trajectory(1, [1, 2], [turn([5], "b", [9, 9]), turn([6], "c", [])], 0)
    scorer = Scorer()
    score_trajectories([single, multi], score=scorer, correct_function=None)
    # the ids before the scored (last) turn: the prompt, then earlier turns and replies
    assert scorer.kwargs["prompt_ids"] == [[1, 2, 3], [1, 2, 5, 9, 9]]
    assert scorer.kwargs["completions"] == ["a", "c"]

    class Plain:  # a scorer of rule rewards is called as before
        def __call__(self, *, completions, rows, group_size):
            return RewardScores([0.0] * len(completions), {}, extras={})

    score_trajectories([single], score=Plain(), correct_function=None)


@pytest.fixture(scope="module")
def arith_texts():
    """Four held-out problems' rendered prompts (from the ids, as a run decodes them),
    each with its worked answer and the lazy one the shipped policy gets wrong."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model_path(POLICY))
    prompts, completions, right = [], [], []
    for p in arith_split("test")[240:244]:
        ids = tok.apply_chat_template(
            [{"role": "user", "content": p.question}], add_generation_prompt=True, tokenize=True
        )
        ids = ids if isinstance(ids, list) else ids["input_ids"]
        first = p.answer.split(". ")[0].rstrip(".")
        lazy = f"{first}.\n#### {first.split(' = ')[-1]}"
        prompts += [ids, ids]
        completions += [p.answer, lazy]
        right += [1.0, 0.0]
    return tok, prompts, completions, right


@pytest.mark.slow  # loads the model here (transformers: seconds)
def test_scores_are_the_logit_of_prompt_completion_eos_batched_or_not(arith_texts):
    import torch
    from transformers import AutoModelForSequenceClassification

    tok, prompt_ids, completions, _ = arith_texts
    prompts = [tok.decode(ids, skip_special_tokens=False) for ids in prompt_ids]
    path = resolve_model_path(RM)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    expected = []
    for ids, text in zip(prompt_ids, completions, strict=True):
        # what the policy saw, then the completion and its end token, as ids
        whole = ids + tok(text + tok.eos_token, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            expected.append(float(model(input_ids=torch.tensor([whole])).logits[0, 0]))
    batched = RewardModel(path=RM, device="cpu", batch_size=8)(completions, prompts=prompts)
    one_by_one = RewardModel(path=RM, device="cpu", batch_size=1)(completions, prompts=prompts)
    assert batched == pytest.approx(expected, abs=1e-4)
    assert one_by_one == pytest.approx(expected, abs=1e-4)
    assert all(batched[i] > batched[i + 1] for i in range(0, 8, 2))  # worked over lazy
    with pytest.raises(ValueError, match="without the prompts"):
        RewardModel(path=RM, device="cpu")(completions)


@pytest.mark.slow  # loads the model here (transformers: seconds)
def test_normalize_uses_the_mean_and_std_stored_in_config_json(arith_texts, tmp_path):
    tok, prompt_ids, completions, _ = arith_texts
    prompts = [tok.decode(ids, skip_special_tokens=False) for ids in prompt_ids]
    model_dir = tmp_path / "rm"
    shutil.copytree(resolve_model_path(RM), model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config["mean"], config["std"] = 0.5, 2.0
    (model_dir / "config.json").write_text(json.dumps(config))
    raw = RewardModel(path=str(model_dir), device="cpu")(completions, prompts=prompts)
    normal = RewardModel(path=str(model_dir), device="cpu", normalize=True)
    assert normal(completions, prompts=prompts) == pytest.approx([(x - 0.5) / 2.0 for x in raw])


@pytest.mark.procs  # a reward worker
def test_the_scorer_passes_rendered_prompts_and_logs_agreement(arith_texts):
    """The real path: a reward worker loads the model (warm_up), the scorer decodes the
    prompt ids and calls it once per group; its agreement with math_answer is logged."""
    from grouprl.rewards.scoring import RewardScorer

    tok, prompt_ids, completions, right = arith_texts
    problems = arith_split("test")[240:244]
    rows = [{"_index": i, "answer": p.answer} for i, p in enumerate(problems) for _ in (0, 1)]
    reward = RewardConfig(
        functions=[
            RewardFunction(name="reward_model", args={"path": RM, "device": "cpu"}),
            RewardFunction(name="math_answer", weight=0.0),
        ],
        sandbox={"workers": 1, "timeout_s": 60},
        correct_function="math_answer",
    )
    scorer = RewardScorer(
        reward, answer_key="answer", decode=lambda ids: tok.decode(ids, skip_special_tokens=False)
    )
    try:
        assert scorer.reads_prompts
        scores = scorer(completions=completions, rows=rows, group_size=2, prompt_ids=prompt_ids)
    finally:
        scorer.close()
    assert not scores.errors
    assert scores.parts["math_answer"] == right
    prompts = [tok.decode(ids, skip_special_tokens=False) for ids in prompt_ids]
    direct = RewardModel(path=RM, device="cpu")(completions, prompts=prompts)
    assert scores.parts["reward_model"] == pytest.approx(direct, abs=1e-4)
    assert scores.total == pytest.approx(direct, abs=1e-4)  # math_answer weighs 0
    assert scores.agreement == {"reward_model": (4.0, 4)}  # worked answer above lazy: 4 of 4
    assert metrics(scores)["reward/reward_model/agreement"] == 1.0


def test_refusals_name_the_key_the_value_and_the_fix(monkeypatch, tmp_path):
    def problems(args: dict, policy: str = POLICY) -> list[str]:
        return reward_model_problems(
            [RewardFunction(name="reward_model", args=args)], policy=policy
        )

    t0 = time.monotonic()
    assert problems({"path": RM}) == []
    (missing,) = problems({})
    assert "reward.functions.0.args.path is not set" in missing and "Fix:" in missing
    monkeypatch.setattr(reward_model_checks, "gpu_present", lambda: False)
    (cuda,) = problems({"path": RM, "device": "cuda"})
    assert cuda.startswith("reward.functions.0.args.device='cuda', but this machine shows no GPU")
    assert "Allowed: auto, cpu, cuda" in cuda and "Fix: reward.functions.0.args.device=auto" in cuda
    assert problems({"path": RM, "device": "auto"}) == []  # auto: the CPU here, as asked
    (absent,) = problems({"path": str(tmp_path / "nope")})
    assert "reward.functions.0.args.path=" in absent and "not found" in absent
    (causal,) = problems({"path": POLICY})
    assert "architectures are ['Qwen2ForCausalLM'], not a sequence classifier" in causal
    assert problems({"path": RM, "normalize": True}) == []  # the shipped model stores them
    (tokenizer,) = problems({"path": RM}, policy="builtin:tiny-code")
    assert "its tokenizer is not the policy's (model.path='builtin:tiny-code')" in tokenizer
    (length,) = problems({"path": RM, "max_length": 4096})
    assert "reward.functions.0.args.max_length=4096" in length and "512" in length
    # two labels: a classifier of classes, no reward model
    two = tmp_path / "two"
    shutil.copytree(resolve_model_path(RM), two)
    config = json.loads((two / "config.json").read_text())
    config["id2label"] = {"0": "bad", "1": "good"}
    (two / "config.json").write_text(json.dumps(config))
    (labels,) = problems({"path": str(two)})
    assert "it has 2 labels" in labels and "num_labels 1" in labels
    # a hub name is not on disk: nothing to read before the workers load it
    assert problems({"path": "SomeOrg/some-reward-model"}) == []
    assert time.monotonic() - t0 < 2.0  # before anything loads, in well under 2 s


def test_a_model_without_stored_stats_is_refused_with_normalize(tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(resolve_model_path(RM), bare)
    config = json.loads((bare / "config.json").read_text())
    config.pop("mean", None), config.pop("std", None)
    (bare / "config.json").write_text(json.dumps(config))
    entry = RewardFunction(name="reward_model", args={"path": str(bare), "normalize": True})
    (problem,) = reward_model_problems([entry], policy=POLICY)
    assert problem.startswith("reward.functions.0.args.normalize=True, but")
    assert "stores no mean and std" in problem and "normalize=false" in problem


def test_the_recipe_checks_clean_and_plans_its_reward_model():
    from grouprl.driver.preflight import input_problems

    cfg = load_config("tiny-arith-rm", [])
    assert [f.name for f in cfg.reward.functions] == ["reward_model", "math_answer"]
    assert cfg.reward.correct_function == "math_answer"
    assert not [p for p in input_problems(cfg) if "reward" in p]
    ((label, value, text),) = reward_model_rows(cfg)
    assert (label, value) == ("reward model", RM)
    assert "2 copies, one per reward worker" in text and "4.71 MiB of weights" in text
    refused = load_config("tiny-arith-rm", ["reward.functions.0.args.device=cuda"])
    if not reward_model_checks.gpu_present():
        assert any("args.device='cuda'" in p for p in input_problems(refused))
