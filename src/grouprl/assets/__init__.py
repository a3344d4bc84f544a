"""Models shipped inside the package, addressed as ``builtin:NAME``."""

from __future__ import annotations

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent
BUILTIN_PREFIX = "builtin:"


def builtin_models() -> list[str]:
    return sorted(p.name for p in ASSETS_DIR.iterdir() if (p / "config.json").is_file())


def resolve_model_path(path: str) -> str:
    """``builtin:NAME`` -> the shipped directory; anything else is returned as given
    (a local directory or a hub name, which transformers resolves itself)."""
    if not path.startswith(BUILTIN_PREFIX):
        return path
    name = path[len(BUILTIN_PREFIX) :]
    if name not in builtin_models():
        raise ModelPathError(
            f"model.path={path!r}: no shipped model named {name!r}; shipped models: "
            f"{[BUILTIN_PREFIX + m for m in builtin_models()]}. Use one of them, a local "
            "directory, or a Hugging Face hub name."
        )
    return str(ASSETS_DIR / name)


class ModelPathError(ValueError):
    user_error = True
