"""The ``grouprl`` command line.

Every command validates the whole config (schema and batch arithmetic) before
anything heavy is imported, so a mistake fails in well under a second. User
errors (``ConfigError`` and any exception whose class sets ``user_error =
True``) print in red on stderr and exit 2, without a traceback. ``--help``,
``recipes`` and ``plan`` never import torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from grouprl.config.checks import derive
from grouprl.config.loader import list_recipes, load_config
from grouprl.config.redact import RESOLVED_CONFIG_FILE
from grouprl.config.schema import RunConfig

USER_ERROR_EXIT = 2
DEFAULT_EVAL_RECIPE = "tiny-arith"

app = typer.Typer(
    name="grouprl",
    help="RL post-training of LLMs with GRPO and family, from one CPU to many GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold secrets such as an API key
    context_settings={"help_option_names": ["-h", "--help"]},
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


@contextmanager
def _user_errors() -> Iterator[None]:
    """Turn user errors into a red message on stderr and exit code 2."""
    try:
        yield
    except Exception as err:
        if not getattr(err, "user_error", False):
            raise
        console = Console(stderr=True)
        console.print(Text(f"error: {err}", style="red"), soft_wrap=True)
        raise typer.Exit(USER_ERROR_EXIT) from None


def _load_checked(recipe: str, overrides: list[str] | None) -> RunConfig:
    cfg = load_config(recipe, overrides or [])
    derive(cfg)  # raises ConfigError on batch arithmetic and other cross-field problems
    return cfg


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


@app.command()
def recipes() -> None:
    """List the packaged recipes, one per line: name and description."""
    with _user_errors():
        found = list_recipes()
        width = max((len(name) for name, _ in found), default=0)
        for name, description in found:
            typer.echo(f"{name:<{width}}  {description}")


@app.command()
def plan(recipe: Recipe, overrides: Overrides = None) -> None:
    """Validate a run and print every derived quantity (batches, steps, tokens) without
    loading anything."""
    from grouprl.config.plan import render_plan

    with _user_errors():
        cfg = load_config(recipe, overrides or [])
        Console().print(render_plan(cfg, derive(cfg)))


@app.command()
def train(recipe: Recipe, overrides: Overrides = None) -> None:
    """Train: validate the config, then load the model and run."""
    with _user_errors():
        cfg = _load_checked(recipe, overrides)
        from grouprl.ckpt.preempt import Preempted
        from grouprl.train.run import train as run_training

        try:
            run_training(cfg)
        except Preempted as stop:
            Console(stderr=True).print(Text(str(stop), style="yellow"), soft_wrap=True)
            raise typer.Exit(stop.exit_code) from None


@app.command("eval")
def eval_(
    target: Annotated[
        str, typer.Argument(help="A run directory or a model (builtin:, local dir or hub name).")
    ],
    overrides: Overrides = None,
    recipe: Annotated[
        str | None,
        typer.Option(
            help="Recipe giving the eval data, rewards and sampling. Default: the run "
            f"directory's {RESOLVED_CONFIG_FILE} if TARGET is a run, else {DEFAULT_EVAL_RECIPE}.",
        ),
    ] = None,
) -> None:
    """Score a run's policy or a model on the held-out split."""
    with _user_errors():
        if recipe is None:
            saved = Path(target) / RESOLVED_CONFIG_FILE
            recipe = str(saved) if saved.is_file() else DEFAULT_EVAL_RECIPE
        cfg = _load_checked(recipe, overrides)
        from grouprl.evaluate import evaluate_cli

        evaluate_cli(target, cfg)


@app.command()
def export(
    run: Annotated[str, typer.Argument(help="The run directory.")],
    out: Annotated[str, typer.Argument(help="Output directory for the Hugging Face model.")],
    step: Annotated[
        int | None, typer.Option(help="Checkpoint step to export; default: the latest.")
    ] = None,
) -> None:
    """Export a run's checkpoint as a Hugging Face model directory."""
    with _user_errors():
        from grouprl.ckpt.export import export_run

        export_run(run, out, step=step)


index_app = typer.Typer(
    help="Search indexes for tool-use agents.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(index_app, name="index")


@index_app.command("build")
def index_build(
    corpus: Annotated[
        str,
        typer.Argument(
            help="Passages: a .jsonl file (id, title, text per line), DPR's .tsv "
            "(id, text, title with a header), either optionally .gz, or builtin:fictional."
        ),
    ],
    out: Annotated[str, typer.Argument(help="Directory to write the index to.")],
) -> None:
    """Build a BM25 search index of a passage corpus (replaces an older index in OUT)."""
    with _user_errors():
        from grouprl.envs.search import build_index

        report = build_index(corpus, out)
        typer.echo(
            f"indexed {report.passages} passages from {corpus} into {out} in {report.seconds:.2f} s"
        )
        if report.skipped:
            Console(stderr=True).print(Text(f"warning: {report.summary()}", style="yellow"))


def main() -> None:
    """Console entry point (``grouprl``)."""
    app()
