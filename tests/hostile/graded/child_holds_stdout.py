"""Prints the right answer and exits, leaving a child in its process group that keeps
stdout open and sleeps: the harness does not wait for the pipe to close (the child is
killed with the group), passed."""

# problem: stdio
# outcome: passed
import os
import time

a, b = map(int, input().split())
print(a + b)
print(a * b, flush=True)
if os.fork() == 0:
    time.sleep(60)
