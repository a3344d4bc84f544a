"""``grouprl plan --json``: the plan as one JSON object, for scripts (no torch). Its keys:

    recipe, name, ok       ok: no check failed
    problems               every failing check's message (the ones `grouprl plan` prints)
    target                 device, gpu (true / false / null: auto), why
    derived                the derived quantities (``config.checks.Derived``); null when
                           the config's own checks fail
    memory                 checked: false with why; or the GPU, its bytes, fits, each
                           phase's and the peak's bytes, and every term of the training
                           (and generation) GPU: what, bytes, how
    sections               the tables' rows by section: quantity, value, how

Sizes are in bytes. The exit code says the same as ``ok`` (0, or 2 on a failing check).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from grouprl.config.checks import Derived
from grouprl.config.schema import RunConfig
from grouprl.plan.check import Checked
from grouprl.plan.gpu_memory import plan_for_run
from grouprl.plan.memory import SizeUnknown
from grouprl.plan.render import plan_sections
from grouprl.plan.target import plan_target


def plan_json(
    cfg: RunConfig, checked: Checked, *, here: bool = False, reward_styles: Sequence[str] = ()
) -> dict[str, Any]:
    """The plan of ``cfg`` and its checks' outcome, as JSON-ready values
    (``reward_styles``: as for ``plan_sections``)."""
    target = plan_target(cfg, here=here)
    d = checked.derived
    sections = None
    if d is not None:
        sections = {
            title: [{"quantity": q.strip(), "value": v, "how": how} for q, v, how in rows]
            for title, rows in plan_sections(cfg, d, here=here, reward_styles=reward_styles)
        }
    return {
        "name": cfg.name,
        "ok": not checked.problems,
        "problems": checked.problems,
        "target": {"device": target.device, "gpu": target.gpu, "why": target.why},
        "derived": asdict(d) if d is not None else None,
        "memory": memory_json(cfg, d) if d is not None else None,
        "sections": sections,
    }


def memory_json(cfg: RunConfig, derived: Derived) -> dict[str, Any]:
    """The memory plan of one training GPU (and the engine's own), in bytes."""
    if cfg.cluster.gpu is None:
        return {"checked": False, "why": "cluster.gpu=null: no memory check"}
    if cfg.train.device == "cpu":
        return {"checked": False, "why": "train.device=cpu: no GPU memory to check"}
    try:
        plan = plan_for_run(cfg, derived, advise=False)  # the problems come from the checks
    except SizeUnknown as err:
        return {"checked": False, "why": f"a model's size is {err}"}
    return {
        "checked": True,
        "gpu": plan.gpu,
        "gpu_bytes": plan.gpu_bytes,
        "fits": plan.fits,
        "peak_bytes": plan.peak,
        "training_phase_bytes": plan.training_phase,
        "generation_phase_bytes": plan.generation_phase,
        "fragmentation_bytes": plan.fragmentation,
        "cached_kv_bytes": plan.cached_kv,
        "trainer_peak_bytes": plan.trainer_peak,
        "reserved_bytes": plan.reserved,
        "colocated": plan.colocated,
        "training_gpu": [asdict(r) for r in plan.training_gpu],
        "generation_gpu": [asdict(r) for r in plan.generation_gpu],
    }
