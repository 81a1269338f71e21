"""site.toml as a frozen dataclass: one organiser's host, where its state lives and how its
VMs are started. VMJUDGE_URI, VMJUDGE_ACCEL and VMJUDGE_PROFILE override the file, so that a
test or a one-off run on another host needs no file of its own.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .cpu import CPU_ALLOWED, HOST_PASSTHROUGH, GuestCpu, default_cpu, is_cpu_setting
from .layout import Layout
from .notify import NotifySite, read_notify
from .registration import PortalSite, read_portal
from .storage import StorageSite, read_storage
from .values import Section, read_toml


@dataclass(frozen=True)
class Retention:
    """How many days after its last event a finished (done or parked) entry keeps what only
    its evaluation needed; None keeps it for ever. Reports, logs, the spool archive and the
    archived stage-3 results are always kept: they are what re-scoring and re-running need.
    The outbox's finished messages too are kept for ever unless bounded: they are small, and
    `vmjudge notify list` is the organiser's only record of what was told to whom."""

    entry_tree_days: int | None = None  # results/ID/entry and results/ID/install
    home_disk_days: int | None = None  # results/ID/home.qcow2 and any overlay left beside it
    console_log_days: int | None = None  # results/ID/console-*.log
    media_days: int | None = None  # results/ID/*.iso, kept with [results] keep_media
    # HOME/entry-roots: a container image's root that no entry still to be judged uses, this many
    # days after its last use (images/root_store.py)
    entry_root_days: int | None = None
    # The outbox's messages sent, failed or dropped, this many days after they ended; never one
    # still to be sent (queue/outbox.py prune)
    outbox_days: int | None = None


# domain:bus:slot.function as sysfs and `lspci -D` write it: slots 00-1f, functions 0-7.
# Matched whole (fullmatch); the groups are the four numbers, which the domain XML needs.
PCI_ADDRESS_RE = re.compile(r"([0-9a-f]{4}):([0-9a-f]{2}):([01][0-9a-f])\.([0-7])")
_PCI_ID_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")
T4_ID = "10de:1eb8"


@dataclass(frozen=True)
class GpuSite:
    """The GPUs this host lends to entries' VMs, one slot each, and where to look them up.
    sysfs and dev are roots rather than fixed paths so that the preflight can be tested
    against a fake tree on a host without a GPU; ids keeps a card swapped for another model
    from being handed to challenges that expect a T4."""

    devices: tuple[str, ...] = ()  # PCI addresses such as "0000:65:00.0"
    sysfs: Path = Path("/sys")
    dev: Path = Path("/dev")
    ids: tuple[str, ...] = (T4_ID,)  # vendor:device ids allowed


_HOST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True)
class QueueSite:
    """Where the queue is and who this host is in it. Without a url the queue is the SQLite
    file in the home, for one host; with a postgresql:// url several hosts share it, each
    under its own name. A claim holds `lease` seconds past its host's last heartbeat; an entry
    whose home disk is on a host silent for `grace` seconds starts again from stage 1."""

    url: str | None = None
    host: str = field(default_factory=lambda: platform.node() or "localhost")
    lease: float = 60.0
    grace: float = 600.0
    fair_window: float = 24 * 3600.0  # seconds of owners' VM time that fair share weighs


