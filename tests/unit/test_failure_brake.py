"""A run that cannot train stops, naming why (issue 37): the failure brake's sliding
window (reward functions, an environment's or agent's episodes), the streak of steps
that train no sample, and summary.json's record of the stop. The runs that stop this
way are in tests/integration/test_stops_without_progress.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from grouprl.algo.kl import KLController
from grouprl.config.loader import load_config
from grouprl.driver.components import Components, RunState
from grouprl.driver.idle import idle_streak
from grouprl.driver.loop import train_step
from grouprl.driver.run import _stop_recorded
from grouprl.driver.source import RolloutSource
from grouprl.envs.single_turn import SingleTurnEnv
from grouprl.metrics.telemetry import Hardware, ModelShape
from grouprl.rewards.failures import CannotTrain, FailureBrake, RewardFailure
from grouprl.rollout.episode_brake import with_episode_brake
from grouprl.rollout.reward import fail
from grouprl.types import Completion, Trajectory, Turn


def _failure(error_type: str = "ConnectionError", sample: int = 0) -> RewardFailure:
    return RewardFailure("judge", sample, 10 + sample, error_type, "Connection refused")


def test_a_success_then_n_failures_trips_the_window_whenever_in_the_run():
    brake = FailureBrake(3)
    for _ in range(50):  # a long healthy stretch first: no "first calls" rule
        brake.record("judge", None)
    brake.record("judge", _failure(sample=1))
    brake.record("judge", _failure(sample=2))
    with pytest.raises(CannotTrain) as err:
        brake.record("judge", _failure(sample=3))
    assert err.value.kind == "reward_failures" and err.value.user_error
    message = str(err.value)
    assert "reward function 'judge' failed on its last 3 calls in a row" in message
    assert "the last on sample 3 (row 13): ConnectionError: Connection refused" in message
    assert "reward.failure_brake" in message and "null: never stop" in message


def test_n_minus_1_failures_then_a_success_restart_the_count():
    brake = FailureBrake(3)
    for _ in range(4):
        brake.record("judge", _failure())
        brake.record("judge", _failure())
        brake.record("judge", None)
    assert brake.failing("judge") == 0
    brake.record("judge", _failure())
    brake.record("other", _failure())  # each source has its own window
    brake.record("judge", _failure())
    assert (brake.failing("judge"), brake.failing("other")) == (2, 1)


def test_mixed_error_types_and_kinds_trip_it_too():
    brake = FailureBrake(3)
    brake.record("judge", _failure("ConnectionError"))
    brake.record("judge", RewardFailure("judge", 1, 2, "TimeoutError", "killed", kind="timeout"))
    with pytest.raises(CannotTrain, match=r"the last on sample 2 .*WorkerCrash"):
        brake.record("judge", RewardFailure("judge", 2, 3, "WorkerCrash", "died", kind="crash"))


def test_null_never_stops():
    brake = FailureBrake(None)
    for i in range(100):
        brake.record("judge", _failure(sample=i))
    assert brake.failing("judge") == 100


def _episode(prompt_index: int, *, error: str | None = None) -> Trajectory:
    completion = Completion(token_ids=[5, 5], logprobs=[-0.5] * 2, finish_reason="stop", text="x")
    traj = Trajectory(
        prompt_index=prompt_index, prompt_ids=[1, 2], turns=[Turn(completion)], weight_version=0
    )
    traj.stop_reason = "answered"
    if error is not None:
        traj.stop_reason = "env_error"
        fail(traj, reason="env_error", message=error)
    return traj


def _rollout(outcomes: list[list[str | None]]):
    """A rollout function whose k-th call returns episodes failing as ``outcomes[k]``."""
    calls = iter(outcomes)

    def rollout(prompt_set, settings):
        episodes = [_episode(i, error=e) for i, e in enumerate(next(calls))]
        return episodes, None

    return rollout


def test_an_environment_failing_its_last_n_episodes_stops_the_run_with_its_error():
    cfg = load_config("tiny-arith", ["env.name=my_env.py:Game", "env.failure_brake=4"])
    outcomes = [[None, None], [None, "boom"], ["boom", "boom"], ["ValueError: down", None]]
    rollout = with_episode_brake(cfg, _rollout(outcomes), env=object())
    for _ in range(3):  # the success in round 2 restarted the count: 3 in a row so far
        rollout(None, None)
    with pytest.raises(CannotTrain) as err:
        rollout(None, None)
    assert err.value.kind == "env_failures"
    message = str(err.value)
    assert "environment 'my_env.py:Game' failed its last 4 episodes in a row" in message
    assert "the last, sample 0 (prompt index 0): ValueError: down" in message
    assert "env.failure_brake" in message and "repair the environment" in message


def test_an_agent_is_named_as_the_agent_and_single_turn_prompting_is_never_counted():
    cfg = load_config("tiny-arith", ["env.agent=agent.py:solve", "env.failure_brake=2"])
    agent = with_episode_brake(cfg, _rollout([["TimeoutError: past 600 s"] * 2]), env=object())
    with pytest.raises(CannotTrain, match=r"agent 'agent.py:solve' failed its last 2") as err:
        agent(None, None)
    assert err.value.kind == "agent_failures"
    single = _rollout([])
    plain = load_config("tiny-arith", [])
    assert with_episode_brake(plain, single, env=SingleTurnEnv.from_data(plain.data)) is single
    off = load_config("tiny-arith", ["env.name=my_env.py:Game", "env.failure_brake=null"])
    assert with_episode_brake(off, single, env=object()) is single


def _components(max_idle_steps: int | None) -> Components:
    cfg = load_config(
        "tiny-arith",
        [
            "rollout.n=2",
            "data.batch_size=2",
            f"trainer.max_idle_steps={'null' if max_idle_steps is None else max_idle_steps}",
        ],
    )
    return Components(
        cfg=cfg,
        tokenizer=SimpleNamespace(pad_token_id=0),
        group=SimpleNamespace(world_size=1),
        policy=SimpleNamespace(call=lambda *a, **k: {}),
        reference_logprobs=None,
        engine=None,
        train_set=None,
        eval_set=None,
        score=None,
        rollout=None,
        mini_batch_size=4,
        total_steps=10,
        state=RunState(sampler=None, kl=KLController(beta=0.0)),
        checkpoint_files={},
        hardware=Hardware(ModelShape(1, 1, 1, 1), peak_flops=1.0, peak_source="test"),
        rollouts=RolloutSource(None, None, batch_size=2),
    )


def _batch(failed: int) -> list[Trajectory]:
    """Two groups of two; the first ``failed`` samples' reward function failed."""
    error = "reward function 'judge' failed on sample 0 (row 3): ConnectionError: refused"
    episodes = [_episode(i // 2) for i in range(4)]
    for traj in episodes[:failed]:
        fail(traj, reason="reward_error", message=error)
    return episodes


def test_k_steps_in_a_row_that_train_no_sample_stop_the_run_naming_the_streak_and_why():
    c = _components(max_idle_steps=3)
    train_step(c, _batch(failed=4), step=1)
    train_step(c, _batch(failed=4), step=2)
    train_step(c, _batch(failed=2), step=3)  # group 1 trains: the streak starts over
    assert c.state.idle_steps == 0
    train_step(c, _batch(failed=3), step=4)  # group 1 left with one sample: dropped whole
    train_step(c, _batch(failed=4), step=5)
    assert c.state.state_dict(sampler={})["idle_steps"] == 2  # a checkpoint keeps it
    with pytest.raises(CannotTrain) as err:
        train_step(c, _batch(failed=4), step=6)
    assert err.value.kind == "idle_steps"
    message = str(err.value)
    assert "steps 4-6 trained no sample, 3 in a row (trainer.max_idle_steps=3)" in message
    assert "4 failed samples left out of training (4 reward_error)" in message
    assert "sample 0 (prompt index 0): reward_error: reward function 'judge'" in message
    assert "ConnectionError: refused" in message and "raise trainer.max_idle_steps" in message


def test_the_streak_survives_a_resume_and_null_never_stops():
    state = RunState(sampler=SimpleNamespace(load_state_dict=lambda s: None), kl=KLController(0))
    state.load_state_dict({"step": 4, "weight_version": 4, "sampler": {}, "algo": {}})
    assert state.idle_steps == 0  # a checkpoint from before the streak was kept
    state.load_state_dict(
        {"step": 4, "weight_version": 4, "sampler": {}, "algo": {}, "idle_steps": 2}
    )
    with pytest.raises(CannotTrain, match="steps 3-5 trained no sample"):
        idle_streak(state.idle_steps, trained=False, trajectories=_batch(4), step=5, limit=3)
    c = _components(max_idle_steps=None)
    for step in range(1, 8):
        train_step(c, _batch(failed=4), step=step)
    assert c.state.idle_steps == 7


def test_a_loop_ended_by_an_error_leaves_summary_json_saying_why(tmp_path):
    c = SimpleNamespace(state=SimpleNamespace(step=3), total_steps=10)
    with pytest.raises(CannotTrain), _stop_recorded(c, tmp_path):
        raise CannotTrain("steps 1-3 trained no sample ...", kind="idle_steps")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["finished"] is False and summary["step"] == 3
    assert summary["stopped"] == {
        "kind": "idle_steps",
        "step": 3,
        "reason": "steps 1-3 trained no sample ...",
    }
    with pytest.raises(KeyError), _stop_recorded(c, tmp_path):
        raise KeyError("x")
    assert json.loads((tmp_path / "summary.json").read_text())["stopped"]["kind"] == "KeyError"


def test_the_command_line_prints_the_stop_without_a_traceback_and_exits_2(capsys):
    import typer

    from grouprl.cli.app import user_errors

    with pytest.raises(typer.Exit) as exited, user_errors():
        raise CannotTrain("reward function 'judge' failed on its last 16 calls", kind="x")
    assert exited.value.exit_code == 2
    err = capsys.readouterr().err
    assert "error: reward function 'judge' failed" in err and "Traceback" not in err


def test_a_run_stopped_before_its_first_step_leaves_the_directory_free_for_the_rerun(tmp_path):
    from grouprl.config.errors import ConfigError
    from grouprl.runtime import check_new_run

    cfg = load_config("tiny-arith", [f"trainer.run_dir={tmp_path}"])
    c = SimpleNamespace(state=SimpleNamespace(step=0), total_steps=10)
    with pytest.raises(CannotTrain), _stop_recorded(c, tmp_path):
        raise CannotTrain("reward function 'judge' failed on its last 16 calls in a row")
    check_new_run(cfg)  # the fixed grader's run may start here
    c.state.step = 1  # one step trained: that is a run, resumed or moved, not overwritten
    with pytest.raises(CannotTrain), _stop_recorded(c, tmp_path):
        raise CannotTrain("reward function 'judge' failed on its last 16 calls in a row")
    with pytest.raises(ConfigError, match="already holds a run"):
        check_new_run(cfg)
