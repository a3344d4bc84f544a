"""Failures never train: a sample whose environment, agent or reward function failed is
left out of the loss and of its group's baseline (``on_error=drop``), trained as reward 0
(``zero``) or stops the run (``raise``); a group left with fewer samples than its
estimator needs is dropped whole; a step with nothing left makes no update."""

from __future__ import annotations

import logging
import socket
from types import SimpleNamespace

import pytest
import torch

from grouprl.algo.advantages import ADVANTAGES, AdvantageInputs
from grouprl.algo.kl import KLController
from grouprl.algo.shaping import signal_groups
from grouprl.config.loader import load_config
from grouprl.config.schema import RunConfig
from grouprl.driver.batch import build_batch, trained_samples, turn_tensors
from grouprl.driver.components import Components, RunState
from grouprl.driver.loop import train_step
from grouprl.driver.rollouts import generate_round, take_batch
from grouprl.driver.source import RolloutSource, group_lag
from grouprl.metrics.telemetry import Hardware, ModelShape
from grouprl.rewards.scoring import RewardFailure, RewardScores
from grouprl.rollout.episode_scores import score_trajectories
from grouprl.rollout.gateway.agents import (
    AgentFailure,
    AgentOutcome,
    AgentRollout,
    _apply_outcomes,
)
from grouprl.rollout.gateway.record import EpisodeRecord
from grouprl.rollout.gateway.worker import start_episode
from grouprl.rollout.reward import SampleFailed, fail
from grouprl.rollout.setup import zero_failed_episodes
from grouprl.types import Completion, Trajectory, Turn

PARAMS = SimpleNamespace(
    scale_by_std=True,
    adv_std="population",
    adv_eps=1e-6,
    gamma=0.9,
    gae_lambda=0.95,
    turn_advantage_coef=0.5,
)
# rows of 8 tokens: 2 prompt tokens, turn 0, an observation token, and (in rows 0 and 3)
# turn 1; the per-turn tensors say the same
TURN_INDEX = [
    [-1, -1, 0, 0, 0, -1, 1, 1],
    [-1, -1, 0, 0, -1, -1, -1, -1],
    [-1, -1, 0, 0, 0, 0, -1, -1],
    [-1, -1, 0, -1, 1, 1, 1, -1],
]


def _inputs(rows: list[int], *, valid: list[bool] | None = None) -> AdvantageInputs:
    """One group of the rows ``rows`` of a fixed random batch of 4 samples."""
    gen = torch.Generator().manual_seed(0)
    turn_BT = torch.tensor(TURN_INDEX)
    counts_B = turn_BT.amax(dim=1) + 1
    full = AdvantageInputs(
        scores_B=torch.tensor([1.0, 0.0, 0.5, 1.0]),
        mask_BT=(turn_BT >= 0).float(),
        group_size=4,
        token_rewards_BT=-0.1 * torch.rand(4, 8, generator=gen),
        values_BT=torch.rand(4, 8, generator=gen),
        turn_index_BT=turn_BT,
        turn_rewards_BK=torch.rand(4, 2, generator=gen) * (torch.arange(2) < counts_B[:, None]),
        turn_counts_B=counts_B,
        credit_turns_B=torch.tensor([1, 1, 1, 2]),
    )
    pick = torch.tensor(rows)
    return AdvantageInputs(
        **{
            name: value[pick] if isinstance(value, torch.Tensor) else value
            for name, value in vars(full).items()
        }
        | {"group_size": len(rows), "valid_B": None if valid is None else torch.tensor(valid)}
    )


@pytest.mark.parametrize("estimator", sorted(ADVANTAGES))
def test_a_group_with_one_failed_sample_gets_the_advantages_of_the_group_without_it(
    estimator,
):
    with_failure = ADVANTAGES[estimator](
        _inputs([0, 1, 2, 3], valid=[True, True, False, True]), cfg=PARAMS
    )
    without = ADVANTAGES[estimator](_inputs([0, 1, 3]), cfg=PARAMS)
    kept = torch.tensor([0, 1, 3])
    assert without.advantages_BT.abs().sum() > 0  # the comparison is not of zeros
    torch.testing.assert_close(with_failure.advantages_BT[kept], without.advantages_BT)
    assert with_failure.advantages_BT[2].abs().sum() == 0
    if without.returns_BT is not None:  # gae: the critic's targets too
        torch.testing.assert_close(with_failure.returns_BT[kept], without.returns_BT)


