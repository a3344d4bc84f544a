"""The parts of pytest that dataset tests (KodCode's) use, for the sandbox, whose
interpreter has the standard library only: copied there as ``pytest.py`` for assert-style
tests, so ``import pytest`` works the same on every machine. Standard library only.

Provided: ``raises`` (context manager, or called with a function), ``approx`` (numbers and
sequences or dicts of them; rel 1e-6, abs 1e-12 by default, as pytest), ``mark.parametrize``
(read by the harness's ``parameter_sets``; other marks do nothing), ``param``, ``fail``,
``fixture`` (a no-op: a test that asks for a fixture is not judged). Not provided:
``skip`` and the rest; a test that uses them errors, as any broken test would.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable


class Failed(AssertionError):
    """A test that failed by ``fail`` or an exception ``raises`` did not see."""


def fail(reason: str = "", pytrace: bool = True) -> None:
    raise Failed(reason)


class Mark:
    def __init__(self, name: str, args: tuple, kwargs: dict) -> None:
        self.name, self.args, self.kwargs = name, args, kwargs


class MarkGenerator:
    """``mark.<name>(...)`` records the mark on the function as pytest does
    (``pytestmark``); a bare ``@mark.slow`` returns the function."""

    def __getattr__(self, name: str):
        def make(*args: object, **kwargs: object):
            if len(args) == 1 and callable(args[0]) and not kwargs and name != "parametrize":
                return args[0]

            def decorate(fn):
                fn.pytestmark = [*getattr(fn, "pytestmark", []), Mark(name, args, kwargs)]
                return fn

            return decorate

        return make


mark = MarkGenerator()


class param:  # pytest's name
    """One parameter set of a ``parametrize`` mark (its ``id`` and ``marks`` ignored)."""

    def __init__(self, *values: object, **kwargs: object) -> None:
        self.values = values


def fixture(*args: object, **kwargs: object):
    """A no-op: the harness judges no test that asks for a fixture."""
    if len(args) == 1 and callable(args[0]):
        return args[0]
    return lambda fn: fn


class raises:  # pytest's name
    """``with raises(E, match=...) as info:``, or ``raises(E, fn, *args)``."""

    def __init__(
        self,
        expected: type[BaseException] | tuple[type[BaseException], ...],
        func: Callable[..., object] | None = None,
        *args: object,
        match: str | None = None,
        **kwargs: object,
    ):
        self.expected, self.match = expected, match
        self.value = self.type = None
        if func is not None:
            with self:
                func(*args, **kwargs)

    def __enter__(self) -> raises:
        return self

    def __exit__(self, kind, value, tb) -> bool:
        if kind is None:
            raise Failed(f"DID NOT RAISE {self.expected}")
        if not issubclass(kind, self.expected):
            return False
        if self.match is not None and not re.search(self.match, str(value)):
            raise AssertionError(f"Regex {self.match!r} does not match {str(value)!r}")
        self.value, self.type = value, kind
        return True


class approx:  # pytest's name
    """Equal within ``max(rel * |expected|, abs)``, element by element for sequences and
    dicts."""

    def __init__(self, expected: object, rel: float | None = None, abs: float | None = None):
        self.expected = expected
        self.rel = 1e-6 if rel is None else rel
        self.abs = 1e-12 if abs is None else abs

    def _close(self, got: object, want: object) -> bool:
        if isinstance(want, dict):
            return (
                isinstance(got, dict)
                and got.keys() == want.keys()
                and all(self._close(got[k], want[k]) for k in want)
            )
        if isinstance(want, list | tuple):
            return (
                isinstance(got, list | tuple)
                and len(got) == len(want)
                and all(self._close(g, w) for g, w in zip(got, want, strict=True))
            )
        if isinstance(want, bool) or not isinstance(want, int | float):
            return got == want
        if isinstance(got, bool) or not isinstance(got, int | float):
            return False
        if math.isinf(want) or math.isnan(want):
            return got == want
        return math.fabs(got - want) <= max(self.rel * math.fabs(want), self.abs)

    def __eq__(self, other: object) -> bool:
        return self._close(other, self.expected)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"approx({self.expected!r})"
