"""site.toml as a frozen dataclass: one organiser's host, where its state lives and how its
VMs are started. VMJUDGE_URI and VMJUDGE_ACCEL override the file, so that a test or a
one-off run on another host needs no file of its own.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .layout import Layout
from .values import Section, read_toml


@dataclass(frozen=True)
class Retention:
    """How many days after its last event a finished (done or parked) entry keeps what only
    its evaluation needed; None keeps it for ever. Reports, logs, the spool archive and the
    archived stage-3 results are always kept: they are what re-scoring and re-running need."""

    entry_tree_days: int | None = None  # results/ID/entry and results/ID/install
    home_disk_days: int | None = None  # results/ID/home.qcow2 and any overlay left beside it
    console_log_days: int | None = None  # results/ID/console-*.log
    media_days: int | None = None  # results/ID/*.iso, kept with [results] keep_media


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
    keep_media: bool = False  # keep each stage's ISO in the entry's results (audits, debugging)
    retention: Retention = field(default_factory=Retention)  # what `vmjudge gc` removes, and when

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
    """site.toml in the home directory, then VMJUDGE_URI / VMJUDGE_ACCEL from the environment."""
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
    retention = _retention(source, data)
    for key in data:
        if isinstance(data[key], dict) and key not in ("libvirt", "image", "results", "retention"):
            raise ConfigError(f"{source}: unknown table [{key}]: use [libvirt], [image], [results] or [retention].")
    env_accel = os.environ.get("VMJUDGE_ACCEL")
    if env_accel:
        if env_accel not in ("kvm", "tcg"):
            raise ConfigError(f"VMJUDGE_ACCEL={env_accel!r} is not allowed: use \"kvm\" or \"tcg\".")
        accel = env_accel
    uri = os.environ.get("VMJUDGE_URI") or uri
    return Site(home=home, uri=uri, accel=accel, channel=channel, mirror=mirror, security_mirror=security,
                suite=suite, boot_timeout=boot, silence_timeout=silence, keep_media=keep_media, retention=retention)


def _retention(source: str, data: dict[str, Any]) -> Retention:
    sec = Section(source, "retention", data.get("retention", {}))
    days = "a whole number of days from 0 to 36500, or leave the key out to keep them for ever"
    policy = Retention(**{key: sec.get(key, int, None, lambda v: 0 <= v <= 36500, days)
                          for key in (f.name for f in fields(Retention))})
    sec.done()
    return policy

