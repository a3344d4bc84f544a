"""Reads address 0 through ctypes: killed by SIGSEGV, crashed."""

# problem: call
# outcome: crashed
import ctypes

ctypes.string_at(0)


def addAll(xs, k):
    return [x + k for x in xs]