@dataclass(frozen=True)
class WebSite:
    """[web]: how `vmjudge web` treats its clients, whoever they are. A client that is slow on
    purpose holds a connection (and, mid-upload, a temporary file) for as long as it is let:
    `header_timeout` seconds for a request's line and headers, `body_timeout` seconds between two
    pieces of its body; a body other than an upload (sign-in, settings, every other form: 16 KiB
    at most) must then be whole within `form_timeout` seconds, and an upload, once `body_timeout`
    seconds have passed, must keep arriving at `upload_min_rate` bytes a second on average, so
    that no request is held longer than its size allows, however its bytes are spaced.
    Connections are capped too: `connections_per_client` open at once from one address (an IPv6
    client: from one /64; 0: no cap), and in all as many as the process's open-file limit leaves
    room for (web/admission.py), beyond which a new connection is answered at once and closed.
    Left out (None), the cap per address is 32, or none when the portal listens on loopback: a
    reverse proxy is in front then, every client has the proxy's address, and the cap per client
    is the proxy's to keep. An owner
    whose uploads keep being refused or keep failing (broken archives, tar bombs, stalled
    bodies) makes the judge pay for each: `failed_uploads_per_hour` of them in any hour, then
    429 until the hour has passed. `checks` archives are checked at once, each in a worker
    process of the portal's, so that a tar bomb's decompression never slows the pages the portal
    serves."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    form_timeout: float = 10.0
    upload_min_rate: int = 10240  # bytes a second
    connections_per_client: int | None = None  # None: 32, or none on a loopback listener
    failed_uploads_per_hour: int = 30
    checks: int = 2


PROFILES = ("production", "trial")


@dataclass(frozen=True)
class Site:
    """One organiser's host: where state lives and how VMs are started."""

    home: Path
    uri: str = "qemu:///system"
    accel: str = "kvm"
    channel: str = "virtio"
    mirror: str = "http://deb.debian.org/debian"
    security_mirror: str = "http://deb.debian.org/debian-security"
    suite: str = "bookworm"
    boot_timeout: float = 120.0
    silence_timeout: float = 60.0
    # Start each stage's VM from a saved, booted one (vm/warm.py); off, every stage boots its kernel.
    warm_start: bool = True
    keep_media: bool = False  # keep each stage's ISO in the entry's results (audits, debugging)
    retention: Retention = field(default_factory=Retention)  # what `vmjudge gc` removes, and when
    gpu: GpuSite = field(default_factory=GpuSite)  # none unless site.toml lists [gpu] devices
    queue: QueueSite = field(default_factory=QueueSite)  # the SQLite file in the home unless [queue] url
    web: WebSite = field(default_factory=WebSite)  # the portal's timeouts and its owners' failed uploads
    # [slots] overcommit: let slots × vCPUs exceed the usable cores, the slots then sharing them
    # (vm/pinning.py), and timings no longer comparable between entries. Off, such a site is refused.
    overcommit: bool = False
    # [site] profile: "production" (the default) makes the daemon refuse a host whose qemu is not
    # confined (supervisor/confinement.py); "trial" judges anyway, for demos, tests and benchmarks.
    profile: str = "production"
    # [site] allow_no_lsm: production without AppArmor or SELinux (the daemon names it first).
    allow_no_lsm: bool = False
    portal: PortalSite = field(default_factory=PortalSite)  # [portal]: who may make an account (issue 58)
    notify: NotifySite = field(default_factory=NotifySite)  # [notify]: who hears of what (issue 35)
    # [storage]: the object store of hosts that share no files (issue 57); left out, none
    storage: StorageSite = field(default_factory=StorageSite)
    # [vm] cpu: what every guest's CPU is (config/cpu.py); None: the accelerator's default, host-passthrough
    # under KVM, "max" under TCG.
    cpu: str | None = None

    @property
    def guest_cpu(self) -> GuestCpu:
        return GuestCpu(self.cpu or default_cpu(self.accel))

    @property
    def domain_tag(self) -> str:
        """Names this home's domains, so that a daemon cleaning up after a crash destroys its
        own leftovers and never the VMs of another home on the same libvirt host."""
        return "h" + hashlib.sha256(str(self.home.resolve()).encode()).hexdigest()[:6]

    @property
    def layout(self) -> Layout:
        """Where everything lives under this home."""
        return Layout(self.home)


def default_home() -> Path:
    """Root's home is mode 0700 on Debian, which libvirt's qemu user cannot cross; a system
    daemon keeps its state under /var/lib, everyone else under ~/.vmjudge."""
    if os.environ.get("VMJUDGE_HOME"):
        return Path(os.environ["VMJUDGE_HOME"])
    if os.geteuid() == 0:
        return Path("/var/lib/vmjudge")
    return Path.home() / ".vmjudge"


def default_accel() -> str:
    return "kvm" if os.access("/dev/kvm", os.R_OK | os.W_OK) else "tcg"


