"""The one exception type for configuration mistakes, and what its messages share.

A ``ConfigError`` message names the key path, the value given, what is allowed and how
to fix it; the CLI prints it without a traceback (``cli/app.py``).
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem the user can fix by editing the recipe or an override."""

    user_error = True


def raise_problems(
    problems: list[str], *, where: str = "the run configuration", bullets: bool = False
) -> None:
    """One ``ConfigError`` naming every problem found in ``where`` (none: return): numbered,
    or with ``bullets`` each under a dash, its further lines indented."""
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        if bullets:
            listed = ["  - " + p.replace("\n", "\n    ") for p in problems]
        else:
            listed = [f"{i}. {p}" for i, p in enumerate(problems, start=1)]
        raise ConfigError(f"{len(problems)} problems in {where}:\n" + "\n".join(listed))


def show(value: object) -> str:
    """A value as the user would write it in YAML (short, one line)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def choices(values: list[int], *, more: bool) -> str:
    """``{4, 8, 12, ...}``: a short set of valid integers for a fix hint."""
    body = ", ".join(str(v) for v in values)
    return "{" + body + (", ...}" if more else "}")
