"""Returns an int of a hundred thousand digits: past Python's int-to-text limit, it cannot
be sent, so the test fails (it is not the answer anyway)."""
# problem: call
# outcome: failed


def addAll(xs, k):
    return 10**100_000