@pytest.mark.parametrize("estimator", sorted(ADVANTAGES))
def test_a_batch_with_no_valid_sample_gets_zero_advantages_not_nan(estimator):
    result = ADVANTAGES[estimator](_inputs([0, 1, 2, 3], valid=[False] * 4), cfg=PARAMS)
    assert torch.equal(result.advantages_BT, torch.zeros(4, 8))


def _trajectory(prompt_index: int, *, tokens: int = 2, stop_reason: str = "stop") -> Trajectory:
    completion = Completion(
        token_ids=[5] * tokens, logprobs=[-0.5] * tokens, finish_reason="stop", text="x"
    )
    traj = Trajectory(
        prompt_index=prompt_index, prompt_ids=[1, 2], turns=[Turn(completion)], weight_version=0
    )
    traj.stop_reason = stop_reason
    return traj


def _scored(rewards: list[float], *, prompts: int = 1) -> list[Trajectory]:
    """Trajectories whose reward functions scored ``rewards`` (prompt-major groups)."""
    group = len(rewards) // prompts
    trajectories = [_trajectory(i // group) for i in range(len(rewards))]

    def score(completions, rows, group_size):
        return RewardScores(total=list(rewards), parts={"math_answer": list(rewards)})

    score_trajectories(trajectories, score=score, correct_function="math_answer", group_size=group)
    return trajectories


def test_the_failed_samples_loss_mask_is_all_zero_in_the_training_batch():
    trajectories = _scored([1.0, 1.0, 0.0])
    fail(trajectories[0], reason="env_error", on_error="drop", message="boom")
    fail(trajectories[1], reason="env_error", on_error="zero")
    batch = build_batch(trajectories, pad_id=0)
    assert batch.loss_mask_BT.sum(dim=1).tolist() == [0.0, 2.0, 2.0]
    assert [t.trains for t in trajectories] == [False, True, True]
    parts = trajectories[0].reward_parts
    assert (parts.failure, parts.dropped, parts.error, parts.scores) == (
        "env_error",
        True,
        "boom",
        {"math_answer": 0.0},
    )


def test_a_group_left_with_fewer_valid_samples_than_the_estimator_needs_is_dropped_whole():
    trajectories = _scored([1.0, 0.0, 1.0, 0.0, 1.0, 0.0], prompts=2)
    for traj in trajectories[:2]:  # group 0 keeps one sample: too few for a baseline
        fail(traj, reason="reward_error")
    fail(trajectories[3], reason="reward_error")  # group 1 keeps two
    grpo = trained_samples(trajectories, group_size=3, min_group_size=2)
    assert grpo.tolist() == [False, False, False, False, True, True]
    reinforce_pp = trained_samples(trajectories, group_size=3, min_group_size=1)
    assert reinforce_pp.tolist() == [False, False, True, False, True, True]


def test_on_error_zero_trains_the_failed_sample_as_reward_0():
    trajectories = _scored([1.0, 1.0, 0.0, 1.0])
    fail(trajectories[0], reason="reward_error", on_error="zero", message="ValueError: x")
    assert (trajectories[0].reward, trajectories[0].trains) == (0.0, True)
    batch = build_batch(trajectories, pad_id=0)
    assert batch.loss_mask_BT[0].sum() == 2
    inputs = AdvantageInputs(
        scores_B=torch.tensor([t.reward for t in trajectories]),
        mask_BT=batch.loss_mask_BT,
        group_size=4,
        valid_B=trained_samples(trajectories, group_size=4, min_group_size=2),
    )
    advantages_B = ADVANTAGES["grpo"](inputs, cfg=PARAMS).advantages_BT[:, -1]
    expected_B = torch.tensor([-1.0, 1.0, -1.0, 1.0])  # rewards 0, 1, 0, 1
    torch.testing.assert_close(advantages_B, expected_B, atol=1e-5, rtol=0)


def test_env_error_under_on_error_raise_names_the_sample_prompt_error_and_key():
    ok, broken = _trajectory(3), _trajectory(7, stop_reason="env_error")
    broken.turns[-1].info["env_error"] = "TimeoutError: step past 30 s"
    with pytest.raises(SampleFailed) as raised:
        zero_failed_episodes([ok, broken], on_error="raise")
    message = str(raised.value)
    for part in ("sample 1 (prompt index 7)", "env_error", "step past 30 s", "env.on_error"):
        assert part in message, message
    assert raised.value.user_error  # the CLI prints it without a stack trace


def test_reward_errors_fail_every_sample_of_the_failed_call():
    trajectories = [_trajectory(p) for p in (0, 0, 1, 1)]
    group_failure = RewardFailure("judge", 2, 1, "ValueError", "bad", samples=2)

    def score(completions, rows, group_size):
        parts = {"judge": [1.0, 0.0, 0.0, 0.0]}
        return RewardScores(total=[1.0, 0.0, 0.0, 0.0], parts=parts, errors=[group_failure])

    score_trajectories(trajectories, score=score, correct_function=None, group_size=2)
    assert [t.reward_parts.failure for t in trajectories] == [None, None, *["reward_error"] * 2]
    assert [t.trains for t in trajectories] == [True, True, False, False]
    assert "reward function 'judge' failed on samples 2-3" in trajectories[2].reward_parts.error
    with pytest.raises(SampleFailed, match=r"sample 2 \(prompt index 1\).*reward\.on_error"):
        score_trajectories(
            [_trajectory(p) for p in (0, 0, 1, 1)],
            score=score,
            correct_function=None,
            group_size=2,
            on_error="raise",
        )


def test_dynamic_sampling_judges_a_group_by_its_training_samples():
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    trains = [False, True, True, True, True, False]  # group 0: equal once 1.0 is dropped
    assert signal_groups(rewards, group_size=3, trains=trains) == [False, True]


class _Policy:
    """The policy role: records the batch it is asked to update with."""

    def __init__(self) -> None:
        self.batches = []

    def call(self, method, batch, **kwargs):
        self.batches.append(batch)
        return {}


class _Engine:
    """One rollout replica with nothing to report."""

    def drain_metrics(self) -> dict[str, float]:
        return {}

    def __len__(self) -> int:
        return 1


def _components(*, n: int = 4) -> Components:
    cfg = load_config("tiny-arith", [f"rollout.n={n}", "data.batch_size=2"])
    return Components(
        cfg=cfg,
        tokenizer=SimpleNamespace(pad_token_id=0),
        group=SimpleNamespace(world_size=1),
        policy=_Policy(),
        reference_logprobs=None,
        engine=None,
        train_set=None,
        eval_set=None,
        score=None,
        rollout=None,
        mini_batch_size=2 * n,
        total_steps=1,
        state=RunState(sampler=None, kl=KLController(beta=0.0)),
        checkpoint_files={},
        hardware=Hardware(ModelShape(1, 1, 1, 1), peak_flops=1.0, peak_source="test"),
        rollouts=RolloutSource(None, None, batch_size=2),
    )


def test_a_step_trains_only_its_valid_samples_and_says_which_were_dropped(caplog):
    c = _components()
    trajectories = _scored([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0], prompts=2)
    fail(trajectories[1], reason="env_error", message="boom")  # group 0 keeps 3
    for i in (4, 5, 6):  # group 1 keeps one: dropped whole
        fail(trajectories[i], reason="reward_error")
    with caplog.at_level(logging.WARNING, logger="grouprl.driver.loop"):
        metrics = train_step(c, trajectories, step=5)
    (batch,) = c.policy.batches
    in_loss_B = batch.loss_mask_BT.sum(dim=1) > 0
    assert in_loss_B.tolist() == [True, False, True, True, False, False, False, False]
    advantages_B = batch.advantages_BT.sum(dim=1) / 2  # 2 tokens, one advantage each
    expected = [2**0.5 / 2, 0.0, 2**0.5 / 2, -(2**0.5), 0.0, 0.0, 0.0, 0.0]  # 1, 1, 0
    torch.testing.assert_close(advantages_B, torch.tensor(expected), atol=1e-5, rtol=0)
    assert (metrics["train/dropped_samples"], metrics["train/dropped_groups"]) == (5.0, 1.0)
    (record,) = [r for r in caplog.records if "left out of training" in r.getMessage()]
    said = record.getMessage()
    for part in (
        "step 5",
        "4 failed samples",
        "1 env_error, 3 reward_error",
        "groups dropped whole: 1",
    ):
        assert part in said, said
    assert "sample 1 (prompt index 0): env_error: boom" in said, said


def test_a_step_whose_samples_all_failed_makes_no_update_and_no_nan(caplog):
    c = _components()
    trajectories = _scored([1.0, 0.0] * 4, prompts=2)
    for traj in trajectories:
        fail(traj, reason="agent_error")
    with caplog.at_level(logging.WARNING, logger="grouprl.driver.loop"):
        metrics = train_step(c, trajectories, step=2)
    assert c.policy.batches == []
    assert metrics == {"train/dropped_samples": 8.0, "train/dropped_groups": 2.0}
    assert "no sample trains: this step makes no update" in caplog.text


def test_step_metrics_count_failures_by_kind_and_average_only_training_samples():
    c = _components(n=2)
    trajectories = _scored([1.0, 0.0, 1.0, 1.0], prompts=2)
    fail(trajectories[1], reason="env_error")  # dropped: not in reward/mean
    fail(trajectories[2], reason="reward_error", on_error="zero")  # trains as 0

    def rollout(prompt_set, settings):
        return trajectories, RewardScores(total=[0.0] * 4, parts={})

    sampler = SimpleNamespace(next_batch=lambda n: list(range(n)))
    c = Components(
        **{
            **vars(c),
            "rollout": rollout,
            "train_set": SimpleNamespace(take=lambda positions: None),
            "state": RunState(sampler=sampler, kl=c.state.kl),
            "score": SimpleNamespace(seconds=0.0),
            "engine": _Engine(),
            "rollouts": RolloutSource(lambda *r: generate_round(c, *r), sampler, batch_size=2),
        }
    )
    _, metrics = take_batch(c)
    assert (metrics["failures/env"], metrics["failures/reward"], metrics["failures/agent"]) == (
        1.0,
        1.0,
        0.0,
    )
    assert metrics["reward/mean"] == pytest.approx(2 / 3)  # 1, 0 (zeroed), 1
    assert metrics["accuracy"] == pytest.approx(2 / 3)


# --- edge paths: a failure never makes a sample train (issue 37, items 2 and 9) ------------


@pytest.mark.parametrize(
    ("first", "second", "dropped"),
    [
        (("reward_error", "drop"), ("env_error", "zero"), True),  # the case that trained
        (("env_error", "zero"), ("reward_error", "drop"), True),
        (("env_error", "zero"), ("reward_error", "zero"), False),
    ],
)
def test_a_sample_failed_twice_keeps_the_stricter_fate_and_its_first_reason(first, second, dropped):
    (traj,) = _scored([1.0])
    fail(traj, reason=first[0], on_error=first[1], message="first")
    fail(traj, reason=second[0], on_error=second[1], message="second")
    parts = traj.reward_parts
    assert (parts.failure, parts.error, parts.dropped) == (first[0], "first", dropped)
    assert (traj.trains, traj.reward) == (not dropped, 0.0)
    with pytest.raises(SampleFailed):  # raise beats both
        fail(traj, reason="reward_error", on_error="raise")


def _multi_turn(turn_rewards: list[float]) -> Trajectory:
    traj = _trajectory(0)
    traj.turns = [
        Turn(Completion([5, 6], [-0.5, -0.5], "stop", text="x"), [9], reward=r)
        for r in turn_rewards
    ]
    traj.turns[-1].observation_ids = []
    return traj


def test_a_failed_episode_trained_as_zero_earns_no_turn_reward():
    """on_error=zero: what the broken episode's turns scored never reaches mt_grpo or
    turn_returns (the per-turn tensors read nothing from it), like its outcome."""
    failed, ok = _multi_turn([1.0, 0.5]), _multi_turn([1.0, 0.5])
    score_trajectories(
        [failed, ok],
        score=lambda completions, rows, group_size: RewardScores(total=[1.0, 1.0], parts={}),
        correct_function=None,
        group_size=2,
    )
    assert failed.reward_parts.turns == (1.0, 0.5)  # as scored, before it failed
    fail(failed, reason="env_error", on_error="zero")
    assert (failed.trains, failed.reward, failed.reward_parts.turns) == (True, 0.0, ())
    rewards_BK, counts_B, _ = turn_tensors([failed, ok])
    assert rewards_BK.tolist() == [[0.0, 0.0], [1.0, 0.5]]
    assert counts_B.tolist() == [2, 2]


def test_a_failed_sample_left_out_neither_counts_nor_trips_the_staleness_bound():
    """A synchronous run (max_staleness=0) at policy version 1: an episode whose agent
    failed before its first call carries no version of its own; left out, it must not
    stop the run. A sample that trains with weights 0 still does (the loop's bug)."""
    c = _components(n=3)
    c.state.weight_version = 1
    trajectories = _scored([1.0, 0.0, 0.0, 1.0, 1.0, 0.0], prompts=2)
    for traj in trajectories:
        traj.weight_version = 1
    trajectories[0].weight_version = 0
    fail(trajectories[0], reason="agent_error", message="ConnectionError: reset")
    metrics = train_step(c, trajectories, step=2)
    assert metrics["train/dropped_samples"] == 1.0
    assert len(c.policy.batches) == 1  # the others trained
    trajectories[1].weight_version = 0  # trains: past the bound
    with pytest.raises(RuntimeError, match=r"rollout.max_staleness=0"):
        train_step(c, trajectories, step=2)


def test_an_episode_without_calls_has_the_version_it_opened_with():
    record = EpisodeRecord(key="k", index=0, row={"_index": 4}, eos_id=None, version=3)
    assert record.trajectory(fallback_prompt=[1, 2]).weight_version == 3
    assert record.rerun().trajectory(fallback_prompt=[1]).weight_version == 3


def test_a_stream_group_is_not_stale_for_its_failed_samples_version():
    ok, failed = _trajectory(0), _trajectory(0)
    ok.weight_version = 4
    fail(failed, reason="agent_error")  # weight_version 0: the episode never called
    assert group_lag([ok, failed], version=5) == 1
    assert group_lag([failed], version=5) == 0  # trains nothing: bounds nothing


def agent_for_scoring(base_url, task, **kwargs):
    """Never run: ``_score`` is handed the outcomes (an ``env.agent`` must resolve)."""


def test_unused_reward_functions_are_not_called_and_cannot_fail_an_agents_sample():
    """Four episodes: the agent returned a reward, reported one, returned None, failed.
    The functions score only the third (the one whose reward they decide); a judge that
    is down fails that sample alone, never the two the agent rewarded itself."""
    cfg = RunConfig.model_validate({"env": {"agent": f"{__file__}:agent_for_scoring"}})
    called = []

    def judge_down(completions, rows, group_size):
        called.append(([r["_index"] for r in rows], group_size))
        down = [
            RewardFailure("judge", i, r["_index"], "ConnectionError", "down")
            for i, r in enumerate(rows)
        ]
        return RewardScores(
            total=[0.0] * len(rows), parts={"judge": [0.0] * len(rows)}, errors=down
        )

    rollout = AgentRollout(cfg, engine=None, tokenizer=None, score=judge_down)
    records = [
        EpisodeRecord(key=f"k{i}", index=i, row={"_index": i}, eos_id=None) for i in range(4)
    ]
    records[1].reported_reward = 0.7
    outcomes = [
        AgentOutcome(reward=0.5),
        AgentOutcome(),
        AgentOutcome(),
        AgentOutcome(failure=AgentFailure(3, 3, "RuntimeError", "agent bug")),
    ]
    trajectories = [_trajectory(i) for i in range(4)]
    for traj, record in zip(trajectories, records, strict=True):
        traj.row = record.row
    scores = rollout._score(trajectories, records, outcomes, group_size=2)
    assert called == [([2], None)]  # the scored one alone, grouped by its row
    _apply_outcomes(trajectories, records, outcomes, scores, on_error="drop")
    parts = [t.reward_parts for t in trajectories]
    assert [(p.failure, t.trains) for p, t in zip(parts, trajectories, strict=True)] == [
        (None, True),
        (None, True),
        ("reward_error", False),
        ("agent_error", False),
    ]
    assert [t.reward for t in trajectories[:2]] == [0.5, 0.7]
    assert scores.total == [0.5, 0.7, 0.0, 0.0]


@pytest.mark.parametrize("network", [True, False])
def test_a_start_that_cannot_reach_the_gateway_blames_env_network_only_when_it_is_off(network):
    with socket.socket() as free:  # a loopback port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(ConnectionError) as raised:
        start_episode(f"http://127.0.0.1:{port}/e/k/v1", network=network)
    said = str(raised.value)
    assert f"127.0.0.1:{port}" in said and "refused" in said.lower(), said
    assert ("env.network=false" in said) is not network, said  # the off setting blamed
    assert ("the gateway's side failed" in said) is network, said
