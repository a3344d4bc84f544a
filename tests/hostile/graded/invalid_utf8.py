"""Prints the answer with invalid UTF-8 bytes and a NUL in it: bytes that are not the
answer never compare equal to it (no replacement character to match by chance)."""

# problem: stdio
# outcome: failed
import sys

a, b = map(int, input().split())
sys.stdout.buffer.write(b"%d\xff\xfe\n%d\x00\n" % (a + b, a * b))
