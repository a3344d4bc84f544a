"""Foreign reward functions keep their own framework's meaning, and the per-function
metrics count what they say.

TRL (``GRPOTrainer._calculate_rewards``): a function returns None for a sample it does not
apply to; the reward is the weighted ``nansum`` of the others; a sample every function
returned None for is unscorable (TRL warns; since 1.6 it leaves it out of the baseline).
verl (``NaiveRewardManager``): ``compute_score`` gets the row's ``data_source`` (required)
and ``extra_info``; it returns a number or ``{"score": x, ...extras}``.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from grouprl.config.containment import SandboxConfig
from grouprl.config.model_data import DataConfig, DataSource
from grouprl.config.reward import RewardConfig, RewardFunction
from grouprl.rewards import RewardScorer, resolve_rewards
from grouprl.rewards.data_checks import verl_row_problems
from grouprl.rewards.failures import RewardFailure
from grouprl.rewards.scores import RewardScores, metrics
from grouprl.rewards.scoring import NOT_APPLIED
from grouprl.rollout.episode_scores import score_trajectories
from grouprl.rollout.reward import SampleFailed
from grouprl.sandbox import WorkerPool
from grouprl.types import Completion, Trajectory, Turn, trajectory_to_dict

# Written as TRL's and verl's docs write them: nothing here knows of grouprl.
FOREIGN = textwrap.dedent(
    """
    def math_reward(completions, task, solution, **kwargs):
        return [
            float(c == s) if t == "math" else None
            for c, t, s in zip(completions, task, solution)
        ]

    def code_reward(completions, task, solution, **kwargs):
        return [
            float(c == s) if t == "code" else None
            for c, t, s in zip(completions, task, solution)
        ]

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "none":
            return None
        if solution_str == "no score":
            return {"acc": True}
        right = solution_str == ground_truth
        return {"score": float(right), "acc": right, "source": data_source,
                "extra": extra_info.get("split", "absent")}
    """
)


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    path = tmp_path_factory.mktemp("foreign") / "foreign_set.py"
    path.write_text(FOREIGN)
    return path


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(
        SandboxConfig(workers=1, memory_mb=1024), name="foreign-rewards-test"
    ) as shared:
        yield shared


def _score(pool, entries, completions, rows, *, on_error="drop", group_size=None):
    reward = RewardConfig(
        on_error=on_error,
        step_timeout_s=None,
        failure_brake=None,
        sandbox=SandboxConfig(timeout_s=10.0),
    )
    functions = resolve_rewards(entries)
    scorer = RewardScorer(reward, answer_key="solution", functions=functions, pool=pool)
    return scorer(completions=completions, rows=rows, group_size=group_size)


def _multi_task_rows():
    """Two prompts of G=2: a math prompt and a code prompt, TRL's multi-task set."""
    math = {"prompt": "2+2?", "task": "math", "solution": "4", "_index": 0}
    code = {"prompt": "print 1", "task": "code", "solution": "print(1)", "_index": 1}
    return [math, math, code, code]


def _trajectory(row) -> Trajectory:
    completion = Completion(token_ids=[5], logprobs=[-0.1], finish_reason="stop")
    return Trajectory(
        prompt_index=row["_index"],
        prompt_ids=[1],
        turns=[Turn(completion)],
        weight_version=0,
        row=row,
    )


@pytest.mark.procs
def test_trl_multi_task_set_trains_every_sample_with_trls_rewards(pool, foreign):
    """The issue's case: TRL trains all 4 samples with rewards [1, 0, 1, 0]."""
    entries = [
        RewardFunction(name=f"{foreign}:math_reward"),
        RewardFunction(name=f"{foreign}:code_reward"),
    ]
    assert [r.style for r in resolve_rewards(entries)] == ["trl", "trl"]
    rows = _multi_task_rows()
    completions = ["4", "5", "print(1)", "print(2)"]
    scores = _score(pool, entries, completions, rows, group_size=2)
    assert scores.errors == []  # none dropped
    assert scores.total == [1.0, 0.0, 1.0, 0.0]
    math, code = (e.name for e in entries)
    assert scores.parts[math] == [1.0, 0.0, None, None]
    assert scores.parts[code] == [None, None, 1.0, 0.0]

    # a function's metric is its mean over the samples it applied to, not over all 4
    m = metrics(scores)
    assert m["reward/math_reward"] == 0.5 and m["reward/code_reward"] == 0.5
    assert m["reward/math_reward/not_applicable"] == 2.0
    assert m["reward/math_reward/failures"] == 0.0

    # samples.jsonl shows a function that did not apply as null, not 0; and the
    # correct_function judged nothing there: not correct
    trajectories = [_trajectory(row) for row in rows]
    score_trajectories(trajectories, score=lambda **_: scores, correct_function=math)
    assert [t.reward for t in trajectories] == [1.0, 0.0, 1.0, 0.0]
    assert all(t.trains for t in trajectories)
    assert trajectory_to_dict(trajectories[2])["reward_parts"]["scores"] == {
        math: None,
        code: 1.0,
    }
    assert [t.correct for t in trajectories] == [True, False, False, False]


@pytest.mark.procs
def test_weights_apply_to_the_functions_that_applied_only(pool, foreign):
    entries = [
        RewardFunction(name=f"{foreign}:math_reward", weight=2.0),
        RewardFunction(name=f"{foreign}:code_reward", weight=0.5),
    ]
    scores = _score(pool, entries, ["4", "5", "print(1)", "x"], _multi_task_rows(), group_size=2)
    assert scores.total == [2.0, 0.0, 0.5, 0.0]


