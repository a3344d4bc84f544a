"""The GPU tier: every test under tests/gpu is marked ``gpu`` and, where torch sees no
CUDA device, skipped with the reason. ``make test-gpu`` runs the tier; ``make test``
deselects it (``-m "not gpu"``).

The tests run on the shipped tiny model (no network) and need a few minutes on one GPU.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from cuda_samples import QUESTIONS, render_prompts

HERE = Path(__file__).resolve().parent

# cuBLAS reads this once, when a process first uses it; deterministic algorithms
# (test_cuda_run.py) refuse cuBLAS calls without it.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def _no_gpu_reason() -> str | None:
    if torch.cuda.is_available():
        return None
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return f"needs a CUDA GPU: torch {torch.__version__} ({build}) sees none"


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # this hook sees the whole session's items, not only this directory's
    reason = _no_gpu_reason()
    for item in items:
        if HERE not in item.path.resolve().parents:
            continue
        item.add_marker(pytest.mark.gpu)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def cuda() -> torch.device:
    return torch.device("cuda")


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    """The shipped model in float32 on the CPU: tests copy it where they need it."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def prompts(tokenizer) -> list[list[int]]:
    return render_prompts(tokenizer, QUESTIONS)
