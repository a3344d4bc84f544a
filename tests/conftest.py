import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

TINY_MODEL = Path(__file__).resolve().parents[1] / "src/grouprl/assets/tiny-arith"


@pytest.fixture(scope="session")
def tiny_model_dir() -> str:
    """The shipped tiny model (GROUPRL_TEST_MODEL_DIR points at another of the same format)."""
    path = Path(os.environ.get("GROUPRL_TEST_MODEL_DIR", TINY_MODEL))
    assert (path / "config.json").is_file(), (
        f"tiny model missing at {path}: run scripts/make_tiny_model.py"
    )
    return str(path)
