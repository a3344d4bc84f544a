"""The one exception type for configuration mistakes.

A ``ConfigError`` message names the key path, the value given, what is allowed
and how to fix it. The CLI prints it in red without a traceback and exits 2;
any other exception class that sets ``user_error = True`` is treated the same.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem the user can fix by editing the recipe or an override."""

    user_error = True


def show(value: object) -> str:
    """A value as the user would write it in YAML (short, one line)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def choices(values: list[int], *, more: bool) -> str:
    """``{4, 8, 12, ...}``: a short set of valid integers for a fix hint."""
    body = ", ".join(str(v) for v in values)
    return "{" + body + (", ...}" if more else "}")
