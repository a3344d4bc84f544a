"""Tries to reach the host's files: symlinks and .. out of /sandbox, /proc/self/root,
/proc/1/root, /proc/1/cwd, the host's /etc, /root, /home and /tmp; and to write outside
its dir (/TOKEN, /usr, /etc, /proc/1/root, /dev). Every read finds nothing of the host's
and every write fails, so it prints the right answer: passed. (The test also checks on
the host that nothing was written.)"""

# problem: stdio
# outcome: passed
# needs: namespaces
import os

escaped = []
for target, link in (("/", "up"), ("../../../../../etc", "etc_link")):
    if not os.path.lexists(link):  # (a second test runs in the same dir)
        os.symlink(target, link)
for path in (
    "up/etc/passwd",
    "etc_link/passwd",
    "../../../../etc/passwd",
    "/proc/self/root/etc/passwd",
    "/proc/1/root/etc/passwd",
    "/proc/1/cwd/etc/passwd",
    "/etc/shadow",
    "/etc/hostname",
    "/root/.bashrc",
    "/home",
    "/var",
    "/sys/kernel",
    "/dev/shm",
    "/dev/mem",
    "/dev/kmsg",
):
    if os.path.exists(path):
        escaped.append(path)
for path in (
    f"/{TOKEN}",  # noqa: F821 - the test's preamble defines TOKEN
    f"/usr/{TOKEN}",  # noqa: F821
    f"/etc/{TOKEN}",  # noqa: F821
    f"/proc/1/root/usr/{TOKEN}",  # noqa: F821
    f"/dev/{TOKEN}",  # noqa: F821
    f"up/usr/{TOKEN}",  # noqa: F821
):
    try:
        with open(path, "w") as file:
            file.write("escaped")
        escaped.append(path)
    except OSError:
        pass
a, b = map(int, input().split())
print(escaped or a + b)
print(a * b)
