"""Algorithm presets: what ``algo.name`` fills in. Imports no torch.

A preset is the paper's choice of the ``algo`` keys; a recipe or override that
sets a key wins over the preset. ``docs/algorithms.md`` is this table in prose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Algorithm:
    title: str
    paper: str
    keys: dict[str, Any] = field(default_factory=dict)
    needs_critic: bool = False


ALGORITHMS: dict[str, Algorithm] = {
    "grpo": Algorithm(
        "GRPO",
        "Shao et al. 2024, DeepSeekMath (arXiv:2402.03300)",
        {"advantage": "grpo", "policy_loss": "ppo_clip", "loss_agg": "token_mean"},
    ),
    "dr_grpo": Algorithm(
        "Dr.GRPO",
        "Liu et al. 2025, Understanding R1-Zero-Like Training (arXiv:2503.20783)",
        {"advantage": "dr_grpo", "policy_loss": "ppo_clip", "loss_agg": "seq_mean_token_sum_norm"},
    ),
    "gspo": Algorithm(
        "GSPO",
        "Zheng et al. 2025, Group Sequence Policy Optimization (arXiv:2507.18071)",
        {
            "advantage": "grpo",
            "policy_loss": "gspo",
            "loss_agg": "seq_mean_token_mean",
            "clip_eps_low": 3e-4,
            "clip_eps_high": 4e-4,
        },
    ),
    "dapo": Algorithm(
        "DAPO",
        "Yu et al. 2025, DAPO (arXiv:2503.14476)",
        {
            "advantage": "grpo",
            "policy_loss": "ppo_clip",
            "loss_agg": "token_mean",
            "clip_eps_low": 0.2,
            "clip_eps_high": 0.28,
            "dynamic_sampling": True,
        },  # plus overlong shaping: algo.overlong_buffer depends on rollout.max_tokens
    ),
    "rloo": Algorithm(
        "RLOO",
        "Ahmadian et al. 2024, Back to Basics (arXiv:2402.14740)",
        {"advantage": "rloo", "policy_loss": "ppo_clip", "loss_agg": "token_mean"},
    ),
    "reinforce_pp": Algorithm(
        "REINFORCE++",
        "Hu 2025, REINFORCE++ (arXiv:2501.03262)",
        {"advantage": "reinforce_pp", "policy_loss": "ppo_clip", "loss_agg": "token_mean"},
    ),
    "mt_grpo": Algorithm(
        "MT-GRPO (multi-turn, turn-level credit)",
        "Zeng et al. 2025, Reinforcing Multi-Turn Reasoning in LLM Agents via Turn-Level "
        "Credit Assignment (arXiv:2505.11821)",
        {"advantage": "mt_grpo", "policy_loss": "ppo_clip", "loss_agg": "token_mean"},
    ),
    "ppo": Algorithm(
        "PPO with a critic",
        "Schulman et al. 2017 (arXiv:1707.06347); GAE: Schulman et al. 2015 (arXiv:1506.02438)",
        {"advantage": "gae", "policy_loss": "ppo_clip", "loss_agg": "token_mean"},
        needs_critic=True,
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
