"""The GPU driver an image may carry (`[image] gpu`): Debian's packages, its kernel module built
for the image's own kernel, and the build tools taken out again.

Debian ships the NVIDIA module only as dkms source. dkms's own hooks would build it while
mmdebstrap installs the packages, for the kernels they guess from `uname -r` (the host's, in a
chroot) and with any failure lost in a package's postinst; so the hooks are switched off
(/etc/dkms/no-autoinstall) and the module is built here, once, for the image's kernel by name.

The built modules are copied to lib/modules/KVER/extra/nvidia/ under their own names, and then
dkms, the driver's dkms package, the kernel headers and what only they needed (gcc, make, perl)
are purged: removing the dkms package deletes the modules dkms installed, and keeping dkms's
tree would mean keeping dkms, which depends on the compiler. An entry gets the image without a
compiler, as a CPU image has none, unless the challenge asked for one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ImageError
from .initramfs import module_load_order
from .kernel_modules import read_modules_dep

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Driver:
    name: str  # as in challenge.toml
    dkms_name: str  # the dkms module name (its source is /usr/src/DKMS_NAME-VERSION)
    dkms_package: str
    runtime: tuple[str, ...]  # what the guest keeps: firmware, CUDA's driver library, NVML, nvidia-smi
    modules: tuple[str, ...]  # module names, each file MODULE.ko (nvidia-modeset and -drm: no display)

    @property
    def packages(self) -> tuple[str, ...]:
        return (self.dkms_package, *self.runtime)


DRIVERS = {
    "nvidia-535": Driver("nvidia-535", "nvidia-tesla-535", "nvidia-tesla-535-kernel-dkms",
                         ("firmware-nvidia-tesla-535-gsp", "libnvidia-tesla-535-cuda1", "libnvidia-tesla-535-ml1",
                          "nvidia-tesla-535-smi"),
                         ("nvidia", "nvidia-uvm")),
}
# The driver is in non-free, its GSP firmware in non-free-firmware, and the free packages it
# depends on (nvidia-support, nvidia-modprobe, the glx alternatives) in contrib.
COMPONENTS = ("contrib", "non-free", "non-free-firmware")
# dkms, gcc and make come as the dkms package's dependencies; the headers are only recommended.
BUILD_PACKAGES = ("linux-headers-amd64",)
SETUP_HOOK = 'mkdir -p "$1/etc/dkms" && touch "$1/etc/dkms/no-autoinstall"'
MODULE_DIR = "extra/nvidia"  # under lib/modules/KVER
LOAD_LIST = "opt/vmjudge/gpu-modules.list"  # the guest's init loads these, in order, when the file exists
BUILD_TIMEOUT = 1800.0
ENV = ("PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8", "TMPDIR=/tmp",
       "DEBIAN_FRONTEND=noninteractive")
TAIL = 15


def driver(name: str) -> Driver:
    return DRIVERS[name]


def components(areas: tuple[str, ...]) -> tuple[str, ...]:
    """The recipe's archive areas and the driver's, in the recipe's order first."""
    return areas + tuple(c for c in COMPONENTS if c not in areas)


def document(name: str) -> dict:
    """The driver's part of the image's key: a CPU image's key never depends on this file."""
    d = driver(name)
    return {"driver": d.name, "packages": list(d.packages), "build_packages": list(BUILD_PACKAGES),
            "code": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}


