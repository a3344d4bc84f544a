"""Ray Jobs: ``submit`` (a training run as a job, its config checked here first) and
``jobs ls / status / logs / stop``."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from grouprl.cli.app import Overrides, Recipe, app, user_errors
from grouprl.cluster import jobs
from grouprl.config.loader import load_config
from grouprl.driver.preflight import check_before_loading

Address = Annotated[
    str | None,
    typer.Option(
        help="Ray dashboard URL (default: $RAY_API_SERVER_ADDRESS, else http://127.0.0.1:8265)."
    ),
]
JobId = Annotated[str, typer.Argument(help="The job's submission id (see `grouprl jobs ls`).")]
jobs_app = typer.Typer(help="Ray Jobs submitted with `grouprl submit`.", no_args_is_help=True)
app.add_typer(jobs_app, name="jobs")


@app.command()
def submit(
    recipe: Recipe,
    overrides: Overrides = None,
    address: Address = None,
    working_dir: Annotated[
        Path, typer.Option(help="Uploaded as the job's working dir (code, recipe files).")
    ] = Path("."),
    requirements: Annotated[
        Path | None, typer.Option(help="pip requirements file installed for the job.")
    ] = None,
    job_id: Annotated[str | None, typer.Option(help="Submission id (default: Ray's).")] = None,
    wait: Annotated[
        bool, typer.Option(help="Stream the job's log until it ends; exit 1 unless it succeeds.")
    ] = True,
) -> None:
    """Run `grouprl train RECIPE [overrides]` as a Ray Job on a cluster (config checked here
    first). With cluster.nodes > 1 the training ranks spread over the cluster's nodes."""
    with user_errors():
        # data files and reward modules this machine lacks may be on the cluster
        check_before_loading(load_config(recipe, overrides or []), missing_ok=True)

        submitted = jobs.submit(
            recipe,
            overrides or [],
            address=address,
            working_dir=working_dir,
            requirements=requirements,
            job_id=job_id,
        )
        typer.echo(f"submitted job {submitted}; `grouprl jobs logs {submitted}` shows its log")
        if not wait:
            return
        final = jobs.follow(address, submitted)
    typer.echo(f"job {submitted}: {final}")
    if final != "SUCCEEDED":
        raise typer.Exit(1)


@jobs_app.command("ls")
def jobs_ls(address: Address = None) -> None:
    """The cluster's jobs, oldest first."""
    with user_errors():
        found = jobs.list_jobs(address)
    table = Table(box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    for column in ("job", "status", "recipe", "started", "entrypoint"):
        table.add_column(column, no_wrap=column != "entrypoint")
    for job in found:
        started = job.start_time and datetime.fromtimestamp(job.start_time / 1000)
        table.add_row(
            job.submission_id or job.job_id or "?",
            str(job.status),  # JobStatus prints its value
            (job.metadata or {}).get("grouprl_recipe", ""),
            started.strftime("%Y-%m-%d %H:%M:%S") if started else "",
            job.entrypoint,
        )
    Console().print(table)


@jobs_app.command("status")
def jobs_status(job: JobId, address: Address = None) -> None:
    """The job's status and Ray's message about it."""
    with user_errors():
        state, message = jobs.status(address, job)
    typer.echo(f"{job}: {state}" + (f" ({message})" if message else ""))


@jobs_app.command("logs")
def jobs_logs(
    job: JobId,
    address: Address = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream until it ends.")] = False,
) -> None:
    """The job's log (its driver's stdout and stderr)."""
    with user_errors():
        if follow:
            jobs.follow(address, job)
        else:
            typer.echo(jobs.logs(address, job), nl=False)


@jobs_app.command("stop")
def jobs_stop(job: JobId, address: Address = None) -> None:
    """Stop the job (SIGTERM to its driver: grouprl saves a checkpoint and exits)."""
    with user_errors():
        stopped = jobs.stop(address, job)
    typer.echo(f"{job}: {'stopping' if stopped else 'already finished'}")
