"""Spins in 8 processes: the test's deadline (or the run's CPU seconds) ends them:
timeout."""

# problem: stdio
# outcome: timeout
import os

for _ in range(7):
    if os.fork() == 0:
        break
while True:
    pass
