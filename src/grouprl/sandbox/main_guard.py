"""A script that starts a run at its top level, without ``if __name__ == "__main__":``.

Reward, environment and agent workers are started with multiprocessing's "spawn", which
runs the main script again (as ``__mp_main__``) in each worker before the worker serves.
A top-level ``grouprl.train(cfg)`` would start a run in every worker, and the parent's
rewards would all fail. ``refuse_unguarded_main`` (the first line of ``grouprl.train``
and ``grouprl.evaluate``) stops that twice over::

    parent: called from the __main__ script's top level, and the script's source shows
            no `if __name__ ...:` around the calling line ──► UnguardedMainError, before
            anything loads
    worker: called while spawn re-runs the script (a <module> frame named __mp_main__)
            ──► a pool worker exits with UNGUARDED_EXIT_CODE before it is ready; its
                WorkerPool fails every call with UnguardedMainError, and the run stops
            ──► any other spawned process raises UnguardedMainError itself

The parent check refuses only what it can read for certain; a guard it cannot judge
(``if __name__ in ("__main__", "__mp_main__"):``) is left to the worker check.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import sys
import tokenize
from types import FrameType, ModuleType

UNGUARDED_EXIT_CODE = 87
"""Exit code of a pool worker whose re-run of the main script tried to start a run."""

WORKER_NAME_PREFIX = "grouprl-"
"""``WorkerPool`` names its processes so (the name is set before spawn re-runs main)."""

FIX = (
    'Fix: put the training call under `if __name__ == "__main__":` (grouprl starts its '
    "reward and environment workers with multiprocessing's spawn, which imports the script "
    "again in each worker: unguarded, each worker would start a run of its own)"
)


class UnguardedMainError(RuntimeError):
    """A run started from a script's top level that spawned workers re-run."""

    user_error = True


def refuse_unguarded_main(what: str) -> None:
    """Stop ``what`` (``"grouprl.train"``) called where a spawned worker re-runs it:
    in such a worker (exit, or raise outside grouprl's pools), or in the parent from
    the main script's top level outside an ``if __name__`` block."""
    if _top_level_frame("__mp_main__") is not None:
        if multiprocessing.current_process().name.startswith(WORKER_NAME_PREFIX):
            raise SystemExit(UNGUARDED_EXIT_CODE)  # its pool says why, once
        raise UnguardedMainError(
            f"{what} was called while a process started with multiprocessing's spawn "
            f"re-imported the script {main_script()}. {FIX}"
        )
    main = sys.modules.get("__main__")
    frame = _top_level_frame("__main__")
    if main is None or frame is None or not rerun_by_spawn(main):
        return
    path, line = frame.f_code.co_filename, frame.f_lineno
    if _unguarded(path, line):
        raise UnguardedMainError(
            f"{path}:{line} calls {what} at the top level of the script, outside "
            f'`if __name__ == "__main__":`. {FIX}'
        )


def worker_start_error(pool: str) -> UnguardedMainError:
    """The error of pool ``pool`` whose worker exited with ``UNGUARDED_EXIT_CODE``."""
    return UnguardedMainError(
        f"a {pool} worker process re-imported the script {main_script()} (multiprocessing's "
        "spawn does) and the script started a run there: it calls grouprl.train or "
        f"grouprl.evaluate where a worker runs it too. {FIX}"
    )


def main_script() -> str:
    """The main script's path, or its module name (``python -m``), as spawn re-runs it."""
    main = sys.modules.get("__main__")
    return (main and (_file(main) or _spec_name(main))) or "__main__"


def _spec_name(main: ModuleType) -> str | None:
    return main.__spec__.name if main.__spec__ is not None else None


def _file(main: ModuleType) -> str | None:
    return vars(main).get("__file__")  # (none: `python -c`, an interactive session)


def _top_level_frame(module_name: str) -> FrameType | None:
    """The frame running the top level of module ``module_name`` on this thread's stack."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and frame.f_globals.get("__name__") == module_name:
            return frame
        frame = frame.f_back
    return None


def rerun_by_spawn(main: ModuleType) -> bool:
    """Whether spawn re-runs ``main`` in its children (``multiprocessing.spawn``'s rules:
    a module by name unless it is a ``__main__.py``, else a script file)."""
    name = _spec_name(main)
    if name is not None:
        return not (name == "__main__" or name.endswith(".__main__"))
    path = _file(main)
    return path is not None and os.path.splitext(os.path.basename(path))[0] != "ipython"


def _unguarded(path: str, line: int) -> bool:
    """Whether ``line`` of the script at ``path`` is a top-level statement under no ``if``
    whose test names ``__name__``; False where the source cannot tell."""
    try:
        with tokenize.open(path) as source:
            tree = ast.parse(source.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return False
    if not any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in tree.body):
        return False  # the file changed since it started
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and node.lineno <= line <= (node.end_lineno or node.lineno)
            and any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(node.test))
        ):
            return False
    return True
