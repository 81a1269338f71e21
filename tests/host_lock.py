"""One VM-using session per host: the test suite clears every vmj- domain an interrupted
session left, and checks after each test that none is left, so a second suite or a benchmark
booting VMs on the same libvirt at the same time would be destroyed by it, or fail it.

By default a second session stops at once with a sentence. With VMJUDGE_WAIT_FOR_HOST=1 it
waits its turn instead: for developers running a benchmark and a test session one after
the other without watching for the first to end."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = Path("/var/tmp/vmjudge-vm-session.lock")


class HostBusy(Exception):
    pass


@contextmanager
def exclusive_host(what: str) -> Iterator[None]:
    with open(LOCK, "a") as lock:
        wait = os.environ.get("VMJUDGE_WAIT_FOR_HOST") == "1"
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise HostBusy(f"another test session or benchmark is booting VMs on this host (it holds {LOCK}): "
                           f"wait for it to end before starting {what}.") from None
        yield


def run_holding_host(main: Callable[[], None], what: str = "this benchmark") -> None:
    """A benchmark's entry point: `main` with the host held, or one sentence if it is busy."""
    try:
        with exclusive_host(what):
            main()
    except HostBusy as exc:
        raise SystemExit(str(exc)) from None
