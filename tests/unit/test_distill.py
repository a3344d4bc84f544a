"""On-policy distillation: the teacher's term of the advantage (figures worked out by hand),
the teacher asked per group (model tokens only; its failures are the samples'), the
records, and the config checks."""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from grouprl.algo.advantages import ADVANTAGES, AdvantageInputs
from grouprl.algo.aggregate import LossNorm
from grouprl.algo.distill import (
    TOP_PAD_LOGPROB,
    reverse_kl,
    teacher_advantages,
    top_k_forward_kl,
)
from grouprl.algo.objective import micro_batch_loss
from grouprl.config.algo_section import AlgoConfig
from grouprl.config.checks import check_config
from grouprl.config.errors import ConfigError
from grouprl.config.loader import load_config
from grouprl.driver.batch import build_batch, trained_samples
from grouprl.driver.loop import _teacher_term
from grouprl.rollout.reward import SampleFailed, fail, record_parts
from grouprl.rollout.teacher_scores import ask_teacher
from grouprl.types import (
    Completion,
    Trajectory,
    Turn,
    trajectory_from_dict,
    trajectory_to_dict,
)


def test_the_teacher_term_by_hand_on_a_2x3_batch():
    """A_t = c * (teacher - sampler) + A_task on the mask; the padded token keeps A_task (0)."""
    teacher = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -3.0, -9.0]])
    sampler = torch.tensor([[-1.5, -1.0, -0.5], [-0.2, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    task = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]])
    adv = teacher_advantages(task, teacher_BT=teacher, sampler_BT=sampler, mask_BT=mask, coef=0.5)
    # row 0: 0.5 * [0.5, -1, 0] + 1;  row 1: 0.5 * [0, -2, (masked)] - [1, 1, 0]
    assert adv.tolist() == [[1.25, 0.5, 1.0], [-1.0, -2.0, 0.0]]
    # reverse KL: mean of sampler - teacher over the 5 masked tokens: (-0.5 + 1 + 0 + 0 + 2) / 5
    assert reverse_kl(teacher_BT=teacher, sampler_BT=sampler, mask_BT=mask) == pytest.approx(0.5)
    assert math.isnan(reverse_kl(teacher_BT=teacher, sampler_BT=sampler, mask_BT=mask * 0))


def _traj(
    tokens: list[int], logprobs: list[float], *, teacher: list[float] | None = None, index: int = 0
) -> Trajectory:
    t = Trajectory(
        prompt_index=index,
        prompt_ids=[1, 2],
        turns=[Turn(Completion(tokens, logprobs, "stop"))],
        weight_version=0,
        teacher_logprobs=teacher,
    )
    return t


def test_grpo_plus_the_teacher_term_leaves_a_failed_sample_out():
    """A group of 3: rewards 1 and 0, and a sample whose reward failed (dropped). GRPO over
    the two that train gives +1 and -1; the teacher's term adds per token; the failed sample
    gets no advantage and counts in no statistic."""
    good = _traj([3, 4], [-0.5, -0.25], teacher=[-0.25, -1.0])
    bad = _traj([5], [-1.0], teacher=[-0.25])
    failed = _traj([6, 7], [-0.1, -0.1])
    record_parts(good, functions=1.0)
    record_parts(bad, functions=0.0)
    fail(failed, reason="reward_error", on_error="drop")
    trajectories = [good, bad, failed]
    batch = build_batch(trajectories, pad_id=0)
    valid_B = trained_samples(trajectories, group_size=3, min_group_size=2)
    batch.loss_mask_BT = batch.loss_mask_BT * valid_B[:, None]
    algo = AlgoConfig(name="distill")
    task = ADVANTAGES["grpo"](
        AdvantageInputs(
            scores_B=torch.tensor([t.reward for t in trajectories]),
            mask_BT=batch.loss_mask_BT,
            group_size=3,
            valid_B=valid_B,
        ),
        cfg=algo,
    )
    batch.advantages_BT = task.advantages_BT
    c = SimpleNamespace(cfg=SimpleNamespace(algo=algo))
    metrics: dict[str, float] = {}
    adv = _teacher_term(c, batch, trajectories, valid_B, metrics)  # type: ignore[arg-type]
    # prompt at columns 0-1; good: 1 + [0.25, -0.75]; bad: -1 + 0.75; failed: nothing
    expected = [[0, 0, 1.25, 0.25], [0, 0, -0.25, 0], [0, 0, 0, 0]]
    torch.testing.assert_close(adv, torch.tensor(expected), atol=1e-5, rtol=0)
    # sampler - teacher over the 3 tokens that train: (-0.25 + 0.75 - 0.75) / 3
    assert metrics["distill/reverse_kl"] == pytest.approx(-0.25 / 3)


