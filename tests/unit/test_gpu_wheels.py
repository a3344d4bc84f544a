"""scripts/gpu_wheels.py's choice of wheels for a CUDA machine without network (nothing
is downloaded here): the project's dependencies and theirs, less what the machine has."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("gpu_wheels", ROOT / "scripts/gpu_wheels.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_wheels"] = module
    spec.loader.exec_module(module)
    return module


gpu_wheels = _script()


def test_a_cuda_image_with_torch_and_transformers_gets_what_it_was_seen_to_lack():
    pins = gpu_wheels.missing(gpu_wheels.assumed_have())
    assert set(pins) == {
        *("pydantic", "pydantic-core", "annotated-types", "typing-inspection"),
        *("boto3", "botocore", "s3transfer", "jmespath"),
        *("datasets", "dill", "multiprocess", "bm25s"),
        *("jsonschema", "jsonschema-specifications", "referencing", "rpds-py", "attrs"),
    }
    assert all("==" in pin for pin in pins.values())  # the versions tested here
    [core] = [r for r in gpu_wheels._needs("pydantic") if r.name == "pydantic-core"]
    assert core.specifier.contains(pins["pydantic-core"].split("==")[1])  # the one it pins


def test_a_freeze_list_adds_what_is_missing_or_too_old_there(tmp_path):
    freeze = tmp_path / "freeze.txt"
    freeze.write_text(
        "# pip list --format=freeze\n"
        "torch==2.11.0+cu130\n"
        "transformers==5.17.0\n"
        "pydantic==2.14.4\n"
        "pydantic_core==2.50.5\n"
        "annotated-types==0.7.0\n"
        "typing-inspection==0.4.5\n"
        "typing_extensions==4.17.0\n"
        "pyarrow==15.0.0\n"  # datasets needs a newer one
        "grouprl @ file:///src\n"
    )
    have = gpu_wheels.read_have(freeze)
    assert have["typing-extensions"] is not None and have["grouprl"] is None
    pins = gpu_wheels.missing(have)
    assert "pyarrow" in pins and "datasets" in pins
    assert not {"torch", "transformers", "pydantic", "pydantic-core", "ray", "vllm"} & set(pins)
