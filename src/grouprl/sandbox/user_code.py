"""User code by name, one way for reward functions, environments and agents.

::

    name ──► registered (a built-in, or grouprl.register_*)   the object, sent by reference
         ├─► package.module:attr | path/to/file.py:attr         imported (a file: run), sent
         │                                                        by name, its file absolute
         └─► anything else                                      a problem naming the key

    driver (preflight, grouprl plan)                 worker process (sandbox/worker.py)
    kind.problems(name, key=...) -> [message]        kind.load(ref): a ref as is, or its
    kind.ref(name)               -> what workers get   import path resolved once per process

Each kind (``REWARDS`` in ``rewards/registry.py``, ``ENVS`` in ``envs/registry.py``,
``AGENTS`` in ``rollout/gateway/worker.py``) is one ``UserCode``: its registry, its error
type, what a loaded object must be, and the wording of its messages. Every message
starts with ``KEY=NAME`` (``reward.functions.0.name='x'``, ``env.name='x'``).

A file path is relative to where you run; it is loaded once per process under a module
name made from its absolute path (``grouprl_user_{kind}_{stem}_{hash}``), registered in
``sys.modules`` so pickling and dataclasses in the file work.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import pickle
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from grouprl.config.imports import absolute_import_path, is_import_path
from grouprl.sandbox.worker import run_awaited, worker_state

Expects = Callable[[Any, str], str | None]
"""``expects(value, attr)``: why a loaded ``value`` is not the kind's (e.g. "'x' is a int,
not a function"), or None when it is."""


def a_function(fix: str = "") -> Expects:
    """``Expects`` for code that is called: any callable, ``fix`` appended to the problem."""

    def expects(value: object, attr: str) -> str | None:
        if callable(value):
            return None
        return f"{attr!r} is a {type(value).__name__}, not a function{fix}"

    return expects


@dataclass(frozen=True, kw_only=True)
class UserCode:
    """One kind of user code: registered names and import paths, resolved and checked."""

    kind: str
    """``reward``, ``env``, ``agent``: ``register_{kind}`` and loaded files' module names."""
    key: str
    """The config key that names one, in messages (``env.name``); a caller may name another."""
    noun: str
    """What one is, in messages: "reward function", "environment"."""
    error: type[Exception]
    """The user error raised (``RewardError``, ``ConfigError``)."""
    expects: Expects
    """What an object loaded by import path must be (a registered one must be callable)."""
    signature: str
    """What ``register_{kind}`` takes, for its error."""
    unknown: str
    """The message for a name neither registered nor an import path; ``str.format`` fields:
    key, name, hint ("Did you mean 'x'? " or ""), names ("a, b"), names_list ("['a', 'b']")."""
    workers: str
    """Where the code runs, in "cannot be sent to {workers}"."""
    members: str = "functions"
    """What a module's public callables are called in "its ... are [...]"."""
    uncontained: str = ""
    """The fix that runs it in this process instead, appended to the unsendable message."""
    built_in: tuple[str, ...] = ()
    """Names the package makes itself (not in ``registry``; they resolve to None)."""
    registry: dict[str, Any] = field(default_factory=dict)
    """``register``'s names: name -> object."""

    def register(self, name: str, value: object) -> Any:
        """Adds ``value`` as ``name`` and returns it. A name is registered once; one with
        ':' is refused (that marks an import path)."""
        where = f"register_{self.kind}"
        if not isinstance(name, str) or not name.strip() or ":" in name:
            raise self.error(
                f"{where}: name={name!r}; a {self.noun}'s name is a non-empty string without "
                f"':' (that marks an import path, which works without registering). Fix: "
                f"e.g. {where}('mine', ...)"
            )
        if not callable(value):
            raise self.error(
                f"{where}({name!r}, ...): a {type(value).__name__} is not a function; pass "
                f"{self.signature}"
            )
        if self.known(name):
            raise self.error(
                f"{where}: {self.noun} {name!r} is already registered; choose another name "
                f"(taken: {', '.join(self.names())})"
            )
        self.registry[name] = value
        return value

    def names(self) -> list[str]:
        """The built-ins, then the registered names, sorted."""
        return [*self.built_in, *sorted(self.registry)]

    def known(self, name: str) -> bool:
        """Whether ``name`` is built in or registered."""
        return name in self.built_in or name in self.registry

    def resolve(self, name: str, *, key: str | None = None) -> Any:
        """The object ``name`` refers to (None for a built-in); raises ``error`` naming
        ``key`` when it is not registered, does not import, or is not the kind's."""
        key = key or self.key
        if self.known(name):
            return self.registry.get(name)
        if not is_import_path(name):
            names = self.names()
            close = difflib.get_close_matches(name, names, n=1)
            raise self.error(
                self.unknown.format(
                    key=key,
                    name=name,
                    hint=f"Did you mean {close[0]!r}? " if close else "",
                    names=", ".join(names),
                    names_list=names,
                )
            )
        value = load_attr(name, key=key, error=self.error, kind=self.kind, members=self.members)
        problem = self.expects(value, name.rpartition(":")[2])
        if problem is not None:
            raise self.error(f"{key}={name!r}: {problem}")
        return value

    def check(
        self, name: str, *, key: str | None = None, missing_ok: bool = False, sent: bool = True
    ) -> tuple[Any, list[str]]:
        """``(object, problems)``: ``name`` resolved now (a module imported, a file run, as
        the run would), and, when ``sent`` to worker processes, checked that it can be.
        The object is None for a built-in, with problems, and for an import path this
        machine lacks when ``missing_ok`` (``grouprl submit``: the job's machine may have it)."""
        key = key or self.key
        if missing_ok and is_import_path(name) and absent_here(name):
            return None, []
        try:
            value = self.resolve(name, key=key)
        except self.error as err:
            return None, [str(err)]
        problem = self.unsendable(name, value, key=key) if sent else None
        if problem is not None:
            return None, [problem]
        return value, []

    def problems(self, name: str, *, key: str | None = None, missing_ok: bool = False) -> list[str]:
        """Why ``name`` would not run in the workers ([] when it would): ``check``'s problems."""
        return self.check(name, key=key, missing_ok=missing_ok)[1]

    def unsendable(self, name: str, value: object, *, key: str | None = None) -> str | None:
        """Why ``value``, registered as ``name``, cannot be sent to the worker processes (a
        lambda or a nested function: objects go by reference), or None. An import path is
        sent by name."""
        if value is None or is_import_path(name):
            return None
        try:
            pickle.dumps(value)
        except Exception as err:
            return (
                f"{key or self.key}={name!r}: the function registered under this name "
                f"cannot be sent to {self.workers} ({type(err).__name__}: {err}). Fix: "
                "register a module-level function (not a lambda or a nested function) of a "
                "module they can import, or name it by import path (`package.module:name` "
                f"or `path/to/file.py:name`){self.uncontained}"
            )
        return None

    def ref(self, name: str) -> Any:
        """What a worker gets for ``name``: an import path with its file made absolute (the
        worker resolves it: a file loads under a module name it could not import by
        itself), or the registered object (pickled by reference)."""
        return absolute_import_path(name) if is_import_path(name) else self.registry.get(name)

    def load(self, ref: object) -> Any:
        """In a worker (or the driver, uncontained): the object ``ref`` stands for; an import
        path is resolved once per process, under a lock (calls start side by side)."""
        if not isinstance(ref, str):
            return ref
        state = worker_state()
        loaded = state.setdefault(f"grouprl.user_code.{self.kind}", {})
        with state.setdefault("grouprl.user_code.lock", threading.Lock()):
            if ref not in loaded:
                loaded[ref] = self.resolve(ref)
        return loaded[ref]