def modinfo(path: Path) -> dict[str, str]:
    """The .modinfo section of a kernel module (name=, vermagic=, depends=, …), read from the ELF
    itself: modinfo would need kmod on the host, and the image's own would run its Python-less
    host check in a chroot for nothing."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        raise ImageError(f"{path} is not a 64-bit little-endian ELF file, so not a module for the guest kernel: "
                         "delete the image's build directory and build again.")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at, names_size = headers[shstrndx][4], headers[shstrndx][5]
    names = data[names_at:names_at + names_size]
    fields: dict[str, str] = {}
    for name_at, _type, _flags, _addr, offset, size in headers:
        if names[name_at:names.index(b"\0", name_at)] == b".modinfo":
            for item in data[offset:offset + size].split(b"\0"):
                key, sep, value = item.partition(b"=")
                if sep:
                    fields.setdefault(key.decode(errors="replace"), value.decode(errors="replace"))
    return fields


def check_vermagic(module: Path, kernel_version: str, reference: Path) -> str:
    """The module's vermagic, if it is the kernel's own (that of one of its in-tree modules)."""
    got = modinfo(module).get("vermagic", "")
    want = modinfo(reference).get("vermagic", "")
    if got.split()[:1] != [kernel_version] or got != want:
        raise ImageError(f"{module.name} was built for another kernel (vermagic {got.strip()!r}, the guest kernel "
                         f"{kernel_version} needs {want.strip()!r}), so the guest could not load it: check that "
                         "linux-headers-amd64 and linux-image-amd64 come from the same mirror and build again.")
    return got


def _chroot(root: Path, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """A command in the new root, offline, with a /proc of its own; all of it gone when it ends."""
    full = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", f"--mount-proc={root}/proc",
            "chroot", str(root), "/usr/bin/env", "-i", *ENV, *argv]
    try:
        return subprocess.run(full, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ImageError(f"{' '.join(argv[:2])} did not finish within {timeout:g} s in the new guest root: "
                         "build the image again on a less busy host.") from None


def _installed(root: Path) -> dict[str, str]:
    out = subprocess.run(["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f=${db:Status-Abbrev}\t"
                          "${Package}\t${Version}\n"], check=True, capture_output=True, text=True).stdout
    return {name: version for status, name, version in (line.split("\t") for line in out.splitlines())
            if status.startswith("ii")}


def _tail(text: str) -> str:
    return "\n".join(text.strip().splitlines()[-TAIL:])


def _said(proc: subprocess.CompletedProcess) -> str:
    return _tail(proc.stdout + proc.stderr)


def install(root: Path, name: str, kernel_version: str, keep: set[str], progress: Progress) -> dict:
    """Build the driver's modules for `kernel_version` in `root`, keep them, and purge the build
    tools (but nothing in `keep`); the manifest's `gpu` section."""
    d = driver(name)
    before = _installed(root)
    missing = [p for p in d.packages if p not in before]
    if missing:
        raise ImageError(f"the driver packages {', '.join(missing)} are not installed in the new root: check that "
                         "the mirror carries Debian's non-free and non-free-firmware areas and build again.")
    build = root / "lib/modules" / kernel_version / "build"  # a link to /usr/src/linux-headers-KVER, in the root
    if not (build.is_symlink() and (root / os.readlink(build).lstrip("/") / "include").is_dir()):
        headers = sorted(p for p in before if p.startswith("linux-headers-"))
        raise ImageError(f"the kernel headers for the guest kernel {kernel_version} are missing (installed: "
                         f"{', '.join(headers) or 'none'}), so the NVIDIA module cannot be built for it: the "
                         "mirror's linux-headers-amd64 must match its linux-image-amd64; build again once it does.")
    sources = sorted((root / "usr/src").glob(f"{d.dkms_name}-*/dkms.conf"))
    if not sources:
        raise ImageError(f"{d.dkms_package} left no source under /usr/src: build the image again.")
    version = sources[-1].parent.name[len(d.dkms_name) + 1:]
    progress(f"    dkms: {d.dkms_name} {version} for the guest kernel {kernel_version} (not the host's)")
    started = time.monotonic()
    dkms_tree = root / "var/lib/dkms" / d.dkms_name / version
    which = ["-m", d.dkms_name, "-v", version]
    # The package's postinst skipped `dkms add` too (no-autoinstall), so the module is added here.
    built = _chroot(root, ["dkms", "add", *which], 120) if not os.path.lexists(dkms_tree / "source") else None
    if built is None or built.returncode == 0:
        built = _chroot(root, ["dkms", "build", *which, "-k", kernel_version], BUILD_TIMEOUT)
    seconds = round(time.monotonic() - started, 1)
    if built.returncode != 0:
        make_log = dkms_tree / "build/make.log"
        log = make_log.read_text(errors="replace") if make_log.is_file() else ""
        raise ImageError(f"the NVIDIA module did not build for the guest kernel {kernel_version} (dkms exit "
                         f"{built.returncode} after {seconds:g} s): check that gcc and the kernel headers come "
                         "from the same Debian release and build again. dkms said:\n" + _said(built)
                         + (f"\nmake.log ends:\n{_tail(log)}" if log else ""))
    progress(f"    built in {seconds:g} s")
    modules_dir = root / "lib/modules" / kernel_version
    target = modules_dir / MODULE_DIR
    target.mkdir(parents=True, exist_ok=True)
    # dkms names the files after the package (nvidia-tesla-535-uvm.ko); the kernel knows them by
    # the name inside, under which they are kept.
    built_modules = {modinfo(p).get("name"): p for p in dkms_tree.glob(f"{kernel_version}/*/module/*.ko")}
    for module in d.modules:
        found = built_modules.get(module.replace("-", "_"))
        if found is None:
            raise ImageError(f"dkms reported success but built no module named {module} for {kernel_version} "
                             f"(only {', '.join(sorted(str(n) for n in built_modules)) or 'none'}): "
                             "build the image again.")
        shutil.copyfile(found, target / f"{module}.ko")
        os.chmod(target / f"{module}.ko", 0o644)
    removed = _purge(root, build_tools(d, kernel_version, set(before), keep))
    after = _installed(root)
    lost = sorted(p for p in keep if p in before and p not in after)
    if lost:
        raise ImageError(f"removing the driver's build tools also removed {', '.join(lost)}, which the image "
                         "needs: report this as a vmjudge bug, with the image's build output.")
    shutil.rmtree(root / "var/lib/dkms", ignore_errors=True)  # a signing key dkms may have made, if openssl was there
    shutil.rmtree(root / "etc/dkms", ignore_errors=True)
    progress(f"    kept {', '.join(m + '.ko' for m in d.modules)} in /lib/modules/{kernel_version}/{MODULE_DIR}; "
             f"removed {len(removed)} build packages ({', '.join(sorted(removed)[:6])}, …)")
    return {"driver": d.name, "version": version, "kernel_version": kernel_version, "dkms_seconds": seconds,
            "packages": {p: before[p] for p in d.packages},
            "removed": {p: before[p] for p in sorted(removed)}}


