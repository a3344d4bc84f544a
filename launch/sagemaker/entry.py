"""SageMaker training-job entry point for grouprl (also HyperPod-style clusters).

    SM_HOSTS ["algo-1", "algo-2", ...]     the first host heads Ray, the others join it
    SM_HPS   {"recipe": ..., "overrides": "k=v k=v", "checkpoint_dir": ..., "k": v}
                                           other hyperparameters become k=v overrides
    SM_MODEL_DIR                           the final policy, as a Hugging Face model
    /opt/ml/checkpoints                    the disk checkpoint tier: SageMaker syncs it to
                                           S3 and restores it after a spot interruption,
                                           and trainer.resume=auto continues from it

    python entry.py [--dry-run]            (--dry-run prints the commands)

Runs with the estimator's ``entry_point="entry.py", source_dir="launch/sagemaker"`` on an
image with grouprl installed (launch/docker/Dockerfile).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

RAY_PORT = 6379


def hyperparameters() -> dict:
    if "SM_HPS" in os.environ:
        return json.loads(os.environ["SM_HPS"])
    path = "/opt/ml/input/config/hyperparameters.json"
    return json.load(open(path)) if os.path.exists(path) else {}


def plan(env: dict[str, str]) -> tuple[list[list[str]], str | None]:
    """The commands this host runs, and the run directory (None on a worker host)."""
    hosts = json.loads(env.get("SM_HOSTS", '["algo-1"]'))
    current = env.get("SM_CURRENT_HOST", hosts[0])
    hps = dict(hyperparameters())
    recipe = str(hps.pop("recipe", "tiny-arith"))
    overrides = shlex.split(str(hps.pop("overrides", "")))
    checkpoints = str(hps.pop("checkpoint_dir", "/opt/ml/checkpoints"))
    overrides += [f"{key}={value}" for key, value in hps.items()]
    run_dir = os.path.join(env.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"), "run")
    gpus = int(env.get("SM_NUM_GPUS", "0"))
    overrides += [
        f"trainer.run_dir={run_dir}",
        f"checkpoint.disk.dir={checkpoints}",
        "trainer.resume=auto",
    ]
    head = hosts[0]
    ray = [sys.executable, "-m", "ray.scripts.scripts", "start"]
    if len(hosts) > 1:
        address = f"{head}:{RAY_PORT}"
        overrides += [f"cluster.address={address}", f"cluster.nodes={len(hosts)}"]
        if gpus:
            overrides.append(f"cluster.gpus_per_node={gpus}")
        if current != head:
            return [[*ray, f"--address={address}", f"--num-gpus={gpus}", "--block"]], None
    commands = []
    if len(hosts) > 1:
        commands.append([*ray, "--head", f"--port={RAY_PORT}", f"--num-gpus={gpus}"])
    grouprl = [sys.executable, "-m", "grouprl"]
    commands.append([*grouprl, "train", recipe, *overrides])
    model_dir = env.get("SM_MODEL_DIR", "/opt/ml/model")
    commands.append([*grouprl, "export", checkpoints, model_dir])  # the newest checkpoint
    return commands, run_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    commands, _ = plan(dict(os.environ))
    for command in commands:
        print("+", shlex.join(command), flush=True)
        if args.dry_run:
            continue
        if "--head" in command:  # the Ray head starts in the background
            subprocess.run(command, check=True)
            time.sleep(5)
            continue
        code = subprocess.run(command).returncode
        if code != 0:
            return code  # a failed run never exits 0; SageMaker marks the job failed
    return 0


if __name__ == "__main__":
    sys.exit(main())
