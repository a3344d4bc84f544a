"""Entropy control: the bonus and its adaptive coefficient, training on high-entropy
tokens only, and the reward ceiling that the entropy predicts. Suffixes: B samples,
T tokens. (Clip-Cov and KL-Cov, which steer entropy through the policy loss, are
policy losses: ``algo/losses.py``.)

- The bonus (``algo.entropy_coef`` = c): the loss gains ``- c * agg(H_BT)``, the policy's
  entropy at each generated token aggregated like the loss (``algo.loss_agg``), with its
  gradient. verl's ``entropy_coeff`` and OpenRLHF's; both default to 0, as here.
- The adaptive coefficient (``algo.entropy_target``; Skywork-OR1, He et al. 2025,
  arXiv:2505.22312, section 4): after each step whose entropy was H,

      alpha <- max(alpha + delta, 0) if H < target else max(alpha - delta, 0)
      c      = alpha if H < target else 0

  (``algo.entropy_coef`` is alpha's start, ``algo.entropy_coef_delta`` delta): the bonus
  acts only while the entropy is below the target. The entropy is the last step's,
  measured by its update; Skywork-OR1 measures the step's own, so ours lags one step.
- High-entropy tokens (``algo.top_entropy_quantile`` = rho; Wang et al. 2025, "Beyond
  the 80/20 Rule", arXiv:2506.01939; TRL's ``top_entropy_quantile``): the policy term
  keeps only the ceil(rho * n) tokens of highest entropy among a micro-batch's n loss
  tokens (ties at the threshold kept); the KL term keeps every token, as in TRL.
- The ceiling (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for
  Reasoning Language Models", arXiv:2505.22617): without entropy intervention, reward
  and entropy follow R = -a exp(H) + b, so at H = 0 the reward can reach b - a at most.
  ``ExplorationWatch`` fits it to the run's steps and says when the run has covered
  ``EXHAUSTED`` of the way from its first reward to that ceiling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

EXHAUSTED = 0.9  # the share of the way to the fitted ceiling that warns
MIN_POINTS = 10  # steps before a fit is trusted


def high_entropy_mask(entropy_BT: Tensor, mask_BT: Tensor, *, keep: float) -> Tensor:
    """Of ``mask_BT``'s tokens, the ceil(``keep`` * n) of highest entropy (bool, B x T);
    every masked token when ``keep`` is 1."""
    mask_BT = mask_BT.bool()
    values_N = entropy_BT.detach()[mask_BT]
    n = values_N.numel()
    if keep >= 1.0 or n == 0:
        return mask_BT
    kept = max(math.ceil(keep * n - 1e-9), 1)  # 0.7 * 10 is 7.000000000000001: keep 7
    threshold = values_N.float().kthvalue(n - kept + 1).values
    return mask_BT & (entropy_BT.detach() >= threshold)


@dataclass
class EntropyController:
    """The entropy bonus's coefficient: ``algo.entropy_coef``, moved by Skywork-OR1's rule
    (module docstring) when ``algo.entropy_target`` is set. A checkpoint saves it
    (``state_dict``, beside the KL controller's)."""

    alpha: float
    target: float | None = None
    delta: float = 0.005
    below: bool = True  # the last measured entropy was under the target

    @property
    def coef(self) -> float:
        """The coefficient the next update uses."""
        return self.alpha if self.target is None or self.below else 0.0

    def update(self, entropy: float | None) -> None:
        """After a step whose mean token entropy was ``entropy`` (None: not measured)."""
        if self.target is None or entropy is None:
            return
        self.below = entropy < self.target
        self.alpha = max(self.alpha + (self.delta if self.below else -self.delta), 0.0)

    def state_dict(self) -> dict[str, float]:
        return {"entropy_coef": self.alpha, "entropy_below": float(self.below)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.alpha = state.get("entropy_coef", self.alpha)
        self.below = bool(state.get("entropy_below", self.below))


def fit_ceiling(entropies: list[float], rewards: list[float]) -> tuple[float, float] | None:
    """Least squares of R = -a exp(H) + b over the points: (a, b), or None when the
    entropies do not vary (nothing to fit)."""
    xs = [math.exp(h) for h in entropies]
    n = len(xs)
    mean_x, mean_r = sum(xs) / n, sum(rewards) / n
    var_x = sum((x - mean_x) ** 2 for x in xs)
    if var_x <= 1e-12:
        return None
    slope = sum((x - mean_x) * (r - mean_r) for x, r in zip(xs, rewards, strict=True)) / var_x
    return -slope, mean_r - slope * mean_x


@dataclass
class ExplorationWatch:
    """Each step's (entropy, mean reward); once ``MIN_POINTS`` are in, the fitted
    ceiling b - a (``entropy_reward_ceiling``) and, once, a warning when the last reward
    has covered ``EXHAUSTED`` of the way from the first to it."""

    entropies: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    warned: bool = False

    def add(self, entropy: float | None, reward: float | None) -> tuple[float | None, str | None]:
        """Records a step; returns the fitted ceiling (None: no fit yet) and the warning
        to give (None: none)."""
        if entropy is None or reward is None:
            return None, None
        self.entropies.append(entropy)
        self.rewards.append(reward)
        fit = fit_ceiling(self.entropies, self.rewards) if len(self.rewards) >= MIN_POINTS else None
        if fit is None or fit[0] <= 0:  # reward does not fall as entropy rises: no ceiling
            return None, None
        a, b = fit
        ceiling, first, last = b - a, self.rewards[0], self.rewards[-1]
        if self.warned or ceiling <= first or (last - first) < EXHAUSTED * (ceiling - first):
            return ceiling, None
        self.warned = True
        return ceiling, (
            f"exploration is nearly exhausted: the reward ({last:.3f}) has covered "
            f"{(last - first) / (ceiling - first):.0%} of the way from its first step's "
            f"({first:.3f}) to {ceiling:.3f}, the ceiling that R = -a exp(H) + b fitted to "
            f"{len(self.rewards)} steps predicts at entropy 0 (Cui et al. 2025). More steps "
            "will gain little unless entropy is kept up: algo.entropy_target, "
            "algo.policy_loss=clip_cov or kl_cov, algo.clip_eps_high (docs/entropy.md)."
        )

    def state_dict(self) -> dict[str, Any]:
        return {"entropies": self.entropies, "rewards": self.rewards, "warned": self.warned}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.entropies = [float(h) for h in state["entropies"]]
        self.rewards = [float(r) for r in state["rewards"]]
        self.warned = bool(state["warned"])
