"""The normal case: prints a sum and exits 0."""

print(sum(range(10)))
