"""Looks for the trainer's secrets: its environment (the test sets a secret there), HOME,
the trainer's cwd (the repo), /proc/1/environ and cmdline, and its own environment. It
finds none (its environment is PATH, HOME, TMPDIR, LANG and one Python switch), so it
prints the right answer: passed."""

# problem: stdio
# outcome: passed
# needs: namespaces
import os

seen = dict(os.environ)
leaks = [k for k in seen if k not in {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE"}]
for path in ("/proc/1/environ", "/proc/self/environ", "/proc/1/cmdline"):
    try:
        with open(path, "rb") as file:
            if b"GROUPRL_SECRET" in file.read():
                leaks.append(path)
    except OSError:
        pass
for path in (os.environ.get("HOME", "/"), "/root", "/work", "/home"):
    try:
        leaks += [
            f"{path}/{n}"
            for n in os.listdir(path)
            if n not in {"solution.py", "child.py", "harness.py", "pytest.py", ".pyenv"}
        ]
    except OSError:
        pass
a, b = map(int, input().split())
print(leaks or a + b)
print(a * b)
