"""``grouprl convert``: a verl config as a grouprl recipe. Imports no torch.

    verl YAML (nested or dotted keys) ──► dotted keys ──► a rule per key ──► recipe
                                                           (units, values)   + a comment
                                                                               per key left

The verl key -> grouprl key mapping is the alias table's (``config/aliases.py``); this
module holds only how values translate. Only what is certain is converted: a key whose
meaning and unit are the same is copied (the table marks it ``same``), one whose unit or
values differ is translated by its rule (``ppo_mini_batch_size`` x ``rollout.n``,
``loss_agg_mode: token-mean`` -> ``token_mean``), and the KL settings, spread over six
verl keys, become ``algo.beta``, ``algo.kl_in`` and ``algo.kl_estimator``. Every other key
(no equivalent, an interpolation, a value with no grouprl counterpart) is listed at the
top of the recipe with the alias table's note, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from grouprl.config.aliases import AR, VERL
from grouprl.config.errors import ConfigError, show
from grouprl.config.model_data import DATA_FILE_SUFFIXES
from grouprl.config.schema import RunConfig

Rule = Callable[[object, dict[str, Any], tuple[str, ...]], dict[str, Any] | None]
"""(value, every verl key, the key's grouprl keys from the alias table) -> grouprl keys to
set ({}: nothing, handled elsewhere) or None (not converted)."""

SHARED = ("data.prompt_key", "data.shuffle")
"""Keys verl and grouprl both have, with the same meaning."""

# fmt: off
KL_KEYS = (
    f"{AR}.actor.use_kl_loss", f"{AR}.actor.kl_loss_coef", f"{AR}.actor.kl_loss_type",
    "algorithm.use_kl_in_reward", "algorithm.kl_ctrl.kl_coef", "algorithm.kl_penalty",
    "algorithm.kl_ctrl.type", "algorithm.kl_ctrl.target_kl",
)
# fmt: on
"""Read together by ``_kl``: one KL term in grouprl, in the loss or in the reward."""

KL_ESTIMATORS = {"low_var_kl": "k3", "k3": "k3", "kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2"}
ESTIMATOR_PRESETS = {
    "gae": "ppo",
    "grpo": "grpo",
    "rloo": "rloo",
    "reinforce_plus_plus": "reinforce_pp",
}
SCHEDULES = {"constant": "constant", "cosine": "cosine"}
DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}
LOSS_AGG = {
    "token-mean": "token_mean",
    "seq-mean-token-mean": "seq_mean_token_mean",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
}


@dataclass
class Converted:
    recipe: dict[str, Any]
    """The grouprl recipe, nested by section."""
    left: list[tuple[str, Any, str]] = field(default_factory=list)
    """``(verl key, value, why)`` for each key not converted."""


def convert_verl(config: dict[str, Any]) -> Converted:
    """``config`` (verl's ``ppo_trainer.yaml`` shape, or a mapping of dotted keys) as a
    grouprl recipe, and the keys it leaves out."""
    flat = _flatten(config)
    aliases = {alias.key: alias for alias in VERL}
    dotted: dict[str, Any] = {}
    left = []
    for key, value in flat.items():
        if value is None:
            continue  # verl's "unset": grouprl's default stands
        if isinstance(value, str) and "${" in value:
            left.append((key, value, "an interpolation: set the value it resolves to"))
            continue
        if key in KL_KEYS:
            continue
        alias = aliases.get(key)
        if key in SHARED:
            found: dict[str, Any] | None = {key: value}
        elif alias is not None and alias.same:
            found = {alias.grouprl[0]: value}
        elif alias is not None and key in RULES:
            found = RULES[key](value, flat, alias.grouprl)
        else:
            found = None
        if found is None:
            known = alias.note or "grouprl has no such key" if alias else None
            why = known or "not a verl key grouprl knows"
            left.append((key, value, why))
        else:
            dotted.update(found)
    if "critic.path" not in dotted:  # verl always carries critic keys; a grouprl critic
        # section means a critic, which needs a path (it comes with adv_estimator=gae)
        why = "grouprl key not set: no critic without critic.model.path"
        critic_keys = [key for key in dotted if key.startswith("critic.")]
        left += [(key, dotted.pop(key), why) for key in critic_keys]
    lengths = ("data.max_prompt_tokens", "rollout.max_tokens")
    if "rollout.max_model_len" not in dotted and all(key in dotted for key in lengths):
        dotted["rollout.max_model_len"] = sum(dotted[key] for key in lengths)  # as verl's vLLM
    kl = _kl(flat)
    if kl is None:
        why = "a KL setting grouprl has no counterpart for"
        left += [(key, flat[key], why) for key in KL_KEYS if key in flat]
    else:
        dotted.update(kl)
    return Converted(recipe=_nested(dotted), left=left)


def render(converted: Converted, *, source: str) -> str:
    """The recipe as YAML, headed by a comment per key left out."""
    lines = [
        f"# Converted from the verl config {source} by `grouprl convert`. Check it with",
        "# `grouprl plan THIS_FILE`; docs/migration.md maps every verl key.",
    ]
    if converted.left:
        lines.append("# Not converted (set these by hand where they matter):")
        for key, value, why in converted.left:
            lines.append(f"#   {key}={show(value)}: {why}")
    body = yaml.safe_dump(converted.recipe, sort_keys=False, default_flow_style=False)
    return "\n".join(lines) + "\n" + body


# --- rules for keys whose unit or values change ------------------------------------------


def _mini_batch(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any] | None:
    n = flat.get(f"{AR}.rollout.n", 1)  # verl counts prompts: x the group size
    return {to[0]: value * n} if isinstance(value, int) and isinstance(n, int) else None


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _copied(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any]:
    return {to[0]: value}


def _read_elsewhere(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any]:
    return {}  # another key's rule reads it


def _mapped(table: dict[str, str]) -> Rule:
    return lambda value, flat, to: {to[0]: table[str(value)]} if str(value) in table else None


def _positive(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any] | None:
    """verl's -1 or 0 means off (or unlimited): grouprl's null default."""
    return None if not _number(value) else {to[0]: value} if value > 0 else {}


def _when(switch: str, rule: Rule) -> Rule:
    """``rule`` when the verl key ``switch`` is on; else nothing (the feature is off, so
    grouprl's default must stand: a setting the run does not read is refused)."""
    return lambda value, flat, to: rule(value, flat, to) if flat.get(switch) else {}


def _estimator(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any] | None:
    name, advantage = to  # algo.name (a preset), algo.advantage (the estimator alone)
    if isinstance(value, str) and value in ESTIMATOR_PRESETS:
        return {name: ESTIMATOR_PRESETS[value]}
    if value == "reinforce_plus_plus_baseline":
        return {advantage: "reinforce_pp_baseline"}
    return None


def _source(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any] | None:
    files = [str(f) for f in value] if isinstance(value, list) else [str(value)]
    if not files or (len(files) > 1 and not all(f.endswith(DATA_FILE_SUFFIXES) for f in files)):
        return None
    found = {to[0]: {"source": files[0] if len(files) == 1 else files}}
    if "data.prompt_key" not in flat:  # verl's row format: chat messages, answer nested
        found |= {"data.prompt_key": "prompt", "data.answer_key": "reward_model.ground_truth"}
    return found


def _micro_batch(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any] | None:
    gpus = int(flat.get("trainer.nnodes") or 1) * int(flat.get("trainer.n_gpus_per_node") or 1)
    return {to[0]: value // gpus} if isinstance(value, int) and value % gpus == 0 else None


def _dynamic_batch(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any]:
    budget = flat.get(f"{AR}.actor.ppo_max_token_len_per_gpu") or 16384
    return {to[0]: budget} if value else {}


def _clip_ratio(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any]:
    own = dict(zip(to, ("clip_ratio_low", "clip_ratio_high"), strict=True))  # eps low, high
    return {key: value for key, verl in own.items() if f"{AR}.actor.{verl}" not in flat}


def _reward_function(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any]:
    """The custom function as the one reward, and as ``reward.correct_function``: the
    recipe's default (``math_answer``) would name a function the run does not have, which
    ``grouprl plan`` refuses. A verl ``compute_score`` scores a right answer 1.0 (its
    built-in scorers' convention), which is what ``correct_function`` counts."""
    name = f"{value}:{flat.get('custom_reward_function.name') or 'compute_score'}"
    return {to[0]: [{"name": name, "weight": 1.0}], "reward.correct_function": name}


def _overlong(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any] | None:
    length = flat.get("reward_model.overlong_buffer.len") or 0
    if not value:
        return {}
    return {to[0]: length} if _number(length) and length > 0 else None


def _epochs(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any]:
    steps_set = flat.get("trainer.total_training_steps") is not None
    return {} if steps_set else {to[0]: value}  # verl: steps win over epochs


def _resume(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any] | None:
    if value == "resume_path":
        path = flat.get("trainer.resume_from_path")
        return {to[0]: str(path)} if path else None
    modes = {"auto": "auto", "disable": "never"}
    return {to[0]: modes[value]} if isinstance(value, str) and value in modes else None


def _loggers(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any]:
    _, wandb_project, mlflow_enabled = to  # console and tensorboard: always on
    loggers = value if isinstance(value, list) else [value]
    found: dict[str, Any] = {}
    project = flat.get("trainer.project_name")
    if "wandb" in loggers and project:
        found[wandb_project] = project
    if "mlflow" in loggers:
        found[mlflow_enabled] = True
    return found


def _text(value: object, flat: dict[str, Any], to: tuple[str, ...]) -> dict[str, Any]:
    return {to[0]: str(value)}


def _kl(flat: dict[str, Any]) -> dict[str, Any] | None:
    """verl's two KL places (loss: use_kl_loss; reward: use_kl_in_reward) as grouprl's one."""
    if flat.get(f"{AR}.actor.use_kl_loss"):
        estimator = KL_ESTIMATORS.get(flat.get(f"{AR}.actor.kl_loss_type") or "low_var_kl")
        beta = flat.get(f"{AR}.actor.kl_loss_coef", 0.001)
        if estimator is None:
            return None
        return {"algo.beta": beta, "algo.kl_in": "loss", "algo.kl_estimator": estimator}
    if flat.get("algorithm.use_kl_in_reward"):
        estimator = KL_ESTIMATORS.get(flat.get("algorithm.kl_penalty") or "kl")
        if estimator is None:
            return None
        beta = flat.get("algorithm.kl_ctrl.kl_coef", 0.001)
        found = {"algo.beta": beta, "algo.kl_in": "reward", "algo.kl_estimator": estimator}
        if flat.get("algorithm.kl_ctrl.type") == "adaptive":
            found["algo.kl_target"] = flat.get("algorithm.kl_ctrl.target_kl", 0.1)
        return found
    return {"algo.beta": 0.0} if any(k in flat for k in KL_KEYS) else {}


RULES: dict[str, Rule] = {
    "data.train_files": _source,
    "data.val_files": _source,
    f"{AR}.actor.ppo_mini_batch_size": _mini_batch,
    f"{AR}.actor.ppo_micro_batch_size": _micro_batch,
    f"{AR}.actor.use_dynamic_bsz": _dynamic_batch,
    f"{AR}.actor.ppo_max_token_len_per_gpu": _read_elsewhere,  # by use_dynamic_bsz
    f"{AR}.actor.clip_ratio": _clip_ratio,
    f"{AR}.actor.loss_agg_mode": _mapped(LOSS_AGG),
    f"{AR}.actor.policy_loss.loss_mode": _mapped(
        {"vanilla": "ppo_clip", "gspo": "gspo", "clip_cov": "clip_cov", "kl_cov": "kl_cov"}
    ),
    f"{AR}.actor.optim.lr_warmup_steps": _positive,
    f"{AR}.actor.optim.warmup_style": _mapped(SCHEDULES),
    f"{AR}.actor.optim.lr_scheduler_type": _mapped(SCHEDULES),
    f"{AR}.rollout.name": _mapped({"vllm": "vllm", "hf": "hf"}),
    f"{AR}.rollout.dtype": _mapped(DTYPES),
    "algorithm.adv_estimator": _estimator,
    "algorithm.filter_groups.max_num_gen_batches": _when(
        "algorithm.filter_groups.enable", _positive
    ),
    "algorithm.rollout_correction.bypass_old_logprob_for_rollout": lambda value, flat, to: (
        {to[0]: "engine"} if value else {}
    ),
    "custom_reward_function.path": _reward_function,
    "custom_reward_function.name": _read_elsewhere,  # by .path
    "reward_model.overlong_buffer.enable": _overlong,
    "reward_model.overlong_buffer.len": _read_elsewhere,  # by .enable
    "reward_model.overlong_buffer.penalty_factor": _when(
        "reward_model.overlong_buffer.enable", _copied
    ),
    "trainer.total_epochs": _epochs,
    "trainer.save_freq": _positive,
    "trainer.test_freq": _positive,
    "trainer.resume_mode": _resume,
    "trainer.resume_from_path": _read_elsewhere,  # by resume_mode
    "trainer.logger": _loggers,
    "trainer.project_name": _read_elsewhere,  # by logger
    "trainer.default_local_dir": _text,
    "trainer.device": _mapped({"cuda": "cuda", "cpu": "cpu"}),
}
"""How the value of each verl key that is not copied as it is becomes grouprl's; the
keys it sets are the alias table's (``to``)."""


# --- shapes ------------------------------------------------------------------------------


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and not str(key).startswith("_"):
            flat.update(_flatten(value, prefix=path + "."))
        elif not str(key).startswith("_"):  # verl's _target_ class names
            flat[path] = value
    return flat


def _nested(dotted: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys as nested sections, in the schema's order of sections."""
    order = list(RunConfig.model_fields)
    out: dict[str, Any] = {}
    for key in sorted(dotted, key=lambda k: order.index(k.split(".")[0])):
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = dotted[key]
    return out


def convert_file(source: str, *, out: str | None) -> tuple[Path, Converted]:
    """Read the verl YAML ``source``, write its recipe to ``out`` (default:
    ``STEM-grouprl.yaml`` here; never overwritten) and return where, and what was left."""
    path = Path(source).expanduser()
    if not path.is_file():
        raise ConfigError(f"grouprl convert: {source} is not a file; give verl's YAML config")
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"grouprl convert: {source} is not valid YAML:\n{err}") from None
    if not isinstance(config, dict):
        raise ConfigError(
            f"grouprl convert: {source} holds a {type(config).__name__}, not verl's mapping of "
            "sections (data:, actor_rollout_ref:, algorithm:, trainer:, ...)"
        )
    target = Path(out) if out else Path(f"{path.stem}-grouprl.yaml")
    if target.exists():
        raise ConfigError(
            f"grouprl convert: {target} already exists; remove it or choose another --out"
        )
    converted = convert_verl(config)
    target.write_text(render(converted, source=str(path)))
    return target, converted
