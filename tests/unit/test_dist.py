"""How ranks split a batch, and what `grouprl submit` sends (no Ray, no cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from grouprl.cluster.jobs import EXCLUDES, JobError, entrypoint, runtime_env
from grouprl.workers.rank import Rank


def test_each_rank_trains_its_contiguous_block_of_every_mini_batch():
    rows = [Rank(r, 2).rows(8, mini_batch_size=4).tolist() for r in range(2)]
    assert rows == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert Rank(1, 2).block(6) == slice(3, 6)
    everything = torch.cat([Rank(r, 4).rows(16, mini_batch_size=8) for r in range(4)])
    assert sorted(everything.tolist()) == list(range(16))  # each row once


def test_a_recipe_file_is_named_relative_to_the_uploaded_working_dir(tmp_path: Path):
    recipe = tmp_path / "recipes" / "mine.yaml"
    recipe.parent.mkdir()
    recipe.write_text("name: mine\n")
    command = entrypoint(str(recipe), ["train.steps=3"], working_dir=tmp_path)
    assert command == "python -m grouprl train recipes/mine.yaml train.steps=3"
    assert entrypoint("tiny-arith", [], working_dir=tmp_path).endswith("train tiny-arith")
    with pytest.raises(JobError, match="outside --working-dir"):
        entrypoint(str(recipe), [], working_dir=tmp_path / "elsewhere")


def test_runtime_env_ships_the_checkout_without_environments(tmp_path: Path):
    (tmp_path / "src" / "grouprl").mkdir(parents=True)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# pinned\nmy-reward-lib==1.2\n\nrapidfuzz\n")
    env = runtime_env(tmp_path, requirements)
    assert env["working_dir"] == str(tmp_path) and env["excludes"] == EXCLUDES
    assert {".venv", ".git", "runs"} <= set(env["excludes"])
    assert env["env_vars"] == {"PYTHONPATH": "src"}
    assert env["pip"] == ["my-reward-lib==1.2", "rapidfuzz"]
    with pytest.raises(JobError, match="no such file"):
        runtime_env(tmp_path, tmp_path / "missing.txt")