def load_site(home: Path | None = None) -> Site:
    """site.toml in the home directory, then VMJUDGE_URI / VMJUDGE_ACCEL / VMJUDGE_PROFILE from the environment."""
    home = Path(home) if home is not None else default_home()
    path = Layout(home).site_toml
    data = read_toml(path) if path.exists() else {}
    source = str(path)
    top = Section(source, "top level", {k: v for k, v in data.items() if not isinstance(v, dict)})
    top.done()
    lv = Section(source, "libvirt", data.get("libvirt", {}))
    uri = lv.get("uri", str, "qemu:///system", lambda v: "://" in v, "a libvirt URI such as \"qemu:///system\"")
    accel = lv.get("accel", str, default_accel(), lambda v: v in ("kvm", "tcg"), "\"kvm\" or \"tcg\"")
    channel = lv.get("channel", str, "virtio", lambda v: v in ("virtio", "uart"), "\"virtio\" or \"uart\"")
    boot = lv.get("boot_timeout", float, 120.0, lambda v: 5 <= v <= 3600, "seconds from 5 to 3600")
    silence = lv.get("silence_timeout", float, 60.0, lambda v: 5 <= v <= 3600, "seconds from 5 to 3600")
    warm = lv.get("warm_start", bool, True, allowed="true or false")
    lv.done()
    res = Section(source, "results", data.get("results", {}))
    keep_media = res.get("keep_media", bool, False, allowed="true or false")
    res.done()
    img = Section(source, "image", data.get("image", {}))
    mirror = img.get("mirror", str, Site.mirror, lambda v: v.startswith(("http://", "https://", "file:")),
                     "a Debian mirror URL")
    security = img.get("security_mirror", str, Site.security_mirror,
                       lambda v: v.startswith(("http://", "https://", "file:")), "a Debian security mirror URL")
    suite = img.get("suite", str, "bookworm", lambda v: v == "bookworm", "\"bookworm\"")
    img.done()
    slots = Section(source, "slots", data.get("slots", {}))
    overcommit = slots.get("overcommit", bool, False, allowed="true or false")
    slots.done()
    vm = Section(source, "vm", data.get("vm", {}))
    cpu = vm.get("cpu", str, None, is_cpu_setting, CPU_ALLOWED)
    vm.done()
    profile, allow_no_lsm = _profile(source, data)
    retention = _retention(source, data)
    gpu = _gpu(source, data)
    queue = _queue(source, data)
    web = _web(source, data)
    portal = read_portal(source, data)
    notify = read_notify(source, data)
    storage = read_storage(source, data, home)
    if storage.url and not queue.url:
        raise ConfigError(f"{source}: [storage] url is set but [queue] url is not, which is not allowed: a store "
                          "serves hosts sharing a PostgreSQL queue; give [queue] a url, or leave [storage] out on one "
                          "host.")
    for key in data:
        if isinstance(data[key], dict) and key not in ("site", "libvirt", "image", "results", "slots", "vm",
                                                       "retention", "gpu", "queue", "web", "portal", "notify",
                                                       "storage"):
            raise ConfigError(f"{source}: unknown table [{key}]: use [site], [libvirt], [image], [results], [slots], "
                              "[vm], [retention], [gpu], [queue], [web], [portal], [notify] or [storage].")
    env_accel = os.environ.get("VMJUDGE_ACCEL")
    if env_accel:
        if env_accel not in ("kvm", "tcg"):
            raise ConfigError(f"VMJUDGE_ACCEL={env_accel!r} is not allowed: use \"kvm\" or \"tcg\".")
        accel = env_accel
    uri = os.environ.get("VMJUDGE_URI") or uri
    if cpu == HOST_PASSTHROUGH and accel != "kvm":
        raise ConfigError(f"{source}: [vm] cpu = \"host-passthrough\" is not allowed under {accel}: only KVM can pass "
                          "the host's CPU through; use \"max\", a level such as \"x86-64-v3\" or a CPU model.")
    return Site(cpu=cpu, home=home, uri=uri, accel=accel, channel=channel, mirror=mirror, security_mirror=security,
                suite=suite, boot_timeout=boot, silence_timeout=silence, warm_start=warm, keep_media=keep_media,
                retention=retention, gpu=gpu, queue=queue, overcommit=overcommit, web=web, profile=profile,
                allow_no_lsm=allow_no_lsm, notify=notify, storage=storage, portal=portal)


def profile_line(what: str) -> str:
    """The first line of the test suite, a benchmark or the demo: they run guests under TCG on
    purpose, with VMJUDGE_PROFILE=trial, and say so before anything else, so that no one takes
    their runs for what a production host would allow."""
    env = os.environ.get("VMJUDGE_PROFILE")
    if env == "trial":
        return (f'{what}: profile = "trial" (VMJUDGE_PROFILE=trial): it judges even where the production profile '
                "refuses (TCG, no AppArmor); not for real entries")
    return f"{what}: profile {'from VMJUDGE_PROFILE=' + env if env else 'as site.toml says'}"


def _profile(source: str, data: dict[str, Any]) -> tuple[str, bool]:
    """[site] profile, which VMJUDGE_PROFILE overrides (the test suite, the benchmarks and the demo
    set it to "trial": they judge under TCG on purpose), and allow_no_lsm."""
    sec = Section(source, "site", data.get("site", {}))
    profile = sec.get("profile", str, "production", lambda v: v in PROFILES, "\"production\" or \"trial\"")
    allow_no_lsm = sec.get("allow_no_lsm", bool, False, allowed="true or false")
    sec.done()
    env = os.environ.get("VMJUDGE_PROFILE")
    if env:
        if env not in PROFILES:
            raise ConfigError(f"VMJUDGE_PROFILE={env!r} is not allowed: use \"production\" or \"trial\".")
        profile = env
    return profile, allow_no_lsm


