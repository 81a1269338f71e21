"""Archive checks in worker processes of the portal's own.

Listing a tar.gz means decompressing all of it, in Python's tarfile and gzip: seconds of CPU for
one small tar bomb, much of it holding the interpreter's lock. On a thread of the portal it
slows every page the portal serves meanwhile, whichever thread serves it. So the slow part of
an admission (queue/admit.py prepare: the archive staged in the spool and checked) runs in a
small pool of worker processes, [web] checks of them, and only the short part (enter: the
admission lock and the queue's transaction) on a thread of the portal.

The workers fork from a forkserver that has loaded the admission code and nothing else: a
worker starts in milliseconds, from a process with no threads (forking the portal itself, which
runs threads, could copy a lock some thread holds). Workers run at a lower priority (nice 10):
on a host with few cores, a tar bomb's decompression then takes what the portal's pages leave.
Each worker ends when the portal process does, however it ends (it watches the portal's pidfd).
The pool starts when the portal does (start(), from the app's lifespan), or at the first check; a
worker that dies (killed, out of memory) breaks the pool, which is then made again, and that
upload gets the judge's 503.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import select
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..config import Challenge, Site
from ..errors import VmjudgeError
from ..queue.admit import Prepared, prepare

NICE = 10  # a check is background work: the host's cores go to the pages being served first


def _worker(portal: int) -> None:
    """A check worker's start: a lower priority, and an end with the portal's, however that
    comes (a worker of a portal killed with SIGKILL would otherwise wait for work for ever, and
    keep the forkserver alive with it)."""
    os.nice(NICE)
    watched = os.pidfd_open(portal)
    threading.Thread(target=_exit_when_ended, args=(watched,), daemon=True).start()


def _exit_when_ended(pidfd: int) -> None:
    select.select([pidfd], [], [])  # readable once the process has ended
    os._exit(0)


class Checker:
    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload(["vmjudge.queue.admit"])
                self._pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=_worker,
                                                 initargs=(os.getpid(),))
            return self._pool

    def start(self) -> None:
        """Start the pool and its first worker now, so that the first upload does not wait for them."""
        self._executor().submit(os.getpid).result(timeout=120)

    async def prepare(self, site: Site, name: str, ch: Challenge, archive: Path, owner: str) -> Prepared:
        """queue.admit.prepare in a worker: what it returns, or what it raises."""
        pool = self._executor()
        try:
            return await asyncio.wrap_future(pool.submit(prepare, site, name, ch, archive, owner))
        except BrokenProcessPool as exc:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise VmjudgeError(f"the portal's archive check for {archive.name} of {owner} stopped: its worker "
                               f"process died ({exc}); the next upload starts a new one.") from exc

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
