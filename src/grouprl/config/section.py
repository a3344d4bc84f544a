"""The base of every config section: strict keys, field docstrings as documentation, and
values set from Python checked like a recipe's, with the project's error.

    cfg.rollout.n = 0
    ConfigError: cfg.rollout.n = 0: should be greater than or equal to 1 (allowed:
    integer >= 1)
    Fix: assign an allowed value (docs/config.md lists every key), or ...

Each section knows its place in the run config (``rollout``, ``reward.functions.0``):
``name_sections`` sets it when a ``RunConfig`` is made and when a section is assigned,
so an error names the whole key. Imports no torch.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

from grouprl.config.errors import ConfigError
from grouprl.config.field_text import assignment_message


class Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, validate_assignment=True
    )
    _path: str | None = PrivateAttr(default=None)
    """Where this section sits in the run config (``data.train``; empty for the run config
    itself); None for a section made on its own."""

    def __setattr__(self, name: str, value: object) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as err:  # a field's value; private attributes are not validated
            message = assignment_message(err, owner=type(self), path=self._path)
            raise ConfigError(message) from None
        if self._path is not None and not name.startswith("_"):
            name_sections(getattr(self, name), path=_join(self._path, name))


def name_sections(value: object, *, path: str) -> None:
    """Tell ``value`` (a section, a list of them, or anything else: ignored) and the
    sections inside it their place in the run config."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            name_sections(item, path=f"{path}.{i}")
    if not isinstance(value, Section):
        return
    value._path = path
    for field, item in value:  # a model iterates over its fields' (name, value)
        name_sections(item, path=_join(path, field))


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
