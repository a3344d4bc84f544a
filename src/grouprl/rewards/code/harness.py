"""The harness that runs a problem's tests inside the sandbox: copied there as ``harness.py``
(with ``harness_child.py`` as ``child.py``, what its children run) and run once per
sample with ``[PYTHON, "-S", "harness.py"]``. Standard library only: the sandbox sees no
grouprl. The host side is ``run_harness.py``; the verdict, ``judge.py``.

::

    host ──stdin: {nonce, mode, cases, ...}──► harness (this file, the parent; never runs
                                               │ the program's code itself)
        stdio:  one child per case [python -S child.py run] (runs solution.py as
                __main__) < case input, stdout to a file;
                the parent compares the whole normalised stdout with the expected one
        call:   one child for all cases [python -S child.py call FD]: imports solution.py,
                calls fn(*args) per case, sends each return value as JSON on pipe FD;
                the parent compares it with the expected value (the child never sees it)
        assert: one child [python -S child.py call FD]: imports solution.py, runs the
                problem's test functions, reports each on FD
    ◄──stdout: "<nonce> ready", "<nonce> case {...}" per case, "<nonce> end <n>"

The nonce travels on stdin, which the parent reads whole before any child starts, so no
child can read it; the children's stdin, stdout and stderr are in-memory files (memfd)
the parent made and holds, never the parent's stdout nor a path in the sandbox dir (which
the program shares: it may delete, replace or fill anything there without breaking the
parent), and the parent makes itself non-dumpable (no same-user process may read its
memory or open its file descriptors). A report counts only when the ``end`` line (the
sentinel, written after the last test) carries the nonce. A child that hangs is killed
with its process group at its case's deadline and the next child starts at the next case.
What a child says is checked: a pass only where the parent can judge none itself
(assert-style tests), and "the tests could not load" (a reward failure, not a 0) only
where the parent confirms it: the module named is missing for it too, or the test asks
for a fixture in its source.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import subprocess
import sys
import time
import traceback

DETAIL_CHARS = 300
"""How much of a case's error or output a report line keeps."""


def normalise(text: str) -> str:
    """Output as compared: CRLF as LF, each line's trailing whitespace and the trailing
    newlines removed; nothing else (leading spaces, blank lines inside, case all count)."""
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).rstrip("\n")


def same_value(got, expected, *, wrapped: bool) -> bool:
    """A function's JSON return value against the expected one: equal as JSON values
    (tuples arrive as lists). ``wrapped``: APPS/TACO store a call's expected value in a
    one-element list, and accept the bare value too, as their checker does."""
    if got == expected:
        return True
    return wrapped and isinstance(expected, list) and len(expected) == 1 and got == expected[0]


