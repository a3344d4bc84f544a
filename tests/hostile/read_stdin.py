"""Reads all of stdin and says how much came, and what."""

import sys

data = sys.stdin.read()
print(len(data), repr(data[:20]))
