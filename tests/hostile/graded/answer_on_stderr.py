"""Points stdout at stderr (dup2) and prints the right answer there: stdout is what is
judged, and it is empty."""

# problem: stdio
# outcome: failed
import os

a, b = map(int, input().split())
os.dup2(2, 1)
print(a + b)
print(a * b)
