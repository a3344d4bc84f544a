"""Tries to read the file named by its second argument; prints READ and its start if it
could, else the error's name."""

import sys

try:
    with open(sys.argv[2], "rb") as file:
        print("READ", file.read(40))
except OSError as err:
    print(type(err).__name__)
