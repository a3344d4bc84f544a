"""Commands that read and write recipes without loading a model: ``recipes``, ``tasks``,
``init``, ``convert`` and ``plan`` (none of them imports torch, vLLM or Ray)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from grouprl.cli.app import USER_ERROR_EXIT, Overrides, Recipe, app, is_user_error, say, user_errors
from grouprl.config.convert import convert_file
from grouprl.config.errors import raise_problems
from grouprl.config.loader import list_recipes, load_config
from grouprl.config.starter import write_starter
from grouprl.data.reasoning_gym import task_names
from grouprl.driver.preflight import input_problems
from grouprl.plan.check import checked_run
from grouprl.plan.render import render_plan
from grouprl.plan.report import plan_json
from grouprl.rewards.registry import reward_styles
from grouprl.sandbox.program import program_sandbox_line


@app.command()
def recipes() -> None:
    """List the packaged recipes, one per line: name and description."""
    with user_errors():
        found = list_recipes()
        width = max((len(name) for name, _ in found), default=0)
        for name, description in found:
            typer.echo(f"{name:<{width}}  {description}")


@app.command()
def tasks() -> None:
    """List reasoning-gym's tasks, one per line: name and description (the graders extra;
    train on one with data.train={source: reasoning_gym:NAME, size: N})."""
    with user_errors():
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
    with user_errors():
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
    with user_errors():
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
    with user_errors():
        try:
            cfg = load_config(recipe, overrides or [])
        except Exception as err:
            if not (as_json and is_user_error(err)):
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
                say(note)
            if (programs := program_sandbox_line(cfg.reward.functions)) is not None:
                line, enclosed = programs  # without namespaces: a warning
                text = line if enclosed else f"WARNING: {line}"
                say(text, style="" if enclosed else "yellow")
        raise_problems(checked.problems)
