"""Sleeps, using no CPU: only the wall deadline ends it."""

import time

time.sleep(3600)
