"""Leaves a daemon behind (double fork, a session of its own) and exits 0 at once."""

import os
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(60)
    os._exit(0)
print("bye")
