"""SIGKILLs every process it may signal (kill(-1): all but init and itself)."""

import os
import signal

os.kill(-1, signal.SIGKILL)