class Parent:
    """The harness: holds the nonce and the expected results, starts the children, judges
    each case and writes the report; it never runs the program's code itself."""

    def __init__(self, job: dict) -> None:
        self.job = job
        self.nonce = job["nonce"]
        self.deadline = time.monotonic() + float(job["budget_s"])
        self.case_s = float(job["case_s"])
        self.output_bytes = int(job["output_bytes"])
        self.out, self.err = -1, -1
        """The last child's stdout and stderr (memfds; -1 before the first)."""

    def say(self, kind: str, payload: object) -> None:
        sys.stdout.write(f"{self.nonce} {kind} {json.dumps(payload)}\n")
        sys.stdout.flush()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def limits(self) -> None:
        """In each child before exec: its files (stdout included) stop at output_bytes (or
        the sandbox's own limit, where lower)."""
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        limit = (
            self.output_bytes if hard == resource.RLIM_INFINITY else min(hard, self.output_bytes)
        )
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))

    def start(self, argv: list[str], stdin: bytes, *, pass_fds=()) -> subprocess.Popen:
        """A child on ``stdin``, its stdout and stderr in fresh in-memory files. Raises
        OSError where it cannot start (the program's processes or memory fill the limits)."""
        for fd in (self.out, self.err):
            if fd >= 0:
                os.close(fd)
        self.out, self.err = private_file("out"), private_file("err")
        stdin_fd = private_file("in", stdin)
        try:
            return subprocess.Popen(
                argv,
                stdin=stdin_fd,
                stdout=self.out,
                stderr=self.err,
                start_new_session=True,
                pass_fds=pass_fds,
                preexec_fn=self.limits,
            )
        finally:
            os.close(stdin_fd)

    def run(self) -> None:
        """Reports each case as it ends, then the sentinel. With ``stop_early`` (no partial
        credit) the cases after the first one not passed are ``skipped``, not run."""
        mode, cases = self.job["mode"], self.job["cases"]
        self.say("ready", len(cases))
        if mode == "stdio":
            results = ((i, self.stdio_case(case)) for i, case in enumerate(cases))
        else:
            results = self.child_cases(mode, cases)
        done = 0
        for i, result in results:
            self.say("case", {"i": i, **result})
            done = i + 1
            if result["status"] != "passed" and self.job["stop_early"]:
                break
        results.close()  # a child still running is killed now, not when collected
        for i in range(done, len(cases)):
            self.say("case", {"i": i, "status": "skipped", "detail": "after a test not passed"})
        self.say("end", len(cases))

    def stdio_case(self, case: dict) -> dict:
        timeout = min(self.case_s, self.left())
        if timeout <= 0:
            return {"status": "timeout", "detail": "the run's time budget was spent"}
        try:
            proc = self.start([sys.executable, "-S", "child.py", "run"], case["stdin"].encode())
        except OSError as err:  # the program's own processes fill the limit
            return {"status": "error", "detail": f"could not start the program: {err}"}
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return {"status": "timeout", "detail": f"killed after {timeout:.3g}s"}
        kill_group(proc)  # whatever it left running
        if proc.returncode != 0:
            return died(proc.returncode, "the program", self.err)
        # invalid UTF-8 stays unequal to any expected text (lone surrogates), not U+FFFD
        got = normalise(read_all(self.out).decode("utf-8", errors="surrogateescape"))
        if got == normalise(case["expected"]):
            return {"status": "passed"}
        return {"status": "failed", "detail": f"printed {got[:DETAIL_CHARS]!r}"}

    def child_cases(self, mode: str, cases: list):
        """(index, result) per case, from as many children as hangs and crashes need."""
        i = 0
        while i < len(cases):
            if self.left() <= 0:
                for j in range(i, len(cases)):
                    yield j, {"status": "timeout", "detail": "the run's time budget was spent"}
                return
            for j, result in self.one_child(mode, cases, i):
                yield j, result
                i = j + 1

    def one_child(self, mode: str, cases: list, start: int):
        """Runs cases from ``start`` in one child until they end or it dies or hangs."""
        job = {"mode": mode, "start": start, "fn_name": self.job.get("fn_name")}
        if mode == "call":
            job["args"] = [c["args"] for c in cases]  # the expected values stay here
            job["strict"] = [bool(c.get("strict")) for c in cases]
        else:
            job["test_code"], job["names"] = self.job["test_code"], cases
        read_end, write_end = os.pipe()
        try:
            proc = self.start(
                [sys.executable, "-S", "child.py", "call", str(write_end)],
                json.dumps(job).encode(),
                pass_fds=(write_end,),
            )
        except OSError as err:
            os.close(read_end)
            os.close(write_end)
            yield start, {"status": "error", "detail": f"could not start the program: {err}"}
            return
        os.close(write_end)
        lines = LineReader(read_end, limit=self.output_bytes)
        try:
            for i in range(start, len(cases)):
                line, why = lines.next(min(self.case_s, self.left()))
                if line is None:
                    kill_group(proc)
                    yield i, self.lost(proc, why)
                    return
                message = readable(line)
                if message is None:
                    yield i, {"status": "error", "detail": "it wrote garbage on the result pipe"}
                    return
                if "fatal" in message:  # the solution did not import: no case can run
                    fatal = self.confirmed(mode, message, None)
                    for j in range(i, len(cases)):
                        yield j, fatal
                    return
                yield i, self.checked(mode, cases[i], message)
        finally:
            kill_group(proc)
            os.close(read_end)

    def checked(self, mode: str, case, message: dict) -> dict:
        """A child's message on one case as that case's result. Call mode: only the parent
        decides a pass (a child claiming one is not believed); assert mode: the child's."""
        status, detail = message["status"], str(message.get("detail", ""))[:DETAIL_CHARS]
        if status not in CHILD_STATUSES[mode]:
            return {"status": "error", "detail": "it wrote a result of its own on the pipe"}
        if status == "tests_error":
            return self.confirmed(mode, message, case)
        if status != "ok":
            return {"status": status, "detail": detail}
        try:
            got = json.loads(message["value"])
        except (ValueError, RecursionError):  # (nested past the parser's depth)
            return {"status": "error", "detail": "it wrote garbage on the result pipe"}
        if same_value(got, case["expected"], wrapped=case.get("wrapped", False)):
            return {"status": "passed"}
        return {"status": "failed", "detail": f"returned {message['value'][:DETAIL_CHARS]}"}

    def confirmed(self, mode: str, message: dict, name: str | None) -> dict:
        """A child's "the tests could not load" (``tests_error``: the sample becomes a
        reward failure, not a 0) as this parent sees it: kept only where it holds here
        too, a module the tests' source imports that this interpreter lacks as well, or
        a test (``name``; None: any) whose source asks for a fixture; else the program's
        error (it claimed it, or shadowed or broke the module itself)."""
        detail = str(message.get("detail", ""))[:DETAIL_CHARS]
        status = message.get("fatal", message.get("status"))
        if status != "tests_error":
            return {"status": "error", "detail": detail}
        missing = message.get("module")
        if (
            mode == "assert"
            and isinstance(missing, str)
            and missing.partition(".")[0] in imported_by(self.job["test_code"])
            and module_missing(missing)
        ):
            return {"status": "tests_error", "detail": detail}
        if mode == "assert" and missing is None and fixture_tests(self.job["test_code"], name):
            return {"status": "tests_error", "detail": detail}
        return {
            "status": "error",
            "detail": f"the program claimed the tests could not load: {detail}",
        }

    def lost(self, proc: subprocess.Popen, why: str) -> dict:
        if why == "timeout":
            return {"status": "timeout", "detail": f"no result within {self.case_s:g}s"}
        if why == "too_long":
            return {"status": "output_limit", "detail": "its result passed the output limit"}
        try:
            code = proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = -signal.SIGKILL
        return died(code, "the program", self.err, exited_ok="it exited before its tests ran")


