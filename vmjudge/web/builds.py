"""Downloads made aside from the request that asked for them: a replica ISO takes a minute or more
to write, longer than a browser waits. One thread per file, by its name, so asking again while it
is made starts no second one; a failure is logged for the organisers, and the file asked for again
BACKOFF seconds later starts a new try."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)
BACKOFF = 600.0  # seconds after a failed making before a new ask tries again: each try reads the whole image


class Builds:
    def __init__(self, backoff: float = BACKOFF) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, threading.Thread] = {}
        self._failed: dict[str, float] = {}  # name -> when its last making failed
        self.backoff = backoff

    def running(self, name: str) -> bool:
        with self._lock:
            return name in self._running

    def start(self, name: str, work: Callable[[], object]) -> bool:
        """Run `work` in a thread of its own unless `name` is being made already; False (nothing
        started) while its last making failed less than `backoff` seconds ago."""
        with self._lock:
            if name in self._running:
                return True
            if time.monotonic() - self._failed.get(name, -self.backoff) < self.backoff:
                return False
            thread = threading.Thread(target=self._run, args=(name, work), name=f"making {name}", daemon=True)
            self._running[name] = thread
        thread.start()
        return True

    def _run(self, name: str, work: Callable[[], object]) -> None:
        try:
            work()
        except Exception:  # whatever stops it: the organisers read it, and an ask after the backoff retries
            with self._lock:
                self._failed[name] = time.monotonic()
            log.exception("%s could not be made", name)
        finally:
            with self._lock:
                del self._running[name]
