"""The checkpoint commands: ``ckpt ls / verify / prune / export`` and ``export``, its
alias, over any tier (disk, memory, S3), from the manifests (no torch until export)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from grouprl.cli.app import app, say, user_errors
from grouprl.plan.memory import human_bytes, plural

if TYPE_CHECKING:
    from grouprl.ckpt.inspect import Row

BEST_HELP = (
    "Export the best validation's checkpoint (runs with checkpoint.keep_best=true; "
    "`grouprl ckpt ls` marks it) instead of the newest."
)


ckpt_app = typer.Typer(
    help="List, verify, prune and export checkpoints in any tier (disk, memory, S3).",
    no_args_is_help=True,
)
app.add_typer(ckpt_app, name="ckpt")

Target = Annotated[
    str,
    typer.Argument(
        help="A run directory (its RUN/checkpoints), a tier directory holding step_N "
        "checkpoints (e.g. /dev/shm/grouprl/NAMESPACE), one checkpoint directory, or "
        "s3://BUCKET/PREFIX/NAMESPACE (verify, export: also .../step_N).",
        show_default=False,
    ),
]
EndpointUrl = Annotated[
    str | None,
    typer.Option(
        "--endpoint-url",
        help="S3-compatible server for s3:// targets (MinIO, Ceph, R2...); default: AWS. "
        "Credentials come from the standard AWS chain.",
    ),
]


@ckpt_app.command("ls")
def ckpt_ls(target: Target, endpoint_url: EndpointUrl = None) -> None:
    """List complete checkpoints, oldest first, from their manifests alone."""
    with user_errors():
        from grouprl.ckpt.inspect import list_checkpoints

        rows = list_checkpoints(target, endpoint_url=endpoint_url)
    root = rows[0].found.where.rstrip("/").rpartition("/")[0]
    total = sum(row.manifest.bytes for row in rows if row.manifest is not None)
    say(f"{plural(len(rows), 'checkpoint')} in {root}, {human_bytes(total)}")
    Console().print(_checkpoint_table(rows))
    for best in (row.best for row in rows if row.best is not None):
        say(f"* {best.describe()}: `grouprl ckpt prune` keeps it")
    for row in rows:
        if row.problem is not None:
            say(f"step {row.found.step}: {row.problem}", style="red")


def _checkpoint_table(rows: list[Row]) -> Table:
    """One row per checkpoint, located relative to the tier printed above it."""
    table = Table(box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    # on a narrow terminal the text folds (the date from its time, the config hash);
    # the step, the other numbers and the checkpoint's name stay whole
    whole = {"step": max(len(str(row.found.step)) for row in rows)}
    whole["location"] = max(len(row.found.name) for row in rows)
    for column in ("step", "location", "size", "files", "created", "world", "config hash"):
        number = column in ("step", "size", "files", "world")
        table.add_column(
            column,
            justify="right" if number else "left",
            no_wrap=number,
            overflow="fold",
            min_width=whole.get(column),
        )
    for row in rows:
        m, name = row.manifest, row.found.name
        if m is None:  # its problem is printed below the table
            table.add_row(str(row.found.step), name, *[Text("?", style="red")] * 5)
            continue
        created = datetime.fromtimestamp(m.created).strftime("%Y-%m-%d %H:%M")
        cells = (human_bytes(m.bytes), str(len(m.files)), created, str(m.world_size))
        if row.best is not None:  # checkpoint.keep_best: explained below the table
            name += " *"
        table.add_row(str(row.found.step), name, *cells, m.config_hash)
    return table


@ckpt_app.command("verify")
def ckpt_verify(
    target: Target,
    step: Annotated[int | None, typer.Option(help="Verify only this step.")] = None,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Check each checkpoint's files against its manifest; exit 1 if any is damaged.

    Checks every file's size and SHA-256. S3 checkpoints are fetched to $TMPDIR one by one.
    """
    with user_errors():
        from grouprl.ckpt.inspect import verify_checkpoints

        results = verify_checkpoints(target, step=step, endpoint_url=endpoint_url)
    for found, problem in results:
        typer.echo(
            f"ok      step {found.step}  {found.where}"
            if problem is None
            else f"DAMAGED step {found.step}  {problem}"
        )
    damaged = sum(problem is not None for _, problem in results)
    typer.echo(f"{len(results) - damaged} of {len(results)} checkpoints ok")
    if damaged:
        raise typer.Exit(1)


@ckpt_app.command("prune")
def ckpt_prune(
    target: Target,
    keep: Annotated[int, typer.Option(help="How many of the newest checkpoints to keep.")],
    endpoint_url: EndpointUrl = None,
) -> None:
    """Remove all but the newest --keep checkpoints of a tier, and never the best
    validation's (checkpoint.keep_best).

    Manifest first: a half-removed checkpoint is never listed. Mind a run still uploading.
    """
    with user_errors():
        from grouprl.ckpt.inspect import prune

        removed = prune(target, keep=keep, endpoint_url=endpoint_url)
    for found in removed:
        typer.echo(f"removed step {found.step}  {found.where}")
    if not removed:
        typer.echo(
            f"nothing to remove: {target} holds at most {keep} checkpoints (besides the "
            "best validation's, which prune keeps)"
        )


@ckpt_app.command("export")
def ckpt_export(
    target: Target,
    out: Annotated[str, typer.Argument(help="New or empty directory for the model.")],
    step: Annotated[int | None, typer.Option(help="Step to export; default: the newest.")] = None,
    best: Annotated[bool, typer.Option("--best", help=BEST_HELP)] = False,
    endpoint_url: EndpointUrl = None,
) -> None:
    """Write a checkpoint's policy and tokenizer as a Hugging Face model directory.

    The checkpoint is verified first; an S3 checkpoint is downloaded to $TMPDIR.
    """
    with user_errors():
        from grouprl.ckpt.inspect import export as export_ckpt

        found, written = export_ckpt(target, out, step=step, best=best, endpoint_url=endpoint_url)
    typer.echo(f"exported step {found.step} ({found.where}) -> {written}")


app.command("export")(ckpt_export)  # `grouprl export`: the same command at the top level
