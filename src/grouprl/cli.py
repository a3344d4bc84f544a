"""The ``grouprl`` command line, a thin layer over the Python API (``grouprl/api.py``).

Every command validates the whole config (schema and batch arithmetic) before
anything heavy is imported, so a mistake fails in well under a second. User
errors (``ConfigError`` and any exception whose class sets ``user_error =
True``) print in red on stderr and exit 2, without a traceback. ``--help``,
``recipes`` and ``plan`` never import torch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from grouprl import api
from grouprl.api import DEFAULT_EVAL_RECIPE
from grouprl.config.loader import list_recipes, load_config
from grouprl.config.redact import RESOLVED_CONFIG_FILE
from grouprl.config.schema import RunConfig
from grouprl.driver.preflight import check_before_loading

if TYPE_CHECKING:
    from grouprl.ckpt.inspect import Row

USER_ERROR_EXIT = 2

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

BEST_HELP = (
    "Export the best validation's checkpoint (runs with checkpoint.keep_best=true; "
    "`grouprl ckpt ls` marks it) instead of the newest."
)


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


def _load_checked(
    recipe: str, overrides: list[str] | None, *, missing_ok: bool = False
) -> RunConfig:
    cfg = load_config(recipe, overrides or [])
    # raises ConfigError on batch arithmetic, memory, data files, reward functions
    check_before_loading(cfg, missing_ok=missing_ok)
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
def tasks() -> None:
    """List reasoning-gym's tasks, one per line: name and description (the graders extra;
    train on one with data.train={source: reasoning_gym:NAME, size: N})."""
    with _user_errors():
        from grouprl.data.reasoning_gym import task_names

        found = task_names()
        width = max((len(name) for name in found), default=0)
        for name, description in found.items():
            typer.echo(f"{name:<{width}}  {description}".rstrip())


@app.command()
def init(
    name: Annotated[
        str, typer.Argument(help="The recipe's name: writes NAME.yaml (a path works too).")
    ],
) -> None:
    """Write NAME.yaml: a commented recipe to start from (the tiny model on CPU, as written)."""
    with _user_errors():
        from grouprl.config.starter import write_starter

        path = write_starter(name)
    typer.echo(f"wrote {path}: `grouprl plan {path}` checks it, `grouprl train {path}` runs it")


@app.command()
def convert(
    verl_config: Annotated[str, typer.Argument(help="verl's YAML config (main_ppo's keys).")],
    out: Annotated[
        str | None, typer.Option(help="Recipe to write; default: STEM-grouprl.yaml here.")
    ] = None,
) -> None:
    """Write a grouprl recipe from a verl config; keys it cannot convert are listed on top."""
    with _user_errors():
        from grouprl.config.convert import convert_file

        path, converted = convert_file(verl_config, out=out)
    left = f"{len(converted.left)} keys not converted (listed at its top); " * bool(converted.left)
    typer.echo(f"wrote {path}: {left}`grouprl plan {path}` checks it")


@app.command()
def plan(
    recipe: Recipe,
    overrides: Overrides = None,
    here: Annotated[
        bool,
        typer.Option(
            "--here",
            help="Describe this machine (train.device=auto resolved here) instead of the "
            "machines the recipe asks for (train.device, cluster.gpus_per_node, cluster.gpu).",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object instead of the tables: the derived quantities, the "
            "memory plan's terms in bytes and the failing checks (exit code 2 if any).",
        ),
    ] = False,
) -> None:
    """Validate a run and print every derived quantity (batches, per-rank passes, steps,
    tokens, rollout replicas, memory) without loading anything, for the recipe's target.
    A failing check is printed after the tables (exit code 2)."""
    from grouprl.config.checks import raise_problems
    from grouprl.driver.preflight import input_problems
    from grouprl.plan.check import checked_run
    from grouprl.plan.render import render_plan
    from grouprl.plan.report import plan_json
    from grouprl.rewards.registry import reward_styles
    from grouprl.sandbox.program import program_sandbox_line

    with _user_errors():
        try:
            cfg = load_config(recipe, overrides or [])
        except Exception as err:
            if not (as_json and getattr(err, "user_error", False)):
                raise
            typer.echo(json.dumps({"recipe": recipe, "ok": False, "problems": [str(err)]}))
            raise typer.Exit(USER_ERROR_EXIT) from None
        notes: list[str] = []  # the rows' counts and prompt lengths (rollout/row_checks)
        checked = checked_run(cfg, inputs=input_problems(cfg, notes=notes))
        styles = reward_styles(cfg.reward.functions)
        if as_json:
            shown = plan_json(cfg, checked, here=here, reward_styles=styles)
            typer.echo(json.dumps({"recipe": recipe, **shown}))
            raise typer.Exit(USER_ERROR_EXIT if checked.problems else 0)
        if checked.derived is not None:
            Console().print(render_plan(cfg, checked.derived, here=here, reward_styles=styles))
            for note in notes:
                Console().print(Text(note), soft_wrap=True)
            if (programs := program_sandbox_line(cfg.reward.functions)) is not None:
                line, enclosed = programs  # without namespaces: a warning
                text = line if enclosed else f"WARNING: {line}"
                Console().print(Text(text, style="" if enclosed else "yellow"), soft_wrap=True)
        raise_problems(checked.problems)


@app.command()
def train(recipe: Recipe, overrides: Overrides = None) -> None:
    """Train: validate the config, then load the model and run.

    Exit codes: 0 done, or stopped at trainer.stop_after; 75 preempted, after its save.

    2: a user error, or a run that cannot train (RUN/summary.json says why).

    1: any other error."""
    with _user_errors():
        from grouprl.ckpt.preempt import Preempted

        try:
            api.train(recipe, overrides or [])  # checks everything before loading
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
        api.evaluate(target, recipe, overrides or [])


@app.command()
def export(
    run: Annotated[
        str, typer.Argument(help="A run directory or a checkpoint (as for `grouprl ckpt export`).")
    ],
    out: Annotated[str, typer.Argument(help="Output directory for the Hugging Face model.")],
    step: Annotated[
        int | None, typer.Option(help="Checkpoint step to export; default: the latest.")
    ] = None,
    best: Annotated[bool, typer.Option("--best", help=BEST_HELP)] = False,
) -> None:
    """Export a run's checkpoint as a Hugging Face model directory (= `grouprl ckpt export`)."""
    ckpt_export(run, out, step=step, best=best, endpoint_url=None)


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


