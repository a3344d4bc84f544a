"""Closes its stdout and stderr, then prints the answer: the prints fail and the
interpreter exits non-zero, a crash."""

# problem: stdio
# outcome: crashed
import os

a, b = map(int, input().split())
os.close(1)
os.close(2)
print(a + b)
print(a * b)
