"""The initramfs: busybox, the few kernel modules needed to reach the root, and our init.

Debian's kernel keeps virtio, squashfs, overlay, isofs and the CD-ROM drivers as modules,
and they must be loaded dependencies first. The archive is a gzip'd "newc" cpio
written here directly: the format is a fixed 110-byte header per member, and writing it
ourselves keeps the output byte-for-byte reproducible (no host mtimes, uids or inode numbers).
"""

from __future__ import annotations

import gzip
import io
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import ImageError
from .kernel_modules import read_modules_dep

# What the init needs, by module name; their dependencies are found in modules.dep.
# virtio_rng comes first: without a seeded CRNG, Python's start blocks in getrandom() for
# over a second under TCG (measured), and so would any entry that asks for random bytes.
# The CD-ROM's controller comes last, as loading any module without async_probe waits for
# every probe still running in the background.
MODULES = ("virtio_pci", "virtio_rng", "virtio_blk", "virtio_console", "squashfs", "overlay", "isofs",
           "sr_mod", "ata_piix")
# The CD-ROM's controllers, loaded with the kernel's async_probe: libata's reset of an IDE port
# sleeps 150 ms and its probe took 0.37 s of each cold boot under TCG, which the init then spent
# waiting; probed in the background, it overlaps the root's mount and Python's start (the agent
# mounts the CD once it has started).
ASYNC_PROBE = ("ata_piix", "ahci")
# A GPU VM is a q35 machine, whose CD-ROM is on SATA: a GPU image's judge boot needs ahci too
# (a CPU image's initramfs stays without it).
GPU_MODULES = ("ahci",)
# Loaded only when booted as the replica ISO (kernel argument vmjudge.replica), so the judge's
# boot does not pay for them: loop mounts root.sqfs from the CD; sd_mod, ahci and the USB host
# and storage drivers find the hybrid ISO written to a stick or attached as a SATA disk or CD on
# a participant's own computer; usbhid keeps a USB keyboard working once the USB host drivers
# have taken the controller from the firmware's legacy keyboard emulation.
REPLICA_MODULES = ("loop", "sd_mod", "ahci", "xhci_pci", "ehci_pci", "ohci_pci", "uhci_hcd", "usb_storage", "uas",
                   "usbhid", "hid_generic")


# The busybox applets the initramfs's init runs, linked when the archive is written: `busybox
# --install` made all 269 links at each boot, 0.05-0.07 s under TCG. The shell itself runs any
# other applet by name (busybox's standalone shell, through /proc/self/exe while /proc is mounted),
# as the replica's rescue shell does.
APPLETS = ("sh", "mkdir", "mount", "umount", "insmod", "cat", "usleep", "sleep", "poweroff", "switch_root")


@dataclass(frozen=True)
class Member:
    name: str
    mode: int
    data: bytes = b""
    rdev: tuple[int, int] = (0, 0)


def _module_name(path: str) -> str:
    """kernel/drivers/char/hw_random/virtio-rng.ko -> virtio_rng, as modprobe names it."""
    return Path(path).name.split(".ko")[0].replace("-", "_")


def module_load_order(modules_dir: Path, wanted: tuple[str, ...] = MODULES) -> list[str]:
    """Paths (relative to modules_dir) of the wanted modules, each after what it needs."""
    deps = read_modules_dep(modules_dir)
    builtin = set()
    builtin_file = modules_dir / "modules.builtin"
    if builtin_file.exists():
        builtin = {_module_name(p) for p in builtin_file.read_text().split()}
    by_name = {_module_name(p): p for p in deps}
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for dep in deps.get(path, []):
            visit(dep)
        order.append(path)

    for name in wanted:
        if name in by_name:
            visit(by_name[name])
        elif name not in builtin:
            raise ImageError(f"the guest kernel has no module {name}: the image cannot boot; "
                             "use Debian's linux-image-amd64 kernel.")
    return order


