"""Recurses without end: RecursionError, the program exits with 1: crashed."""
# problem: stdio
# outcome: crashed


def down(n):
    return down(n + 1) + 1


down(0)
