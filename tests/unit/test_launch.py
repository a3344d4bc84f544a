"""The launch templates parse, and the grouprl command each runs passes the config
checks (the recipe exists, the overrides are valid keys, the batch splits over the
ranks). A run on a Ray cluster keeps all GPU work in Ray actors, so the head (where the
driver runs) asks for no GPU; every node mounts the same shared storage at SHARED, and
the run dir of every run that spans a cluster lies on it (every rank writes its
checkpoint shards there, and a RayJob deletes its cluster when it ends); every node runs
the same image."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

from grouprl.config.loader import list_recipes, load_config
from grouprl.config.schema import RunConfig
from grouprl.plan.check import check_run

LAUNCH = Path(__file__).resolve().parents[2] / "launch"
KUBERAY = ("kuberay/raycluster.yaml", "kuberay/rayjob.yaml")
SHARED = PurePosixPath("/mnt/shared")
"""Where every pod and node mounts the shared storage."""
CLAIM = "grouprl-shared"
"""The ReadWriteMany PersistentVolumeClaim of launch/kuberay/shared-pvc.yaml."""


def _check_train_command(command: str, **env: str) -> list[str]:
    """Validates `grouprl train RECIPE k=v ...` (shell variables filled from ``env``)."""
    for name, value in env.items():
        command = command.replace(f'"${name}"', value).replace(f"${name}", value)
    words = shlex.split(command)
    start = words.index("train")
    recipe, overrides = words[start + 1], words[start + 2 :]
    check_run(load_config(recipe, overrides))
    return overrides


def _on_shared(path: str | None) -> bool:
    return path is not None and PurePosixPath(path).is_relative_to(SHARED)


def _writes_to_shared_storage(cfg: RunConfig) -> bool:
    """The run dir, and a disk checkpoint dir of its own, lie on the shared storage."""
    disk = cfg.checkpoint.disk.dir
    return _on_shared(cfg.trainer.run_dir) and (disk is None or _on_shared(disk))


def _cluster_spec(template: str) -> dict:
    doc = yaml.safe_load((LAUNCH / template).read_text())
    return doc["spec"]["rayClusterSpec"] if doc["kind"] == "RayJob" else doc["spec"]


def _pods(template: str) -> dict[str, dict]:
    """A KubeRay template's pod specs: the head's, then each worker group's."""
    spec = _cluster_spec(template)
    pods = {"head": spec["headGroupSpec"]["template"]["spec"]}
    for group in spec["workerGroupSpecs"]:
        pods[group["groupName"]] = group["template"]["spec"]
    return pods


def _shared_mounts(pod: dict) -> list[str]:
    """Where each container of the pod mounts the shared claim."""
    volumes = pod.get("volumes", [])
    shared = {
        v["name"] for v in volumes if v.get("persistentVolumeClaim", {}).get("claimName") == CLAIM
    }
    return [
        mount["mountPath"]
        for container in pod["containers"]
        for mount in container.get("volumeMounts", [])
        if mount["name"] in shared
    ]


def _override(overrides: list[str], key: str) -> str:
    (value,) = [o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}=")]
    return value


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


@pytest.mark.procs
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
    assert _override(overrides, "trainer.run_dir") == f"{SHARED}/runs/{{name}}"


@pytest.mark.procs
def test_slurm_script_puts_the_run_dir_on_the_shared_dir_every_node_sees():
    script = LAUNCH / "slurm/grouprl.sbatch"
    env = {
        "PATH": "/usr/bin:/bin",
        "DRY_RUN": "1",
        "SLURM_JOB_NODELIST": "gpu1,gpu2,gpu3,gpu4",
        "SLURM_JOB_ID": "7",
        "SHARED_DIR": "/fsx/team",
    }
    out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # a file the batch host writes must be seen by all 4 nodes before Ray starts
    touch = lines.index("touch /fsx/team/.grouprl-check-7 ")
    (check,) = [i for i, x in enumerate(lines) if "test -e /fsx/team/.grouprl-check-7" in x]
    assert "--nodes=4 --ntasks=4 --ntasks-per-node=1" in lines[check]
    first_ray = min(i for i, x in enumerate(lines) if "ray start" in x)
    assert touch < check < first_ray
    (train,) = [line for line in lines if line.startswith("grouprl train")]
    overrides = _check_train_command(train)
    assert _override(overrides, "trainer.run_dir") == "/fsx/team/runs/{name}"


