"""Ignores SIGTERM, SIGINT and SIGHUP and loops: it is ended by SIGKILL at its test's
deadline: timeout."""

# problem: stdio
# outcome: timeout
import signal

for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
while True:
    pass
