"""Which models an OpenAI-compatible server serves, asked once before anything loads (a
judge's ``url``, the teacher's ``server_url``): one ``GET .../models``, bounded by
``PROBE_S``, never retried. No torch."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

PROBE_S = 2.0
"""Seconds a server has to answer ``GET .../models`` at config time."""


def served_models(models_url: str) -> list[str] | str:
    """The model ids ``GET models_url`` lists, or why it did not answer within ``PROBE_S``
    as an OpenAI-compatible server does (the error's type and reason)."""
    try:
        with urllib.request.urlopen(models_url, timeout=PROBE_S) as response:
            return [m.get("id") for m in json.loads(response.read()).get("data", [])]
    except (urllib.error.URLError, OSError, ValueError, AttributeError) as err:
        reason = err.reason if isinstance(err, urllib.error.URLError) else err
        return f"{type(err).__name__}: {reason}"
