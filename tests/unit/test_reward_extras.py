"""A reward's extras (a dict beside its score) become per-step metrics and samples.jsonl
fields; categories are bounded; a reward's warm-up runs once per worker, before any call's
deadline, and a warm-up that fails or hangs is reported and bounded."""

from __future__ import annotations

import functools
import logging
import textwrap
import time

import pytest

from grouprl.config.containment import SandboxConfig
from grouprl.config.reward import RewardConfig, RewardFunction
from grouprl.rewards import RewardScorer, resolve_rewards
from grouprl.rewards.calls import preload
from grouprl.rewards.code import code_tests
from grouprl.rewards.declares import DeclaresCategories, WarmsUp
from grouprl.rewards.extras import CATEGORY_LIMIT, OTHER, CategoryBound, tally
from grouprl.rewards.reasoning_gym import reasoning_gym_score
from grouprl.rewards.scoring import RewardScores, function_ref, metrics
from grouprl.rollout.episode_scores import score_trajectories
from grouprl.sandbox import WorkerPool
from grouprl.types import (
    Completion,
    RewardParts,
    Trajectory,
    Turn,
    trajectory_from_dict,
    trajectory_to_dict,
)

EXTRAS = textwrap.dedent(
    """
    import math

    def graded(completion, *, reference, row, **kwargs):
        if completion == "boom":
            raise ValueError("boom")
        right = completion == reference
        return {"score": float(right), "verdict": "right" if right else "wrong",
                "length": len(completion), "exact": right, "ignored": [1], "nan": math.nan}

    def ranked(completions, *, references, rows, **kwargs):
        return [{"score": i, "place": "first" if i == 0 else "later"}
                for i in range(len(completions))]

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": 0.5, "acc": solution_str == ground_truth, "pred": solution_str}
    """
)

WARMING = textwrap.dedent(
    """
    import os, time

    WARMED = []

    class Marked:
        def warm_up(self):
            WARMED.append(os.getpid())

        def __call__(self, completion, **kwargs):
            return float(WARMED == [os.getpid()])  # warmed once, in this process

    class Broken:
        def warm_up(self):
            raise RuntimeError("no grader here")

        def __call__(self, completion, **kwargs):
            return 1.0

    class Hangs:
        def warm_up(self):
            time.sleep(60)

        def __call__(self, completion, **kwargs):
            return 1.0

    marked, broken, hangs = Marked(), Broken(), Hangs()
    """
)


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(SandboxConfig(workers=1, memory_mb=1024), name="reward-extras-test") as shared:
        yield shared


def _scorer(pool, functions, *, answer_key="answer", timeout_s=10.0) -> RewardScorer:
    """A scorer on ``pool`` with no step deadline and no brake."""
    box = SandboxConfig(timeout_s=timeout_s)
    reward = RewardConfig(step_timeout_s=None, failure_brake=None, sandbox=box)
    return RewardScorer(reward, answer_key=answer_key, functions=functions, pool=pool)


