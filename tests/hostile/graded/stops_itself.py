"""Sends itself SIGSTOP: it never ends, so its test times out."""

# problem: stdio
# outcome: timeout
import os
import signal

os.kill(os.getpid(), signal.SIGSTOP)
