"""The right answer with CRLF line ends and no final newline: the documented
normalisation (CRLF as LF, trailing newlines dropped) makes it equal: passed."""

# problem: stdio
# outcome: passed
import sys

a, b = map(int, input().split())
sys.stdout.write(f"{a + b}\r\n{a * b}")
