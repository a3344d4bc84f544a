"""Answer extraction, the built-in rewards, user reward loading, and safe scoring."""

from __future__ import annotations

import asyncio
import functools
import importlib
import math
import os
import re
import textwrap
import time

import pytest

from grouprl.config.containment import SandboxConfig
from grouprl.config.reward import RewardConfig, RewardFunction
from grouprl.rewards import (
    REWARD_FUNCTIONS,
    CannotTrain,
    FailureBrake,
    Reward,
    RewardError,
    RewardScorer,
    extract_answer,
    format_reward,
    math_answer,
    metrics,
    normalize_number,
    register_reward,
    resolve_reward,
    resolve_rewards,
)
from grouprl.sandbox import WorkerPool

GSM8K_REFERENCE = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n"
    "#### 72"
)

# --- extraction and numbers ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12 + 3 = 15\n#### 15", "15"),
        ("#### 3\nwait, no\n#### 4  \nok 99", "4"),  # last #### line wins over later numbers
        ("so the answer is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("\\boxed{1} then \\boxed{{2}+{3}}", "{2}+{3}"),  # last box, nested braces
        ("\\boxed{9}\n#### 8 apples", "8 apples"),  # #### beats \boxed; rest of line
        ("She has 3 apples, then 5, so 8 in all.", "8"),
        ("It costs $1,234.50 in total", "1,234.50"),
        ("The temperature fell to -12 degrees", "-12"),
        ("x-5 is not negative five", "5"),
        ("no numbers here", None),
        ("\\boxed{unclosed", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$1,234.50", 1234.5),
        ("-42", -42.0),
        ("  7 ", 7.0),
        ("3.", 3.0),
        ("45%", 45.0),
        ("3/4", 0.75),
        ("-6/4", -1.5),
        ("\\frac{1}{2}", 0.5),
        ("-\\dfrac{3}{4}", -0.75),
        ("1 1/2", 1.5),
        ("1{,}000", 1000.0),
        ("0.5", 0.5),
        (".5", 0.5),
        ("1,23", None),
        ("1/0", None),
        ("nan", None),
        ("inf", None),
        ("twelve", None),
        ("", None),
    ],
)
def test_normalize_number(text, expected):
    assert normalize_number(text) == expected


@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        ("48 / 2 = 24, 48 + 24 = 72\n#### 72", GSM8K_REFERENCE, 1.0),
        ("#### 72.0", GSM8K_REFERENCE, 1.0),
        ("The answer is 72.", GSM8K_REFERENCE, 1.0),  # last-number fallback
        ("#### 24", GSM8K_REFERENCE, 0.0),  # the reference's working numbers do not count
        ("#### $1,000", "1000", 1.0),
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("#### 0.500002", "0.5", 0.0),  # past the tolerance (1e-6 x max(1, |a|, |b|))
        ("#### 1000000.5", "1000000", 1.0),  # within it
        ("#### 72", 72, 1.0),  # a numeric reference column
        ("#### -3", "#### 3", 0.0),
        ("\\boxed{x + 1}", "\\boxed{x  +  1}", 1.0),  # text answers: whitespace only
        ("\\boxed{Paris}", "paris", 0.0),
        ("no answer at all", "5", 0.0),
    ],
)
def test_math_answer(completion, reference, expected):
    assert math_answer(completion, reference=reference, row={}) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("7 + 5 = 12. 12 - 3 = 9.\n#### 9", 1.0),
        ("7 + 5 = 12.\n#### 9<|im_end|>\n", 1.0),
        ("#### -1,234.5  \n\n", 1.0),
        ("#### 9</s>", 1.0),
        ("#### 9\nI hope that helps!", 0.0),
        ("The answer is #### 9", 0.0),
        ("#### nine", 0.0),
        ("\\boxed{9}", 0.0),
        ("", 0.0),
    ],
)
def test_format_reward(completion, expected):
    assert format_reward(completion, reference="9") == expected


# --- registry -----------------------------------------------------------------------------


