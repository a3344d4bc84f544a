"""Answers the first test right, then rewrites the harness's files in its dir
(child.py, harness.py) so that later tests print the first answer, and turns the names
the harness once used for its files into directories. The harness loaded its code before
the first test and keeps its files where the program cannot reach them; the next test
runs the program's own child.py, which prints a wrong answer: failed, not a sandbox error."""

# problem: stdio
# outcome: failed
import os

a, b = map(int, input().split())
print(a + b)
print(a * b)
for name in ("child.py", "harness.py"):
    with open(name, "w") as file:
        file.write("print(5)\nprint(6)\n")
for name in ("in.txt", "out.txt", "err.txt", "job.json"):
    try:
        os.mkdir(name)
    except OSError:
        pass
