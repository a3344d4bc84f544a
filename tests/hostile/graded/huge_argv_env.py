"""Re-executes itself with a huge argument list and environment: exec fails (E2BIG) and
the program exits with an error: crashed."""

# problem: stdio
# outcome: crashed
import os
import sys

os.execve(
    sys.executable, [sys.executable, "-c", "pass"] + ["x" * 4096] * 4096, {"X": "y" * (1 << 22)}
)
