"""Prints the answer in fullwidth digits (U+FF10...): they look alike, they are not
equal."""

# problem: stdio
# outcome: failed
a, b = map(int, input().split())
wide = str.maketrans("0123456789", "０１２３４５６７８９")
print(str(a + b).translate(wide))
print(str(a * b).translate(wide))
