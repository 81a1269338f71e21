"""Warm starts: each stage's VM restored from one saved after boot, not booted anew.

Under TCG a boot costs a stage 8-10 s before the entry's first command (about a second under
KVM). A warm state is that boot done once: the image's VM booted with `vmjudge.warm=1`, its
agent waiting to be woken (guest/wake.py), saved by libvirt. It is saved with no home disk, no
entry root and an empty CD-ROM drive, so nothing of a job or an entry is in it and no block
cache of either can be: a stage restores it paused, puts its own job CD in the drive, attaches
its own home disk (and a container entry's root), then resumes it and sends the wake line (the
time, and fresh randomness to reseed the kernel's pool with before any process starts).

libvirt restores a saved domain only under its saved name and uuid, so a state serves one VM
at a time: each shape (accelerator, vCPUs, memory) has seats, each a state of its own, taken
under a lock for the whole run; a run that finds every seat busy boots cold. States live beside
the images (Layout.warm), by image key and shape, each with a record naming the image, the
hypervisor, libvirt, domain XML and code that made it, and its sha256; a record that names another
(or is a day old) is remade, a state whose hash differs is refused. Whatever goes wrong before
the restored agent says hello sends the stage to a cold boot: never the entry's fault, never a
failed stage.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import libvirt

from ..config import Site
from ..errors import InfrastructureError
from ..files import durable_write, sha256_file, stat_signature
from ..images.guest.frames import Decoder, FrameError
from ..images.guest.wake import READY
from ..images.image import GuestImage
from .channel import ChannelClosed
from .domain import DOMAIN_PREFIX, Domain
from .domain_xml import (
    DomainSpec,
    cdrom_xml,
    data_disk_xml,
    domain_xml,
    entry_root_xml,
    hard_limit_kib,
    home_disk_xml,
    tmp_disk_xml,
    tune_xml,
)
from .pty_reader import ChannelReader
from .warm_rules import maker_sha256

log = logging.getLogger(__name__)

WARM_ARG = "vmjudge.warm=1"
SEATS = 8  # more VMs of one shape at once than any host runs slots
# A state is made again after a day: a restore shares the kernel's boot-time choices (KASLR's
# offset among them) with every other restore of its state, so they do not outlive a day.
MAX_AGE = 24 * 3600.0
FAILED_WAIT = 600.0  # after a state could not be made, the seat's runs boot cold this long
# A restored agent says hello within seconds; one that has not within this is given up for a cold boot.
HELLO_TIMEOUT = 30.0


class WarmFailed(Exception):
    """A warm start that did not come to the agent's hello: the stage boots cold instead."""


@dataclass(frozen=True)
class Shape:
    """What a saved state fixes of a VM: libvirt refuses a restore that changes any of it."""

    accel: str
    vcpus: int
    memory_mib: int

    @property
    def key(self) -> str:
        return f"{self.accel}-{self.vcpus}c-{self.memory_mib}m"


def wake_line() -> bytes:
    """The host's time and 32 bytes of its randomness, for the agent to set and to reseed with."""
    return b"go %d %s\n" % (time.time_ns(), secrets.token_hex(32).encode())


