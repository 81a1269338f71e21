"""The daemon: fills idle VM slots with queued stages, in queue order.

One lock per home keeps a second daemon out. At start it destroys leftover vmj- domains
and puts stages that a dead daemon left running back in the queue, to be run again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import signal
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable

from ..config import Site
from ..errors import VmjudgeError
from ..evaluate import run_stage
from ..queue.db import EntryRow, Queue
from . import vm

log = logging.getLogger(__name__)


class DaemonBusy(VmjudgeError):
    """Another daemon holds this home."""


class DaemonLock:
    """An exclusive lock on the home's daemon.lock, holding the owner's pid for others to read."""

    def __init__(self, home: Path):
        self.path = home / "daemon.lock"
        self._file = None

    def acquire(self, wait_for_it: bool = False) -> bool:
        f = open(self.path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if wait_for_it else fcntl.LOCK_NB))
        except BlockingIOError:
            f.close()
            return False
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._file = f
        return True

    def holder(self) -> str:
        try:
            return self.path.read_text().strip() or "unknown"
        except OSError:
            return "unknown"

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def recover(site: Site, queue: Queue) -> None:
    conn = vm.connect(site.uri)
    try:
        for name in vm.leftover_domains(conn, prefix=f"{vm.DOMAIN_PREFIX}{site.domain_tag}-"):
            log.warning("destroying leftover domain %s", name)
            try:
                vm.Domain(conn.lookupByName(name)).destroy()
            except Exception as exc:  # noqa: BLE001 - a domain that vanished meanwhile is fine
                log.warning("could not destroy %s: %s", name, exc)
    finally:
        conn.close()
    for entry_id in queue.requeue_running():
        log.warning("entry %d: its stage was interrupted; it will run again", entry_id)
    # Scratch directories of stage runs (named e<ID>-<stage>-...) that a dead daemon left.
    if site.run_dir.is_dir():
        for leftover in site.run_dir.glob("e[0-9]*-*-*"):
            log.warning("removing leftover scratch directory %s", leftover)
            shutil.rmtree(leftover, ignore_errors=True)


def serve(site: Site, queue: Queue, slots: int, until_idle: bool, only: int | None = None,
          on_change: Callable[[EntryRow], None] | None = None, stop: threading.Event | None = None) -> None:
    """Run queued stages until stopped (or, with until_idle, until nothing is queued or running).
    `only` restricts the daemon to one entry (vmjudge evaluate)."""
    lock = DaemonLock(site.home)
    if not lock.acquire():
        raise DaemonBusy(f"another vmjudge daemon (pid {lock.holder()}) is running on {site.home}: "
                           "stop it first, or let it evaluate the queue.")
    stop = stop or threading.Event()
    restore = _stop_on_signals(stop)
    try:
        recover(site, queue)
        running: dict[Future, int] = {}
        free = list(range(slots))
        with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="slot") as pool:
            while not stop.is_set():
                while free:
                    entry = queue.claim_next(owner=f"pid{os.getpid()}", only=only)
                    if entry is None:
                        break
                    slot = free.pop(0)
                    if on_change:
                        on_change(entry)
                    running[pool.submit(run_stage, queue, site, entry, slot, stop)] = slot
                if not running:
                    if until_idle and not queue.waiting(only):
                        return
                    stop.wait(1.0)  # new submissions, or a retry waiting out its delay
                    continue
                done, _ = wait(list(running), timeout=1.0, return_when=FIRST_COMPLETED)
                for fut in done:
                    free.append(running.pop(fut))
                    fut.result()
            # Stopping: the slots see `stop`, destroy their VMs and queue their stages again.
            for fut in running:
                fut.result()
    finally:
        restore()
        lock.release()


def _stop_on_signals(stop: threading.Event) -> Callable[[], None]:
    """SIGTERM and SIGINT stop the daemon cleanly: running stages are abandoned and queued
    again, not failed. Returns a function that puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, lambda _sig, _frame: stop.set())

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return restore