def test_a_sample_that_trains_without_the_teacher_and_without_a_failure_stops_the_step():
    trajectories = [_traj([3], [-0.5], teacher=[-0.5]), _traj([4], [-0.5])]
    batch = build_batch(trajectories, pad_id=0)
    c = SimpleNamespace(cfg=SimpleNamespace(algo=AlgoConfig(name="distill")))
    with pytest.raises(RuntimeError, match="without the teacher's logprobs"):
        _teacher_term(c, batch, trajectories, torch.tensor([True, True]), {})  # type: ignore[arg-type]


class FakeTeacher:
    """log p(ids[t] | ids[:t]) = -ids[t] / 10 - t / 100: each value says its token and place."""

    def __init__(self, *, fail_on: int | None = None, short_on: int | None = None) -> None:
        self.calls: list[list[list[int]]] = []
        self.fail_on, self.short_on = fail_on, short_on

    def token_logprobs(self, ids: list[list[int]], starts: list[int]) -> list[list[float]]:
        self.calls.append(ids)
        if any(s[0] == self.fail_on for s in ids):
            raise TimeoutError("teacher replica 0 did not answer in 60 s")
        out = [
            [-s[t] / 10 - t / 100 for t in range(b, len(s))]
            for s, b in zip(ids, starts, strict=True)
        ]
        return [row[:-1] if s[0] == self.short_on else row for s, row in zip(ids, out, strict=True)]

    def top_logprobs(self, ids: list[list[int]], starts: list[int], k: int):
        """Each position's top k: ids 100 + t, ..., its logprobs -t / 100 - j."""
        given = self.token_logprobs(ids, starts)
        return [
            (
                g,
                [[100 + t + j for j in range(k)] for t in range(b, len(s))],
                [[-t / 100 - j for j in range(k)] for t in range(b, len(s))],
            )
            for g, s, b in zip(given, ids, starts, strict=True)
        ]

    def released(self):
        return nullcontext()

    def close(self) -> None:
        pass


def _two_turns() -> Trajectory:
    """prompt [1, 2] | turn 0 [3, 4] | tool reply [9, 9] | turn 1 [5]"""
    return Trajectory(
        prompt_index=0,
        prompt_ids=[1, 2],
        turns=[
            Turn(Completion([3, 4], [-0.1, -0.1], "stop"), observation_ids=[9, 9]),
            Turn(Completion([5], [-0.1], "stop")),
        ],
        weight_version=0,
    )


def test_the_teacher_scores_the_model_tokens_of_a_multi_turn_episode():
    """prompt [1, 2] | turn 0 [3, 4] | tool reply [9, 9] | turn 1 [5]: the teacher sees the
    whole sequence; the trajectory keeps the logprobs of 3, 4 and 5 only, and the batch
    places them where the engine's are."""
    traj = _two_turns()
    teacher = FakeTeacher()
    seconds = ask_teacher([traj], teacher=teacher, group_size=1, on_error="drop")
    assert seconds >= 0 and teacher.calls == [[[1, 2, 3, 4, 9, 9, 5]]]
    assert traj.teacher_logprobs == pytest.approx([-0.32, -0.43, -0.56])
    batch = build_batch([traj], pad_id=0)
    assert batch.teacher_logprobs_BT is not None
    row = batch.teacher_logprobs_BT[0].tolist()
    assert row == pytest.approx([0, 0, -0.32, -0.43, 0, 0, -0.56])
    assert batch.loss_mask_BT[0].tolist() == [0, 0, 1, 1, 0, 0, 1]


