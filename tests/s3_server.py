"""A real S3-compatible server for tests: moto's server mode on 127.0.0.1.

The server is our own subprocess in its own process group, stopped by its PID. ``start()``
after ``stop()`` reuses the same port, so clients built against ``endpoint_url`` keep
working; moto keeps everything in memory, so a restart forgets every bucket and object.
If the test process dies without tearing down (killed by a timeout), the server notices
its stdin pipe closing and exits, so no orphan keeps the port.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# ``python -m moto.server ARGS`` plus a watchdog thread: EOF on stdin means our parent is gone.
_BOOT = (
    "import os, sys, threading\n"
    "threading.Thread(target=lambda: (sys.stdin.buffer.read(), os._exit(0)), daemon=True).start()\n"
    "from moto.server import main\n"
    "main(sys.argv[1:])\n"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MotoServer:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = Path(tempfile.mkdtemp(prefix="moto-")) / "server.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, *, timeout_s: float = 20.0) -> MotoServer:
        assert self._proc is None, "already started"
        cmd = [sys.executable, "-c", _BOOT, "-H", "127.0.0.1", "-p", str(self.port)]
        with self._log.open("ab") as log:  # moto logs every request: a pipe would fill up
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self._log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"moto server on port {self.port} did not start:\n{tail}")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        """Terminate our process by PID (SIGTERM, then SIGKILL after 5 s) and reap it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        finally:
            proc.stdin.close()

    def _answers(self) -> bool:
        # http.client, not urllib: it ignores HTTP_PROXY, so the probe stays on loopback.
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
        try:
            conn.request("GET", "/")
            conn.getresponse().read()
            return True
        except OSError:
            return False
        finally:
            conn.close()

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
