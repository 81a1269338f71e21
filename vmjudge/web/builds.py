"""Downloads made aside from the request that asked for them: a replica ISO takes a minute or more
to write, longer than a browser waits. One thread per file, by its name, so asking again while it
is made starts no second one; a failure is logged for the organisers and the file asked for again
starts a new try."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Builds:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, threading.Thread] = {}

    def running(self, name: str) -> bool:
        with self._lock:
            return name in self._running

    def start(self, name: str, work: Callable[[], object]) -> None:
        """Run `work` in a thread of its own unless `name` is being made already."""
        with self._lock:
            if name in self._running:
                return
            thread = threading.Thread(target=self._run, args=(name, work), name=f"making {name}", daemon=True)
            self._running[name] = thread
        thread.start()

    def _run(self, name: str, work: Callable[[], object]) -> None:
        try:
            work()
        except Exception:
            log.exception("%s could not be made", name)
        finally:
            with self._lock:
                del self._running[name]

    def wait(self, name: str, timeout: float) -> None:
        """Until `name` is made or `timeout` seconds pass (the tests' and the CLI's)."""
        with self._lock:
            thread = self._running.get(name)
        if thread is not None:
            thread.join(timeout)