def test_the_teachers_top_k_of_a_multi_turn_episode_sit_at_the_model_tokens():
    """As above with algo.teacher_top_k=2: the top k of positions 2, 3 and 6 (the model's
    tokens) are kept, and the batch places them there, padding elsewhere."""
    traj = _two_turns()
    plain = _traj([3], [-0.5])
    ask_teacher([traj], teacher=FakeTeacher(), group_size=1, on_error="drop", top_k=2)
    assert traj.teacher_logprobs == pytest.approx([-0.32, -0.43, -0.56])
    assert traj.teacher_top_ids == [[102, 103], [103, 104], [106, 107]]
    assert traj.teacher_top_logprobs is not None
    flat = [v for row in traj.teacher_top_logprobs for v in row]
    assert flat == pytest.approx([-0.02, -1.02, -0.03, -1.03, -0.06, -1.06])
    record = json.loads(json.dumps(trajectory_to_dict(traj), allow_nan=False))
    assert trajectory_from_dict(record) == traj
    batch = build_batch([traj, plain], pad_id=0)
    assert batch.teacher_top is not None
    ids_BTK, lp_BTK = batch.teacher_top
    assert ids_BTK.shape == lp_BTK.shape == (2, 7, 2)
    assert ids_BTK[0, :, 0].tolist() == [0, 0, 102, 103, 0, 0, 106]
    assert lp_BTK[0, 6].tolist() == pytest.approx([-0.06, -1.06])
    pad = lp_BTK[0, [0, 1, 4, 5]].flatten().tolist() + lp_BTK[1].flatten().tolist()
    assert set(pad) == {TOP_PAD_LOGPROB}  # the plain sample has none: all padding
    assert build_batch([plain], pad_id=0).teacher_top is None


def test_the_top_k_forward_kl_and_its_gradient_by_hand():
    """A 4-token vocabulary, the teacher's top 2 = tokens 2 (p 0.6) and 0 (p 0.3), a padding
    entry after them: KL = sum p_t (log p_t - log pi); d/dlogit_j = M * pi_j - p_t(j) with
    M = 0.9, and the padding weighs nothing."""
    logits = torch.tensor([[1.0, 2.0, 0.0, -1.0]], requires_grad=True)
    pi = logits.softmax(-1)
    top_ids = torch.tensor([[2, 0, 3]])
    top_lps = torch.tensor([[math.log(0.6), math.log(0.3), TOP_PAD_LOGPROB]])
    kl = top_k_forward_kl(logits.log_softmax(-1), top_ids_NK=top_ids, top_logprobs_NK=top_lps)
    log_pi = pi.log()[0].tolist()
    want = 0.6 * (math.log(0.6) - log_pi[2]) + 0.3 * (math.log(0.3) - log_pi[0])
    assert kl.item() == pytest.approx(want, abs=1e-6)
    kl.sum().backward()
    p_t = torch.tensor([0.3, 0.0, 0.6, 0.0])
    assert logits.grad is not None
    torch.testing.assert_close(logits.grad[0], 0.9 * pi[0].detach() - p_t, rtol=1e-5, atol=1e-6)
    # at the student's p = 0.998 on a token the teacher gives nothing, the sampled-token
    # term's push is (1 - p) = 0.002 per unit of advantage; this one's is about 1
    sure = torch.tensor([[8.0, 0.0, -2.0, -2.0]], requires_grad=True)
    one = torch.tensor([[1]])
    certain = torch.zeros(1, 1)  # the teacher: token 1 with p = 1
    top_k_forward_kl(sure.log_softmax(-1), top_ids_NK=one, top_logprobs_NK=certain).backward()
    assert sure.grad is not None and sure.grad[0, 0].item() > 0.99  # pushes token 0 down


def test_the_loss_adds_the_weighted_forward_kl_without_the_ratio():
    """micro_batch_loss with forward_kl_BT: the loss grows by coef x its token mean, and
    distill/forward_kl is that mean; without it the loss is as before."""
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    logprobs = torch.full((2, 3), -1.0)
    fkl = torch.tensor([[5.0, 0.3, 0.6], [7.0, 0.9, 8.0]])
    args = dict(
        logprobs_BT=logprobs,
        old_logprobs_BT=logprobs,
        ref_logprobs_BT=None,
        engine_logprobs_BT=logprobs,
        advantages_BT=torch.zeros(2, 3),
        loss_mask_BT=mask,
        norm=LossNorm(tokens=3.0, sequences=2.0),
        cfg=AlgoConfig(name="distill"),
        beta=0.0,
    )
    base, _ = micro_batch_loss(**args)  # type: ignore[arg-type]
    loss, metrics = micro_batch_loss(**args, forward_kl_BT=fkl, teacher_coef=2.0)  # type: ignore[arg-type]
    assert metrics["distill/forward_kl"].item() == pytest.approx(0.6)  # (0.3 + 0.6 + 0.9) / 3
    assert (loss - base).item() == pytest.approx(1.2)


