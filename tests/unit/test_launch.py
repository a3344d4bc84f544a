"""The launch templates parse, and the grouprl command each runs passes the config
checks (the recipe exists, the overrides are valid keys, the batch splits over the
ranks)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grouprl.config.loader import load_config
from grouprl.plan.check import check_run

LAUNCH = Path(__file__).resolve().parents[2] / "launch"


def _check_train_command(command: str, **env: str) -> list[str]:
    """Validates `grouprl train RECIPE k=v ...` (shell variables filled from ``env``)."""
    for name, value in env.items():
        command = command.replace(f'"${name}"', value).replace(f"${name}", value)
    words = shlex.split(command)
    start = words.index("train")
    recipe, overrides = words[start + 1], words[start + 2 :]
    check_run(load_config(recipe, overrides))
    return overrides


def test_kuberay_raycluster_has_a_head_and_gpu_workers():
    spec = yaml.safe_load((LAUNCH / "kuberay/raycluster.yaml").read_text())
    assert (spec["apiVersion"], spec["kind"]) == ("ray.io/v1", "RayCluster")
    assert spec["spec"]["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    (workers,) = spec["spec"]["workerGroupSpecs"]
    limits = workers["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == workers["rayStartParams"]["num-gpus"] == "8"


def test_kuberay_rayjob_runs_a_valid_recipe_on_as_many_nodes_as_it_asks():
    spec = yaml.safe_load((LAUNCH / "kuberay/rayjob.yaml").read_text())
    assert (spec["apiVersion"], spec["kind"]) == ("ray.io/v1", "RayJob")
    _check_train_command(spec["spec"]["entrypoint"])
    recipe = shlex.split(spec["spec"]["entrypoint"])[2]
    cfg = load_config(recipe, [])
    (workers,) = spec["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["replicas"] == cfg.cluster.nodes
    assert int(workers["rayStartParams"]["num-gpus"]) == cfg.cluster.gpus_per_node


def test_slurm_script_dry_run_starts_ray_on_every_node_then_trains(tmp_path):
    script = LAUNCH / "slurm/grouprl.sbatch"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    env = {"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "SLURM_JOB_NODELIST": "gpu1,gpu2"}
    out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any("-w gpu1 ray start --head" in line for line in lines)
    for worker in ("gpu2",):
        assert any(f"-w {worker} ray start --block --address=gpu1:6379" in x for x in lines)
    (train,) = [line for line in lines if line.startswith("grouprl train")]
    overrides = _check_train_command(train)
    assert "cluster.nodes=2" in overrides and "trainer.resume=auto" in overrides


def test_dstack_task_heads_ray_on_node_zero_and_trains_there():
    task = yaml.safe_load((LAUNCH / "dstack/grouprl.dstack.yml").read_text())
    assert task["type"] == "task" and task["nodes"] == 2
    script = task["commands"][0]
    assert 'ray start --address="$DSTACK_MASTER_NODE_IP:6379"' in script
    (train,) = [line.strip() for line in script.splitlines() if "grouprl train" in line]
    env = {"RECIPE": "qwen2.5-7b-gsm8k-2x8", "DSTACK_NODES_NUM": "2", "DSTACK_GPUS_PER_NODE": "8"}
    _check_train_command(train, **env)


@pytest.mark.parametrize("current", ["algo-1", "algo-2"])
def test_sagemaker_entry_dry_run_on_two_hosts(tmp_path, current):
    hps = {"recipe": "qwen2.5-7b-gsm8k-2x8", "overrides": "train.lr=2e-6", "train.seed": 3}
    env = os.environ | {
        "SM_HOSTS": json.dumps(["algo-1", "algo-2"]),
        "SM_CURRENT_HOST": current,
        "SM_NUM_GPUS": "8",
        "SM_MODEL_DIR": str(tmp_path / "model"),
        "SM_HPS": json.dumps(hps),
    }
    entry = LAUNCH / "sagemaker/entry.py"
    out = subprocess.run(
        [sys.executable, str(entry), "--dry-run"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    commands = [line[2:] for line in out.stdout.splitlines() if line.startswith("+ ")]
    if current == "algo-2":
        assert len(commands) == 1 and "--address=algo-1:6379" in commands[0]
        return
    assert "--head" in commands[0]
    overrides = _check_train_command(commands[1])
    for expected in (
        "train.lr=2e-6",
        "train.seed=3",
        "cluster.nodes=2",
        "checkpoint.disk.dir=/opt/ml/checkpoints",
        "trainer.resume=auto",
    ):
        assert expected in overrides
    assert commands[2].endswith(f"export /opt/ml/checkpoints {tmp_path / 'model'}")


def test_dockerfile_installs_the_gpu_extra_and_exposes_ray():
    text = (LAUNCH / "docker/Dockerfile").read_text()
    instructions = [line.split()[0] for line in text.splitlines() if line and line[0].isalpha()]
    assert instructions[0] == "FROM" and "ENTRYPOINT" in instructions
    assert 'pip install ".[gpu]"' in text and "8265" in text
