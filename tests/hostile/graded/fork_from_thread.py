"""Forks from a thread: each child sleeps for a minute holding its stdout; the program
prints the right answer and exits. Its leftovers are killed with its process group when
the test ends: passed, and nothing is left running."""

# problem: stdio
# outcome: passed
import os
import threading
import time


def spawn():
    for _ in range(3):
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)


thread = threading.Thread(target=spawn)
thread.start()
thread.join()
a, b = map(int, input().split())
print(a + b)
print(a * b)
