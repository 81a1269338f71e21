"""The daemon: fills idle VM slots with queued stages, in queue order.

One lock per home keeps a second daemon out, and with several hosts on one queue, the hosts
table a second daemon under the same host name. At start it destroys leftover vmj- domains
and puts stages that this host's dead daemon left running back in the queue, to be run again.
Its heartbeat (heartbeat.py) keeps its claims and takes back those of hosts that died; with
several hosts it claims only stages of challenges whose files and image it holds as
registered (environment.py). Its sender (notifier.py) delivers the outbox's notifications;
the ones this host's dead daemon was sending are given back first, to go again at once.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

from ..config import Site
from ..config.layout import Layout
from ..errors import VmjudgeError
from ..queue.conditions import daemon_failed, daemon_started
from ..queue.connection import QueueUnavailable
from ..queue.db import Queue
from ..queue.outbox import release_host
from ..queue.rows import EntryRow
from ..vm import domain, warm
from . import confinement
from .cores import core_plan
from .cpu_gate import refuse_unfit_site
from .environment import Environment
from .evaluate import run_stage
from .heartbeat import Heartbeat
from .notifier import Notifier
from .progress import Progress
from .slots import Slot, SlotPool

log = logging.getLogger(__name__)


class DaemonBusy(VmjudgeError):
    """Another daemon holds this home."""


class DaemonLock:
    """An exclusive lock on the home's daemon.lock, holding the owner's pid for others to read."""

    def __init__(self, home: Path):
        self.path = Layout(home).daemon_lock
        self._file: TextIO | None = None

    def acquire(self, wait_for_it: bool = False) -> bool:
        with ExitStack() as unless_held:  # the file is closed unless the lock is taken
            f = unless_held.enter_context(open(self.path, "a+"))
            try:
                fcntl.flock(f, fcntl.LOCK_EX | (0 if wait_for_it else fcntl.LOCK_NB))
            except BlockingIOError:
                return False
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}\n")
            f.flush()
            unless_held.pop_all()  # held: the file stays open until release()
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
    conn = domain.connect(site.uri)
    try:
        for name in domain.leftover_domains(conn, prefix=f"{domain.DOMAIN_PREFIX}{site.domain_tag}-"):
            log.warning("destroying leftover domain %s", name)
            try:
                domain.Domain(conn.lookupByName(name)).destroy_leftover()
            except Exception as exc:  # noqa: BLE001 - a domain that vanished meanwhile is fine
                log.warning("could not destroy %s: %s", name, exc)
        for name in warm.recover(conn, site):
            log.warning("destroyed leftover warm-started domain %s", name)
    finally:
        conn.close()
    for entry_id in queue.requeue_running():
        log.warning("entry %d: its stage was interrupted; it will run again", entry_id)
    # Scratch directories of stage runs (named e<ID>-<stage>-...) that a dead daemon left.
    for leftover in site.layout.stage_run_leftovers():
        log.warning("removing leftover scratch directory %s", leftover)
        shutil.rmtree(leftover, ignore_errors=True)


def serve(site: Site, queue: Queue, slots: int, until_idle: bool, only: int | None = None,
          on_change: Callable[[EntryRow], None] | None = None, stop: threading.Event | None = None,
          progress: Progress | None = None) -> None:
    """Run queued stages until stopped (or, with until_idle, until nothing is queued or running).
    `only` restricts the daemon to one entry (vmjudge evaluate); `progress` hears each stage's
    start and end, and is asked for a summary at the end."""
    # Before anything else, and before any VM: under the production profile, a host that does not
    # confine qemu (TCG, qemu as root, no seccomp, no security driver) is refused in one sentence,
    # and allow_no_lsm is named first; then a site whose slots do not fit the cores is refused in
    # one sentence, and an overcommitted one says first that its timings are not comparable.
    why = confinement.refusal(site)
    if why is not None:
        raise confinement.Unconfined(why)
    said = confinement.notice(site)
    if said is not None:
        log.warning("%s", said)
    plan = core_plan(site, queue, slots)
    refuse_unfit_site(site)  # a [vm] cpu this host cannot give: refused too, before any VM
    if plan.shared:
        log.warning("%s", plan.notice())
    lock = DaemonLock(site.home)
    if not lock.acquire():
        raise DaemonBusy(f"another vmjudge daemon (pid {lock.holder()}) is running on {site.home}: "
                           "stop it first, or let it evaluate the queue.")
    stop = stop or threading.Event()
    restore = _stop_on_signals(stop)
    running: dict[Future, tuple[Slot, EntryRow, float]] = {}
    heartbeat = Heartbeat(site, queue, busy=lambda: len(running))
    notifier: Notifier | None = None
    started = False  # a failure before this host's daemon ran (its name taken, say) is the caller's to show
    try:
        notifier = Notifier(site, queue)  # a secret file others may read stops the daemon here
        slot_pool = SlotPool(site, queue, slots, plan)
        heartbeat.start(slots, len(slot_pool.gpus))
        if held := release_host(queue.database, queue.host):  # before this host's sender takes any
            log.warning("%d notifications this host was sending when its daemon stopped will go again", held)
        notifier.start()  # its own thread: a slow mail server never holds a slot or a claim
        daemon_started(queue.database, queue.host)  # "back to normal" after a stop by an error
        started = True
        recover(site, queue)
        libvirt_up = _LibvirtWatch(site.uri)
        environment = Environment(site, queue)
        idle = _IdleNotice()
        with ThreadPoolExecutor(max_workers=slots + len(slot_pool.gpus), thread_name_prefix="slot") as pool:
            while not stop.is_set():
                while slot_pool.free and libvirt_up.check():
                    try:
                        claimed = slot_pool.claim(only=only, challenges=environment.allowed())
                    except QueueUnavailable as exc:  # e.g. its disk is full, its server restarting: wait
                        log.error("cannot take an entry from the queue (%s); trying again shortly", exc)
                        break
                    if claimed is None:
                        break
                    slot, entry = claimed
                    if on_change:
                        on_change(entry)
                    if progress:
                        progress.started(slot, entry)
                    running[pool.submit(run_stage, queue, site, entry, slot, stop)] = (slot, entry, time.monotonic())
                if not running:
                    models = slot_pool.models_in_service()
                    if not _waiting(queue, only, models, environment):
                        idle.say(queue.waiting_for_gpu(), models)
                        if until_idle:
                            break
                    stop.wait(1.0)  # new submissions, or a retry waiting out its delay
                    continue
                done, _ = wait(list(running), timeout=1.0, return_when=FIRST_COMPLETED)
                for fut in done:
                    slot, entry, began = running.pop(fut)
                    _ended(fut, slot, entry, began, progress)
                    slot_pool.release(slot)
            # Stopping: the slots see `stop`, destroy their VMs and queue their stages again.
            for fut, (slot, entry, began) in running.items():
                fut.exception()  # waits for it
                _ended(fut, slot, entry, began, progress)
        if progress:
            progress.summary()
    except Exception as exc:
        if notifier is not None and started:
            _tell_failure(queue, notifier, exc)
        raise
    finally:
        if notifier is not None:
            notifier.stop()
        heartbeat.stop()
        restore()
        lock.release()


def _tell_failure(queue: Queue, notifier: Notifier, exc: Exception) -> None:
    """The daemon stops because of an error: the organisers' message is written and, as no
    sender of this host will run until it is started again, sent now if it can be (bounded)."""
    try:
        daemon_failed(queue.database, queue.host, f"{type(exc).__name__}: {exc}")
        notifier.flush()
    except QueueUnavailable as unavailable:
        log.error("could not tell the organisers that the daemon stops (%s)", unavailable)


def _waiting(queue: Queue, only: int | None, models: tuple[str, ...], environment: Environment) -> bool:
    try:
        return queue.waiting(only, gpu=models, challenges=environment.allowed())
    except QueueUnavailable as exc:
        log.error("cannot read the queue (%s); trying again shortly", exc)
        return True


def _ended(fut: Future, slot: Slot, entry: EntryRow, began: float, progress: Progress | None) -> None:
    _report_crash(fut)
    if progress:
        progress.ended(slot, entry, time.monotonic() - began)


def _report_crash(fut: Future) -> None:
    """run_stage records every outcome itself; an exception here is a vmjudge bug. The daemon
    goes on with other entries; this one stays marked running until the next daemon start
    queues it again, and the log says so."""
    exc = fut.exception()
    if exc is not None:
        log.error("a slot failed inside vmjudge (%s: %s); its entry runs again after the daemon restarts",
                  type(exc).__name__, exc, exc_info=exc)


class _IdleNotice:
    """Says once (until it changes) that GPU stages wait which no GPU slot in service here can
    run: without it, a queue that never moves would look like a daemon that does nothing."""

    def __init__(self) -> None:
        self.said: dict[str, int] = {}

    def say(self, waiting: dict[str, int], models: tuple[str, ...]) -> None:
        stuck = {model: n for model, n in waiting.items() if model not in models}
        if stuck and stuck != self.said:
            counts = ", ".join(f"{n} for gpu = \"{model}\"" for model, n in sorted(stuck.items()))
            log.warning("GPU stages wait (%s) but no GPU slot of this host in service can run them: list the "
                        "cards in site.toml [gpu] devices, and see `vmjudge status` for GPUs out of service", counts)
        self.said = stuck


class _LibvirtWatch:
    """Holds back new stages while libvirtd is down: claiming them would only burn their
    retries (and park them) during an outage that restarting libvirtd ends."""

    def __init__(self, uri: str):
        self.uri = uri
        self.down_since: float | None = None

    def check(self) -> bool:
        why = domain.unreachable(self.uri)
        if why is None:
            if self.down_since is not None:
                log.warning("libvirt at %s answers again after %.0f s; taking entries from the queue",
                            self.uri, time.monotonic() - self.down_since)
                self.down_since = None
            return True
        if self.down_since is None:
            self.down_since = time.monotonic()
            log.warning("libvirt at %s does not answer (%s); waiting for it before starting any stage "
                        "(start it with `libvirtd -d` or `systemctl start libvirtd`)", self.uri, why)
        return False


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
