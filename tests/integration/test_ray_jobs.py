"""`grouprl submit` runs a recipe as a Ray Job on a 2-node cluster (started by the test)
to completion; `grouprl jobs ls|status|logs` show it; a bad config never reaches the
cluster."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ray_cluster import ray_env

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[2]


def _grouprl(*args: str, timeout: float = 480) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grouprl", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=os.environ | ray_env() | {"COLUMNS": "250"},
        timeout=timeout,
    )


def test_submit_runs_a_recipe_to_completion_and_jobs_show_it(ray_cluster, tmp_path):
    url = ray_cluster.dashboard_url
    done = _grouprl(
        "submit",
        "tiny-arith",
        "rollout.engine=hf",
        # a small run: the test is about the job, not the training (16 samples a step)
        "train.steps=1",
        "data.batch_size=4",
        "rollout.n=4",
        "rollout.max_tokens=32",
        "train.mini_batch_size=16",
        "train.micro_batch_size=8",
        "data.eval.limit=8",
        "data.train.limit=64",
        "metrics.progress=false",
        "metrics.report=false",  # a subprocess: conftest's default does not reach it
        f"trainer.run_dir={tmp_path}/{{name}}",
        "--address",
        url,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    job = re.search(r"submitted job (\S+);", done.stdout).group(1)
    assert f"job {job}: SUCCEEDED" in done.stdout
    assert "held-out accuracy:" in done.stdout  # the job's log, streamed
    assert (tmp_path / "tiny-arith" / "summary.json").is_file()

    listed = _grouprl("jobs", "ls", "--address", url)
    assert re.search(rf"{job}\s+SUCCEEDED\s+tiny-arith", listed.stdout), listed.stdout
    assert _grouprl("jobs", "status", job, "--address", url).stdout.strip() == (
        f"{job}: SUCCEEDED (Job finished successfully.)"
    )
    log = _grouprl("jobs", "logs", job, "--address", url)
    assert log.returncode == 0 and "held-out accuracy:" in log.stdout, log.stderr


def test_a_bad_config_is_refused_before_anything_is_submitted(ray_cluster):
    url = ray_cluster.dashboard_url
    before = _grouprl("jobs", "ls", "--address", url).stdout
    bad = _grouprl("submit", "tiny-arith", "rollout.n=3", "--address", url)
    assert bad.returncode == 2
    assert "rollout.n" in bad.stderr and "Traceback" not in bad.stderr
    assert _grouprl("jobs", "ls", "--address", url).stdout == before


def test_unknown_job_and_unreachable_dashboard_are_clear_errors(ray_cluster):
    missing = _grouprl("jobs", "logs", "no-such-job", "--address", ray_cluster.dashboard_url)
    assert missing.returncode == 2 and "no job 'no-such-job'" in missing.stderr
    down = _grouprl("jobs", "ls", "--address", "http://127.0.0.1:9")
    assert down.returncode == 2 and "cannot reach the Ray dashboard" in down.stderr
