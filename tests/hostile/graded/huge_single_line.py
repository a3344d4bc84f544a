"""Writes one line of 40 MB, no newline: past the output limit of a test (file_mb), the
write fails; output_limit."""

# problem: stdio
# outcome: output_limit
import sys

sys.stdout.write("7" * (40 << 20))
