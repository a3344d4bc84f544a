"""The machines a plan describes: the ones the recipe asks for, or (``grouprl plan
--here``) this one.

A recipe asks for GPUs with ``train.device=cuda``, ``cluster.gpus_per_node`` > 0 or
``cluster.gpu`` (the GPU the memory plan checks against), for the CPU with
``train.device=cpu``; with none of these, ``train.device=auto`` leaves it to the machine
the run lands on. ``--here`` resolves ``auto`` the way the run would here: a GPU when
nvidia-smi is on the PATH (the trainer asks torch; the plan imports no torch).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from grouprl.config.schema import RunConfig


@dataclass(frozen=True)
class Target:
    gpu: bool | None  # None: train.device=auto and nothing in the recipe says which
    device: str  # cuda, cpu or auto
    why: str  # how it follows from the recipe (or this machine)


def plan_target(cfg: RunConfig, *, here: bool = False) -> Target:
    """What ``grouprl plan`` plans for; ``here``: this machine."""
    return _here(cfg) if here else _recipe(cfg)


def _recipe(cfg: RunConfig) -> Target:
    device, c = cfg.train.device, cfg.cluster
    machines = "the recipe's machines (grouprl plan --here: this one)"
    if device == "cpu":
        return Target(False, "cpu", f"train.device=cpu; planned for {machines}")
    if device == "cuda":
        return Target(True, "cuda", f"train.device=cuda; planned for {machines}")
    said = [f"cluster.gpus_per_node={c.gpus_per_node}"] if c.gpus_per_node else []
    said += [f"cluster.gpu={c.gpu}"] if c.gpu is not None else []
    if said:
        return Target(
            True, "cuda", f"train.device=auto with {' and '.join(said)}; planned for {machines}"
        )
    return Target(
        None,
        "auto",
        "train.device=auto: cuda where the run finds a GPU, else cpu (grouprl plan --here "
        "resolves it on this machine)",
    )


def _here(cfg: RunConfig) -> Target:
    device = cfg.train.device
    found = shutil.which("nvidia-smi") is not None
    seen = "nvidia-smi found" if found else "no nvidia-smi found"
    if device == "cpu":
        return Target(False, "cpu", "train.device=cpu; planned for this machine")
    if device == "cuda" and not found:
        return Target(
            False,
            "cpu",
            f"train.device=cuda, but this machine has no GPU ({seen}): a run here fails; "
            "planned for what this machine has",
        )
    if device == "cuda":
        return Target(True, "cuda", f"train.device=cuda; this machine ({seen})")
    return Target(found, "cuda" if found else "cpu", f"train.device=auto on this machine: {seen}")