def build_tools(d: Driver, kernel_version: str, installed: set[str], keep: set[str]) -> list[str]:
    """What is purged by name (the compiler, make and perl go with them as no longer needed):
    never a package the image keeps, such as one the challenge's [image] packages names."""
    return [p for p in (d.dkms_package, "dkms", *BUILD_PACKAGES, f"linux-headers-{kernel_version}")
            if p in installed and p not in keep]


def _purge(root: Path, packages: list[str]) -> set[str]:
    """Purge `packages` and whatever only they depended on. Recommendations do not keep a package:
    the image is installed without them, so they never brought one in."""
    before = set(_installed(root))
    proc = _chroot(root, ["apt-get", "purge", "-y", "--autoremove", "-o", "APT::AutoRemove::RecommendsImportant=0",
                          "-o", "APT::AutoRemove::SuggestsImportant=0", *packages], 600)
    if proc.returncode != 0:
        raise ImageError(f"removing the driver's build tools ({', '.join(packages)}) failed (apt-get exit "
                         f"{proc.returncode}): build the image again; apt-get said:\n" + _said(proc))
    return before - set(_installed(root))


def finish(root: Path, name: str, kernel_version: str, section: dict) -> dict:
    """After the module pruning: the modules must still be there and indexed, each for this kernel;
    writes the list the guest's init loads, dependencies first. Returns the manifest's `gpu` section."""
    d = driver(name)
    modules_dir = root / "lib/modules" / kernel_version
    deps = read_modules_dep(modules_dir)
    reference = next((modules_dir / m for m in sorted(deps) if m.startswith("kernel/")), None)
    if reference is None:
        raise ImageError(f"the guest kernel {kernel_version} has no modules of its own left: build the image again.")
    records = []
    for module in d.modules:
        rel = f"{MODULE_DIR}/{module}.ko"
        if rel not in deps or not (modules_dir / rel).is_file():
            raise ImageError(f"{module}.ko is missing from the guest kernel's modules after pruning: "
                             "report this as a vmjudge bug.")
        path = modules_dir / rel
        records.append({"path": f"/lib/modules/{kernel_version}/{rel}", "name": modinfo(path).get("name", module),
                        "vermagic": check_vermagic(path, kernel_version, reference),
                        "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    order = module_load_order(modules_dir, tuple(m.replace("-", "_") for m in d.modules))
    (root / LOAD_LIST).parent.mkdir(parents=True, exist_ok=True)
    (root / LOAD_LIST).write_text("".join(rel + "\n" for rel in order))
    os.chmod(root / LOAD_LIST, 0o644)
    return {**section, "modules": records, "load_order": order}
