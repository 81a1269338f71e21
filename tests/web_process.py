"""A real `vmjudge web` process on loopback for the tests that need one: the server itself
(timeouts, slow clients, its log), or two processes sharing one queue. Its stderr, the
organiser's log, goes to a file the test reads."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .cli import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Portal:
    base: str
    port: int
    log: Path
    proc: subprocess.Popen

    def logged(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def running_portal(home: Path, log: Path) -> Iterator[Portal]:
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "vmjudge.cli", "web", "--listen", f"127.0.0.1:{port}",
                                 "--no-secure-cookies"], cwd=REPO, env={**os.environ, "VMJUDGE_HOME": str(home)},
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"vmjudge web exited ({proc.returncode}): {log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("vmjudge web did not listen within 60 s") from None
                time.sleep(0.05)  # polling a condition (the port open), under a deadline
        yield Portal(f"http://127.0.0.1:{port}", port, log, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def wait_for(condition, seconds: float, what: str) -> None:
    """Poll `condition` until it holds, or fail saying `what` did not happen within `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds} s")
        time.sleep(0.05)