def awaited_call(fn: Callable[..., Any], *args: object, **kwargs: object) -> Any:
    """``fn(*args, **kwargs)``, run to its end when ``fn`` is an ``async def``: on the one
    event loop this process keeps for its life (``worker.run_awaited``), never a loop of
    its own per call, so loop-bound objects the code keeps work from call to call."""
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        value = run_awaited(value)
    return value


# --- import paths ---------------------------------------------------------------------------


def absent_here(name: str) -> bool:
    """Whether ``name`` points at a file or a top-level module this machine does not have."""
    target = name.rpartition(":")[0]
    if target.endswith(".py"):
        return not Path(target).expanduser().is_file()
    return importlib.util.find_spec(target.split(".")[0]) is None


def load_attr(
    name: str, *, key: str, error: type[Exception], kind: str, members: str = "functions"
) -> Any:
    """``module.attr`` for ``name = target:attr``; raises ``error`` naming ``key`` when the
    module cannot be imported or run, or has no ``attr`` (listing its public ``members``)."""
    target, _, attr = name.rpartition(":")
    if not target or not attr:
        raise error(
            f"{key}={name!r} is not an import path; write `package.module:name` or "
            "`path/to/file.py:name`"
        )
    if target.endswith(".py"):
        module = _load_file(target, key=key, name=name, error=error, kind=kind)
    else:
        module = _import_module(target, key=key, name=name, error=error)
    value = getattr(module, attr, None)
    if value is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise error(f"{key}={name!r}: {target} has no {attr!r}; its {members} are {public}")
    return value


def _import_module(target: str, *, key: str, name: str, error: type[Exception]) -> ModuleType:
    try:
        return importlib.import_module(target)
    except Exception as err:  # ImportError or an error while running the module
        raise error(
            f"{key}={name!r}: cannot import module {target!r} ({type(err).__name__}: {err}). "
            "Install it or add its directory to PYTHONPATH, or use `path/to/file.py:name`"
        ) from err


def _load_file(
    target: str, *, key: str, name: str, error: type[Exception], kind: str
) -> ModuleType:
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise error(f"{key}={name!r}: file {str(path)!r} does not exist")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    module_name = f"grouprl_user_{kind}_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise error(f"{key}={name!r}: {str(path)!r} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # so pickling and dataclasses in the file work
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise error(
            f"{key}={name!r}: running {str(path)!r} failed ({type(err).__name__}: {err})"
        ) from err
    return module
