"""Attaches to the harness and to init with ptrace and reads the harness's memory with
process_vm_readv: the kernel refuses each (a non-dumpable harness; init's capabilities),
so it has no answers to print."""

# problem: stdio
# outcome: failed
# needs: namespaces
import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
results = []
for pid in (os.getppid(), 1):
    for request in (PTRACE_ATTACH, PTRACE_SEIZE):
        results.append(libc.ptrace(request, pid, None, None) == 0)
buffer = ctypes.create_string_buffer(4096)
local = (ctypes.c_void_p * 2)(ctypes.cast(buffer, ctypes.c_void_p), 4096)
remote = (ctypes.c_void_p * 2)(0x400000, 4096)
results.append(libc.process_vm_readv(os.getppid(), local, 1, remote, 1, 0) > 0)
print("attached" if any(results) else "refused")
