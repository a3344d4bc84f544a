"""The real-model code recipe (``qwen2.5-coder-1.5b-code``) and its shipped problems
(``examples/code/*.jsonl``, DeepCoder-Preview's columns): the rows load as the recipe
reads them, their tests parse as both kinds code_tests runs, train and test share no
problem, and in the sandbox, under the recipe's own code_tests settings, a reference
solution passes while a wrong one fails.

``grouprl plan`` of the recipe is tested with every packaged recipe
(tests/unit/test_plan_output.py). The recipe's data paths start at the repository root,
so these tests run there."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grouprl.config.loader import load_config
from grouprl.data.sources import read_rows
from grouprl.plan.known_models import known_config
from grouprl.plan.memory import estimate_params
from grouprl.rewards.args import with_args
from grouprl.rewards.code import code_tests
from grouprl.rewards.code.tests_format import load_tests
from long import short_or_long

RECIPE = "qwen2.5-coder-1.5b-code"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def at_the_repository_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def recipe_rows() -> dict[str, list[dict]]:
    """The recipe's train and eval rows, read as a run reads them."""
    cfg = load_config(RECIPE, [])
    rows = {}
    for key, source in (("data.train", cfg.data.train), ("data.eval", cfg.data.eval)):
        rows[key], report = read_rows(
            source,
            prompt_key=cfg.data.prompt_key,
            answer_key=cfg.data.answer_key,
            config_key=key,
        )
        assert report.skipped == [], report.summary()
    return rows


def fenced(code: str) -> str:
    return f"The solution:\n```python\n{code}```\n"


def test_the_shipped_rows_load_and_their_tests_parse():
    rows = recipe_rows()
    train, test = rows["data.train"], rows["data.eval"]
    assert (len(train), len(test)) == (36, 12)
    for split in (train, test):
        kinds = Counter(load_tests(row["tests"], row).kind for row in split)
        assert set(kinds) == {"stdio", "call"}, kinds  # both kinds in each split
        assert all(len(load_tests(row["tests"], row).cases) >= 2 for row in split)
    # held out: no problem of the test split is a train problem
    assert not {r["id"] for r in train} & {r["id"] for r in test}
    assert not {r["problem"] for r in train} & {r["problem"] for r in test}


# a stdin and a function problem of each split in make test; all 48 under GROUPRL_TEST_LONG
SAMPLE = short_or_long({"sum_list", "rotate_matrix", "knapsack", "word_break"}, None)

WRONG = {
    # reads the count line as the numbers: prints n
    "sum_list": "print(sum(map(int, input().split())))\n",
    # rotates counter-clockwise
    "rotate_matrix": "def rotate_matrix(m):\n    return [list(r) for r in zip(*m)][::-1]\n",
    # takes an item more than once: 300 (five of weight 10) where 220 is right
    "knapsack": (
        "n, W = map(int, input().split())\n"
        "items = [tuple(map(int, input().split())) for _ in range(n)]\n"
        "best = [0] * (W + 1)\n"
        "for cap in range(W + 1):\n"
        "    for w, v in items:\n"
        "        if w <= cap:\n"
        "            best[cap] = max(best[cap], best[cap - w] + v)\n"
        "print(best[W])\n"
    ),
    # checks the letters only: true for "catsandog", which cannot be split
    "word_break": "def word_break(s, words):\n    return set(s) <= set(''.join(words))\n",
}


@pytest.mark.procs
def test_reference_solutions_pass_and_wrong_ones_fail_in_the_sandbox():
    rows = [row for split in recipe_rows().values() for row in split]
    chosen = [row for row in rows if SAMPLE is None or row["id"] in SAMPLE]
    assert len(chosen) == (len(SAMPLE) if SAMPLE else 48)
    runs = [(row, row["solutions"][0], "passed") for row in chosen]
    runs += [(row, WRONG[row["id"]], "failed") for row in chosen if row["id"] in WRONG]
    [entry] = load_config(RECIPE, []).reward.functions
    reward = with_args(code_tests, entry.args)  # as the run builds it
    assert entry.name == "code_tests" and reward.wall_s == 10

    def verdict(run):
        row, program, _ = run
        return reward.verdict(fenced(program), reference=row["tests"], row=row)

    with ThreadPoolExecutor(2) as pool:
        verdicts = list(pool.map(verdict, runs))
    for (row, _, expected), got in zip(runs, verdicts, strict=True):
        assert got.outcome == expected, (row["id"], expected, got)


def test_the_plan_sizes_the_model_and_its_7b_sibling_without_the_hub():
    """Both are in grouprl's table of known configs, their parameter counts within 0.5% of
    their model cards' (1.54B, 7.61B), so `grouprl plan` checks their memory offline."""
    small = estimate_params(known_config(load_config(RECIPE, []).model.path)).causal_lm
    large = estimate_params(known_config("Qwen/Qwen2.5-Coder-7B-Instruct")).causal_lm
    assert abs(small / 1.54e9 - 1) < 0.005 and abs(large / 7.61e9 - 1) < 0.005, (small, large)
