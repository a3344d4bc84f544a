"""Returns a generator of the right values: not a JSON value, so not the answer."""
# problem: call
# outcome: failed


def addAll(xs, k):
    return (x + k for x in xs)
