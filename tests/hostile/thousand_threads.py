"""Starts a thousand threads (each a task for the process limit), then waits for them."""

import threading
import time

threads = [threading.Thread(target=time.sleep, args=(0.2,)) for _ in range(1000)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("started 1000 threads")
