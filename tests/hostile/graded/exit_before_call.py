"""A function-call program that raises SystemExit(0) at import: no test ran, so it
crashed, whatever its exit code."""

# problem: call
# outcome: crashed
raise SystemExit(0)