def test_a_failed_teacher_call_fails_its_group_and_no_other():
    """Groups of 2: the teacher raises on the second group's call; both its samples fail as
    reward errors (dropped, with the teacher's error), the first group's get logprobs. A
    sample that failed before is not sent; one given a wrong count fails alone."""
    trajectories = [_traj([3], [-0.1], index=i) for i in range(6)]
    for t, first in zip(trajectories, [1, 1, 7, 7, 1, 8], strict=True):
        t.prompt_ids = [first, 2]
    fail(trajectories[4], reason="env_error", on_error="drop")
    teacher = FakeTeacher(fail_on=7, short_on=8)
    ask_teacher(trajectories, teacher=teacher, group_size=2, on_error="drop")
    assert [len(ids) for ids in teacher.calls] == [2, 2, 1]  # sample 4 was not sent
    assert [t.teacher_logprobs is not None for t in trajectories] == [1, 1, 0, 0, 0, 0]
    assert [t.trains for t in trajectories] == [True, True, False, False, False, False]
    for t in trajectories[2:4]:
        assert t.reward_parts.failure == "reward_error"
        assert "the teacher failed: TimeoutError: teacher replica 0" in t.reward_parts.error
    assert "0 logprobs for 1 tokens" in trajectories[5].reward_parts.error
    assert trajectories[4].reward_parts.failure == "env_error"


def test_a_non_finite_teacher_logprob_fails_the_sample_and_raise_stops_the_run():
    class Infinite(FakeTeacher):
        def token_logprobs(self, ids, starts):
            return [[-math.inf] * (len(s) - b) for s, b in zip(ids, starts, strict=True)]

    traj = _traj([3], [-0.1])
    ask_teacher([traj], teacher=Infinite(), group_size=1, on_error="zero")
    assert traj.reward_parts.failure == "reward_error" and traj.trains  # zero: trains as 0
    assert traj.teacher_logprobs is None and "non-finite" in traj.reward_parts.error
    with pytest.raises(SampleFailed, match=r"reward\.on_error=raise"):
        ask_teacher([_traj([3], [-0.1])], teacher=Infinite(), group_size=1, on_error="raise")


def test_records_keep_the_teacher_logprobs_and_records_without_them_are_unchanged():
    with_teacher = _traj([3, 4], [-0.5, -0.25], teacher=[-0.25, -1e-9])
    record = json.loads(json.dumps(trajectory_to_dict(with_teacher), allow_nan=False))
    assert trajectory_from_dict(record) == with_teacher
    plain = trajectory_to_dict(_traj([3], [-0.5]))
    assert "teacher_logprobs" not in plain
    assert trajectory_from_dict(plain).teacher_logprobs is None


def test_distill_is_grpo_with_a_teacher_term_and_combines_with_a_task_reward():
    cfg = load_config("tiny-arith", ["algo.name=distill", "teacher.path=builtin:tiny-arith"])
    check_config(cfg)
    assert (cfg.algo.advantage, cfg.algo.policy_loss, cfg.algo.teacher_coef) == (
        "grpo",
        "ppo_clip",
        1.0,
    )
    mixed = load_config("tiny-arith", ["algo.teacher_coef=0.3", "teacher.path=builtin:tiny-arith"])
    check_config(mixed)
    assert (mixed.algo.name, mixed.algo.teacher_coef) == ("grpo", 0.3)
    assert load_config("tiny-arith", []).algo.teacher_coef == 0.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo.name=distill"], r"algo\.name=distill learns from a teacher model, and the "),
        (["algo.teacher_coef=0.5"], r"algo\.teacher_coef=0\.5 weights a teacher term, and the"),
        (
            ["algo.name=distill", "algo.teacher_coef=0"],
            r"algo\.name=distill with algo\.teacher_coef=0 has no teacher term",
        ),
        (
            ["algo.name=distill", "teacher.path=builtin:tiny-arith", "algo.dynamic_sampling=true"],
            r"algo\.dynamic_sampling=true drops groups whose rewards are all equal",
        ),
        (
            ["algo.name=distill", "teacher.path=builtin:tiny-arith", "algo.policy_loss=gspo"],
            r"algo\.teacher_coef=1(\.0)? gives each token its own",
        ),
        (
            ["algo.teacher_top_k=8", "teacher.path=builtin:tiny-arith"],
            r"algo\.teacher_top_k=8 chooses the teacher term's divergence, but algo\.teacher_"
            r"coef=0",
        ),
    ],
)
def test_a_teacher_term_without_what_it_needs_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_config(load_config("tiny-arith", overrides))
