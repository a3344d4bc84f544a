"""The ``grouprl`` Typer app and what its commands share: the argument types, the version
flag, and user errors (``ConfigError``, or any exception whose class sets ``user_error =
True``), printed in red on stderr with exit code 2, without a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

USER_ERROR_EXIT = 2

app = typer.Typer(
    name="grouprl",
    help="RL post-training of LLMs with GRPO and family, from one CPU to many GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold secrets such as an API key
    context_settings={"help_option_names": ["-h", "--help"]},  # subcommands inherit it
)

Recipe = Annotated[
    str, typer.Argument(help="A packaged recipe name (see `grouprl recipes`) or a YAML path.")
]
Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        help="Dotted overrides key.sub=value, values parsed as YAML: rollout.n=8 algo.beta=0.04",
        show_default=False,
    ),
]


def is_user_error(err: BaseException) -> bool:
    """Whether ``err`` is the user's to fix: its class sets ``user_error = True``."""
    return bool(getattr(err, "user_error", False))


def say(text: str, *, style: str = "", stderr: bool = False) -> None:
    """Print ``text`` as is (never read as markup), in ``style``, folded at the terminal."""
    Console(stderr=stderr).print(Text(text, style=style), soft_wrap=True)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn user errors into a red message on stderr and exit code 2."""
    try:
        yield
    except Exception as err:
        if not is_user_error(err):
            raise
        say(f"error: {err}", style="red", stderr=True)
        raise typer.Exit(USER_ERROR_EXIT) from None


def _version(value: bool) -> None:
    if value:
        from grouprl import __version__

        typer.echo(f"grouprl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print version.")
    ] = False,
) -> None:
    """RL post-training of LLMs with GRPO and family, from one CPU to many GPUs."""
