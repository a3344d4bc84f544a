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