def test_registry_has_builtins_and_refuses_duplicates():
    assert REWARD_FUNCTIONS["math_answer"] is math_answer
    assert REWARD_FUNCTIONS["format"] is format_reward
    with pytest.raises(ValueError, match="already registered"):
        register_reward("format", lambda completion, **_: 0.0)
    assert REWARD_FUNCTIONS["format"] is format_reward


def test_unknown_name_lists_registered_functions():
    with pytest.raises(RewardError) as err:
        resolve_reward("math_anwser", index=2)
    assert "reward.functions.2.name='math_anwser'" in str(err.value)
    for name in ("format", "math_answer", "math_verify", "qa_em", "qa_f1", "reasoning_gym"):
        assert repr(name) in str(err.value)  # every built-in is offered
    assert err.value.user_error is True


def test_reward_problems_lists_every_bad_entry_and_leaves_absent_ones_to_the_cluster(tmp_path):
    from grouprl.rewards.registry import reward_problems

    (tmp_path / "mine.py").write_text("def score(completion, **_):\n    return 1.0\n")
    functions = [
        RewardFunction(name="math_answer"),
        RewardFunction(name="fromat"),
        RewardFunction(name=f"{tmp_path / 'mine.py'}:score"),
        RewardFunction(name=f"{tmp_path / 'mine.py'}:scroe"),
        RewardFunction(name="grouprl_no_such_module:score"),
        RewardFunction(name=f"{tmp_path / 'absent.py'}:score"),
        RewardFunction(name="math_answer"),
    ]
    problems = reward_problems(functions)
    assert [p.split("=", 1)[0] for p in problems] == [
        f"reward.functions.{i}.name" for i in (1, 3, 4, 5, 6)
    ]
    assert "Did you mean 'format'?" in problems[0]
    assert "has no 'scroe'; its functions are ['score']" in problems[1]
    assert "cannot import module 'grouprl_no_such_module'" in problems[2]
    assert "does not exist" in problems[3] and "listed twice" in problems[4]
    # grouprl submit: what this machine lacks may be on the cluster
    kept = reward_problems(functions, missing_ok=True)
    assert [p.split("=", 1)[0] for p in kept] == [f"reward.functions.{i}.name" for i in (1, 3, 6)]


