"""SIGKILLs its parent, then says it is still alive."""

import os
import signal

try:
    os.kill(os.getppid(), signal.SIGKILL)
except OSError as err:
    print(type(err).__name__)
print("alive")
