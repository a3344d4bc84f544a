"""`grouprl submit` and `grouprl jobs`: runs as Ray Jobs on a cluster's dashboard.

grouprl submit RECIPE k=v ... ──► the config is checked here first (fails in < 1 s)
     │  runtime env: the working dir (code, recipe files) and pip requirements
     ▼
Ray Jobs (dashboard, :8265) ──► `python -m grouprl train RECIPE k=v ...` on the head
     │                           node; RAY_ADDRESS is set there, so cluster.nodes > 1
     ▼                           places training ranks over the cluster's nodes
grouprl jobs ls | status | logs | stop
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from pathlib import Path

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
EXCLUDES = [".venv", ".git", "runs", "**/__pycache__", "*.egg-info", ".pytest_cache", "*.log"]
"""Never uploaded with the working dir: environments, run outputs, caches."""


class JobError(RuntimeError):
    user_error = True


def dashboard_address(address: str | None) -> str:
    """--address, else RAY_API_SERVER_ADDRESS (as `ray job` reads it), else the local
    dashboard."""
    return address or os.environ.get("RAY_API_SERVER_ADDRESS") or DEFAULT_ADDRESS


def client(address: str | None):
    from ray.job_submission import JobSubmissionClient

    url = dashboard_address(address)
    try:
        return JobSubmissionClient(url)
    except Exception as err:
        raise JobError(
            f"cannot reach the Ray dashboard at {url} ({type(err).__name__}: {err}). Start a "
            "cluster (`ray start --head`, KubeRay, launch/slurm.sbatch) and pass its dashboard "
            "with --address http://HOST:8265 (or set RAY_API_SERVER_ADDRESS)."
        ) from None


def runtime_env(working_dir: Path, requirements: Path | None) -> dict:
    """The working dir (code and recipe files, without environments and outputs), the
    pip requirements, and the source tree on PYTHONPATH when the dir is a grouprl checkout."""
    if not working_dir.is_dir():
        raise JobError(f"--working-dir {working_dir}: not a directory")
    env: dict = {"working_dir": str(working_dir), "excludes": EXCLUDES}
    if (working_dir / "src" / "grouprl").is_dir():
        env["env_vars"] = {"PYTHONPATH": "src"}
    if requirements is not None:
        if not requirements.is_file():
            raise JobError(f"--requirements {requirements}: no such file")
        lines = requirements.read_text().splitlines()
        env["pip"] = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    return env


def entrypoint(recipe: str, overrides: list[str], *, working_dir: Path) -> str:
    """The job's command. A recipe file must lie inside the working dir (it is uploaded
    with it) and is named relative to it."""
    path = Path(recipe)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        try:
            recipe = str(path.resolve().relative_to(working_dir.resolve()))
        except ValueError:
            raise JobError(
                f"recipe {recipe} is outside --working-dir {working_dir}, so the cluster would "
                "not have it; run from the directory that holds it or pass --working-dir"
            ) from None
    return shlex.join(["python", "-m", "grouprl", "train", recipe, *overrides])


def submit(
    recipe: str,
    overrides: list[str],
    *,
    address: str | None,
    working_dir: Path,
    requirements: Path | None,
    job_id: str | None,
) -> str:
    jobs = client(address)
    return jobs.submit_job(
        entrypoint=entrypoint(recipe, overrides, working_dir=working_dir),
        runtime_env=runtime_env(working_dir, requirements),
        submission_id=job_id,
        metadata={"grouprl_recipe": recipe},
    )


def follow(address: str | None, job_id: str) -> str:
    """Streams the job's log to stdout until it ends; returns its final status."""
    jobs = client(address)

    async def tail() -> None:
        async for chunk in jobs.tail_job_logs(job_id):
            sys.stdout.write(chunk)
            sys.stdout.flush()

    asyncio.run(tail())
    return str(status(address, job_id)[0])


def status(address: str | None, job_id: str) -> tuple[str, str]:
    info = _info(client(address), job_id)
    return str(info.status.value if hasattr(info.status, "value") else info.status), (
        info.message or ""
    )


def logs(address: str | None, job_id: str) -> str:
    jobs = client(address)
    _info(jobs, job_id)
    return jobs.get_job_logs(job_id)


def stop(address: str | None, job_id: str) -> bool:
    jobs = client(address)
    _info(jobs, job_id)
    return jobs.stop_job(job_id)


def list_jobs(address: str | None) -> list:
    """Submitted jobs, oldest first (not the drivers that merely connected to the cluster)."""
    jobs = [j for j in client(address).list_jobs() if j.submission_id]
    return sorted(jobs, key=lambda j: j.start_time or 0)


def _info(jobs, job_id: str):
    try:
        return jobs.get_job_info(job_id)
    except RuntimeError as err:
        raise JobError(
            f"no job {job_id!r} on this cluster ({err}); see `grouprl jobs ls`"
        ) from None
