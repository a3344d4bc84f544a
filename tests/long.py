"""Long and short variants of the stress and learning tests.

`make test` runs the short ones: the same checks with fewer repetitions (fewer crash
trials, shorter learning runs). `make test-long` (``GROUPRL_TEST_LONG=1``) runs the
full ones, as a change to checkpointing, the loop or an algorithm deserves.
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")
LONG = os.environ.get("GROUPRL_TEST_LONG") == "1"


def short_or_long(short: T, long: T) -> T:
    return long if LONG else short
