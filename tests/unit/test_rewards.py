"""Answer extraction, the built-in rewards, user reward loading, and safe scoring."""

from __future__ import annotations

import math
import textwrap
import threading
import time

import pytest

from grouprl.config.schema import RewardFunction
from grouprl.rewards import (
    REWARD_FUNCTIONS,
    RewardError,
    RewardRunner,
    extract_answer,
    format_reward,
    math_answer,
    metrics,
    normalize_number,
    register_reward,
    resolve_reward,
    resolve_rewards,
    score_completions,
)

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
    assert "['format', 'math_answer', 'qa_em', 'qa_f1']" in str(err.value)
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
    assert resolved == [("math_answer", math_answer, 1.0), ("format", format_reward, 0.1)]
    with pytest.raises(RewardError, match=r"functions.1.name.*listed twice"):
        resolve_rewards([RewardFunction(name="format"), RewardFunction(name="format")])


# --- scoring ------------------------------------------------------------------------------

ROWS = [
    {"question": "a", "answer": "#### 9", "_index": 7},
    {"question": "b", "answer": "#### 4", "_index": 3},
]


def test_weighted_total_parts_and_metrics():
    completions = ["5 + 4 = 9\n#### 9", "the answer is 5"]
    scores = score_completions(
        functions=[("math_answer", math_answer, 1.0), ("format", format_reward, 0.5)],
        completions=completions,
        rows=ROWS,
        answer_key="answer",
        on_error="zero",
        timeout_s=5.0,
    )
    assert scores.parts == {"math_answer": [1.0, 0.0], "format": [1.0, 0.0]}
    assert scores.total == [1.5, 0.0]
    assert scores.errors == []
    assert metrics(scores) == {
        "reward/errors": 0.0,
        "reward/math_answer": 0.5,
        "reward/format": 0.5,
    }


def test_reference_and_row_are_passed_by_keyword():
    seen = []

    def spy(completion, *, reference, row):
        seen.append((completion, reference, row["_index"]))
        return True  # a bool counts as 1.0

    scores = score_completions(
        functions=[("spy", spy, 2.0)],
        completions=["x", "y"],
        rows=ROWS,
        answer_key="answer",
        on_error="zero",
        timeout_s=5.0,
    )
    assert seen == [("x", "#### 9", 7), ("y", "#### 4", 3)]
    assert scores.total == [2.0, 2.0]


def failing_on_b(completion, **_):
    if completion == "b":
        raise KeyError("no such thing")
    return 1.0


def test_raising_function_scores_zero_and_is_recorded():
    scores = score_completions(
        functions=[("flaky", failing_on_b, 1.0), ("format", format_reward, 1.0)],
        completions=["a", "b", "#### 1"],
        rows=[ROWS[0], ROWS[1], ROWS[0]],
        answer_key="answer",
        on_error="zero",
        timeout_s=5.0,
    )
    assert scores.parts["flaky"] == [1.0, 0.0, 1.0]
    assert scores.total == [1.0, 0.0, 2.0]
    [failure] = scores.errors
    assert (failure.function, failure.sample_index, failure.row_index) == ("flaky", 1, 3)
    assert (failure.error_type, failure.message) == ("KeyError", "'no such thing'")
    assert metrics(scores)["reward/errors"] == 1.0
    assert metrics(scores)["reward/flaky"] == pytest.approx(2 / 3)


def test_abort_raises_with_sample_and_row_index():
    with pytest.raises(RewardError) as err:
        score_completions(
            functions=[("flaky", failing_on_b, 1.0)],
            completions=["a", "b"],
            rows=ROWS,
            answer_key="answer",
            on_error="abort",
            timeout_s=5.0,
        )
    message = str(err.value)
    assert "'flaky' failed on sample 1 (row 3)" in message
    assert "KeyError: 'no such thing'" in message and "reward.on_error=zero" in message
    assert isinstance(err.value.__cause__, KeyError)


@pytest.mark.parametrize(
    ("value", "error_type"),
    [(math.nan, "ValueError"), (math.inf, "ValueError"), ("1.0", "TypeError"), (None, "TypeError")],
)
def test_non_numeric_or_nan_return_is_an_error(value, error_type):
    scores = score_completions(
        functions=[("bad", lambda completion, **_: value, 1.0)],
        completions=["a"],
        rows=ROWS[:1],
        answer_key="answer",
        on_error="zero",
        timeout_s=5.0,
    )
    assert scores.total == [0.0]
    assert [(e.sample_index, e.row_index, e.error_type) for e in scores.errors] == [
        (0, 7, error_type)
    ]


def test_hanging_function_times_out_and_the_next_calls_still_run():
    def hang_on_a(completion, **_):
        if completion == "a":
            time.sleep(5)
        return 1.0

    runner = RewardRunner()
    start = time.monotonic()
    scores = score_completions(
        functions=[("slow", hang_on_a, 1.0)],
        completions=["a", "b"],
        rows=ROWS,
        answer_key="answer",
        on_error="zero",
        timeout_s=0.2,
        runner=runner,
    )
    elapsed = time.monotonic() - start
    assert elapsed < 2.0
    assert scores.parts["slow"] == [0.0, 1.0]  # "b" ran on a fresh worker
    [failure] = scores.errors
    assert (failure.sample_index, failure.row_index) == (0, 7)
    assert (failure.error_type, failure.message) == ("TimeoutError", "timeout after 0.2s")

    with pytest.raises(RewardError, match=r"sample 0 \(row 7\): TimeoutError: timeout after 0.2s"):
        score_completions(
            functions=[("slow", hang_on_a, 1.0)],
            completions=["a"],
            rows=ROWS[:1],
            answer_key="answer",
            on_error="abort",
            timeout_s=0.2,
            runner=runner,
        )
    assert time.monotonic() - start < 3.0


def test_workers_do_not_pile_up():
    def reward_threads() -> int:
        return sum(t.name == "grouprl-reward" and t.is_alive() for t in threading.enumerate())

    before = reward_threads()
    for _ in range(5):
        score_completions(
            functions=[("format", format_reward, 1.0)],
            completions=["#### 1"],
            rows=ROWS[:1],
            answer_key="answer",
            on_error="zero",
            timeout_s=5.0,
        )
    deadline = time.monotonic() + 2.0
    while reward_threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reward_threads() <= before
