"""Separates the two lines by a lone CR, which is not a line end: wrong output."""

# problem: stdio
# outcome: failed
import sys

a, b = map(int, input().split())
sys.stdout.write(f"{a + b}\r{a * b}\n")
