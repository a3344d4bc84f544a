"""Algorithm presets: what ``algo.name`` fills in. Imports no torch.

A preset is the paper's choice of the ``algo`` keys; a recipe or override that
sets a key wins over the preset. ``docs/algorithms.md`` is this table in prose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Algorithm:
    title: str
    paper: str
    keys: dict[str, Any]


def _keys(
    advantage: str, *, policy_loss: str = "ppo_clip", loss_agg: str = "token_mean", **more: object
) -> dict[str, Any]:
    """A preset's keys: its estimator, its policy loss and aggregation (PPO's clipped ratio
    over all tokens unless it says otherwise), and any others its paper sets."""
    return {"advantage": advantage, "policy_loss": policy_loss, "loss_agg": loss_agg, **more}


ALGORITHMS: dict[str, Algorithm] = {
    "grpo": Algorithm(
        "GRPO",
        "Shao et al. 2024, DeepSeekMath (arXiv:2402.03300)",
        _keys("grpo"),
    ),
    "dr_grpo": Algorithm(
        "Dr.GRPO",
        "Liu et al. 2025, Understanding R1-Zero-Like Training (arXiv:2503.20783)",
        _keys("dr_grpo", loss_agg="seq_mean_token_sum_norm"),
    ),
    "gspo": Algorithm(
        "GSPO",
        "Zheng et al. 2025, Group Sequence Policy Optimization (arXiv:2507.18071)",
        _keys(
            "grpo",
            policy_loss="gspo",
            loss_agg="seq_mean_token_mean",
            clip_eps_low=3e-4,
            clip_eps_high=4e-4,
        ),
    ),
    "dapo": Algorithm(
        "DAPO",
        "Yu et al. 2025, DAPO (arXiv:2503.14476)",
        _keys("grpo", clip_eps_low=0.2, clip_eps_high=0.28, dynamic_sampling=True),
        # plus overlong shaping: algo.overlong_buffer depends on rollout.max_tokens
    ),
    "rloo": Algorithm(
        "RLOO",
        "Ahmadian et al. 2024, Back to Basics (arXiv:2402.14740)",
        _keys("rloo"),
    ),
    "reinforce_pp": Algorithm(
        "REINFORCE++",
        "Hu 2025, REINFORCE++ (arXiv:2501.03262)",
        _keys("reinforce_pp"),
    ),
    "mt_grpo": Algorithm(
        "MT-GRPO (multi-turn, turn-level credit)",
        "Zeng et al. 2025, Reinforcing Multi-Turn Reasoning in LLM Agents via Turn-Level "
        "Credit Assignment (arXiv:2505.11821)",
        _keys("mt_grpo"),
    ),
    "ppo": Algorithm(
        "PPO with a critic",
        "Schulman et al. 2017 (arXiv:1707.06347); GAE: Schulman et al. 2015 (arXiv:1506.02438)",
        _keys("gae"),
    ),
    "distill": Algorithm(
        "On-policy distillation (per-token reverse KL to a teacher)",
        "Agarwal et al. 2024, GKD (arXiv:2306.13649); Lu and Thinking Machines Lab 2025, "
        "On-Policy Distillation; Qwen3 Technical Report (arXiv:2505.09388)",
        # GRPO's estimator for the task reward (weight 0 in a pure distillation recipe)
        _keys("grpo", teacher_coef=1.0),
    ),
}


def with_preset(algo: dict[str, Any]) -> dict[str, Any]:
    """The ``algo`` section with its preset's keys filled in where the section is silent.

    An unknown name is left for the schema to reject with the list of names.
    """
    preset = ALGORITHMS.get(algo.get("name", "grpo"))
    if preset is None:
        return algo
    return {**preset.keys, **algo}
