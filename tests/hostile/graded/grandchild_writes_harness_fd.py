"""A grandchild in a session of its own writes a forged report on every descriptor it
has and on the harness's stdout through /proc. It holds no descriptor of the harness's,
and /proc/<harness>/fd is closed to it: the report stays the harness's."""

# problem: stdio
# outcome: failed
import os
import time

harness = os.getppid()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        line = b"%s ready 2\n%s end 2\n" % (b"0" * 32, b"0" * 32)
        for fd in range(64):
            try:
                os.write(fd, line)
            except OSError:
                pass
        for path in (f"/proc/{harness}/fd/1", "/proc/1/fd/1", "/proc/1/fd/2"):
            try:
                with open(path, "wb") as file:
                    file.write(line)
            except OSError:
                pass
    os._exit(0)
time.sleep(0.2)
print("done")
