"""A name -> function table that refuses duplicate names."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


class Registry(dict[str, F]):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[F], F]:
        def add(fn: F) -> F:
            if name in self:
                raise KeyError(f"{self.kind} {name!r} is registered twice")
            self[name] = fn
            return fn

        return add