ckpt_app = typer.Typer(
    help="List, verify, prune and export checkpoints in any tier (disk, memory, S3).",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
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
    with _user_errors():
        from grouprl.ckpt.inspect import list_checkpoints

        rows = list_checkpoints(target, endpoint_url=endpoint_url)
    console = Console()
    console.print(Text(_tier_line(rows)), soft_wrap=True)
    console.print(_checkpoint_table(rows))
    for best in (row.best for row in rows if row.best is not None):
        console.print(Text(f"* {best.describe()}: `grouprl ckpt prune` keeps it"), soft_wrap=True)
    for row in rows:
        if row.problem is not None:
            console.print(
                Text(f"step {row.found.step}: {row.problem}", style="red"), soft_wrap=True
            )


def _tier_line(rows: list[Row]) -> str:
    from grouprl.plan.memory import human_bytes

    root = rows[0].found.where.rstrip("/").rpartition("/")[0]
    total = sum(row.manifest.bytes for row in rows if row.manifest is not None)
    return f"{len(rows)} checkpoint{'s' * (len(rows) != 1)} in {root}, {human_bytes(total)}"


def _checkpoint_table(rows: list[Row]) -> Table:
    """One row per checkpoint, located relative to the tier printed above it."""
    from datetime import datetime

    from grouprl.plan.memory import human_bytes

    table = Table(box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    # on a narrow terminal the text folds (the date from its time, the config hash);
    # the step, the other numbers and the checkpoint's name stay whole
    whole = {"step": max(len(str(row.found.step)) for row in rows)}
    whole["location"] = max(len(row.found.where.rstrip("/").rpartition("/")[2]) for row in rows)
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
        m, name = row.manifest, row.found.where.rstrip("/").rpartition("/")[2]
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
    with _user_errors():
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
    with _user_errors():
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
    with _user_errors():
        from grouprl.ckpt.inspect import export as export_ckpt

        found, written = export_ckpt(target, out, step=step, best=best, endpoint_url=endpoint_url)
    typer.echo(f"exported step {found.step} ({found.where}) -> {written}")


# --- Ray Jobs ------------------------------------------------------------------------

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
    with _user_errors():
        # data files and reward modules this machine lacks may be on the cluster
        _load_checked(recipe, overrides, missing_ok=True)
        from grouprl.cluster import jobs

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
    from datetime import datetime

    with _user_errors():
        from grouprl.cluster import jobs

        found = jobs.list_jobs(address)
    table = Table(box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    for column in ("job", "status", "recipe", "started", "entrypoint"):
        table.add_column(column, no_wrap=column != "entrypoint")
    for job in found:
        started = job.start_time and datetime.fromtimestamp(job.start_time / 1000)
        table.add_row(
            job.submission_id or job.job_id or "?",
            str(getattr(job.status, "value", job.status)),
            (job.metadata or {}).get("grouprl_recipe", ""),
            started.strftime("%Y-%m-%d %H:%M:%S") if started else "",
            job.entrypoint,
        )
    Console().print(table)


@jobs_app.command("status")
def jobs_status(job: JobId, address: Address = None) -> None:
    """The job's status and Ray's message about it."""
    with _user_errors():
        from grouprl.cluster import jobs

        state, message = jobs.status(address, job)
    typer.echo(f"{job}: {state}" + (f" ({message})" if message else ""))


@jobs_app.command("logs")
def jobs_logs(
    job: JobId,
    address: Address = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream until it ends.")] = False,
) -> None:
    """The job's log (its driver's stdout and stderr)."""
    with _user_errors():
        from grouprl.cluster import jobs

        if follow:
            jobs.follow(address, job)
        else:
            typer.echo(jobs.logs(address, job), nl=False)


@jobs_app.command("stop")
def jobs_stop(job: JobId, address: Address = None) -> None:
    """Stop the job (SIGTERM to its driver: grouprl saves a checkpoint and exits)."""
    with _user_errors():
        from grouprl.cluster import jobs

        stopped = jobs.stop(address, job)
    typer.echo(f"{job}: {'stopping' if stopped else 'already finished'}")


def main() -> None:
    """Console entry point (``grouprl``)."""
    app()
