"""Tries to write the file named by its second argument; prints WROTE or the error."""

import sys

try:
    with open(sys.argv[2], "w") as file:
        file.write("hostile was here\n")
    print("WROTE")
except OSError as err:
    print(type(err).__name__)
