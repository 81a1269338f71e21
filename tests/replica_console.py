"""Drives a replica ISO booted in plain qemu through its first serial port (qemu's stdio).

qemu writes the guest's serial output to its stdout and reads its stdin as the serial input,
so a pipe each way is the whole link: a thread gathers what arrives, expect() waits for a
pattern, send() types a line. The qemu process is killed on close, whatever happened.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time


class ConsoleTimeout(AssertionError):
    pass


class Console:
    def __init__(self, argv: list[str]):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.buffer = bytearray()
        self.pos = 0
        self.runs = 0
        self.lock = threading.Condition()
        self.thread = threading.Thread(target=self._gather, daemon=True)
        self.thread.start()

    def _gather(self) -> None:
        assert self.proc.stdout is not None
        while True:
            data = self.proc.stdout.read1(65536)
            with self.lock:
                if not data:
                    self.lock.notify_all()
                    return
                self.buffer += data
                self.lock.notify_all()

    def text(self) -> str:
        with self.lock:
            return self.buffer.decode("utf-8", "replace")

    def expect(self, pattern: str, timeout: float) -> _Decoded:
        """The first match of `pattern` after the previous match; ConsoleTimeout with the
        console's tail when it does not come within `timeout` seconds or qemu exits."""
        regex = re.compile(pattern.encode())
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                match = regex.search(self.buffer, self.pos)
                if match:
                    self.pos = match.end()
                    return _Decoded(match)
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self.thread.is_alive()):
                    tail = self.buffer[-8000:].decode("utf-8", "replace")
                    raise ConsoleTimeout(f"no {pattern!r} on the console within {timeout:.0f} s; its end:\n{tail}")
                self.lock.wait(min(left, 1.0))

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def run(self, command: str, timeout: float) -> tuple[str, int]:
        """What `command` printed and its exit status. Its output is fenced by markers numbered for
        this run alone, so a late or repeated output of an earlier command is never taken for it."""
        self.runs += 1
        n = self.runs
        self.send(f"echo @@GO@@ {n}; {command}; echo @@END@@ {n} $?")
        start = self.expect(rf"\n@@GO@@ {n}\r?\n", timeout).match.end()
        done = self.expect(rf"\n@@END@@ {n} (\d+)\r?\n", timeout)
        with self.lock:
            output = self.buffer[start:done.match.start()].decode("utf-8", "replace")
        return output, int(done.group(1))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.thread.join(timeout=5)


def json_line(output: str) -> dict:
    """The one JSON object a `--json` command printed on a line of its own."""
    found = [line for line in output.splitlines() if line.startswith("{")]
    assert len(found) == 1, output[-3000:]
    return json.loads(found[0])


class _Decoded:
    """A bytes match with str groups."""

    def __init__(self, match: re.Match):
        self.match = match

    def group(self, *i: int) -> str:
        g = self.match.group(*i)
        return g.decode("utf-8", "replace") if isinstance(g, bytes) else g
