"""On-policy distillation: the teacher's term of each generated token's advantage.

Suffixes: B samples, T tokens.

The student samples; a frozen teacher scores each sampled token; the token's advantage
gains the negative reverse KL between them, estimated on the token itself (Agarwal et
al. 2024, GKD, arXiv:2306.13649, with lambda = 1: on-policy data only; Lu and Thinking
Machines Lab 2025, "On-Policy Distillation"; Qwen3 Technical Report, arXiv:2505.09388)::

    A_t = c * (log pi_teacher(y_t) - log pi_sampler(y_t)) + A_task_t

``A_task`` is the task reward's advantage from the configured estimator (GRPO under
``algo.name=distill``; 0 where the task reward's weight is 0), c is
``algo.teacher_coef``. The term is per token and not summed over the tokens after t:
the exact gradient of the sequence's reverse KL would also credit token t with the later
tokens' terms; Thinking Machines use a discount of 0, which leaves them out. It is not
normalised: the policy loss takes it like any advantage, importance-sampled and clipped
(``ppo_clip``), so minimising the loss lowers the reverse KL
``E_{y ~ pi}[log pi(y) - log pi_teacher(y)]`` of the sampled tokens.

``log pi_sampler`` is the engine's logprob of the token as it sampled it (the processed
logprob: at the sampling temperature): the distribution the token was drawn from, known
before the trainer's pass, and with ``rollout.max_staleness`` the older policy that
sampled it, which is what the estimator on that token measures.
"""

from __future__ import annotations

from torch import Tensor


def teacher_advantages(
    task_BT: Tensor, *, teacher_BT: Tensor, sampler_BT: Tensor, mask_BT: Tensor, coef: float
) -> Tensor:
    """``task_BT`` plus ``coef * (teacher - sampler)`` on the tokens of ``mask_BT`` (the
    generated tokens of the samples that train and have the teacher's logprobs); off the
    mask ``task_BT`` is kept as it is (0 off the loss mask)."""
    return task_BT + coef * (teacher_BT - sampler_BT) * mask_BT


def reverse_kl(*, teacher_BT: Tensor, sampler_BT: Tensor, mask_BT: Tensor) -> float:
    """Mean over the tokens of ``mask_BT`` of ``log pi_sampler - log pi_teacher``: the
    per-token reverse KL KL(pi_sampler || pi_teacher), estimated on the sampled tokens (0
    when the policy samples as the teacher would; NaN with no token)."""
    count = mask_BT.sum()
    if count == 0:
        return float("nan")
    return float(((sampler_BT - teacher_BT) * mask_BT).sum() / count)


TOP_PAD_LOGPROB = -1e4
"""The logprob of a padding entry of the teacher's top k (a position with fewer
entries): exp() of it is 0 in float32, so the entry weighs nothing (a -inf would make
0 * inf a NaN)."""


def top_k_forward_kl(
    student_logp_NV: Tensor, *, top_ids_NK: Tensor, top_logprobs_NK: Tensor
) -> Tensor:
    """Per position, the forward KL from the teacher's top k to the student,
    ``sum_k p_t(k) * (log p_t(k) - log pi(k))`` over the teacher's k most likely tokens
    (``algo.teacher_top_k``; GKD's divergence at beta = 0, Agarwal et al. 2024, restricted
    to the teacher's top k as verl's and slime's top-k distillation are). The teacher's
    mass outside its top k is left out, not renormalised: the gradient with respect to
    the student's logit j is ``M * pi(j) - p_t(j)`` (M: the top k's mass; p_t(j) = 0
    outside it), which raises the teacher's likely tokens however unlikely the student
    finds them, unlike the sampled-token term, whose gradient at a token the student
    gives probability p is scaled by 1 - p. ``student_logp_NV``: the student's
    log-softmax over the vocabulary; entries at ``TOP_PAD_LOGPROB`` weigh nothing."""
    student_NK = student_logp_NV.gather(-1, top_ids_NK)
    p_NK = top_logprobs_NK.exp()
    return (p_NK * (top_logprobs_NK - student_NK)).sum(-1)
