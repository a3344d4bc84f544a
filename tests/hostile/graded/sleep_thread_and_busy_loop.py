"""A thread sleeps in C (time.sleep) while the main thread spins: ended at its test's
deadline, timeout."""

# problem: stdio
# outcome: timeout
import threading
import time

threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
while True:
    pass
