"""ISO 9660 media (Rock Ridge + Joliet) for the VM's CD-ROM, written with pycdlib.

Files are added by path: pycdlib reads each one only while writing, so a data set of any
size passes through in small blocks. The replica ISO is bootable: an El Torito entry for
ISOLINUX with its boot info table, an El Torito EFI entry for a FAT image holding a UEFI boot
loader, and an isohybrid MBR (with the FAT image as partition 2, type 0xEF, and a GPT) so the
same image also boots when written to a disk. Boot files keep plain ISO 9660 names, which
ISOLINUX looks up. The same inputs give the same bytes (dates pinned,
names in sorted order), which lets a stage manifest's ISO hash identify its content.
"""

from __future__ import annotations

import io
import os
import re
import stat
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from time import struct_time
from typing import Any

import pycdlib
import pycdlib.dates
import pycdlib.headervd
import pycdlib.pycdlib

from ..archive.joliet import JOLIET_MAX, joliet_length
from ..errors import MediaError

# 2000-01-01T00:00:00Z: ISO 9660 dates cannot be 1970, and any fixed date will do.
PINNED_EPOCH = 946684800.0

Source = Path | bytes
_PLAIN_RE = re.compile(r"^[A-Z0-9_]{1,8}(\.[A-Z0-9_]{1,3})?$")
# isohybrid MBR disk signature: pycdlib draws a random one unless given, and the same inputs
# must give the same bytes.
MBR_ID = 0x766D6A64
# pycdlib's isohybrid pads the image to whole cylinders of 64 heads x 32 sectors x 512 bytes;
# the backup GPT is 32 sectors of partition entries and a header sector.
CYLINDER = 64 * 32 * 512
BACKUP_GPT = 33 * 512
# The GPT that pycdlib writes for an EFI isohybrid: pycdlib draws random GUIDs (and different
# ones for the primary and the backup table); these are fixed, the same in both.
GPT_DISK_GUID = uuid.UUID("766d6a75-6467-4500-8000-000000000000")
GPT_PART_GUIDS = (uuid.UUID("766d6a75-6467-4500-8000-000000000001"),
                  uuid.UUID("766d6a75-6467-4500-8000-000000000002"))


@dataclass(frozen=True)
class ElTorito:
    """A BIOS boot entry (no emulation, boot info table), optionally a UEFI one, and an
    isohybrid MBR.

    `loader` is the ISO path of isolinux.bin; it and every path in `plain` get plain ISO 9660
    names (upper case, 8.3), which ISOLINUX finds where Rock Ridge names would be unseen.
    `efi` is the ISO path of a FAT image holding EFI/BOOT/BOOTX64.EFI: the El Torito EFI entry
    and, on a hybrid, the MBR's EFI system partition both point at it."""

    loader: str
    catalog: str
    plain: frozenset[str] = frozenset()
    hybrid: bool = True
    efi: str | None = None


class _PinnedClock:
    """Stands in for the `time` module inside pycdlib, which stamps the current local time
    into volume descriptors and records and offers no way to pass a date for all of them."""

    def time(self) -> float:
        return PINNED_EPOCH

    def localtime(self, secs: float | None = None) -> struct_time:
        return time.gmtime(PINNED_EPOCH if secs is None else secs)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def _pin_pycdlib_clock() -> None:
    modules: tuple[Any, ...] = (pycdlib.pycdlib, pycdlib.headervd, pycdlib.dates)  # untyped: they own `time`
    for module in modules:
        if not isinstance(module.time, _PinnedClock):
            module.time = _PinnedClock()


def _expand(files: Mapping[str, Source]) -> dict[PurePosixPath, Source]:
    """Turn {iso path: file, directory or bytes} into {iso path: file or bytes}."""
    out: dict[PurePosixPath, Source] = {}
    for name, source in files.items():
        path = _iso_path(name)
        if isinstance(source, bytes):
            out[path] = source
            continue
        source = Path(source)
        try:
            st = source.lstat()
        except FileNotFoundError:
            raise MediaError(f"{source} does not exist, so it cannot go on the ISO.") from None
        if stat.S_ISDIR(st.st_mode):
            for root, dirs, names in os.walk(source):
                dirs.sort()
                for entry in sorted(names) + [d for d in dirs if Path(root, d).is_symlink()]:
                    full = Path(root, entry)
                    rel = PurePosixPath(*full.relative_to(source).parts)
                    out[path / rel] = full
        elif stat.S_ISREG(st.st_mode):
            out[path] = source
        else:
            raise MediaError(f"{source} is not a regular file or directory, so it cannot go on the ISO.")
    for source in out.values():
        if isinstance(source, Path) and not stat.S_ISREG(source.lstat().st_mode):
            raise MediaError(f"{source} is a link or special file; only regular files can go on the ISO.")
    return out


