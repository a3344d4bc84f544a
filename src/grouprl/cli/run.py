"""Commands that load models and data: ``train``, ``eval`` and ``index build``."""

from __future__ import annotations

from typing import Annotated

import typer

from grouprl import api
from grouprl.api import DEFAULT_EVAL_RECIPE
from grouprl.ckpt.preempt import Preempted
from grouprl.cli.app import Overrides, Recipe, app, say, user_errors
from grouprl.config.redact import RESOLVED_CONFIG_FILE
from grouprl.envs.search import build_index


@app.command()
def train(recipe: Recipe, overrides: Overrides = None) -> None:
    """Train: validate the config, then load the model and run.

    Exit codes: 0 done, or stopped at trainer.stop_after; 75 preempted, after its save.

    2: a user error, or a run that cannot train (RUN/summary.json says why).

    1: any other error."""
    with user_errors():
        try:
            api.train(recipe, overrides or [])  # checks everything before loading
        except Preempted as stop:
            say(str(stop), style="yellow", stderr=True)
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
    with user_errors():
        api.evaluate(target, recipe, overrides or [])


index_app = typer.Typer(help="Search indexes for tool-use agents.", no_args_is_help=True)
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
    with user_errors():
        report = build_index(corpus, out)
        typer.echo(
            f"indexed {report.passages} passages from {corpus} into {out} in {report.seconds:.2f} s"
        )
        if report.skipped:
            say(f"warning: {report.summary()}", style="yellow", stderr=True)
