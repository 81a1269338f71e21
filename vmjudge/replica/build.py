"""`vmjudge replica build`: the bootable replica ISO for one challenge.

It holds the judge's image files as they are (root.sqfs, vmlinuz, initrd.img and their
manifest, byte for byte), ISOLINUX (BIOS) and GRUB (UEFI, efi.py) to boot them with the
kernel argument vmjudge.replica, the pure-Python part of vmjudge and its entry points for
`vmjudge-replica check`, and the challenge's training set; for a container challenge also the
judge's own skopeo, umoci and squashfs tools with their libraries (tools.py), with which stage 1
makes the image's root there as the judge makes it.
Only files named here go on it: challenge.toml, training/RECORDS, each training record's
files and training/REFERENCE*; never test/ or reference/. The same inputs give the same bytes
(the ISO writer pins dates and orders names). One of the inputs is the CPU level the judge's VMs
give, asked of libvirt when the replica is built (cpu_match.py): the README states it, and the
check on a participant's machine compares it with theirs.

A contest whose phases have training sets or images of their own has a replica per phase
(`--phase`): the phase's image, and its training set at its place in the challenge's directory,
which the replica's check reads as the judge reads it (Challenge.in_phase, named in replica.json).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

from ..config import Challenge, Site, load_challenge
from ..config.submission import set_files
from ..errors import ImageError, InfrastructureError, MediaError
from ..images.build import find_image
from ..images.image import FILES, GuestImage
from ..images.iso import ElTorito, Source, write_iso
from ..sources import package_files
from ..vm import cpu_offer, domain
from .boot_config import ISOLINUX_CFG
from .cpu_match import judge_cpu, readme_text
from .efi import efi_image_bytes
from .tools import tool_files

BOOT_DIR = Path(__file__).resolve().parent / "boot"
# Debian's isolinux and syslinux-common packages (vmjudge/host/setup-host installs them).
ISOLINUX_BIN = Path("/usr/lib/ISOLINUX/isolinux.bin")
LDLINUX_C32 = Path("/usr/lib/syslinux/modules/bios/ldlinux.c32")
VOLUME_ID = "VMJUDGE_REPLICA"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ReplicaBuild:
    path: Path
    size: int
    seconds: float
    files: int


def training_files(ch: Challenge) -> dict[str, Path]:
    """The training set as it goes on the ISO, by its path in the challenge's directory
    (training/, or a phase's own): RECORDS, each record's files (RECORD.*, or with sockets every file
    under RECORD/ at its own path, as the case's /input lays it out), REFERENCE*; a submission challenge's,
    every file of its directory."""
    base = ch.set_dir("training")
    where = base.relative_to(ch.directory)
    if ch.submission is not None:  # a submission's sample is its whole directory (its format among its files)
        return {f"{where}/{rel}": path for rel, path in set_files(base).items()}
    out: dict[str, Path] = {f"{where}/RECORDS": base / "RECORDS"}
    for record in ch.training:
        for f in ch.record_files("training", record):
            out[f"{where}/{f.relative_to(base).as_posix()}"] = f
    for f in sorted(base.glob("REFERENCE*")):
        if f.is_file():
            out[f"{where}/{f.name}"] = f
    return out


def build_scripts(ch: Challenge) -> dict[str, Path]:
    """Every build script challenge.toml names ([image] and each [phase.image]): reading the
    replica's copy of it checks that each is there. What they built is in root.sqfs."""
    whole = load_challenge(ch.directory)
    named = {recipe.build for recipe in (whole.image, *(p.image for p in whole.phases)) if recipe.build}
    return {build: ch.directory / build for build in sorted(named)}


def package_metadata() -> dict[str, bytes]:
    """vmjudge's installed metadata, as a dist-info directory beside those sources: the copy on
    the CD is not installed, and its entry points are the only registry of the built-in
    scorers (vmjudge.scorers), which stage 2 and the training scores need."""
    try:
        dist = distribution("vmjudge")
    except PackageNotFoundError as exc:
        raise MediaError("vmjudge is not installed, so its scorers' entry points cannot go on the replica: "
                         "run `make setup` (pip install -e .).") from exc
    return {"vmjudge.dist-info/METADATA": f"Metadata-Version: 2.1\nName: vmjudge\nVersion: {dist.version}\n".encode(),
            "vmjudge.dist-info/entry_points.txt": (dist.read_text("entry_points.txt") or "").encode()}


def judge_cpu_of(site: Site, ch: Challenge) -> dict[str, Any]:
    """The CPU the judge's VMs give, as replica.json records it; its level None when libvirt does
    not answer or cannot say."""
    offered = None
    try:
        conn = domain.connect(site.uri)
    except InfrastructureError:
        pass
    else:
        try:
            offered = cpu_offer.offer(conn, site)
        finally:
            conn.close()
    return judge_cpu(site.guest_cpu.setting, offered.level if offered else None,
                     offered.flags if offered else frozenset(), ch.vm.cpu_level)


def replica_files(ch: Challenge, image: GuestImage, cpu: dict[str, Any] | None = None) -> dict[str, Source]:
    """`cpu`: judge_cpu_of's record (None: not known)."""
    cpu = cpu or judge_cpu(None, None, required=ch.vm.cpu_level)
    for tool in (ISOLINUX_BIN, LDLINUX_C32):
        if not tool.is_file():
            raise MediaError(f"{tool} is missing: run `make setup` or `apt-get install isolinux syslinux-common`.")
    files: dict[str, Source] = {
        "isolinux/isolinux.bin": ISOLINUX_BIN,
        "isolinux/ldlinux.c32": LDLINUX_C32,
        "isolinux/isolinux.cfg": ISOLINUX_CFG.encode(),
        "efi/efiboot.img": efi_image_bytes(),
        "vmjudge/init": BOOT_DIR / "init",
        "vmjudge/vmjudge-replica": BOOT_DIR / "vmjudge-replica",
        "vmjudge/greeting.txt": BOOT_DIR / "greeting.txt",
        "vmjudge/manifest.json": image.directory / "manifest.json",
        "vmjudge/challenge/challenge.toml": ch.directory / "challenge.toml",
        "vmjudge/replica.json": (json.dumps({"challenge": ch.name, "image": image.key, "kind": ch.entry.kind,
                                             "sha256": image.manifest["sha256"], "cpu": cpu,
                                             "training_records": len(ch.training),
                                             **({"phase": ch.phase.name} if ch.phase is not None else {})},
                                            indent=1, sort_keys=True) + "\n").encode(),
        "README.txt": (BOOT_DIR / "greeting.txt").read_bytes() + readme_text(cpu).encode(),
    }
    for name in FILES:
        files[f"vmjudge/{name}"] = image.directory / name
    for name, path in build_scripts(ch).items():
        files[f"vmjudge/challenge/{name}"] = path
    for name, path in training_files(ch).items():
        files[f"vmjudge/challenge/{name}"] = path
    for name, path in package_files().items():
        files[f"vmjudge/python/{name}"] = path
    for name, data in package_metadata().items():
        files[f"vmjudge/python/{name}"] = data
    if ch.entry.kind == "container":
        files.update(tool_files())
    return files


BOOT = ElTorito(loader="isolinux/isolinux.bin", catalog="isolinux/boot.cat",
                plain=frozenset({"isolinux/ldlinux.c32", "isolinux/isolinux.cfg", "vmjudge/vmlinuz",
                                 "vmjudge/initrd.img"}),
                efi="efi/efiboot.img")


def build_replica(site: Site, ch: Challenge, out: Path, progress: Progress = print) -> ReplicaBuild:
    started = time.monotonic()
    if not ch.training:
        raise ImageError(f"{ch.set_dir('training') / 'RECORDS'} is missing or empty: the replica carries the "
                         "training set, so list one record per line.")
    image = find_image(site, ch.image)
    progress(f"[1/3] checking the judge's image {image.key} against its manifest")
    image.verify()
    files = replica_files(ch, image, judge_cpu_of(site, ch))
    data = sum(p.stat().st_size for p in files.values() if isinstance(p, Path))
    progress(f"[2/3] writing {out}: {len(files)} files, {data / 1e6:.0f} MB "
             f"({len(ch.training)} training records, root.sqfs {image.root.stat().st_size / 1e6:.0f} MB)")
    write_iso(out, files, volume_id=VOLUME_ID, boot=BOOT)
    size = out.stat().st_size
    seconds = time.monotonic() - started
    progress(f"[3/3] done in {seconds:.1f} s: {out} is {size / 1e6:.1f} MB ({size} bytes)")
    return ReplicaBuild(path=out, size=size, seconds=seconds, files=len(files))
