"""challenge.toml and site.toml as frozen dataclasses.

Every value is checked when the file is read, so a typo is refused with the file, the key,
the value and what is allowed, before any VM or image build is started.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .errors import ConfigError

_PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_PIP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?((==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!_-]+)?$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class ImageRecipe:
    """What goes into the guest root besides vmjudge's own base."""

    packages: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()


@dataclass(frozen=True)
class VmShape:
    vcpus: int = 2
    memory_mib: int = 2048
    home_mib: int = 1024


@dataclass(frozen=True)
class Challenge:
    name: str
    directory: Path
    image: ImageRecipe = field(default_factory=ImageRecipe)
    vm: VmShape = field(default_factory=VmShape)


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

    @property
    def images_dir(self) -> Path:
        return self.home / "images"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"


class _Section:
    """Reads one table of a TOML file, naming file, table and key in every error."""

    def __init__(self, source: str, table: str, data: Any):
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: [{table}] must be a table of keys.")
        self.source, self.table, self.data = source, table, dict(data)

    def _where(self, key: str) -> str:
        return f"{self.source}: [{self.table}] {key}"

    def get(self, key: str, kind: type, default: Any, check: Callable[[Any], bool] | None = None,
            allowed: str = "") -> Any:
        if key not in self.data:
            return default
        value = self.data.pop(key)
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok or (check is not None and not check(value)):
            raise ConfigError(f"{self._where(key)} = {value!r} is not allowed: use {allowed or kind.__name__}.")
        return value

    def names(self, key: str, pattern: re.Pattern[str], allowed: str) -> tuple[str, ...]:
        value = self.get(key, list, [], allowed=allowed)
        for item in value:
            if not isinstance(item, str) or not pattern.match(item):
                raise ConfigError(f"{self._where(key)} has {item!r}, which is not allowed: use {allowed}.")
        return tuple(value)

    def done(self) -> None:
        if self.data:
            keys = ", ".join(sorted(self.data))
            raise ConfigError(f"{self.source}: [{self.table}] has unknown key(s) {keys}: remove or correct them.")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: give the path of a challenge directory holding challenge.toml.")
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}): fix the syntax.")


def load_challenge(directory: Path) -> Challenge:
    directory = Path(directory).resolve()
    source = str(directory / "challenge.toml")
    data = _read_toml(directory / "challenge.toml")
    top = _Section(source, "top level", {k: v for k, v in data.items() if not isinstance(v, dict)})
    name = top.get("name", str, None, lambda v: bool(_NAME_RE.match(v)),
                   "letters, digits, '.', '_' and '-', at most 64 characters")
    if name is None:
        raise ConfigError(f"{source} has no name: add a line such as name = \"beats2014\".")
    top.done()
    image = _Section(source, "image", data.get("image", {}))
    recipe = ImageRecipe(
        packages=image.names("packages", _PACKAGE_RE, "Debian package names such as \"python3-numpy\""),
        pip=image.names("pip", _PIP_RE, "pip requirements such as \"wfdb==4.3.1\""))
    image.done()
    vm = _Section(source, "vm", data.get("vm", {}))
    shape = VmShape(
        vcpus=vm.get("vcpus", int, 2, lambda v: 1 <= v <= 64, "a whole number from 1 to 64"),
        memory_mib=vm.get("memory", int, 2048, lambda v: 256 <= v <= 1 << 20,
                          "a whole number of MiB from 256 to 1048576"),
        home_mib=vm.get("home", int, 1024, lambda v: 64 <= v <= 1 << 22, "a whole number of MiB from 64 to 4194304"))
    vm.done()
    return Challenge(name=name, directory=directory, image=recipe, vm=shape)


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
    path = home / "site.toml"
    data = _read_toml(path) if path.exists() else {}
    source = str(path)
    top = _Section(source, "top level", {k: v for k, v in data.items() if not isinstance(v, dict)})
    top.done()
    lv = _Section(source, "libvirt", data.get("libvirt", {}))
    uri = lv.get("uri", str, "qemu:///system", lambda v: "://" in v, "a libvirt URI such as \"qemu:///system\"")
    accel = lv.get("accel", str, default_accel(), lambda v: v in ("kvm", "tcg"), "\"kvm\" or \"tcg\"")
    channel = lv.get("channel", str, "virtio", lambda v: v in ("virtio", "uart"), "\"virtio\" or \"uart\"")
    boot = lv.get("boot_timeout", float, 120.0, lambda v: 5 <= v <= 3600, "seconds from 5 to 3600")
    silence = lv.get("silence_timeout", float, 60.0, lambda v: 5 <= v <= 3600, "seconds from 5 to 3600")
    lv.done()
    img = _Section(source, "image", data.get("image", {}))
    mirror = img.get("mirror", str, Site.mirror, lambda v: v.startswith(("http://", "https://", "file:")),
                     "a Debian mirror URL")
    security = img.get("security_mirror", str, Site.security_mirror,
                       lambda v: v.startswith(("http://", "https://", "file:")), "a Debian security mirror URL")
    suite = img.get("suite", str, "bookworm", lambda v: v == "bookworm", "\"bookworm\"")
    img.done()
    for key in data:
        if isinstance(data[key], dict) and key not in ("libvirt", "image"):
            raise ConfigError(f"{source}: unknown table [{key}]: use [libvirt] or [image].")
    env_accel = os.environ.get("VMJUDGE_ACCEL")
    if env_accel:
        if env_accel not in ("kvm", "tcg"):
            raise ConfigError(f"VMJUDGE_ACCEL={env_accel!r} is not allowed: use \"kvm\" or \"tcg\".")
        accel = env_accel
    uri = os.environ.get("VMJUDGE_URI") or uri
    return Site(home=home, uri=uri, accel=accel, channel=channel, mirror=mirror, security_mirror=security,
                suite=suite, boot_timeout=boot, silence_timeout=silence)
