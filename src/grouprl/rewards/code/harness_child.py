"""What the harness's children run inside the sandbox, copied there as ``child.py``
(``harness.py`` is the parent). Standard library only, and as few imports as can be:
each child pays for them (``asyncio`` and ``inspect`` take 0.2 s to load there).

    python -S child.py run        a stdio case: solution.py as ``__main__``
    python -S child.py call FD    call and assert cases: imports solution.py, runs the
                                  cases its job (on stdin) lists, a message per case on FD
"""

from __future__ import annotations

import json
import os
import sys

dumps = json.dumps
"""Bound before the program runs: a program that replaces ``json.dumps`` changes neither
how its results are sent nor what they say (the parent judges the values)."""

SOLUTION = "solution.py"
DETAIL_CHARS = 300


def child(fd: int) -> None:
    job = json.loads(sys.stdin.buffer.read())
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the program's stdin: empty
    out = os.fdopen(fd, "w", buffering=1)

    def send(message: dict) -> None:
        out.write(dumps(message) + "\n")

    sys.path.insert(0, os.getcwd())
    try:
        import solution  # type: ignore[import-not-found]  # noqa: F401 - the program, run once
    except BaseException as err:  # SystemExit too: the program ended before any test ran
        send({"fatal": "error", "detail": f"solution.py did not import: {describe(err)}"})
        return
    if job["mode"] == "call":
        call_cases(job, send)
    else:
        assert_cases(job, send)
    out.flush()
    os._exit(0)  # nothing the program registered (atexit, threads) runs after its tests


def call_cases(job: dict, send) -> None:
    import solution  # type: ignore[import-not-found]  # the program, in the sandbox dir

    strict = job.get("strict") or [False] * len(job["args"])
    for args, plain_only in zip(job["args"][job["start"] :], strict[job["start"] :], strict=True):
        try:
            fn = target(solution, job["fn_name"])
            value = fn(*args)
        except BaseException as err:
            send({"status": "error", "detail": describe(err)})
            continue
        if plain_only and not plain(value):  # an assert line's ``==``: a tuple is no list
            send(
                {
                    "status": "failed",
                    "detail": f"returned a {type(value).__name__[:80]}, where the test's"
                    " == wants JSON's plain values (no tuple, set, or other type)",
                }
            )
            continue
        try:
            send({"status": "ok", "value": dumps(value)})
        except (TypeError, ValueError) as err:
            send({"status": "failed", "detail": f"returned a {type(value).__name__}: {err}"})


def plain(value, depth: int = 0) -> bool:
    """Whether ``value`` holds only JSON's plain values: None, bool, int, finite float,
    str, list, dict with str keys (no tuple, set, bytes), so that it means the same after a
    JSON round trip and compares as Python would: an assert line's literals on the host
    (``assert_calls``, which imports it), a strict case's returned value here."""
    if depth > 100:
        return False
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    if isinstance(value, list):
        return all(plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v, depth + 1) for k, v in value.items())
    return False


def target(module, name: str):
    """``name`` in the program: a method of LeetCode's ``class Solution`` (a fresh instance
    per case, as LiveCodeBench calls it), else a module-level function."""
    cls = getattr(module, "Solution", None)
    if isinstance(cls, type) and hasattr(cls, name):
        return getattr(cls(), name)
    return getattr(module, name)


def assert_cases(job: dict, send) -> None:
    namespace = {"__name__": "test_solution"}
    try:
        exec(compile(job["test_code"], "test_solution.py", "exec"), namespace)
    except ModuleNotFoundError as err:
        if err.name != "solution":  # (the parent checks that it lacks the module too)
            detail = f"the tests need {describe(err)}"
            send({"fatal": "tests_error", "detail": detail, "module": err.name})
            return
        send({"fatal": "error", "detail": f"the tests did not load: {describe(err)}"})
        return
    except BaseException as err:
        send({"fatal": "error", "detail": f"the tests did not load: {describe(err)}"})
        return
    for name in job["names"][job["start"] :]:
        send(one_test(namespace, name))


def one_test(namespace: dict, name: str) -> dict:
    """Runs test ``name`` (``test_x``, or ``TestCls.test_x`` on a fresh instance) for each
    of its parameter sets; an ``async def`` test is run to its end."""
    owner, _, attr = name.rpartition(".")
    fn = getattr(namespace[owner](), attr) if owner else namespace[name]
    sets = parameter_sets(fn)
    wanted = required_parameters(fn)
    missing = [p for p in wanted if p not in sets[0]]
    if missing:  # a pytest fixture: this harness cannot judge the program with it
        return {"status": "tests_error", "detail": f"{name} needs the fixtures {missing}"}
    try:
        for kwargs in sets:
            value = fn(**kwargs)
            if hasattr(value, "__await__"):  # an async test
                import asyncio

                asyncio.run(value)
    except AssertionError as err:
        return {"status": "failed", "detail": f"{name}: {describe(err)}"}
    except BaseException as err:
        return {"status": "error", "detail": f"{name}: {describe(err)}"}
    return {"status": "passed"}


def required_parameters(fn) -> list[str]:
    """The parameters ``fn`` must be given (read from its code object: ``inspect`` alone
    costs a child 0.1 s to import); ``self`` of a bound method is given."""
    function = getattr(fn, "__func__", fn)
    code = function.__code__
    positional = list(code.co_varnames[: code.co_argcount])
    keyword_only = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    defaults = len(function.__defaults__ or ())
    required = positional[: len(positional) - defaults]
    if function is not fn:
        required = required[1:]
    kw_defaults = function.__kwdefaults__ or {}
    return required + [name for name in keyword_only if name not in kw_defaults]


def parameter_sets(fn) -> list[dict]:
    """The keyword sets pytest's ``@pytest.mark.parametrize`` marks on ``fn`` ask for (one
    empty set without marks); a parameter no mark gives (a fixture) is not supported."""
    sets: list[dict] = [{}]
    for mark in getattr(fn, "pytestmark", []):
        if getattr(mark, "name", "") != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        rows = []
        for value in values:
            value = getattr(value, "values", value)  # pytest.param(...)
            rows.append(dict(zip(names, value if len(names) > 1 else (value,), strict=True)))
        sets = [{**s, **r} for s in sets for r in rows]
    return sets


def describe(err: BaseException) -> str:
    import traceback  # only on errors: it costs a child 0.05 s to import

    text = "".join(traceback.format_exception_only(type(err), err)).strip()
    return text[-DETAIL_CHARS:]


def run_solution() -> None:
    """``python solution.py`` as the program would be run, on an interpreter started with
    ``-S`` (no site: 4x faster to start): ``solution.py`` is ``__main__``; its exit code
    and uncaught errors are the interpreter's own (no runpy: 0.03 s to import)."""
    import types

    with open(SOLUTION, "rb") as f:
        source = f.read()
    main = types.ModuleType("__main__")
    main.__file__ = os.path.abspath(SOLUTION)
    sys.modules["__main__"] = main
    sys.argv = [SOLUTION]
    exec(compile(source, main.__file__, "exec"), main.__dict__)


class Quitter:
    """``exit`` and ``quit`` as ``site`` defines them (``-S`` leaves them out, and importing
    site costs a child 0.02 s); competitive programs call ``exit()``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Use {self.name}() or Ctrl-D (i.e. EOF) to exit"

    def __call__(self, code=None):
        raise SystemExit(code)


def main() -> None:
    import builtins

    builtins.exit, builtins.quit = Quitter("exit"), Quitter("quit")
    if sys.argv[1] == "run":
        run_solution()
    else:
        child(int(sys.argv[2]))


if __name__ == "__main__":
    main()