@dataclass(frozen=True)
class Seat:
    directory: Path
    number: int
    image: GuestImage
    shape: Shape
    tag: str  # names the states' directory (states_tag): homes sharing it restore under the same names

    @property
    def name(self) -> str:
        return seat_name(self.tag, self.image.key, self.shape.key, self.number)

    @property
    def state(self) -> Path:
        return self.directory / f"seat-{self.number}.save"

    @property
    def record(self) -> Path:
        return self.directory / f"seat-{self.number}.json"

    @property
    def failed(self) -> Path:
        """When making its state last failed, and why: not tried again for FAILED_WAIT."""
        return self.directory / f"seat-{self.number}.failed"

    def _saving_spec(self, spec: DomainSpec) -> DomainSpec:
        """The VM that is saved: this run's, with no home disk, no entry root, an empty drive, told
        to wait: one state serves archive and container entries alike."""
        return replace(spec, name=self.name, home=None, cdrom=None, entry_root=None, tmp_disk=None, data_disks=(),
                       cmdline_extra=spec.cmdline_extra + (WARM_ARG,))

    def _identity(self, conn: libvirt.virConnect, spec: DomainSpec) -> dict:
        """What the state must have been made with to be restored here: the image, qemu, libvirt,
        and the VM the judge asks for (its XML, but for the paths a run changes)."""
        xml = domain_xml(replace(self._saving_spec(spec), console_log=Path("/console.log"), cputune=None))
        return {"image": self.image.key, "image_sha256": self.image.manifest["sha256"],
                "hypervisor": conn.getVersion(), "libvirt": conn.getLibVersion(), "shape": asdict(self.shape),
                "xml_sha256": hashlib.sha256(xml.encode()).hexdigest(), "maker_sha256": maker_sha256()}

    def ready(self, conn: libvirt.virConnect, site: Site, spec: DomainSpec) -> dict:
        """Make sure the seat holds a state to restore: made now when missing, older than
        MAX_AGE, or made for another image, qemu, libvirt, VM or version of this code (what the
        manifest's start says). WarmFailed when it cannot be made, or when the state on disk is not the one its record
        hashed."""
        try:
            record = json.loads(self.record.read_text())
        except (OSError, ValueError):
            record = None
        identity = self._identity(conn, spec)
        age = time.time() - float(record.get("made") or 0) if record is not None else None
        if record is not None and self.state.is_file() and age is not None and age < MAX_AGE and \
                {k: record.get(k) for k in identity} == identity:
            self._check(record)
            return {"state": "saved", "made": record.get("made")}
        why = "missing" if record is None else "older than a day" if age is None or age >= MAX_AGE \
            else "made for another image, qemu, libvirt, VM or version of this code"
        self._not_failing_lately()
        log.info("making warm state %s (%s)", self.state, why)
        started = time.monotonic()
        try:
            self._make(conn, site, spec, identity)
        except WarmFailed as exc:
            durable_write(self.failed, [json.dumps({"at": time.time(), "why": str(exc)}).encode()], mode=0o644)
            raise
        self.failed.unlink(missing_ok=True)
        return {"state": f"made for this run ({why}) in {time.monotonic() - started:.1f} s"}

    def _not_failing_lately(self) -> None:
        """A state that could not be made is not tried again for every stage (each try costs a boot)."""
        try:
            failed = json.loads(self.failed.read_text())
            ago = time.time() - float(failed["at"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        if 0 <= ago < FAILED_WAIT:
            raise WarmFailed(f"making this warm state failed {ago:.0f} s ago ({failed.get('why')}); "
                             f"not tried again for {FAILED_WAIT / 60:.0f} minutes")

    def _check(self, record: dict) -> None:
        """Hashed whenever its inode, size, mtime or ctime differs from the last pass (as the
        image's files are, images/image.py): not 150 MB read before every stage."""
        signature = stat_signature(self.state)
        if record.get("verified") == signature:
            return
        got = sha256_file(self.state)
        if got != record.get("sha256"):
            self.discard()
            raise WarmFailed(f"the warm state {self.state.name} was refused: its sha256 {got[:12]}… is not the "
                             f"{str(record.get('sha256'))[:12]}… its record gives (it will be made again)")
        self._write_record({**record, "verified": signature})

    def _write_record(self, record: dict) -> None:
        durable_write(self.record, [json.dumps(record, indent=1, sort_keys=True).encode() + b"\n"], mode=0o644)

    def discard(self) -> None:
        self.record.unlink(missing_ok=True)
        self.state.unlink(missing_ok=True)

    def _make(self, conn: libvirt.virConnect, site: Site, spec: DomainSpec, identity: dict) -> None:
        """Boot the image's VM with no home disk and an empty drive, wait for its agent's ready
        frame, and save it. Its console log is the stage's (it tells how the state was made)."""
        self.discard()
        self.leave_no_domain(conn)
        tmp = self.state.with_name(f"{self.state.name}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            domain = Domain.start_paused(conn, domain_xml(self._saving_spec(spec)))
        except InfrastructureError as exc:
            raise WarmFailed(f"could not make a warm state: {exc}") from None
        try:
            # Not bounded (Domain.bound_memory): libvirt saves the live XML, a bound included, and a
            # restore whose XML keeps it (another checkout's, sharing the states) has libvirt raise
            # the restored qemu's locked-memory limit to it, which a libvirtd without CAP_SYS_RESOURCE
            # cannot: that restore fails and its stage boots cold (vm/memory.py). This VM runs the
            # judge's own image to its agent's ready frame, no entry; each run's restored VM is
            # bounded before its guest resumes (restore).
            reader = ChannelReader(domain.channel_pty(spec.channel))
            try:
                domain.resume()
                _wait_ready(reader, site.boot_timeout, spec.console_log)
                domain.save(tmp)  # with the channel still open: the agent never sees its host side go
            finally:
                reader.close()
            os.chmod(tmp, 0o600)
            record = {**identity, "sha256": sha256_file(tmp), "made": time.time()}
            tmp.replace(self.state)
            self._write_record(record)
        except (InfrastructureError, WarmFailed, OSError) as exc:
            tmp.unlink(missing_ok=True)
            self.discard()
            raise WarmFailed(f"could not make a warm state: {exc}") from None
        finally:
            domain.destroy()

    def leave_no_domain(self, conn: libvirt.virConnect) -> None:
        """A domain under the seat's name while the seat is held is a killed run's: gone."""
        with contextlib.suppress(libvirt.libvirtError):
            Domain(conn.lookupByName(self.name)).destroy_leftover()

    def restore(self, conn: libvirt.virConnect, spec: DomainSpec) -> Domain:
        """The state restored paused with this run's console log and pinning, its job CD in the
        drive and its home disk attached (then a container entry's root, after it, as a cold boot
        has them): ready to resume and wake."""
        self.leave_no_domain(conn)
        try:
            xml = restore_xml(conn.saveImageGetXMLDesc(str(self.state)), spec)
        except libvirt.libvirtError as exc:
            self.discard()
            raise WarmFailed(f"libvirt cannot read the warm state {self.state.name}: {exc.get_error_message()}") \
                from None
        try:
            domain = Domain.restore_paused(conn, self.state, xml, self.name)
        except InfrastructureError as exc:
            self.discard()  # another qemu or libvirt, or a damaged file: made again next time
            raise WarmFailed(str(exc)) from None
        try:
            domain.bound_memory(hard_limit_kib(spec))
            if spec.cdrom is None or spec.home is None:
                raise WarmFailed("a warm-started VM needs its job CD and home disk")
            domain.give(cdrom_xml(spec.cdrom), attach=False)
            domain.give(home_disk_xml(spec.home), attach=True)
            if spec.entry_root is not None:
                domain.give(entry_root_xml(spec.entry_root), attach=True)
            if spec.tmp_disk is not None:
                domain.give(tmp_disk_xml(spec.tmp_disk), attach=True)
            for index, path in enumerate(spec.data_disks):
                domain.give(data_disk_xml(path, index), attach=True)
        except (InfrastructureError, WarmFailed) as exc:
            domain.destroy()
            raise WarmFailed(str(exc)) from None
        return domain


def restore_xml(saved: str, spec: DomainSpec) -> str:
    """The saved domain's XML with this run's host-side parts: its console log file, its slot's
    pinning, no stale pty path (libvirt gives the channel a new one), and no memory bound: the states
    this judge makes carry none (Seat._make), but libvirt saved the bound of a VM that ran under one
    (older versions of it made such states; their records' maker_sha256 has them made again, and this
    holds should one be restored all the same), and restoring with it would raise qemu's locked-memory
    limit (vm/memory.py); the restored domain is bounded as a cold one is, once restored."""
    dom = ET.fromstring(saved)
    for serial in dom.findall("./devices/serial[@type='file']"):
        source = serial.find("source")
        if source is not None:
            source.set("path", str(spec.console_log))
    for channel in dom.findall("./devices/channel[@type='pty']"):
        for source in channel.findall("source"):
            channel.remove(source)
    for old in dom.findall("cputune"):
        dom.remove(old)
    if spec.cputune is not None:
        dom.append(ET.fromstring(tune_xml(spec.cputune, spec.vcpus)))
    for old in dom.findall("memtune"):
        dom.remove(old)
    return ET.tostring(dom, encoding="unicode")


def _wait_ready(reader: ChannelReader, timeout: float, console_log: Path) -> None:
    decoder = Decoder()
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            frames = decoder.feed(reader.read(min(left, 0.5)))
        except (ChannelClosed, FrameError) as exc:
            raise WarmFailed(f"the VM booted to be saved broke off ({exc}; console log: {console_log})") from None
        if any(f.kind == "log" and f.payload == READY for f in frames):
            return
    raise WarmFailed(f"the VM booted to be saved did not get ready within {timeout:.0f} s (console log: {console_log})")


def states_tag(site: Site) -> str:
    """Names the domains of the states under site.layout.warm: another directory's states (another
    home's, on the same libvirt) have other names, so neither takes the other's domain for a leftover."""
    return "w" + hashlib.sha256(str(site.layout.warm).encode()).hexdigest()[:6]


def seat_name(tag: str, image_key: str, shape_key: str, number: int) -> str:
    """The name its state was saved under, which libvirt keeps for every restore of it."""
    return f"{DOMAIN_PREFIX}{tag}-{image_key[:10]}-{shape_key}-{number}"


def recover(conn: libvirt.virConnect, site: Site) -> list[str]:
    """A killed run leaves its restored VM running (its home disk attached), and the seat's lock
    free: every domain of a seat nobody holds is such a leftover, destroyed here (the daemon's
    recovery). Returns their names."""
    tag, gone = states_tag(site), []
    for lock_path in sorted(site.layout.warm.glob("*/*/seat-*.lock")):
        number = int(lock_path.stem.removeprefix("seat-"))
        name = seat_name(tag, lock_path.parent.parent.name, lock_path.parent.name, number)
        with open(lock_path, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live run's
            try:
                Domain(conn.lookupByName(name)).destroy_leftover()
            except libvirt.libvirtError:
                continue
            gone.append(name)
    return gone


@contextlib.contextmanager
def seat(site: Site, image: GuestImage, shape: Shape) -> Iterator[Seat | None]:
    """A free seat of this shape, held until the block ends (its VM destroyed); None when all are
    busy. OSError when its directory cannot be made (the caller boots cold)."""
    directory = site.layout.warm / image.key / shape.key
    directory.mkdir(parents=True, exist_ok=True)
    for number in range(SEATS):
        with open(directory / f"seat-{number}.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            yield Seat(directory, number, image, shape, states_tag(site))
            return
    yield None
