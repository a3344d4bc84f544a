"""Maps 64 GiB with MAP_NORESERVE (refused: past its address space), then 1 GiB it
touches page by page: memory."""

# problem: stdio
# outcome: memory
import mmap

try:
    huge = mmap.mmap(-1, 64 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)
except OSError:
    huge = mmap.mmap(-1, 1 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for offset in range(0, len(huge), 4096):
    huge[offset] = 1
