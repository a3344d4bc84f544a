"""Looks for the nonce and the expected outputs in the harness's and init's /proc
(cmdline, environ, mem, fd/0), then writes a forged report on every descriptor of theirs
it can open. The harness is not dumpable and init holds capabilities the program lacks:
nothing opens, so it prints nothing right."""

# problem: stdio
# outcome: failed
# needs: namespaces
import os
import re

found = set()
for pid in {os.getppid(), 1}:
    for name in ("cmdline", "environ", "fd/0", "mem"):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as file:
                found |= set(re.findall(rb"[0-9a-f]{32}", file.read(1 << 20)))
        except OSError:
            continue
    for fd in range(64):
        try:
            with open(f"/proc/{pid}/fd/{fd}", "wb") as file:
                for nonce in found or {b"0" * 32}:
                    n = nonce.decode()
                    file.write(f'{n} ready 2\n{n} case {{"i": 0, "status": "passed"}}\n'.encode())
                    file.write(f'{n} case {{"i": 1, "status": "passed"}}\n{n} end 2\n'.encode())
        except OSError:
            continue
print("found", len(found))
