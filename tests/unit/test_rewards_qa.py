"""QA rewards: SQuAD normalisation, <answer> extraction, aliases, exact match and token F1."""

from __future__ import annotations

import pytest

from grouprl.rewards.qa import (
    answer_aliases,
    exact_match,
    extract_answer,
    normalize_answer,
    token_f1,
)
from grouprl.rewards.registry import REWARD_FUNCTIONS, resolve_reward

# A TriviaQA row as the HF dataset gives it (fields trimmed to the ones rewards read).
TRIVIAQA_ROW = {
    "question": "Which Lloyd Webber musical premiered in the US on 10th December 1993?",
    "answer": {
        "aliases": ["Sunset Blvd", "Sunset Boulevard", "Sunset Bulevard", "West Sunset Boulevard"],
        "normalized_aliases": ["sunset boulevard", "sunset blvd", "west sunset boulevard"],
        "value": "Sunset Boulevard",
        "normalized_value": "sunset boulevard",
        "type": "WikipediaEntity",
    },
}


def answered(text: str) -> str:
    return f"<think>I searched.</think>\n<answer>{text}</answer><|im_end|>"


# --- normalisation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The  Eiffel Tower!", "eiffel tower"),
        ("an apple, a pear", "apple pear"),
        ("A Tale of Two Cities", "tale of two cities"),
        ("THE END.", "end"),
        ("Theatre and Anthem", "theatre and anthem"),  # articles only as whole words
        ("U.S.A.", "usa"),  # SQuAD deletes punctuation (TriviaQA's script would give "u s a")
        ("Rock 'n' Roll", "rock n roll"),
        ("  multi\n line\t answer ", "multi line answer"),
        ("the", ""),
        ("", ""),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


# --- extraction ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<answer>Paris</answer>", "Paris"),
        ("<answer>Paris</answer><|im_end|>", "Paris"),
        ("<answer> Lyon </answer> on reflection <answer>\n Paris\n</answer>\n", "Paris"),
        ("<answer>New\nYork City</answer>", "New\nYork City"),  # multi-line kept inside
        ("<answer>draft <answer>Paris</answer>", "Paris"),  # nearest opening tag before close
        ("<answer></answer>", ""),
        ("The answer is Paris.", None),
        ("<answer>Paris", None),  # never closed
        ("Paris</answer>", None),  # never opened
    ],
)
def test_extract_answer(completion, expected):
    assert extract_answer(completion) == expected


# --- aliases ------------------------------------------------------------------------------


def test_answer_aliases_shapes():
    assert answer_aliases("Paris") == ["Paris"]
    assert answer_aliases(["Paris", "City of Light", "Paris"]) == ["Paris", "City of Light"]
    assert answer_aliases(("a", "b")) == ["a", "b"]
    assert answer_aliases(1969) == ["1969"]
    # TriviaQA: aliases, then normalized_aliases, then value/normalized_value; deduplicated.
    assert answer_aliases(TRIVIAQA_ROW["answer"]) == [
        "Sunset Blvd",
        "Sunset Boulevard",
        "Sunset Bulevard",
        "West Sunset Boulevard",
        "sunset boulevard",
        "sunset blvd",
        "west sunset boulevard",
    ]
    assert answer_aliases({"value": "Paris"}) == ["Paris"]


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        (None, "the reference is a NoneType"),
        (True, "the reference is a bool"),
        ({"text": ["Paris"]}, "dict with keys ['text'] but none of 'aliases'"),
        ({"aliases": "Paris"}, "reference['aliases'] is a str, expected a list of strings"),
        (["Paris", None], "an item of the reference list is a NoneType"),
        ([], "has no answers"),
    ],
)
def test_bad_reference_says_what_is_accepted(reference, message):
    with pytest.raises(ValueError, match=r"accepted|expected") as err:
        answer_aliases(reference)
    assert message in str(err.value)
    with pytest.raises(ValueError):
        exact_match(answered("Paris"), reference=reference)