CHILD_STATUSES = {
    "call": {"ok", "failed", "error"},
    "assert": {"passed", "failed", "error", "tests_error"},
}
"""What a child may say of a case: in call mode it sends values (``ok``) and the parent
judges them; in assert mode the child's own verdict is all there is."""


def readable(line: str) -> dict | None:
    """A child's message, or None where it is not one (the program wrote on the pipe)."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict):
        return None
    if "fatal" in message:
        fatal_ok = message["fatal"] in ("error", "tests_error")
        return message if fatal_ok and isinstance(message.get("detail"), str) else None
    if message.get("status") not in {"ok", "passed", "failed", "error", "tests_error"}:
        return None
    if message["status"] == "ok" and not isinstance(message.get("value"), str):
        return None
    return message


def died(code: int, who: str, err_fd: int, *, exited_ok: str = "") -> dict:
    """The status of a child that ended with ``code`` (negative: killed by that signal);
    ``err_fd`` holds its stderr."""
    tail = err_tail(err_fd)
    if code < 0:
        sig = signal.Signals(-code)
        if sig == signal.SIGXFSZ:
            return {"status": "output_limit", "detail": "it wrote past the output limit"}
        if sig == signal.SIGXCPU:
            return {"status": "timeout", "detail": "it ran out of CPU time"}
        return {"status": "error", "detail": f"{who} was killed by {sig.name}. {tail}"}
    if code == 0 and exited_ok:
        return {"status": "error", "detail": exited_ok}
    last = tail.rstrip().rsplit("\n", 1)[-1]
    if "MemoryError" in last or "[Errno 12]" in last:  # (ENOMEM: an mmap, a fork)
        return {"status": "memory", "detail": tail}
    if "[Errno 27]" in last:  # EFBIG: Python ignores SIGXFSZ, its write fails instead
        return {"status": "output_limit", "detail": "it wrote past the output limit"}
    return {"status": "error", "detail": f"{who} exited with {code}. {tail}"}


def err_tail(fd: int) -> str:
    """The end of a child's stderr (``fd``, a file the parent holds)."""
    with contextlib.suppress(OSError):
        end = os.lseek(fd, 0, os.SEEK_END)
        return (
            os.pread(fd, DETAIL_CHARS, max(0, end - DETAIL_CHARS))
            .decode("utf-8", errors="replace")
            .strip()
        )
    return ""