def _newc(members: list[Member]) -> bytes:
    out = io.BytesIO()

    def write(name: str, mode: int, data: bytes, ino: int, rdev: tuple[int, int]) -> None:
        encoded = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(encoded), 0)
        out.write(b"070701" + b"".join(b"%08x" % f for f in fields))
        out.write(encoded)
        out.write(b"\0" * (-(110 + len(encoded)) % 4))
        out.write(data)
        out.write(b"\0" * (-len(data) % 4))

    for ino, m in enumerate(members, start=1):
        write(m.name, m.mode, m.data, ino, m.rdev)
    write("TRAILER!!!", 0, b"", 0, (0, 0))
    return out.getvalue()


def read_newc(data: bytes) -> dict[str, Member]:
    """Members of an (uncompressed) newc archive, for checking what was written."""
    members: dict[str, Member] = {}
    pos = 0
    while True:
        if data[pos:pos + 6] != b"070701":
            raise ImageError(f"not a newc cpio archive at offset {pos}")
        fields = [int(data[pos + 6 + 8 * i: pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name = data[pos + 110: pos + 110 + namesize - 1].decode()
        pos += 110 + namesize
        pos += -pos % 4
        body = data[pos:pos + size]
        pos += size + (-size % 4)
        if name == "TRAILER!!!":
            return members
        members[name] = Member(name, mode, body, (fields[9], fields[10]))


def write_initramfs(members: list[Member], out: Path) -> None:
    with open(out, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0, compresslevel=6) as gz:
        gz.write(_newc(members))


def _load_list(order: list[str]) -> bytes:
    """The init's list: a module's path, then its parameters. Every module after a CD-ROM
    controller is loaded with async_probe too, as loading one without it would wait for the
    controller's probe."""
    lines, background = [], False
    for path in order:
        background = background or _module_name(path) in ASYNC_PROBE
        lines.append(f"{path} async_probe=1\n" if background else f"{path}\n")
    return "".join(lines).encode()


def build_initramfs(root: Path, kernel_version: str, init_script: Path, out: Path, gpu: bool = False) -> list[str]:
    """Write the initramfs for the guest root at `root`; returns the module load order."""
    modules_dir = root / "lib" / "modules" / kernel_version
    busybox = root / "usr" / "bin" / "busybox"
    if not busybox.exists():
        busybox = root / "bin" / "busybox"
    if not busybox.exists():
        raise ImageError("the guest root has no busybox: keep busybox-static in the base package list.")
    order = module_load_order(modules_dir, MODULES + (GPU_MODULES if gpu else ()))
    replica = [m for m in module_load_order(modules_dir, REPLICA_MODULES) if m not in order]
    members = [
        Member("bin", stat.S_IFDIR | 0o755),
        Member("dev", stat.S_IFDIR | 0o755),
        Member("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1)),
        Member("lib", stat.S_IFDIR | 0o755),
        Member("lib/modules", stat.S_IFDIR | 0o755),
        Member("bin/busybox", stat.S_IFREG | 0o755, busybox.read_bytes()),
        *(Member(f"bin/{applet}", stat.S_IFLNK | 0o777, b"busybox") for applet in APPLETS),
        Member("init", stat.S_IFREG | 0o755, init_script.read_bytes()),
        Member("modules.list", stat.S_IFREG | 0o644, _load_list(order)),
        Member("modules-replica.list", stat.S_IFREG | 0o644, _load_list(replica)),
    ]
    made_dirs = {"lib/modules"}
    for rel in order + replica:
        parts = Path(rel).parts
        for i in range(1, len(parts)):
            d = "lib/modules/" + "/".join(parts[:i])
            if d not in made_dirs:
                made_dirs.add(d)
                members.append(Member(d, stat.S_IFDIR | 0o755))
        members.append(Member("lib/modules/" + rel, stat.S_IFREG | 0o644, (modules_dir / rel).read_bytes()))
    write_initramfs(members, out)
    return order
