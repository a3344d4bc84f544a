"""Prints half of the answer, and the other half from an atexit handler after
sys.exit(0): what it printed is the whole right answer and it exited 0, so it passes.
(The judge reads the output and the exit code, not how the program got there.)"""

# problem: stdio
# outcome: passed
import atexit
import sys

a, b = map(int, input().split())
print(a + b)
atexit.register(lambda: print(a * b))
sys.exit(0)
