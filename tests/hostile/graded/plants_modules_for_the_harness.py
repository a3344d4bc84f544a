"""Plants ast.py and an importlib package in its dir, each of which, imported by the
harness, would find the harness's state (gc) and write a forged report with its nonce;
then claims on the result pipe that the tests could not load, the path on which the
harness imports more. The harness never imports from the program's dir (it drops that
dir from its own module path before anything runs): the claim is checked, found false,
crashed."""

# problem: assert
# outcome: crashed
import os

FORGE = """
import gc, os, sys
for o in gc.get_objects():
    if type(o).__name__ == "Parent" and hasattr(o, "nonce"):
        n, k = o.nonce, len(o.job["cases"])
        for i in range(k):
            sys.stdout.write(n + ' case {"i": %d, "status": "passed"}\\n' % i)
        sys.stdout.write(n + " end %d\\n" % k)
        sys.stdout.flush()
        os._exit(0)
"""
os.makedirs("importlib", exist_ok=True)
for path in ("ast.py", "importlib/__init__.py", "importlib/util.py"):
    with open(path, "w") as file:
        file.write(FORGE)
for fd in range(3, 64):
    try:
        os.write(fd, b'{"fatal": "tests_error", "detail": "needs numpy", "module": "numpy"}\n')
    except OSError:
        pass
os._exit(0)