def _score(pool, entries, completions, answers, *, categories=None):
    scorer = _scorer(pool, resolve_rewards(entries))
    if categories is not None:
        scorer.categories = categories  # the run's bound, kept across passes
    rows = [{"answer": a, "data_source": "test", "_index": i // 2} for i, a in enumerate(answers)]
    return scorer(completions=completions, rows=rows, group_size=2)


@pytest.mark.procs
def test_extras_of_each_style_become_shares_and_means_and_failed_calls_have_none(
    pool, tmp_path, caplog
):
    path = tmp_path / "extras_rewards.py"
    path.write_text(EXTRAS)
    entries = [
        RewardFunction(name=f"{path}:graded"),
        RewardFunction(name=f"{path}:ranked", scope="group"),
        RewardFunction(name=f"{path}:compute_score"),
    ]
    completions = ["4", "5", "boom", "7"]
    with caplog.at_level(logging.WARNING):
        scores = _score(pool, entries, completions, ["4", "4", "7", "7"])

    graded = f"{path}:graded"
    assert scores.parts[graded] == [1.0, 0.0, 0.0, 1.0]
    assert scores.extras[graded][2] is None  # the call that raised: no extras, not scored
    assert scores.extras[graded][0] == {"verdict": "right", "length": 1.0, "exact": True}
    m = metrics(scores)
    # shares of the 3 scored samples, not of the 4; lists and NaN are not extras
    assert m["reward/graded/verdict/right"] == pytest.approx(2 / 3)
    assert m["reward/graded/verdict/wrong"] == pytest.approx(1 / 3)
    assert m["reward/graded/exact"] == pytest.approx(2 / 3)  # a bool is averaged
    assert m["reward/graded/length"] == 1.0
    assert not any("ignored" in k or "nan" in k for k in m)
    assert m["reward/ranked"] == 0.5  # a group's dicts: scores 0, 1 per group
    assert m["reward/ranked/place/first"] == 0.5
    assert m["reward/compute_score/acc"] == 0.5  # verl's reward_extra_info
    assert m["reward/compute_score/pred/boom"] == 0.25

    # samples.jsonl shows a sample's extras in its reward parts (a failed call: none)
    trajectories = [_trajectory() for _ in completions]
    score_trajectories(trajectories, score=lambda **_: scores, correct_function=None)
    assert trajectories[0].reward_parts.extras[graded] == scores.extras[graded][0]
    assert graded not in trajectories[2].reward_parts.extras


def _trajectory(**parts) -> Trajectory:
    completion = Completion(token_ids=[5], logprobs=[-0.1], finish_reason="stop")
    return Trajectory(
        prompt_index=3,
        prompt_ids=[1, 2],
        turns=[Turn(completion)],
        weight_version=0,
        reward_parts=RewardParts(**parts),
    )


@pytest.mark.procs
def test_code_tests_returns_its_outcome_and_every_outcome_is_logged(pool):
    """All outcomes but sandbox_error (a failed call, not an outcome) are listed every
    step, 0 where no sample had them, so plots have every line."""
    assert isinstance(code_tests, DeclaresCategories)
    row_tests = '{"inputs": ["1\\n"], "outputs": ["2\\n"]}'
    no_code = code_tests("no program here, sorry.", reference=row_tests, row={})
    assert no_code == {"score": 0.0, "outcome": "no_code", "tests_passed": 0.0}
    scorer = _scorer(
        pool, resolve_rewards([RewardFunction(name="code_tests")]), answer_key="input_output"
    )
    scores = scorer(
        completions=["I cannot write it.", "Nor can I."],
        rows=[{"input_output": row_tests, "_index": 0}] * 2,
    )
    outcomes = {k: v for k, v in metrics(scores).items() if k.startswith("reward/code_tests/")}
    assert outcomes == {
        "reward/code_tests/outcome/no_code": 1.0,
        "reward/code_tests/tests_passed": 0.0,
        "reward/code_tests/failures": 0.0,
        **{
            f"reward/code_tests/outcome/{o}": 0.0
            for o in ("passed", "failed", "timeout", "memory", "crashed", "output_limit")
        },
    }


def test_categories_are_bounded_per_key_for_the_run_with_one_warning(caplog):
    bound = CategoryBound()
    names = [f"c{i}" for i in range(CATEGORY_LIMIT + 5)]
    with caplog.at_level(logging.WARNING):
        first = tally("fn", [{"k": n} for n in names[:10]], declared={}, bound=bound)
        later = tally(
            "fn", [{"k": n} for n in names[5:]] + [{"k": "x" * 65}], declared={}, bound=bound
        )
    assert set(first.categories["k"]) == set(names[:10])
    kept = names[:CATEGORY_LIMIT]
    assert set(later.categories["k"]) == {*names[5:CATEGORY_LIMIT], OTHER}
    assert later.categories["k"][OTHER] == len(names) - len(kept) + 1  # the long one too
    assert len([r for r in caplog.records if "count as 'other'" in r.getMessage()]) == 1
    # another key, or another function, has its own limit
    assert tally("fn", [{"j": "c99"}], declared={}, bound=bound).categories["j"]["c99"] == 1


def test_rounds_concatenated_keep_declared_categories_and_add_counts():
    bound = CategoryBound()
    declared = {"outcome": ("passed", "failed")}
    rounds = [
        RewardScores(
            total=[1.0],
            parts={"f": [1.0]},
            extras={"f": [extra]},
            tallies={"f": tally("f", [extra], declared=declared, bound=bound)},
        )
        for extra in ({"outcome": "passed", "n": 1.0}, {"outcome": "passed", "n": 3.0})
    ]
    m = metrics(RewardScores.concat(rounds))
    assert m["reward/f/outcome/passed"] == 1.0 and m["reward/f/outcome/failed"] == 0.0
    assert m["reward/f/n"] == 2.0


def test_extras_survive_a_trajectory_record():
    extras = {"code_tests": {"outcome": "timeout", "tests_passed": 0.5, "ok": False}}
    t = _trajectory(scores={"code_tests": 0.0}, extras=extras)
    assert trajectory_from_dict(trajectory_to_dict(t)).reward_parts.extras == extras


@pytest.mark.procs
def test_warm_ups_run_once_per_worker_before_calls_and_a_broken_or_hung_one_is_bounded(
    tmp_path, capfd
):
    path = tmp_path / "warming_rewards.py"
    path.write_text(WARMING)
    assert isinstance(code_tests, WarmsUp) and isinstance(reasoning_gym_score, WarmsUp)
    rewards = resolve_rewards(
        [RewardFunction(name=f"{path}:{n}") for n in ("marked", "broken", "hangs")]
    )
    refs = [function_ref(r) for r in rewards]
    started = time.monotonic()
    initializer = functools.partial(preload, refs, warm_up_s=1.0)
    box = SandboxConfig(workers=1, memory_mb=1024)
    with WorkerPool(box, name="warm-up-test", initializer=initializer) as p:
        scorer = _scorer(p, rewards, timeout_s=5.0)
        scores = scorer(completions=["a"], rows=[{"answer": "a", "_index": 0}])
    assert time.monotonic() - started < 15  # the hung warm-up cost its budget, not 60 s
    assert scores.errors == []
    assert scores.parts[f"{path}:marked"] == [1.0]  # warmed before its first call
    err = capfd.readouterr().err
    assert "the warm-up of" in err and "failed (RuntimeError: no grader here)" in err
    assert "did not end within" in err


def test_held_out_evaluation_logs_the_outcome_shares_under_eval():
    from grouprl.config.rollout import RolloutConfig
    from grouprl.driver.evaluate import validate

    declared = {"outcome": ("passed", "timeout")}
    extras = [{"outcome": "timeout"}, {"outcome": "passed"}, {"outcome": "timeout"}, None]
    scores = RewardScores(
        total=[0.0, 1.0, 0.0, 0.0],
        parts={"code_tests": [0.0, 1.0, 0.0, 0.0]},
        extras={"code_tests": extras},
        tallies={
            "code_tests": tally("code_tests", extras, declared=declared, bound=CategoryBound())
        },
    )
    m = validate(
        run=lambda prompt_set, settings: ([_trajectory()] * 4, scores),
        prompt_set=None,
        rollout=RolloutConfig(),
        seed=0,
    )
    assert m["eval/reward/code_tests/outcome/timeout"] == pytest.approx(2 / 3)
    assert m["eval/reward/code_tests/outcome/passed"] == pytest.approx(1 / 3)
