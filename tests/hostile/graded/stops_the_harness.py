"""Sends the harness SIGSTOP (same uid: allowed), then exits: the harness never reports,
the run times out at wall_s and scores 0 as a timeout."""

# problem: stdio
# outcome: timeout
import os
import signal

os.kill(os.getppid(), signal.SIGSTOP)