# --- exact match --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        (answered("Sunset Boulevard!"), TRIVIAQA_ROW["answer"], 1.0),
        (answered("sunset blvd."), TRIVIAQA_ROW["answer"], 1.0),
        (answered("The West Sunset Boulevard"), TRIVIAQA_ROW["answer"], 1.0),
        (answered("Cats"), TRIVIAQA_ROW["answer"], 0.0),
        (answered("the Eiffel  Tower"), ["Tour Eiffel", "Eiffel Tower"], 1.0),
        (answered("Eiffel"), ["Tour Eiffel", "Eiffel Tower"], 0.0),  # partial is not exact
        (answered("PARIS"), "Paris", 1.0),
        ("Paris", "Paris", 0.0),  # no <answer> tag
        (answered(""), "Paris", 0.0),
        (answered("The"), ["The", "Paris"], 0.0),  # empty after normalising never scores
    ],
)
def test_exact_match(completion, reference, expected):
    assert exact_match(completion, reference=reference, row={}) == expected


def test_exact_match_uses_last_answer():
    text = "<answer>Cats</answer> no, <answer>Sunset Boulevard</answer>"
    assert exact_match(text, reference=TRIVIAQA_ROW["answer"]) == 1.0
    text = "<answer>Sunset Boulevard</answer> no, <answer>Cats</answer>"
    assert exact_match(text, reference=TRIVIAQA_ROW["answer"]) == 0.0


# --- token F1 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        # "big red dog" (3 tokens) vs "red dog" (2): P = 2/3, R = 1, F1 = (4/3) / (5/3) = 0.8
        ("the big red dog", "red dog", 0.8),
        # swap roles: P = 1, R = 2/3 -> 0.8 again
        ("red dog", "a big red dog", 0.8),
        # multiplicity: "dog dog dog" vs "dog" shares one dog: P = 1/3, R = 1, F1 = 0.5
        ("dog dog dog", "dog", 0.5),
        # "dog dog" vs "dog dog cat": common 2, P = 1, R = 2/3, F1 = 0.8
        ("dog dog", "dog dog cat", 0.8),
        # one shared token of 2 and 4: P = 1/2, R = 1/4, F1 = (1/4) / (3/4) = 1/3
        ("red fox", "the red dog runs fast", 1 / 3),
        ("Red, Dog!", "the red dog", 1.0),
        ("cat", "red dog", 0.0),
    ],
)
def test_token_f1_by_hand(prediction, gold, expected):
    assert token_f1(answered(prediction), reference=gold) == pytest.approx(expected)


def test_token_f1_takes_best_alias():
    # "sunset strip" vs "sunset boulevard" or "sunset blvd": P = 1/2, R = 1/2 -> 0.5;
    # vs "west sunset boulevard": P = 1/2, R = 1/3 -> (1/3) / (5/6) = 0.4. The best is 0.5.
    got = token_f1(answered("Sunset Strip"), reference=TRIVIAQA_ROW["answer"])
    assert got == pytest.approx(0.5)
    got = token_f1(answered("West Sunset"), reference=TRIVIAQA_ROW["answer"])
    assert got == pytest.approx(0.8)  # vs "west sunset boulevard": P = 1, R = 2/3
    assert token_f1(answered("Sunset Boulevard"), reference=TRIVIAQA_ROW["answer"]) == 1.0


def test_token_f1_without_answer_or_usable_alias_is_zero():
    assert token_f1("red dog", reference="red dog") == 0.0
    assert token_f1(answered("  the  "), reference="red dog") == 0.0
    assert token_f1(answered("red dog"), reference=["The", "a"]) == 0.0


# --- registry -----------------------------------------------------------------------------


def test_registered_by_name():
    assert resolve_reward("qa_em") is exact_match
    assert resolve_reward("qa_f1") is token_f1
    assert REWARD_FUNCTIONS["qa_em"] is exact_match
    # the caller's convention: positional completion, reference and row as keywords
    row = TRIVIAQA_ROW
    assert resolve_reward("qa_em")(answered("Sunset Blvd"), reference=row["answer"], row=row) == 1
