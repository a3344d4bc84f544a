"""Leaves a daemon (double fork, a session of its own, out of the test's process group)
that holds stdout and writes junk into it for a minute, and exits at once. Its output
is junk before the test is judged: failed; the daemon dies with the run's namespace."""

# problem: stdio
# outcome: failed
import os
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for _ in range(600):
            os.write(1, b"junk\n")
            time.sleep(0.1)
    os._exit(0)
time.sleep(0.3)