def test_dstack_task_heads_ray_on_node_zero_and_trains_there():
    task = yaml.safe_load((LAUNCH / "dstack/grouprl.dstack.yml").read_text())
    assert task["type"] == "task" and task["nodes"] == 2
    script = task["commands"][0]
    assert 'ray start --address="$DSTACK_MASTER_NODE_IP:6379"' in script
    (train,) = [line.strip() for line in script.splitlines() if "grouprl train" in line]
    env = dict(item.split("=", 1) for item in task["env"] if "=" in item)
    env |= {"DSTACK_NODES_NUM": "2", "DSTACK_GPUS_PER_NODE": "8"}
    overrides = _check_train_command(train, **env)
    assert _override(overrides, "trainer.run_dir") == f"{SHARED}/runs/{{name}}"
    # one filesystem on every node: the hosts' mount of it (a network volume attaches to
    # one instance only)
    assert env["SHARED_DIR"] == str(SHARED)
    assert task["volumes"] == [{"instance_path": str(SHARED), "path": str(SHARED)}]


@pytest.mark.parametrize("current", ["algo-1", "algo-2"])
@pytest.mark.procs
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
    assert " wget " in text  # KubeRay's health probes run wget in the container


def test_shared_storage_is_one_read_write_many_claim():
    claim = yaml.safe_load((LAUNCH / "kuberay/shared-pvc.yaml").read_text())
    assert (claim["kind"], claim["metadata"]["name"]) == ("PersistentVolumeClaim", CLAIM)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


@pytest.mark.parametrize("template", KUBERAY)
def test_kuberay_head_asks_for_no_gpu(template):
    head = _cluster_spec(template)["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    (container,) = head["template"]["spec"]["containers"]
    resources = container["resources"]
    asked = {key for part in resources.values() for key in part}
    assert not [key for key in asked if "gpu" in key], asked
    assert {"cpu", "memory"} <= set(resources["limits"])  # the driver's own


@pytest.mark.parametrize("template", KUBERAY)
def test_every_kuberay_pod_mounts_the_shared_claim_at_the_same_path(template):
    pods = _pods(template)
    assert len(pods) >= 2
    for group, pod in pods.items():
        assert _shared_mounts(pod) == [str(SHARED)], group


def test_every_node_runs_one_pushed_image():
    images = {
        (template, group): container["image"]
        for template in KUBERAY
        for group, pod in _pods(template).items()
        for container in pod["containers"]
    }
    dstack = yaml.safe_load((LAUNCH / "dstack/grouprl.dstack.yml").read_text())
    images["dstack", "every node"] = dstack["image"]
    assert len(set(images.values())) == 1, images
    image = next(iter(images.values()))
    # a registry every node pulls from and a tag of its own build: not a local tag
    repository, _, tag = image.rpartition(":")
    assert "/" in repository and tag and tag != "latest", image


def test_grouprl_submit_leaves_the_driver_on_the_gpu_free_head(monkeypatch, tmp_path):
    from grouprl.cluster import jobs

    sent: dict = {}

    class Dashboard:
        def submit_job(self, **kwargs):
            sent.update(kwargs)
            return "job-1"

    monkeypatch.setattr(jobs, "client", lambda address: Dashboard())
    jobs.submit(
        "qwen2.5-7b-gsm8k-2x8",
        [],
        address=None,
        working_dir=tmp_path,
        requirements=None,
        job_id=None,
    )
    assert shlex.split(sent["entrypoint"])[:4] == ["python", "-m", "grouprl", "train"]
    # an entrypoint asking for no resources runs on the head (a GPU ask would move it)
    assert not [key for key in sent if key.startswith("entrypoint_")]


def test_rayjob_runs_the_driver_on_the_head_and_its_run_dir_on_the_shared_claim():
    spec = yaml.safe_load((LAUNCH / "kuberay/rayjob.yaml").read_text())["spec"]
    words = shlex.split(spec["entrypoint"])
    assert words[:2] == ["grouprl", "train"]
    # Ray Jobs starts an entrypoint that asks for no resources on the head node
    assert not {"entrypointNumGpus", "entrypointNumCpus", "entrypointResources"} & set(spec)
    cfg = load_config(words[2], words[3:])
    # all GPU work in Ray actors: the driver on the GPU-free head needs none
    assert cfg.world_size > 1 and cfg.rollout_in_actors
    # the cluster goes when the job ends; the run dir on the claim stays, and a retry resumes
    assert spec["shutdownAfterJobFinishes"] is True
    assert _writes_to_shared_storage(cfg), cfg.trainer.run_dir
    assert cfg.trainer.resume == "auto"


def test_recipes_that_span_a_cluster_write_their_run_dir_to_shared_storage():
    spanning = set()
    for name, _ in list_recipes():
        cfg = load_config(name, [])
        if cfg.cluster.nodes > 1 or cfg.world_size > 1 or cfg.rollout_in_actors:
            spanning.add(name)
            assert _writes_to_shared_storage(cfg), (name, cfg.trainer.run_dir)
    assert {"qwen2.5-7b-gsm8k-2x8", "qwen2.5-72b-gspo-4x8", "qwen2.5-3b-search-1x8"} <= spanning
