"""The harness that runs a problem's tests inside the sandbox: copied there as ``harness.py``
(with ``in_sandbox_child.py`` as ``child.py``, what its children run) and run once per
sample with ``[PYTHON, "-S", "harness.py"]``. Standard library only: the sandbox sees no
grouprl. The host side is ``harness.py``; the verdict, ``judge.py``.

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
child can read it; the children's stdout and stderr go to files, never to the parent's
stdout, and the parent makes itself non-dumpable (no same-user process may read its
memory or open its file descriptors). A report counts only when the ``end`` line (the
sentinel, written after the last test) carries the nonce. A child that hangs is killed
with its process group at its case's deadline and the next child starts at the next case.
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


# --- the parent ------------------------------------------------------------------------------


class Parent:
    """The harness: holds the nonce and the expected results, starts the children, judges
    each case and writes the report; it never runs the program's code itself."""

    def __init__(self, job: dict) -> None:
        self.job = job
        self.nonce = job["nonce"]
        self.deadline = time.monotonic() + float(job["budget_s"])
        self.case_s = float(job["case_s"])
        self.output_bytes = int(job["output_bytes"])

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

    def start(self, argv: list[str], stdin, *, pass_fds=()) -> subprocess.Popen:
        with open("out.txt", "wb") as out, open("err.txt", "wb") as err:
            return subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=out,
                stderr=err,
                start_new_session=True,
                pass_fds=pass_fds,
                preexec_fn=self.limits,
            )

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
        with open("in.txt", "wb") as f:
            f.write(case["stdin"].encode())
        try:
            with open("in.txt", "rb") as stdin:
                proc = self.start([sys.executable, "-S", "child.py", "run"], stdin)
        except OSError as err:  # the program's own processes fill the limit
            return {"status": "error", "detail": f"could not start the program: {err}"}
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return {"status": "timeout", "detail": f"killed after {timeout:.3g}s"}
        kill_group(proc)  # whatever it left running
        if proc.returncode != 0:
            return died(proc.returncode, "the program")
        with open("out.txt", "rb") as f:
            got = normalise(f.read().decode("utf-8", errors="replace"))
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
        else:
            job["test_code"], job["names"] = self.job["test_code"], cases
        read_end, write_end = os.pipe()
        with open("job.json", "w") as f:
            json.dump(job, f)
        try:
            with open("job.json", "rb") as stdin:
                proc = self.start(
                    [sys.executable, "-S", "child.py", "call", str(write_end)],
                    stdin,
                    pass_fds=(write_end,),
                )
        except OSError as err:
            os.close(read_end)
            os.close(write_end)
            yield start, {"status": "error", "detail": f"could not start the program: {err}"}
            return
        os.close(write_end)
        os.remove("job.json")
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
                    for j in range(i, len(cases)):
                        yield j, {"status": message["fatal"], "detail": message["detail"]}
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
        if status != "ok":
            return {"status": status, "detail": detail}
        try:
            got = json.loads(message["value"])
        except ValueError:
            return {"status": "error", "detail": "it wrote garbage on the result pipe"}
        if same_value(got, case["expected"], wrapped=case.get("wrapped", False)):
            return {"status": "passed"}
        return {"status": "failed", "detail": f"returned {message['value'][:DETAIL_CHARS]}"}

    def lost(self, proc: subprocess.Popen, why: str) -> dict:
        if why == "timeout":
            return {"status": "timeout", "detail": f"no result within {self.case_s:g}s"}
        if why == "too_long":
            return {"status": "output_limit", "detail": "its result passed the output limit"}
        try:
            code = proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = -signal.SIGKILL
        return died(code, "the program", exited_ok="it exited before its tests ran")


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
    except ValueError:
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


def died(code: int, who: str, *, exited_ok: str = "") -> dict:
    """The status of a child that ended with ``code`` (negative: killed by that signal)."""
    tail = err_tail()
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
    if "MemoryError" in last:
        return {"status": "memory", "detail": tail}
    if "[Errno 27]" in last:  # EFBIG: Python ignores SIGXFSZ, its write fails instead
        return {"status": "output_limit", "detail": "it wrote past the output limit"}
    return {"status": "error", "detail": f"{who} exited with {code}. {tail}"}


def err_tail() -> str:
    with contextlib.suppress(OSError), open("err.txt", "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - DETAIL_CHARS))
        return f.read().decode("utf-8", errors="replace").strip()
    return ""


def kill_group(proc: subprocess.Popen) -> None:
    """Kills the child's process group (what it started too) and reaps the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=1.0)


class LineReader:
    """Lines from a pipe, each within a deadline and a length limit."""

    def __init__(self, fd: int, *, limit: int) -> None:
        self.fd, self.limit, self.buffer = fd, limit, b""

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
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode(), "line"


def not_dumpable() -> None:
    """No process of this user may read this one's memory or open its descriptors
    (PR_SET_DUMPABLE 0): the nonce stays here. Where prctl is missing, nothing changes."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE


def main() -> None:
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
