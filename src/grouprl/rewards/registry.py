"""Reward functions by name: the built-ins, or your own by import path or file path.

Every reward function has one signature. It is called once per completion as::

    fn(completion_text, reference=row_answer, row=row_dict)

``completion_text`` is the decoded completion, ``reference`` the row's
``data.answer_key`` value and ``row`` the whole data row (with ``_index``, its
position in the source). It returns a number (a bool counts as 0/1); raising,
returning a non-number or NaN, or running past ``reward.timeout_s`` counts as
an error (see ``reward.on_error``). Accept ``**kwargs`` so new keywords do not
break it. An example user function in ``my_rewards.py``::

    def short_and_right(completion: str, *, reference: str, **kwargs) -> float:
        right = completion.strip().endswith(f"#### {reference.split('####')[-1].strip()}")
        return float(right) - 0.001 * len(completion.split())

used from a recipe as ``reward.functions: [{name: my_rewards.py:short_and_right}]``
(a file, relative to where you run) or ``{name: my_pkg.rewards:short_and_right}``
(an importable module).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grouprl.rewards.format import format_reward
from grouprl.rewards.math import math_answer
from grouprl.rewards.qa import exact_match, token_f1

RewardFn = Callable[..., Any]


class RewardError(ValueError):
    """A reward function that cannot be found, loaded or run; the message says which and why."""

    user_error = True


REWARD_FUNCTIONS: dict[str, RewardFn] = {}


def register_reward(name: str, fn: RewardFn) -> RewardFn:
    """Add ``fn`` to ``REWARD_FUNCTIONS`` as ``name``; a name is registered only once."""
    if not isinstance(name, str) or not name.strip() or ":" in name:
        raise RewardError(
            f"register_reward: name={name!r}; a reward's name is a non-empty string "
            "without ':' (that marks an import path). Fix: e.g. register_reward('short', fn)"
        )
    if not callable(fn):
        raise RewardError(
            f"register_reward({name!r}, ...): a {type(fn).__name__} is not a function; pass "
            "fn(completion, *, reference, row, **kwargs) -> float"
        )
    if name in REWARD_FUNCTIONS:
        raise RewardError(
            f"register_reward: reward function {name!r} is already registered; choose "
            f"another name (taken: {sorted(REWARD_FUNCTIONS)})"
        )
    REWARD_FUNCTIONS[name] = fn
    return fn


register_reward("math_answer", math_answer)
register_reward("format", format_reward)
register_reward("qa_em", exact_match)
register_reward("qa_f1", token_f1)


def resolve_reward(name: str, *, index: int | None = None) -> RewardFn:
    """The function ``name`` refers to: registered, ``package.module:fn`` or ``file.py:fn``.

    ``index`` is the position in ``reward.functions``, used in error messages.
    """
    key = f"reward.functions.{'i' if index is None else index}.name"
    if name in REWARD_FUNCTIONS:
        return REWARD_FUNCTIONS[name]
    if ":" not in name:
        close = difflib.get_close_matches(name, list(REWARD_FUNCTIONS), n=1)
        hint = f"Did you mean {close[0]!r}? " if close else ""
        raise RewardError(
            f"{key}={name!r} is not a registered reward function. {hint}Choose one of "
            f"{sorted(REWARD_FUNCTIONS)}, or give your own as `package.module:function` "
            "or `path/to/file.py:function`"
        )
    target, _, attr = name.rpartition(":")
    if target.endswith(".py"):
        module = _load_file(target, key=key, name=name)
    else:
        module = _import_module(target, key=key, name=name)
    fn = getattr(module, attr, None)
    if fn is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise RewardError(f"{key}={name!r}: {target} has no {attr!r}; its functions are {public}")
    if not callable(fn):
        raise RewardError(f"{key}={name!r}: {attr!r} is a {type(fn).__name__}, not a function")
    return fn


def resolve_rewards(functions: list[Any]) -> list[tuple[str, RewardFn, float]]:
    """``(name, fn, weight)`` for each ``reward.functions`` entry (``RewardFunction`` records)."""
    names = [f.name for f in functions]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise RewardError(_listed_twice(i, name))
    return [(f.name, resolve_reward(f.name, index=i), f.weight) for i, f in enumerate(functions)]


def reward_problems(functions: list[Any], *, missing_ok: bool = False) -> list[str]:
    """Why each ``reward.functions`` entry would not resolve, as messages ([] when all do),
    by resolving them now: import paths are imported and files run, so a mistake shows
    before any model loads. ``missing_ok``: a module or file this machine lacks is not a
    problem (``grouprl submit``: the cluster may have it)."""
    problems = []
    names = [f.name for f in functions]
    for i, name in enumerate(names):
        if name in names[:i]:
            problems.append(_listed_twice(i, name))
            continue
        if missing_ok and _absent_here(name):
            continue
        try:
            resolve_reward(name, index=i)
        except RewardError as err:
            problems.append(str(err))
    return problems


def _listed_twice(index: int, name: str) -> str:
    return (
        f"reward.functions.{index}.name={name!r} is listed twice; list it once and set its weight"
    )


def _absent_here(name: str) -> bool:
    """Whether ``name`` points at a file or a top-level module this machine does not have."""
    if name in REWARD_FUNCTIONS or ":" not in name:
        return False
    target = name.rpartition(":")[0]
    if target.endswith(".py"):
        return not Path(target).expanduser().is_file()
    return importlib.util.find_spec(target.split(".")[0]) is None


def _import_module(target: str, *, key: str, name: str) -> Any:
    try:
        return importlib.import_module(target)
    except Exception as err:  # ImportError or an error while running the module
        raise RewardError(
            f"{key}={name!r}: cannot import module {target!r} ({type(err).__name__}: {err}). "
            "Install it or add its directory to PYTHONPATH, or use `path/to/file.py:function`"
        ) from err


def _load_file(target: str, *, key: str, name: str) -> Any:
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise RewardError(f"{key}={name!r}: file {str(path)!r} does not exist")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    module_name = f"grouprl_user_reward_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise RewardError(f"{key}={name!r}: {str(path)!r} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # so pickling and dataclasses in the file work
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise RewardError(
            f"{key}={name!r}: running {str(path)!r} failed ({type(err).__name__}: {err})"
        ) from err
    return module
