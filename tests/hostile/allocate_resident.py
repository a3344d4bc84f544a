"""Touches memory 16 MiB at a time (resident, not just reserved), without end."""

blocks = []
while True:
    blocks.append(bytearray(16 << 20))  # bytearray(n) zero-fills: every page is touched
