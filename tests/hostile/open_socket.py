"""Tries to reach the port named by its second argument on 127.0.0.1, then an outside
address; prints CONNECTED or each error."""

import socket
import sys

for host, port in (("127.0.0.1", int(sys.argv[2])), ("1.1.1.1", 53)):
    try:
        with socket.create_connection((host, port), timeout=1):
            print("CONNECTED", host)
    except OSError as err:
        print(type(err).__name__, host)
