"""Prints the first line of the answer, then leaves with exit code 0 (os._exit, so
nothing buffered is flushed past what it wrote): a partial output is a wrong output."""

# problem: stdio
# outcome: failed
import os
import sys

a, b = map(int, input().split())
sys.stdout.write(f"{a + b}\n")
sys.stdout.flush()
os._exit(0)