def test_user_function_by_module_path(tmp_path, monkeypatch):
    package = tmp_path / "grouprl_test_userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "scores.py").write_text(
        textwrap.dedent(
            """
            def length_penalty(completion, *, reference, **kwargs):
                return -len(completion) / 100

            NOT_CALLABLE = 3
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = resolve_reward("grouprl_test_userpkg.scores:length_penalty", index=0)
    assert fn("abcd", reference="x", row={}) == -0.04
    with pytest.raises(
        RewardError, match=r"has no 'missing'; its functions are \['length_penalty'\]"
    ):
        resolve_reward("grouprl_test_userpkg.scores:missing", index=1)
    with pytest.raises(RewardError, match="'NOT_CALLABLE' is a int, not a function"):
        resolve_reward("grouprl_test_userpkg.scores:NOT_CALLABLE", index=1)
    with pytest.raises(RewardError, match=r"reward.functions.0.name.*cannot import module"):
        resolve_reward("grouprl_no_such_module.x:f", index=0)


def test_user_function_by_file_path(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(
        textwrap.dedent(
            """
            def says_hello(completion, *, reference, row, **kwargs):
                return completion.startswith("hello") and row["_index"] == 4
            """
        )
    )
    fn = resolve_reward(f"{path}:says_hello")
    assert fn("hello world", reference="", row={"_index": 4}) is True
    assert resolve_reward(f"{path}:says_hello") is fn  # loaded once
    with pytest.raises(RewardError, match="does not exist"):
        resolve_reward(f"{tmp_path / 'other.py'}:f", index=0)
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('import-time failure')\n")
    with pytest.raises(RewardError, match="RuntimeError: import-time failure"):
        resolve_reward(f"{broken}:f", index=0)


def test_resolve_rewards_keeps_names_and_weights():
    resolved = resolve_rewards(
        [RewardFunction(name="math_answer"), RewardFunction(name="format", weight=0.1)]
    )
    assert resolved == [
        Reward("math_answer", math_answer, 1.0, "sample"),
        Reward("format", format_reward, 0.1, "sample"),
    ]
    with pytest.raises(RewardError, match=r"functions.1.name.*listed twice"):
        resolve_rewards([RewardFunction(name="format"), RewardFunction(name="format")])


# --- scoring (in worker processes) -------------------------------------------------------

ROWS = [
    {"question": "a", "answer": "#### 9", "_index": 7},
    {"question": "b", "answer": "#### 4", "_index": 3},
]


@pytest.fixture(scope="module")
def pool():
    """Two reward workers for the module; they import this file before any deadline runs."""
    preload = functools.partial(importlib.import_module, __name__)
    box = SandboxConfig(workers=2, memory_mb=1024)
    with WorkerPool(box, name="reward-test", initializer=preload) as shared:
        yield shared


def score(
    pool, functions, completions, rows, *, timeout_s=5.0, brake=None, group_size=None, **settings
):
    """One pass of a scorer on ``pool``; ``settings``: ``RewardConfig``'s (no step deadline,
    no brake unless given: ``brake`` is kept across passes by the caller)."""
    reward = RewardConfig(
        **{"step_timeout_s": None, "failure_brake": None, **settings},
        sandbox=SandboxConfig(timeout_s=timeout_s),
    )
    functions = [Reward(*f) for f in functions]
    scorer = RewardScorer(reward, answer_key="answer", functions=functions, pool=pool)
    if brake is not None:
        scorer.brake = brake
    return scorer(completions=completions, rows=rows, group_size=group_size)


def stopped(scores, rows) -> Exception:
    """What the rollout raises for ``scores`` with ``reward.on_error=raise`` (imported here:
    the workers import this module before they are ready)."""
    from grouprl.rollout.episode_scores import score_trajectories
    from grouprl.rollout.reward import SampleFailed
    from grouprl.types import Completion, Trajectory, Turn

    completion = Completion(token_ids=[5], logprobs=[-0.1], finish_reason="stop")
    trajectories = [
        Trajectory(row["_index"], [1], [Turn(completion)], weight_version=0, row=row)
        for row in rows
    ]
    with pytest.raises(SampleFailed) as raised:
        score_trajectories(
            trajectories, score=lambda **_: scores, correct_function=None, on_error="raise"
        )
    return raised.value


@pytest.mark.procs
def test_weighted_total_parts_and_metrics(pool):
    completions = ["5 + 4 = 9\n#### 9", "the answer is 5"]
    scores = score(
        pool, [("math_answer", math_answer, 1.0), ("format", format_reward, 0.5)], completions, ROWS
    )
    assert scores.parts == {"math_answer": [1.0, 0.0], "format": [1.0, 0.0]}
    assert scores.total == [1.5, 0.0]
    assert scores.errors == []
    assert metrics(scores) == {
        "reward/errors": 0.0,
        "reward/timeouts": 0.0,
        "reward/crashes": 0.0,
        "reward/memory_errors": 0.0,
        "reward/worker_restarts": 0.0,
        "reward/math_answer": 0.5,
        "reward/format": 0.5,
        "reward/math_answer/failures": 0.0,
        "reward/format/failures": 0.0,
    }


def index_and_reference(completion, *, reference, row):
    return row["_index"] * 10 + int(reference.split()[-1]) + (completion == "x")


@pytest.mark.procs
def test_reference_and_row_are_passed_by_keyword(pool):
    scores = score(pool, [("spy", index_and_reference, 2.0)], ["x", "y"], ROWS)
    assert scores.parts["spy"] == [80.0, 34.0]  # row 7, "#### 9", "x"; row 3, "#### 4"
    assert scores.total == [160.0, 68.0]


def failing_on_b(completion, **_):
    if completion == "b":
        raise KeyError("no such thing")
    return 1.0


@pytest.mark.procs
def test_raising_function_fails_its_sample_alone_and_is_recorded(pool, caplog):
    scores = score(
        pool,
        [("flaky", failing_on_b, 1.0), ("format", format_reward, 1.0)],
        ["a", "b", "#### 1"],
        [ROWS[0], ROWS[1], ROWS[0]],
    )
    assert scores.parts["flaky"] == [1.0, 0.0, 1.0]
    assert scores.total == [1.0, 0.0, 2.0]
    [failure] = scores.errors
    assert (failure.function, failure.sample_index, failure.row_index) == ("flaky", 1, 3)
    assert (failure.error_type, failure.message, failure.kind) == (
        "KeyError",
        "'no such thing'",
        "error",
    )
    assert metrics(scores)["reward/errors"] == 1.0
    # the mean of the samples it scored (the failed call's 0.0 is no score), its failures
    assert metrics(scores)["reward/flaky"] == 1.0
    assert metrics(scores)["reward/flaky/failures"] == 1.0
    assert "first on sample 1 (row 3): KeyError: 'no such thing'" in caplog.text


@pytest.mark.procs
def test_failures_log_one_warning_per_function_per_step(pool, caplog):
    functions = [("flaky", failing_on_b, 1.0), ("broken", always_fails, 1.0)]
    with caplog.at_level("WARNING", logger="grouprl.rewards"):
        score(pool, functions, ["a", "b", "b", "b"], [*ROWS, *ROWS], on_error="zero")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2, warnings  # not one per failed sample
    flaky, broken = warnings
    assert flaky.startswith("reward function 'flaky' failed on 3 of 4 samples this step (3 error)")
    assert "first on sample 1 (row 3): KeyError: 'no such thing'" in flaky
    assert "trained as score 0 (reward.on_error=zero)" in flaky
    assert "'broken' failed on 4 of 4 samples" in broken
    assert "first on sample 0 (row 7): ValueError: cannot grade 'a'" in broken


def always_fails(completion, **_):
    raise ValueError(f"cannot grade {completion!r}")


def scores_zero(completion, **_):
    return 0.0


@pytest.mark.parametrize("on_error", ["drop", "zero"])
@pytest.mark.procs
def test_drop_and_zero_return_every_failure_without_raising(pool, on_error):
    functions = [("format", format_reward, 1.0), ("broken", always_fails, 1.0)]
    scores = score(pool, functions, ["#### 1", "b", "c"], ROWS + ROWS[:1], on_error=on_error)
    assert [(e.function, e.sample_index, e.row_index) for e in scores.errors] == [
        ("broken", 0, 7),
        ("broken", 1, 3),
        ("broken", 2, 7),
    ]
    assert scores.parts == {"format": [1.0, 0.0, 0.0], "broken": [0.0, 0.0, 0.0]}


@pytest.mark.procs
def test_a_score_of_zero_on_every_sample_is_no_failure(pool):
    scores = score(pool, [("zero", scores_zero, 1.0)], ["a", "b"], ROWS)
    assert scores.total == [0.0, 0.0] and scores.errors == []


@pytest.mark.procs
def test_raise_stops_at_the_first_failure_with_sample_and_row_index(pool):
    rows = ROWS + ROWS[1:]
    scores = score(pool, [("flaky", failing_on_b, 1.0)], ["a", "b", "b"], rows, on_error="raise")
    message = str(stopped(scores, rows))
    assert "'flaky' failed on sample 1 (row 3)" in message
    assert "KeyError: 'no such thing'" in message
    assert "reward.on_error=drop" in message and "reward.on_error=zero" in message


@pytest.mark.procs
def test_the_brake_stops_the_run_when_a_functions_last_n_calls_failed_whenever_in_the_run(
    pool,
):
    """A sliding window (issue 37): a success, then failures counted across steps."""
    brake = FailureBrake(3)
    flaky = [("flaky", failing_on_b, 1.0)]
    assert len(score(pool, flaky, ["a", "b", "b"], [*ROWS, ROWS[1]], brake=brake).errors) == 2
    with pytest.raises(CannotTrain) as err:
        score(pool, flaky, ["b"], ROWS[1:], brake=brake)
    message = str(err.value)
    assert err.value.kind == "reward_failures" and err.value.user_error
    assert "reward function 'flaky' failed on its last 3 calls in a row" in message
    assert "the last on sample 0 (row 3): KeyError: 'no such thing'" in message
    assert "reward.failure_brake" in message and "null: never stop" in message
    # a call that returns within the window restarts the count; null never stops
    mended = FailureBrake(3)
    rows = [ROWS[1], ROWS[1], ROWS[0], ROWS[1], ROWS[1]]
    assert len(score(pool, flaky, ["b", "b", "a", "b", "b"], rows, brake=mended).errors) == 4
    never = FailureBrake(None)
    broken = [("broken", always_fails, 1.0)]
    assert len(score(pool, broken, ["a", "b", "c"], [*ROWS, ROWS[0]], brake=never).errors) == 3


RETURNS = {"nan": math.nan, "inf": math.inf, "str": "1.0", "none": None}


def returns_listed(completion, **_):
    return RETURNS[completion]


@pytest.mark.parametrize(
    ("value", "error_type"),
    [("nan", "ValueError"), ("inf", "ValueError"), ("str", "TypeError"), ("none", "TypeError")],
)
@pytest.mark.procs
def test_non_numeric_or_nan_return_is_an_error(pool, value, error_type):
    scores = score(pool, [("bad", returns_listed, 1.0)], [value], ROWS[:1])
    assert scores.total == [0.0]
    assert [(e.sample_index, e.row_index, e.error_type) for e in scores.errors] == [
        (0, 7, error_type)
    ]


def hang_on_a(completion, **_):
    if completion == "a":
        time.sleep(3600)
    return 1.0


@pytest.mark.procs
def test_hanging_call_is_killed_at_its_deadline_and_the_others_score(pool):
    restarts = pool.stats()["restarts"]
    start = time.monotonic()
    scores = score(pool, [("slow", hang_on_a, 1.0)], ["a", "b"], ROWS, timeout_s=0.5)
    assert time.monotonic() - start < 0.5 + 1
    assert scores.parts["slow"] == [0.0, 1.0]  # "b" ran on the other worker
    [failure] = scores.errors
    assert (failure.sample_index, failure.row_index, failure.kind) == (0, 7, "timeout")
    assert (failure.error_type, failure.message) == (
        "TimeoutError",
        "killed after its 0.5s deadline",
    )
    assert scores.worker_restarts == 1 == pool.stats()["restarts"] - restarts
    assert metrics(scores)["reward/timeouts"] == 1.0
    raised = score(
        pool, [("slow", hang_on_a, 1.0)], ["a"], ROWS[:1], timeout_s=0.5, on_error="raise"
    )
    assert re.search(
        r"sample 0 \(row 7\): TimeoutError: killed after", str(stopped(raised, ROWS[:1]))
    )


@pytest.mark.procs
def test_past_step_timeout_the_calls_not_done_fail_as_timeouts_at_once(pool):
    start = time.monotonic()
    scores = score(
        pool,
        [("slow", hang_on_a, 1.0)],
        ["a", "a", "b"],  # two hang on the two workers, "b" waits behind them
        ROWS + ROWS[1:],
        timeout_s=30.0,
        step_timeout_s=0.3,
        brake=FailureBrake(2),  # the step's deadline is not the function's: no brake
    )
    assert time.monotonic() - start < 0.3 + 1
    assert [(e.sample_index, e.kind, e.own) for e in scores.errors] == [
        (0, "timeout", False),
        (1, "timeout", False),
        (2, "timeout", False),
    ]
    assert "reward.step_timeout_s=0.3s" in scores.errors[0].message
    assert scores.total == [0.0, 0.0, 0.0]
    assert score(pool, [("slow", hang_on_a, 1.0)], ["b"], ROWS[:1]).total == [1.0]


async def async_length(completion, **_):
    await asyncio.sleep(0)
    return len(completion)


@pytest.mark.procs
def test_async_reward_is_awaited(pool):
    assert score(pool, [("len", async_length, 1.0)], ["abc", "de"], ROWS).total == [3.0, 2.0]


def rank_by_length(completions, *, references, rows):
    assert len({r["_index"] for r in rows}) == 1 and len(references) == len(completions)
    order = sorted(range(len(completions)), key=lambda i: len(completions[i]))
    return [order.index(i) / (len(completions) - 1) for i in range(len(completions))]


def one_score_too_few_for_row_7(completions, *, rows, **_):
    return [1.0] * (len(completions) - (rows[0]["_index"] == 7))


@pytest.mark.procs
def test_group_reward_scores_each_prompt_group_at_once(pool):
    rows = [ROWS[0]] * 3 + [ROWS[1]] * 3
    completions = ["ccc", "a", "bb", "z", "yyy", "xx"]
    group = ("rank", rank_by_length, 1.0, "group")
    scores = score(pool, [group], completions, rows, group_size=3)
    assert scores.parts["rank"] == [1.0, 0.0, 0.5, 0.0, 1.0, 0.5]
    # without group_size: groups are the runs of rows with the same _index
    assert score(pool, [group], completions, rows).parts == scores.parts
    short = ("short", one_score_too_few_for_row_7, 1.0, "group")
    bad = score(pool, [short], completions, rows, group_size=3)
    assert bad.total == [0.0] * 3 + [1.0] * 3
    assert [(e.sample_index, e.samples, e.row_index) for e in bad.errors] == [(0, 3, 7)]
    assert "returned 2 scores for a group of 3 completions" in bad.errors[0].message
    assert "failed on samples 0-2 (row 7)" in bad.errors[0].describe()


@pytest.mark.procs
def test_file_reward_is_resolved_in_the_worker_by_name(pool, tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("import os\ndef worker_pid(completion, **_):\n    return os.getpid()\n")
    name = f"{path}:worker_pid"
    scores = score(pool, [(name, resolve_reward(name), 1.0)], ["a"], ROWS[:1])
    assert scores.errors == [] and scores.total[0] in pool.pids()


def test_a_lambda_cannot_be_sent_to_the_workers():
    from grouprl.rewards.registry import reward_problems

    register_reward("test_lambda_reward", lambda completion, **_: 1.0)
    try:
        functions = resolve_rewards([RewardFunction(name="test_lambda_reward")])
        with pytest.raises(RewardError, match="cannot be sent to the reward worker processes"):
            RewardScorer(RewardConfig(), answer_key="answer", functions=functions)
        [problem] = reward_problems([RewardFunction(name="test_lambda_reward")])
        assert problem.startswith("reward.functions.0.name='test_lambda_reward': the function")
    finally:
        REWARD_FUNCTIONS.pop("test_lambda_reward")


@pytest.mark.procs
def test_scorer_closes_its_workers():
    reward = RewardConfig(
        functions=[RewardFunction(name="format")],
        sandbox=SandboxConfig(workers=1, memory_mb=512, timeout_s=5.0),
    )
    scorer = RewardScorer(reward, answer_key="answer")
    assert scorer(completions=["#### 1"], rows=ROWS[:1]).total == [1.0]
    [pid] = scorer.pool.pids()
    scorer.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_function_named_by_path_logs_under_its_short_name():
    from grouprl.rewards.scores import RewardScores, metric_names

    names = ["/abs/path/file.py:fn", "pkg.mod:fn", "fn", "my.py:errors", "format"]
    assert metric_names(names) == {
        "/abs/path/file.py:fn": "reward/fn",
        "pkg.mod:fn": "reward/fn_2",  # the same short name: the next free suffix, in order
        "fn": "reward/fn_3",
        "my.py:errors": "reward/errors_2",  # reward/errors counts failed calls
        "format": "reward/format",
    }
    scores = RewardScores(total=[1.0, 0.0], parts={"/x/y.py:fn": [1.0, 1.0], "z.py:fn": [0.0, 1.0]})
    assert {k: v for k, v in metrics(scores).items() if "fn" in k} == {
        "reward/fn": 1.0,
        "reward/fn_2": 0.5,
    }
