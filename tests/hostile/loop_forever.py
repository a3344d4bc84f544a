"""Spins on one core until killed: the wall deadline must end it."""

while True:
    pass
