"""A sample's reward is computed in one place (``rollout/reward.py``) from named parts, and
samples.jsonl shows the parts: which parts are summed, which are only shown, what a
failure does, and that no other module writes a trajectory's reward."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import grouprl
from grouprl.metrics.samples import SamplesWriter
from grouprl.rewards.scoring import RewardScores
from grouprl.rollout.episode_scores import score_trajectories
from grouprl.rollout.reward import FAILED_OUTCOME, fail, record_parts, sample_reward
from grouprl.types import Completion, RewardParts, Trajectory, Turn


def _trajectory(turn_rewards: tuple[float, ...] = (0.0,), text: str = "x") -> Trajectory:
    turns = [
        Turn(Completion(token_ids=[1], logprobs=[0.0], finish_reason="stop", text=text), reward=r)
        for r in turn_rewards
    ]
    return Trajectory(prompt_index=0, prompt_ids=[1], turns=turns, weight_version=0)


@pytest.mark.parametrize(
    ("parts", "reward"),
    [
        (RewardParts(scores={"math_answer": 1.0, "format": 1.0}, functions=1.1), 1.1),
        (RewardParts(functions=1.1, overlong=-0.25), 1.1 - 0.25),
        (RewardParts(functions=1.0, agent=0.25), 0.25),  # the agent's reward replaces them
        (RewardParts(functions=1.0, agent=0.0), 0.0),  # 0 is a reward, not "none given"
        (RewardParts(functions=1.0, agent=0.5, failure="env_error"), FAILED_OUTCOME),
        (RewardParts(functions=1.0, failure="env_error", overlong=-0.5), FAILED_OUTCOME - 0.5),
        # shown beside the reward, never summed into it
        (RewardParts(scores={"f": 5.0}, functions=1.0, turns=(0.3, 0.2), kl=-0.7), 1.0),
    ],
)
def test_the_reward_is_the_outcome_plus_the_overlong_shaping(parts, reward):
    assert sample_reward(parts) == reward


def test_a_failed_sample_shows_a_reward_of_zero():
    # what it trains as with on_error=zero; with drop it is out of the loss
    # (tests/unit/test_failed_samples.py)
    assert FAILED_OUTCOME == 0.0


def test_scoring_records_the_parts_and_the_reward_from_them():
    trajectories = [_trajectory(), _trajectory((0.5, 0.0, 1.0))]

    def score(completions, rows, group_size):
        parts = {"math_answer": [1.0, 0.0], "format": [1.0, 1.0]}
        return RewardScores(total=[1.1, 0.1], parts=parts)

    score_trajectories(trajectories, score=score, correct_function="math_answer", group_size=2)
    single, multi = trajectories
    assert single.reward_parts == RewardParts(
        scores={"math_answer": 1.0, "format": 1.0}, functions=1.1
    )
    assert multi.reward_parts.turns == (0.5, 0.0, 1.0)  # only where a turn earned one
    assert [t.reward for t in trajectories] == [1.1, 0.1]  # the scorer's total, as it was
    assert [t.correct for t in trajectories] == [True, False]


def test_parts_added_later_keep_the_others_and_recompute_the_reward():
    traj = _trajectory()
    record_parts(traj, scores={"math_answer": 1.0}, functions=1.0)
    record_parts(traj, overlong=-0.25)
    assert (traj.reward, traj.reward_parts.functions) == (0.75, 1.0)
    record_parts(traj, kl=-0.5)  # KL in the reward goes in per token: the reward stays
    assert traj.reward == 0.75


def test_a_failure_voids_the_outcome_but_keeps_the_shaping():
    traj = _trajectory()
    record_parts(traj, scores={"math_answer": 1.0}, functions=1.0, agent=1.0)
    traj.correct = True
    fail(traj, reason="env_error")
    record_parts(traj, overlong=-0.5)  # the loop shapes after the rollout, failed or not
    parts = traj.reward_parts
    assert (parts.failure, parts.scores, parts.functions, parts.agent) == (
        "env_error",
        {"math_answer": 0.0},
        0.0,
        None,
    )
    assert (traj.reward, traj.correct) == (-0.5, False)


def test_samples_jsonl_shows_the_parts_that_are_set(tmp_path: Path):
    parts = RewardParts(scores={"math_answer": 1.0, "format": float("nan")}, functions=1.0)
    failed = RewardParts(
        scores={"math_answer": 0.0}, failure="env_error", dropped=True, turns=(0.5,)
    )
    SamplesWriter(tmp_path).write(
        3,
        [
            {"reward": 0.85, "reward_parts": RewardParts(**{**vars(parts), "overlong": -0.15})},
            {"reward": 0.0, "reward_parts": failed},
        ],
    )
    lines = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert lines[0]["reward_parts"] == {
        "scores": {"math_answer": 1.0, "format": None},
        "functions": 1.0,
        "overlong": -0.15,
    }
    assert lines[1]["reward_parts"] == {
        "scores": {"math_answer": 0.0},
        "functions": 0.0,
        "failure": "env_error",
        "dropped": True,
        "turns": [0.5],
    }


def _writes(source: str) -> list[str]:
    """The targets of the assignments to a ``.reward`` or ``.reward_parts`` attribute."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            elts = target.elts if isinstance(target, ast.Tuple) else [target]
            found += [
                ast.unparse(t)
                for t in elts
                if isinstance(t, ast.Attribute) and t.attr in ("reward", "reward_parts")
            ]
    return found


def test_only_rollout_reward_writes_a_samples_reward():
    package = Path(grouprl.__file__).parent
    writers = {}
    for path in package.rglob("*.py"):
        # the episode driver records each turn's reward (Turn.reward, a part, not the sum)
        writes = [w for w in _writes(path.read_text()) if not w.startswith(("last.", "turn"))]
        if writes:
            writers[path.relative_to(package).as_posix()] = writes
    assert writers == {"rollout/reward.py": ["traj.reward_parts", "traj.reward"]}