def private_file(name: str, data: bytes = b"") -> int:
    """A file only this process and the child it hands it to hold: in memory (memfd) where
    the kernel has them, else unnamed in the sandbox dir (O_TMPFILE); never a path the
    program could replace, delete or make a directory of. ``data`` written, offset 0."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(name, 0)  # (not close-on-exec: handed to the child)
    else:
        fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def read_all(fd: int) -> bytes:
    """All of a child's output file (its size is held to the output limit)."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def module_missing(name: str) -> bool:
    """Whether module ``name`` (its top-level package) is missing for this interpreter:
    what makes a test's ``ModuleNotFoundError`` the dataset's problem, not the program's."""
    import importlib.util

    try:
        return importlib.util.find_spec(name.partition(".")[0]) is None
    except (ImportError, ValueError):
        return False


def imported_by(test_code: str) -> set[str]:
    """The top-level modules the tests' source imports (``solution`` aside)."""
    import ast

    try:
        tree = ast.parse(test_code)
    except (SyntaxError, ValueError, RecursionError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.partition(".")[0])
    return names - {"solution"}


def fixture_tests(test_code: str, name: str | None) -> bool:
    """Whether test ``name`` (None: any test) asks, in its source, for a parameter that
    neither a default nor a ``parametrize`` mark with literal names gives: a fixture."""
    import ast

    try:
        tree = ast.parse(test_code)
    except (SyntaxError, ValueError, RecursionError):
        return False
    owners = {"": tree.body}
    owners |= {n.name: n.body for n in tree.body if isinstance(n, ast.ClassDef)}
    for owner, body in owners.items():
        for node in body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            full = f"{owner}.{node.name}" if owner else node.name
            if (name is None or name == full) and needs_fixture(node, method=bool(owner)):
                return True
    return False


def needs_fixture(node, *, method: bool) -> bool:
    """A test function's parameters without default, less ``self`` and those its
    ``parametrize`` decorators name as string literals: any left is a fixture."""
    import ast

    args = node.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    required = positional[: len(positional) - len(args.defaults)]
    required = required[1:] if method else required
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    given: set[object] = set()  # (a name that is no str matches no parameter)
    for deco in node.decorator_list:
        first = deco.args[0] if isinstance(deco, ast.Call) and deco.args else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            given |= {n.strip() for n in first.value.split(",")}
        elif isinstance(first, ast.List | ast.Tuple):
            given |= {e.value for e in first.elts if isinstance(e, ast.Constant)}
    return any(name not in given for name in required)


def kill_group(proc: subprocess.Popen) -> None:
    """Kills the child's process group (what it started too) and reaps the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=1.0)


class LineReader:
    """Lines from a pipe, each within a deadline and a length limit."""

    def __init__(self, fd: int, *, limit: int) -> None:
        self.fd, self.limit, self.buffer = fd, limit, bytearray()

    def next(self, timeout: float) -> tuple[str | None, str]:
        """A line, or None and why: ``timeout``, ``eof``, ``too_long``."""
        end = time.monotonic() + max(0.0, timeout)
        while b"\n" not in self.buffer:
            if len(self.buffer) > self.limit:
                return None, "too_long"
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None, "timeout"
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None, "eof"
            self.buffer += chunk
        end = self.buffer.index(b"\n")
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        return line.decode("utf-8", errors="replace"), "line"  # (garbage: not JSON)


def not_dumpable() -> None:
    """No process of this user may read this one's memory or open its descriptors
    (PR_SET_DUMPABLE 0): the nonce stays here. Where prctl is missing, nothing changes."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE


def own_module_path() -> None:
    """Drop the sandbox dir (this script's, the program's cwd) from the module path: the
    program writes there, and a module it plants (``ast.py``, ``importlib/``) must never
    be what this process imports later (the standard library is read-only)."""
    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    cwd = os.path.realpath(os.getcwd())
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) not in (here, cwd)]


def main() -> None:
    own_module_path()
    not_dumpable()
    job = json.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    parent = Parent(job)
    try:
        parent.run()
    except Exception:
        parent.say("error", traceback.format_exc()[-2000:])


if __name__ == "__main__":
    main()
