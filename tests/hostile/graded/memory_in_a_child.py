"""Its child allocates 400 MB while the program waits for it: the tree's memory counts,
memory."""

# problem: stdio
# outcome: memory
import os

pid = os.fork()
if pid == 0:
    block = bytearray(400 << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    os._exit(0)
os.waitpid(pid, 0)
