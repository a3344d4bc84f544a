"""Fills its dir (the tmpfs: space, then inodes) and prints the right answer. The harness
needs no room there (its files are in memory): passed, not a sandbox error."""

# problem: stdio
# outcome: passed
import os

try:
    with open("big", "wb") as file:
        while True:
            file.write(b"x" * (1 << 20))
except OSError:
    pass
for i in range(10_000):
    try:
        os.mkdir(f"d{i}")
    except OSError:
        break
a, b = map(int, input().split())
print(a + b)
print(a * b)
