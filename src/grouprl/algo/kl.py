"""Per-token KL estimators between the policy and a frozen reference.

Signature: ``fn(logprobs_BT, ref_logprobs_BT) -> kl_BT`` with samples drawn
from the policy (Schulman, "Approximating KL Divergence", 2020). With
``r = ref / policy`` probability ratio of the sampled token:

- k1 = -log r              (unbiased, high variance, can be negative)
- k2 = (log r)^2 / 2       (biased, low variance)
- k3 = r - 1 - log r       (unbiased, non-negative; GRPO's choice)

k3 is bounded as verl's ``low_var_kl`` does: log r is clamped to [-20, 20] before
``exp`` and the estimate to at most 10 (``K3_LOG_RATIO_BOUND``, ``K3_MAX``; k3 > 10
where the reference gives the sampled token about 13.6 times the policy's probability,
or the policy 6e4 times the reference's). A clamped token passes no KL gradient. k1 and
k2 are not bounded (their gradients are linear in log r). TRL bounds none of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from grouprl.algo.registry import Registry

KL_ESTIMATORS: Registry = Registry("KL estimator")

K3_LOG_RATIO_BOUND = 20.0  # |log(ref / policy)| at most before exp (verl's low_var_kl)
K3_MAX = 10.0  # the k3 estimate at most (verl's low_var_kl)


@KL_ESTIMATORS.register("k1")
def k1(logprobs_BT: Tensor, ref_logprobs_BT: Tensor) -> Tensor:
    return logprobs_BT - ref_logprobs_BT


@KL_ESTIMATORS.register("k2")
def k2(logprobs_BT: Tensor, ref_logprobs_BT: Tensor) -> Tensor:
    return 0.5 * (ref_logprobs_BT - logprobs_BT) ** 2


@KL_ESTIMATORS.register("k3")
def k3(logprobs_BT: Tensor, ref_logprobs_BT: Tensor) -> Tensor:
    log_ratio_BT = (ref_logprobs_BT - logprobs_BT).clamp(-K3_LOG_RATIO_BOUND, K3_LOG_RATIO_BOUND)
    return (log_ratio_BT.exp() - 1 - log_ratio_BT).clamp(max=K3_MAX)


def adaptive_kl_coef(
    beta: float, *, observed_kl: float, target: float, horizon: int, n_samples: int
) -> float:
    """Adaptive KL controller (Ziegler et al. 2019, "Fine-Tuning Language Models from
    Human Preferences"): the coefficient beta grows when the KL is above target, shrinks
    when below, by at most 20% per ``horizon`` samples:

        error = clip(observed / target - 1, -0.2, 0.2)
        beta' = beta * (1 + error * n_samples / horizon)
    """
    error = min(max(observed_kl / target - 1.0, -0.2), 0.2)
    return beta * (1.0 + error * n_samples / horizon)


@dataclass
class KLController:
    """The KL coefficient of a run: ``algo.beta``, moved toward ``algo.kl_target`` by
    ``adaptive_kl_coef`` after each step when a target is set. A checkpoint saves it whole
    (``state_dict``; its key, like the metric's, stays ``kl_coef``)."""

    beta: float
    target: float | None = None
    horizon: int = 10_000

    def update(self, observed_kl: float | None, *, n_samples: int) -> None:
        """After a step whose mean KL was ``observed_kl`` (None: not measured)."""
        if self.target is not None and observed_kl is not None:
            self.beta = adaptive_kl_coef(
                self.beta,
                observed_kl=observed_kl,
                target=self.target,
                horizon=self.horizon,
                n_samples=n_samples,
            )

    def state_dict(self) -> dict[str, float]:
        return {"kl_coef": self.beta}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.beta = state.get("kl_coef", self.beta)


def kl_rewards(
    logprobs_BT: Tensor, ref_logprobs_BT: Tensor, mask_BT: Tensor, *, beta: float, estimator: str
) -> tuple[Tensor, Tensor]:
    """KL in the reward (``algo.kl_in=reward``; PPO, REINFORCE++): each generated token's
    reward ``-beta * KL_t``, and the per-token KL itself (for the metric)."""
    kl_BT = KL_ESTIMATORS[estimator](logprobs_BT, ref_logprobs_BT)
    return -beta * kl_BT * mask_BT, kl_BT
