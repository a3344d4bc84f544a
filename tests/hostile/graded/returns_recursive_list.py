"""Returns a list that holds itself: no JSON value, the test fails."""
# problem: call
# outcome: failed


def addAll(xs, k):
    value = [x + k for x in xs]
    value.append(value)
    return value
