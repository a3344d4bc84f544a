"""Settings the chosen algorithm would not read are refused, not silently dropped.

A key given a value other than its default must change the run: ``algo.gamma=0.9``
with ``algo.advantage=reinforce_pp`` (which does not discount) or
``algo.kl_bias_correction=true`` with the KL in the reward would otherwise train
exactly as without them. Which estimator reads which key is the ``reads`` column of
``algo/traits.py``; the other keys here are read only when a switch turns them on.
"""

from __future__ import annotations

from grouprl.algo.traits import ESTIMATOR_KEYS, ESTIMATORS, keys_read
from grouprl.config.algo_section import AlgoConfig
from grouprl.config.errors import show
from grouprl.config.schema import RunConfig


def ignored_key_problems(cfg: RunConfig) -> list[str]:
    """One message per ``algo`` key set away from its default that the run would not read."""
    return [*_estimator_problems(cfg.algo), *_switch_problems(cfg.algo)]


def _default(key: str):
    return AlgoConfig.model_fields[key].default


def _estimator_problems(algo: AlgoConfig) -> list[str]:
    reads = keys_read(algo.advantage, scale_by_std=algo.scale_by_std)
    problems, values = [], algo.model_dump()
    for key in ESTIMATOR_KEYS:
        value, default = values[key], _default(key)
        if key in reads or value == default:
            continue
        chosen = f"algo.advantage={algo.advantage}"
        if algo.name != algo.advantage:
            chosen += f" (algo.name={algo.name})"
        if key in ESTIMATORS[algo.advantage].reads:  # the std's keys, with no std
            why = "divides by no std (algo.scale_by_std=false)"
            fix = "algo.scale_by_std=true to divide by it"
        else:
            readers = [name for name, t in ESTIMATORS.items() if key in t.reads]
            listed = ", ".join(f"algo.{k}" for k in sorted(reads)) or "none of them"
            why = f"does not read it (it reads {listed})"
            fix = f"an estimator that reads it: algo.advantage={' or '.join(readers)}"
        problems.append(
            f"algo.{key}={show(value)} would be ignored: {chosen} {why}. Set "
            f"algo.{key}={show(default)} (its default) or {fix}."
        )
    return problems


def _switches(algo: AlgoConfig) -> list[tuple[str, bool, str, str]]:
    """(key, whether the run reads it, when it is read, what turns that on)."""
    return [
        (
            "kl_bias_correction",
            algo.kl_in == "loss" and algo.beta > 0,
            f"with a KL term in the loss (here algo.beta={show(algo.beta)}, "
            f"algo.kl_in={algo.kl_in})",
            "algo.beta > 0 (e.g. 0.01) with algo.kl_in=loss",
        ),
        (
            "kl_horizon",
            algo.kl_target is not None,
            "by the adaptive KL controller (algo.kl_target=null here)",
            "algo.kl_target (e.g. 0.05)",
        ),
        (
            "overlong_penalty",
            algo.overlong_buffer is not None,
            "with overlong shaping (algo.overlong_buffer=null here)",
            "algo.overlong_buffer (DAPO: a fifth of rollout.max_tokens)",
        ),
        (
            "max_sampling_rounds",
            algo.dynamic_sampling,
            "with dynamic sampling (algo.dynamic_sampling=false here)",
            "algo.dynamic_sampling=true",
        ),
    ]


def _switch_problems(algo: AlgoConfig) -> list[str]:
    problems, values = [], algo.model_dump()
    for key, read, when, turn_on in _switches(algo):
        value, default = values[key], _default(key)
        if read or value == default:
            continue
        problems.append(
            f"algo.{key}={show(value)} would be ignored: it is read only {when}. Set "
            f"algo.{key}={show(default)} (its default), or set {turn_on}."
        )
    return problems
