"""Asks for 64 GiB at once."""

block = bytearray(64 << 30)
print(len(block))