def _queue(source: str, data: dict[str, Any]) -> QueueSite:
    sec = Section(source, "queue", data.get("queue", {}))
    url = sec.get("url", str, None, lambda v: v.startswith(("postgresql://", "postgres://")),
                  "a PostgreSQL URL such as \"postgresql:///vmjudge\" (leave the key out for the SQLite file in "
                  "the home)")
    host = sec.get("host", str, QueueSite().host, lambda v: _HOST_RE.fullmatch(v) is not None,
                   "a name of letters, digits, dots, dashes and underscores, at most 63 characters")
    lease = sec.get("lease_seconds", float, 60.0, lambda v: 10 <= v <= 3600, "seconds from 10 to 3600")
    grace = sec.get("grace_seconds", float, 600.0, lambda v: 0 <= v <= 7 * 86400, "seconds from 0 to 604800")
    window = sec.get("fair_window_hours", float, 24.0, lambda v: 0 < v <= 24 * 366, "hours from 0 to 8784")
    sec.done()
    if grace < lease:
        raise ConfigError(f"{source}: [queue] grace_seconds = {grace:g} is shorter than lease_seconds = {lease:g}, "
                          "which is not allowed: a host must be presumed dead before its home disks are given up.")
    return QueueSite(url=url, host=host, lease=lease, grace=grace, fair_window=window * 3600)


def _web(source: str, data: dict[str, Any]) -> WebSite:
    sec = Section(source, "web", data.get("web", {}))
    web = WebSite(
        header_timeout=sec.get("header_timeout", float, WebSite.header_timeout, lambda v: 0.5 <= v <= 300,
                               "seconds from 0.5 to 300"),
        body_timeout=sec.get("body_timeout", float, WebSite.body_timeout, lambda v: 0.5 <= v <= 3600,
                             "seconds from 0.5 to 3600"),
        form_timeout=sec.get("form_timeout", float, WebSite.form_timeout, lambda v: 0.5 <= v <= 300,
                             "seconds from 0.5 to 300"),
        upload_min_rate=sec.get("upload_min_rate", int, WebSite.upload_min_rate, lambda v: 1 <= v <= 10**9,
                                "bytes a second, a whole number from 1 to 1000000000"),
        connections_per_client=sec.get("connections_per_client", int, None, lambda v: 0 <= v <= 100000,
                                       "a whole number from 1 to 100000, or 0 for no cap"),
        failed_uploads_per_hour=sec.get("failed_uploads_per_hour", int, WebSite.failed_uploads_per_hour,
                                        lambda v: 1 <= v <= 100000, "a whole number from 1 to 100000"),
        checks=sec.get("checks", int, WebSite.checks, lambda v: 1 <= v <= 64, "a whole number from 1 to 64"))
    sec.done()
    return web


def _retention(source: str, data: dict[str, Any]) -> Retention:
    sec = Section(source, "retention", data.get("retention", {}))
    days = "a whole number of days from 0 to 36500, or leave the key out to keep them for ever"
    policy = Retention(**{key: sec.get(key, int, None, lambda v: 0 <= v <= 36500, days)
                          for key in (f.name for f in fields(Retention))})
    sec.done()
    return policy


def _gpu(source: str, data: dict[str, Any]) -> GpuSite:
    sec = Section(source, "gpu", data.get("gpu", {}))
    devices = sec.names("devices", PCI_ADDRESS_RE, "PCI addresses as `lspci -D` prints them, in lowercase, "
                        "such as \"0000:65:00.0\"")
    _once(source, "devices", devices, "each GPU once (each is one slot)")
    id_rule = "vendor:device ids in lowercase hex, such as \"10de:1eb8\" (a T4)"
    ids = sec.names("ids", _PCI_ID_RE, id_rule) if "ids" in sec.data else GpuSite.ids
    if not ids:
        raise ConfigError(f"{source}: [gpu] ids = [] is not allowed: name at least one vendor:device id, such as "
                          f"\"{T4_ID}\" (a T4), or leave the key out for that.")
    _once(source, "ids", ids, "each id once")
    root = "an absolute path, such as \"{}\" (tests point it at a fake tree)"
    sysfs = sec.get("sysfs", str, "/sys", lambda v: v.startswith("/"), root.format("/sys"))
    dev = sec.get("dev", str, "/dev", lambda v: v.startswith("/"), root.format("/dev"))
    sec.done()
    return GpuSite(devices=devices, sysfs=Path(sysfs), dev=Path(dev), ids=ids)


def _once(source: str, key: str, values: tuple[str, ...], allowed: str) -> None:
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise ConfigError(f"{source}: [gpu] {key} names {', '.join(map(repr, twice))} more than once, which is "
                          f"not allowed: name {allowed}.")