def _iso_path(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise MediaError(f"ISO path {name!r} must be relative and stay inside the image.")
    return path


def _plain_name(path: PurePosixPath) -> str:
    for part in path.parts:
        if not _PLAIN_RE.match(part.upper()):
            raise MediaError(f"boot file {path} needs an 8.3 name (letters, digits, _) on the ISO.")
    upper = "/" + "/".join(p.upper() for p in path.parts)
    return upper


def write_iso(out: Path, files: Mapping[str, Source], volume_id: str = "VMJUDGE",
              boot: ElTorito | None = None, private: frozenset[str] = frozenset(),
              directories: Iterable[str] = ()) -> Path:
    """Write an ISO holding `files` ({path on the ISO: host file, host directory or bytes}).

    Paths in `private` are root's alone in the guest (Rock Ridge mode 0400, owner 0): the
    job's description holds the run's nonce, which the entry must not read. Linux reads a
    disc's Rock Ridge tree in preference to its Joliet one, so the mode holds. `directories` are
    made even when empty: where the guest mounts a record set's disk (vm/job.py Job.data)."""
    _pin_pycdlib_clock()
    entries = _expand(files)
    plain = {PurePosixPath(p) for p in boot.plain | {boot.loader} | ({boot.efi} if boot.efi else set())} \
        if boot is not None else set()
    plain_dirs = {parent for p in plain for parent in p.parents if parent != PurePosixPath(".")}
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, vol_ident=volume_id[:32].upper(), sys_ident="LINUX",
            app_ident_str="VMJUDGE", rock_ridge="1.09", joliet=3)
    dirs: dict[PurePosixPath, str] = {PurePosixPath("."): "/"}
    counter = 0
    handles: list[io.BytesIO] = []

    def iso_dir(path: PurePosixPath) -> str:
        nonlocal counter
        if path in dirs:
            return dirs[path]
        parent = iso_dir(path.parent)
        counter += 1
        name = _plain_name(path) if path in plain_dirs else f"{parent.rstrip('/')}/D{counter:06d}"
        iso.add_directory(name, rr_name=path.name, joliet_path=_joliet(path), file_mode=0o40555)
        dirs[path] = name
        return name

    for made in sorted(directories):
        iso_dir(_iso_path(made))
    for path in sorted(entries):
        source = entries[path]
        parent = iso_dir(path.parent)
        counter += 1
        name = f"{parent.rstrip('/')}/F{counter:06d}.;1"
        if path in plain:
            name = _plain_name(path) + ("" if "." in path.name else ".") + ";1"
        if isinstance(source, bytes):
            fp = io.BytesIO(source)
            handles.append(fp)
            mode = 0o100400 if str(path) in private else 0o100444
            iso.add_fp(fp, len(source), name, rr_name=path.name, joliet_path=_joliet(path), file_mode=mode)
        else:
            mode = 0o100555 if os.access(source, os.X_OK) else 0o100444
            iso.add_file(str(source), name, rr_name=path.name, joliet_path=_joliet(path), file_mode=mode)
    if boot is not None:
        loader = PurePosixPath(boot.loader)
        catalog = PurePosixPath(boot.catalog)
        iso_dir(catalog.parent)
        iso.add_eltorito(_plain_name(loader) + ";1", bootcatfile=_plain_name(catalog) + ";1",
                         rr_bootcatname=catalog.name, joliet_bootcatfile=_joliet(catalog),
                         boot_load_size=4, boot_info_table=True, media_name="noemul")
        if boot.efi:
            iso.add_eltorito(_plain_name(PurePosixPath(boot.efi)) + ";1", bootcatfile=_plain_name(catalog) + ";1",
                             rr_bootcatname=catalog.name, joliet_bootcatfile=_joliet(catalog),
                             efi=True, media_name="noemul")
        if boot.hybrid:
            iso.add_isohybrid(mbr_id=MBR_ID, efi=bool(boot.efi))
            if boot.efi:
                _pin_gpt(iso)
                _leave_room_for_backup_gpt(iso)
    out = Path(out)
    tmp = out.with_name(out.name + ".part")
    try:
        iso.write(str(tmp))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except OSError as exc:
        raise MediaError(f"cannot write {out}: {exc.strerror}; check the disk has room and the directory is "
                         "writable.") from exc
    finally:
        iso.close()
        tmp.unlink(missing_ok=True)
    return out


def _pin_gpt(iso: pycdlib.PyCdlib) -> None:
    hybrid = iso.isohybrid_mbr
    if hybrid is None:
        raise MediaError("the ISO has no isohybrid MBR to pin")
    for gpt in (hybrid.primary_gpt, hybrid.secondary_gpt):
        gpt.header.disk_guid = GPT_DISK_GUID
        for part, guid in zip(gpt.parts, GPT_PART_GUIDS, strict=True):
            part.part_guid = guid


def _leave_room_for_backup_gpt(iso: pycdlib.PyCdlib) -> None:
    """pycdlib writes the backup GPT (33 sectors) at the very end of the padding that rounds
    the image up to whole 1 MiB cylinders, and when that padding is shorter the GPT overwrites
    the ISO's last blocks (file data). So the volume grows by enough empty blocks to leave it
    that room (at most 1 MiB more)."""
    size = iso.pvd.space_size * iso.logical_block_size
    padding = -size % CYLINDER
    if padding < BACKUP_GPT:
        blocks = -(-BACKUP_GPT // iso.logical_block_size)
        iso._finish_add(padding + blocks * iso.logical_block_size, 0)


def _joliet(path: PurePosixPath) -> str | None:
    """The Joliet path, or None for a file reachable through Rock Ridge only: one with a name
    part longer than Joliet's 64 UTF-16 code units, or longer than the 64 bytes of UTF-8 that
    pycdlib (1.22) checks instead, which refuses, say, 40 "é" (80 bytes), a valid Joliet name."""
    if any(joliet_length(part) > JOLIET_MAX or len(part.encode()) > JOLIET_MAX for part in path.parts):
        return None
    return "/" + "/".join(path.parts)
