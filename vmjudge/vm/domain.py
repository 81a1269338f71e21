"""libvirt domains for the judge: connecting, starting, watching and destroying them.

Domains are transient: once they stop, libvirt forgets them, and
`destroy()` is always safe to call again.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import libvirt

from ..errors import InfrastructureError

log = logging.getLogger(__name__)

DOMAIN_PREFIX = "vmj-"
T = TypeVar("T")


def _quiet_libvirt() -> None:
    """libvirt prints every error to stderr by default; ours are raised as exceptions instead."""
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)


def connect(uri: str) -> libvirt.virConnect:
    _quiet_libvirt()
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as exc:
        raise InfrastructureError(
            "libvirt-unreachable",
            f"cannot reach libvirt at {uri} ({exc.get_error_message()}): start it with "
            "`virtlogd -d && libvirtd -d` (or `systemctl start libvirtd`) and check the URI in site.toml.") from None


# How long a run waits for a restarting libvirtd before giving the stage up as an
# infrastructure failure. qemu keeps running meanwhile, and so does the data channel.
RECONNECT_WINDOW = 60.0

# How long a dead run's leftover domain may stay busy with a libvirt call of its before it is
# destroyed all the same: a restore or hot-plug takes seconds, even under TCG on a busy host.
LEFTOVER_SETTLE = 60.0

# How long a restore may take before the run gives it up: seconds for a state of a few GiB, even
# under TCG on a busy host. Past it, the child is killed, which is what the child is there to avoid.
RESTORE_TIMEOUT = 300.0


def unreachable(uri: str) -> str | None:
    """Why libvirt at `uri` cannot be used right now, or None when it answers."""
    _quiet_libvirt()
    try:
        libvirt.open(uri).close()
    except libvirt.libvirtError as exc:
        return exc.get_error_message()
    return None


class Domain:
    """A started transient domain. Every method tolerates the domain having gone away.

    libvirtd may be restarted while a domain runs: qemu and the channel carry on, only our
    connection dies. The domain then reconnects to `uri` and looks itself up by name, so a
    run survives the restart instead of being abandoned with its VM left running.
    """

    def __init__(self, dom: libvirt.virDomain, uri: str | None = None, reconnect_window: float = RECONNECT_WINDOW):
        self._dom = dom
        self.name = dom.name()
        self._uri = uri
        self._window = reconnect_window
        self._own_conn: libvirt.virConnect | None = None
        self.reconnects = 0

    @classmethod
    def start_paused(cls, conn: libvirt.virConnect, xml: str, uri: str | None = None) -> Domain:
        """Start paused so the host can open the channel before the guest writes to it:
        qemu drops what a pty port is sent while nobody has it open. A connection that died
        (libvirtd restarted since the stage began, as when a warm start broke off and this is its
        cold boot) is replaced by one of the domain's own on `uri`, not taken for the VM's fault."""
        own = None
        if uri is not None and not _alive(conn):
            log.warning("the libvirt connection died; opening another to start the VM")
            conn = own = connect(uri)
        try:
            made = cls(conn.createXML(xml, libvirt.VIR_DOMAIN_START_PAUSED), uri=uri or conn.getURI())
        except libvirt.libvirtError as exc:
            if own is not None:
                with contextlib.suppress(libvirt.libvirtError):
                    own.close()
            raise InfrastructureError("vm-start", f"the VM would not start: {exc.get_error_message()}") from None
        made._own_conn = own
        return made

    @classmethod
    def restore_paused(cls, conn: libvirt.virConnect, state: Path, xml: str, name: str,
                       timeout: float = RESTORE_TIMEOUT) -> Domain:
        """A saved domain back, paused (vm/warm.py): `xml` is its saved XML with this run's host
        paths; libvirt keeps the saved name and uuid, so one saved state runs once at a time.

        The restore is asked by a child process in a session of its own (virsh), not on the
        daemon's connection: libvirt 9.0 aborts a restore whose client dies, and its libvirtd
        segfaulted as that abort ended (twice on 2026-11-26, a daemon SIGKILLed 0.1 s into a
        restore). A daemon killed now leaves the child to finish; the restored domain is then
        a leftover like any other, which the next daemon's recovery destroys."""
        uri = conn.getURI()
        with tempfile.NamedTemporaryFile("w", prefix="vmjudge-restore-", suffix=".xml") as definition:
            definition.write(xml)
            definition.flush()
            try:
                proc = subprocess.run(["virsh", "-q", "-c", uri, "restore", str(state), "--xml", definition.name,
                                       "--paused"], capture_output=True, text=True, timeout=timeout,
                                      start_new_session=True)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise InfrastructureError("vm-restore", f"libvirt would not restore {state.name}: {exc}") from None
        if proc.returncode != 0:
            said = proc.stderr.strip().removeprefix("error: ").replace("\nerror: ", "; ")[-2000:]
            raise InfrastructureError("vm-restore", f"libvirt would not restore {state.name}: "
                                      f"{said or f'virsh exited {proc.returncode}'}")
        try:
            return cls(conn.lookupByName(name), uri=uri)
        except libvirt.libvirtError as exc:
            raise InfrastructureError("vm-restore", f"libvirt restored {state.name} but has no domain {name}: "
                                      f"{exc.get_error_message()}") from None

    def save(self, state: Path) -> None:
        """The running domain's state to `state`; the domain stops."""
        try:
            self._call(lambda d: d.save(str(state)), "saving")
        except libvirt.libvirtError as exc:
            raise InfrastructureError("vm-save", f"libvirt would not save domain {self.name}: "
                                      f"{exc.get_error_message()}") from None

    def give(self, xml: str, attach: bool) -> None:
        """A device to the running (or paused) domain: attached anew, or one of its own (a CD-ROM
        drive's medium) changed."""
        flags = libvirt.VIR_DOMAIN_AFFECT_LIVE
        try:
            if attach:
                self._call(lambda d: d.attachDeviceFlags(xml, flags), "attaching a device to")
            else:
                self._call(lambda d: d.updateDeviceFlags(xml, flags), "changing a device of")
        except libvirt.libvirtError as exc:
            raise InfrastructureError("vm-device", f"libvirt would not give domain {self.name} a device: "
                                      f"{exc.get_error_message()}") from None

    def _call(self, op: Callable[[libvirt.virDomain], T], what: str) -> T:
        """Run `op` on the domain; if libvirt's connection died, reconnect once and retry.
        A missing domain is raised as is, for the caller to take as "stopped"."""
        try:
            return op(self._dom)
        except libvirt.libvirtError as exc:
            if _alive(self._dom.connect()) or self._uri is None:
                raise
            log.warning("lost the libvirt connection while %s domain %s (%s); reconnecting",
                        what, self.name, exc.get_error_message())
        self._reconnect()
        return op(self._dom)

    def _reconnect(self) -> None:
        deadline = time.monotonic() + self._window
        last = "no answer"
        while True:
            try:
                conn = libvirt.open(self._uri)
            except libvirt.libvirtError as exc:
                last = exc.get_error_message()
            else:
                try:
                    dom = conn.lookupByName(self.name)
                except libvirt.libvirtError:
                    conn.close()
                    raise
                self._close_own()
                self._own_conn, self._dom = conn, dom
                self.reconnects += 1
                log.warning("reconnected to libvirt; domain %s is still there", self.name)
                return
            if time.monotonic() >= deadline:
                raise InfrastructureError("libvirt-unreachable", f"lost touch with libvirt at {self._uri} and could "
                                          f"not reconnect within {self._window:.0f} s ({last}).")
            time.sleep(1.0)

    def _close_own(self) -> None:
        if self._own_conn is not None:
            with contextlib.suppress(libvirt.libvirtError):
                self._own_conn.close()
            self._own_conn = None

    def channel_pty(self, channel: str = "virtio") -> str:
        root = ET.fromstring(self._call(lambda d: d.XMLDesc(0), "reading"))
        sources: list[ET.Element | None]
        if channel == "virtio":
            sources = list(root.findall("./devices/channel/source"))
        else:
            sources = [s.find("source") for s in root.findall("./devices/serial")
                       if (target := s.find("target")) is not None and target.get("port") == "1"]
        paths = [path for n in sources if n is not None and (path := n.get("path"))]
        if not paths:
            raise InfrastructureError("vm-start", f"libvirt gave domain {self.name} no pty for its data channel.")
        return paths[0]

    def bound_memory(self, kib: int) -> None:
        """qemu's memory cgroup capped at `kib` (the domain's <memtune><hard_limit>, live), while the
        domain is still paused: vm/memory.py says why it is not in the XML it started from. A bound
        libvirt will not set is the judge's failure, never skipped: the caller destroys the VM
        before its guest runs (libvirt's qemu driver refuses it when the memory controller is missing)."""
        try:
            self._call(lambda d: d.setMemoryParameters({libvirt.VIR_DOMAIN_MEMORY_HARD_LIMIT: kib},
                                                       libvirt.VIR_DOMAIN_AFFECT_LIVE), "bounding the memory of")
        except libvirt.libvirtError as exc:
            raise InfrastructureError("vm-start", f"libvirt would not bound the memory of domain {self.name} "
                                      f"({exc.get_error_message()}), and no VM runs unbounded: when libvirt names "
                                      "the memory cgroup, enable that controller (cgroup_controllers in "
                                      "/etc/libvirt/qemu.conf) and restart libvirtd.") from None

    def live_xml(self) -> str:
        """The running domain's XML as libvirt holds it (its memtune, its devices, its labels)."""
        return self._call(lambda d: d.XMLDesc(0), "reading")

    def security_label(self) -> tuple[str, bool]:
        """The label libvirt's security driver gave this domain's qemu ("" under none), and
        whether it is enforced."""
        label = self._call(lambda d: d.securityLabel(), "reading the label of")
        return str(label[0] or ""), bool(label[1])

    def resume(self) -> None:
        try:
            self._call(lambda d: d.resume(), "resuming")
        except libvirt.libvirtError as exc:
            raise InfrastructureError("vm-start", f"the VM would not resume: {exc.get_error_message()}") from None

    def is_active(self) -> bool:
        """False once the domain is gone. A domain that qemu paused because a write to its
        disks failed (the host's disk is full) is an infrastructure failure, raised here."""
        try:
            state, reason = self._call(lambda d: d.state(), "checking")
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return False
            raise InfrastructureError("libvirt-unreachable",
                                      f"lost touch with libvirt: {exc.get_error_message()}") from None
        if state == libvirt.VIR_DOMAIN_PAUSED and reason == libvirt.VIR_DOMAIN_PAUSED_IOERROR:
            raise self._disk_error()
        return state not in (libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_CRASHED, libvirt.VIR_DOMAIN_NOSTATE)

    def _disk_error(self) -> InfrastructureError:
        try:
            errors = self._call(lambda d: d.diskErrors(), "asking") or {}
        except libvirt.libvirtError:
            errors = {}
        full = libvirt.VIR_DOMAIN_DISK_ERROR_NO_SPACE in errors.values()
        if full:
            return InfrastructureError("host-disk-full", f"qemu paused domain {self.name}: the host's disk is full "
                                       "(free space where the vmjudge home is; the stage will run again).")
        return InfrastructureError("host-io", f"qemu paused domain {self.name}: reading or writing its disks failed "
                                   f"on the host ({sorted(errors) or 'no detail'}); check the host's disk.")

    def cpu_seconds(self) -> float | None:
        """The CPU time qemu has used for this VM so far, all its threads (libvirt's count,
        which the guest cannot alter); None once the domain is gone or libvirt cannot say."""
        try:
            return float(self._call(lambda d: d.info()[4], "reading the CPU time of")) / 1e9
        except (libvirt.libvirtError, InfrastructureError):
            return None

    def wait_stopped(self, seconds: float, poll: float = 0.1) -> bool:
        deadline = time.monotonic() + seconds
        while self.is_active():
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll)
        return True

    def destroy_leftover(self, settle: float = LEFTOVER_SETTLE, poll: float = 0.05) -> None:
        """Destroy a dead run's domain once no libvirt call on it is still under way. libvirt goes
        on with a killed client's call (a restore, a disk hot-plug) after the client is gone, and
        libvirtd 9.0 crashed (a segfault in its qemu driver, every VM of the host orphaned) when a
        destroy landed in the middle of one: seen in the full run of 2026-11-26, a daemon killed
        while its VM was being restored and the next daemon's recovery destroying it."""
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            try:
                state = self._dom.controlInfo()[0]
            except libvirt.libvirtError:
                break  # gone, or libvirt cannot say: destroy() copes with either
            if state not in (libvirt.VIR_DOMAIN_CONTROL_JOB, libvirt.VIR_DOMAIN_CONTROL_OCCUPIED):
                break
            time.sleep(poll)
        self.destroy()

    def destroy(self) -> None:
        try:
            self._call(lambda d: d.destroy(), "destroying")
            log.info("destroyed domain %s", self.name)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() not in (libvirt.VIR_ERR_NO_DOMAIN, libvirt.VIR_ERR_OPERATION_INVALID):
                raise InfrastructureError("libvirt-unreachable", f"could not destroy domain {self.name}: "
                                          f"{exc.get_error_message()}") from None
        finally:
            self._close_own()


def _alive(conn: libvirt.virConnect) -> bool:
    try:
        return bool(conn.isAlive())
    except libvirt.libvirtError:
        return False


def leftover_domains(conn: libvirt.virConnect, prefix: str = DOMAIN_PREFIX) -> list[str]:
    return sorted(d.name() for d in conn.listAllDomains() if d.name().startswith(prefix))
