"""The resolved config as saved with every run, secrets redacted.

A key is secret when one of its words (split on ``_``, ``-`` and case changes)
is token, secret, password, passwd or credential(s), or when it contains
``api_key``/``apikey``. Word matching keeps ``max_tokens`` and friends visible.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from grouprl.config.schema import RunConfig

REDACTED = "***REDACTED***"
RESOLVED_CONFIG_FILE = "config.yaml"
"""File name of the resolved config inside a run directory."""

SECRET_WORDS = {"token", "secret", "password", "passwd", "credential", "credentials"}


def is_secret_key(key: str) -> bool:
    """``api_key``, ``hf_token``, ``aws_secret_access_key``: yes. ``max_tokens``: no."""
    flat = key.lower().replace("-", "_")
    if "api_key" in flat or "apikey" in flat:
        return True
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key).lower().replace("-", "_").split("_")
    return any(word in SECRET_WORDS for word in words)


def redacted_dict(cfg: RunConfig) -> dict[str, Any]:
    """``cfg`` as plain YAML-able data with every set secret replaced by ``REDACTED``."""
    return _redact(cfg.model_dump(mode="json"))


def save_resolved(cfg: RunConfig, path: str | Path) -> Path:
    """Write the redacted resolved config as YAML (atomically) and return its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# Resolved config of run {cfg.name!r}; secrets redacted.\n"
        f"# Re-run with: grouprl train {path}\n"
    )
    body = yaml.safe_dump(redacted_dict(cfg), sort_keys=False, allow_unicode=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(header + body)
    os.replace(tmp, path)
    return path


def _redact(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: REDACTED if is_secret_key(str(key)) and value is not None else _redact(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_redact(item) for item in node]
    return node
