"""The daemon's heartbeat: it tells the queue this host lives, keeps its claims, and takes
back the claims of hosts that stopped.

It runs in a thread of its own, so a slot busy with a VM, or the main loop hashing a
challenge, never lets a claim lapse. Every beat: this host's row (slots busy), its leases
moved on, every lease that ran out queued again (whoever held it), and with several hosts,
entries whose home disk is on a host gone longer than the grace period started again from
stage 1, and the organisers are told of a host gone down or back (queue/conditions.py). A queue
that cannot be reached is said once and tried again at the next beat; if it
stays away longer than a lease, the other hosts take this host's stages, and the stale-claim
check keeps its results from being recorded.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from ..config import Site
from ..queue.conditions import watch_disk, watch_hosts
from ..queue.connection import QueueUnavailable
from ..queue.db import Queue

log = logging.getLogger(__name__)


def machine_id() -> str:
    """What tells two machines given the same [queue] host apart."""
    try:
        return Path("/etc/machine-id").read_text().strip() or os.uname().nodename
    except OSError:
        return os.uname().nodename


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Heartbeat:
    def __init__(self, site: Site, queue: Queue, busy: Callable[[], int]):
        self.site, self.queue, self.busy = site, queue, busy
        self.interval = site.queue.lease / 6
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._failing = False

    def start(self, slots: int, gpu_slots: int) -> None:
        """Register this host (refused while a live daemon holds its name), then beat."""
        self.queue.hosts.register(self.queue.host, machine_id(), os.getpid(), slots, gpu_slots,
                                  self.site.queue.lease, alive=pid_alive)
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and record that this host stopped on purpose (if it had registered)."""
        if not self._thread.is_alive():
            return
        self._stop.set()
        self._thread.join()
        try:
            self.queue.hosts.stop(self.queue.host)
        except QueueUnavailable as exc:
            log.warning("could not record in the queue that this host stopped (%s); it will show as down", exc)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()

    def watch_home(self) -> None:
        """The home's disk (the spool, results, the SQLite queue): the organisers hear when its free
        space falls below [notify] disk_free_percent, and when it is back above."""
        try:
            usage = shutil.disk_usage(self.site.home)
        except OSError as exc:
            log.warning("cannot read the free space of %s: %s", self.site.home, exc)
            return
        free = 100.0 * usage.free / usage.total if usage.total else 100.0
        assert self.site.notify.disk_free_percent is not None
        if watch_disk(self.queue.database, self.queue.host, free, self.site.notify.disk_free_percent,
                      f"The home's disk ({self.site.home})"):
            log.warning("the home's disk has %.1f %% free; the organisers are told", free)

    def beat(self) -> None:
        queue = self.queue
        try:
            queue.hosts.heartbeat(queue.host, self.busy())
            queue.leases.renew(queue.host, self.site.queue.lease)
            for entry_id in queue.leases.expire():
                log.warning("entry %d: the host running its stage stopped renewing its claim; the stage is "
                            "queued again", entry_id)
            if self.site.notify.disk_free_percent is not None:
                self.watch_home()
            if queue.shared:
                for name in watch_hosts(queue.database, queue.host, self.site.queue.lease):
                    log.warning("host %s: down or back; the organisers are told", name)
                for entry_id in queue.leases.restart_lost_homes(self.site.queue.grace):
                    log.warning("entry %d: the host holding its home disk is gone; it starts again from stage 1",
                                entry_id)
        except QueueUnavailable as exc:
            if not self._failing:
                log.error("heartbeat: %s (trying again every %.0f s)", exc, self.interval)
            self._failing = True
            return
        if self._failing:
            log.warning("heartbeat: the queue answers again")
        self._failing = False