@pytest.mark.procs
def test_a_sample_no_function_applied_to_fails_naming_it(pool, foreign):
    entries = [RewardFunction(name=f"{foreign}:math_reward")]
    rows = _multi_task_rows()
    scores = _score(pool, entries, ["4", "4", "print(1)", "print(1)"], rows, group_size=2)
    assert [(e.function, e.sample_index, e.row_index) for e in scores.errors] == [
        (NOT_APPLIED, 2, 1),
        (NOT_APPLIED, 3, 1),
    ]
    failure = scores.errors[0]
    assert failure.error_type == "NotApplicable" and not failure.own  # no function's own
    assert "every reward function" in failure.message and "returned None" in failure.message
    assert scores.total == [1.0, 1.0, 0.0, 0.0]
    trajectories = [_trajectory(row) for row in rows]
    score_trajectories(trajectories, score=lambda **_: scores, correct_function=None)
    assert [t.trains for t in trajectories] == [True, True, False, False]  # dropped
    raised = _score(pool, entries, ["4"] * 4, rows, on_error="raise", group_size=2)
    with pytest.raises(SampleFailed, match=r"sample 2 .*NotApplicable"):
        score_trajectories(
            [_trajectory(row) for row in rows],
            score=lambda **_: raised,
            correct_function=None,
            on_error="raise",
        )


def test_reward_fn_averages_the_samples_it_scored_and_counts_its_failures():
    """A failed call's 0.0 is no score: a grader that fails looks like a failing grader,
    not like worse completions."""
    scores = RewardScores(
        total=[1.0, 0.0, 0.0, 1.0],
        parts={"judge": [1.0, 0.0, 0.0, 1.0], "fmt": [None, None, None, None]},
        errors=[RewardFailure("judge", 2, 0, "ConnectionError", "down")],
        extras={"judge": [{}, {}, None, {}], "fmt": [None] * 4},
    )
    m = metrics(scores)
    assert m["reward/judge"] == pytest.approx(2 / 3)  # not 2 / 4
    assert m["reward/judge/failures"] == 1.0
    assert "reward/judge/not_applicable" not in m
    assert "reward/fmt" not in m  # scored nothing this step: no mean, not 0
    assert m["reward/fmt/not_applicable"] == 4.0 and m["reward/fmt/failures"] == 0.0
    # the steps' rounds together
    both = metrics(RewardScores.concat([scores, scores]))
    assert both["reward/judge/failures"] == 2.0
    assert both["reward/judge"] == pytest.approx(2 / 3)


@pytest.mark.procs
def test_verl_compute_score_as_verls_reward_manager_calls_it(pool, foreign):
    entries = [RewardFunction(name=f"{foreign}:compute_score")]
    rows = [
        {"prompt": "q", "data_source": "gsm8k", "solution": "72", "_index": 0},
        {"prompt": "q", "data_source": "gsm8k", "solution": "72", "_index": 1},
        {"prompt": "q", "data_source": "gsm8k", "solution": "72", "_index": 2},
        {"prompt": "q", "solution": "72", "_index": 3},  # no data_source column
    ]
    scores = _score(pool, entries, ["72", "none", "no score", "72"], rows)
    name = entries[0].name
    # a dict's score is the score; its other keys are extras; extra_info absent: {} (verl's)
    assert scores.parts[name][0] == 1.0
    assert scores.extras[name][0] == {"acc": True, "source": "gsm8k", "extra": "absent"}
    failed = {e.sample_index: e for e in scores.errors}
    assert sorted(failed) == [1, 2, 3]  # verl stops on each of these; here the sample fails
    assert failed[1].error_type == "TypeError" and "NoneType" in failed[1].message
    assert failed[2].error_type == "KeyError" and "without 'score'" in failed[2].message
    assert failed[3].error_type == "KeyError" and "no 'data_source' column" in failed[3].message


def test_a_verl_function_with_rows_without_data_source_is_refused_before_loading(foreign, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": "q", "answer": "1"}) + "\n")
    with_source = tmp_path / "with_source.jsonl"
    with_source.write_text(json.dumps({"prompt": "q", "answer": "1", "data_source": "x"}) + "\n")
    verl = [RewardFunction(name=f"{foreign}:compute_score")]
    data = DataConfig(train=DataSource(source=str(rows)), eval=None)
    [problem] = verl_row_problems(verl, data)
    assert problem.startswith(f"reward.functions.0.name='{foreign}:compute_score' is a verl")
    assert f"data.train.source='{rows}' has no 'data_source' column" in problem
    assert "Fix: add a 'data_source' column" in problem
    assert (
        verl_row_problems(
            verl, data.model_copy(update={"train": DataSource(source=str(with_source))})
        )
        == []
    )
    trl = [RewardFunction(name=f"{foreign}:math_reward")]
    assert verl_row_problems(trl, data) == []  # only verl's call passes data_source


@pytest.mark.parametrize("reference", ["N/A", "none", "\\text{N/A}", "see the text", "Yes", ""])
def test_math_verify_fails_a_reference_that_is_no_answer(reference):
    pytest.importorskip("math_verify", reason="the graders extra (make install)")
    from grouprl.rewards.math_verify import math_verify_score

    with pytest.raises(ValueError, match="math_verify: the reference"):
        math_verify_score("\\boxed{4}", reference=reference)


@pytest.mark.parametrize("reference", ["xy", "2xy", "10 cm", "infinity", "$abc$", "(A)"])
def test_math_verify_still_scores_short_products_and_units(reference):
    pytest.importorskip("math_verify", reason="the graders extra (make install)")
    from grouprl.rewards.math_verify import math_verify_score

    assert math_verify_score("\\boxed{4}", reference=reference) == 0.0
