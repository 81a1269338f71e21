"""Unpack an entry archive on the host, checking every member before anything is written.

An entry archive is hostile until proven otherwise: a member may try to climb out of the
destination (`../x`, `/etc/x`), plant a link, a device or a FIFO, or unpack to far more
than it claims (a zip bomb). So all members are read and checked first; only a clean
archive is extracted, one member at a time, with the bytes actually written counted
(headers can lie) and the run stopped the moment it passes the limit. Links of any kind
are refused outright: entries hold only regular files and directories. The layout is the
participant's: no leading directory is stripped. On any failure the destination is left
as it was found (absent or empty).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ...errors import EntryError, InfrastructureError, VmjudgeError

CHUNK = 1 << 20
RATIO_FLOOR = 10 << 20  # below this total, a high compression ratio is harmless
NAME_MAX = 255
PATH_MAX = 4000
# Errors the archive libraries raise on damaged data.
CORRUPT = (zipfile.BadZipFile, zipfile.LargeZipFile, tarfile.TarError, zlib.error, EOFError,
           NotImplementedError, UnicodeError, ValueError, OSError)


@dataclass(frozen=True)
class UnpackLimits:
    """How much an entry may hold: members, total bytes, and uncompressed/archive size ratio
    (the ratio only counts once the total passes 10 MiB)."""

    max_members: int = 10000
    max_unpacked: int = 1 << 30
    max_ratio: float = 200.0


@dataclass(frozen=True)
class Member:
    """One checked archive member: its clean relative POSIX path, whether it is a directory,
    its declared size, whether any execute bit is set, and how to open its data."""

    path: str
    is_dir: bool
    size: int
    executable: bool
    open: Callable[[], BinaryIO]


def _show(name: str) -> str:
    return name if name.isprintable() else repr(name)


def _bad(message: str) -> EntryError:
    return EntryError("bad-archive", message)


def _link_error(name: str) -> EntryError:
    return _bad(f"{_show(name)} is a link; entries may hold only regular files and directories: "
                "put a copy of the file it points to in its place and submit again.")


def _special_error(name: str, what: str) -> EntryError:
    return _bad(f"{_show(name)} is a {what}; entries may hold only regular files and directories: "
                "remove it and submit again.")


def clean_path(name: str, raw: str | None = None) -> str:
    """The member's path relative to the entry's home ("" for the home itself), or an
    EntryError when it is absolute, climbs with "..", or holds a NUL or backslash."""
    shown = _show(raw if raw is not None else name)
    if "\0" in (raw or name) or "\\" in name:
        raise _bad(f"The member name {shown} holds a NUL or backslash character: rename the file "
                   "and submit again.")
    if name.startswith("/"):
        raise _bad(f"The member {shown} has an absolute path: make the archive from inside the entry's "
                   "folder (e.g. `cd entry && zip -r ../entry.zip .`) and submit again.")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _bad(f"The member {shown} climbs out of the entry with '..': make the archive with "
                   "relative paths from inside the entry's folder and submit again.")
    path = "/".join(parts)
    if len(path.encode("utf-8", "surrogateescape")) > PATH_MAX or any(
            len(p.encode("utf-8", "surrogateescape")) > NAME_MAX for p in parts):
        raise _bad(f"The member name {shown} is too long for a Linux file system: shorten it and "
                   "submit again.")
    return path


def _zip_members(zf: zipfile.ZipFile, limits: UnpackLimits) -> Iterator[Member]:
    infos = zf.infolist()
    _check_count(len(infos), limits)
    for info in infos:
        name = info.filename
        path = clean_path(name, info.orig_filename)
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode)
        if stat.S_ISLNK(mode):
            raise _link_error(name)
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            raise _special_error(name, _describe(mode))
        if info.flag_bits & 0x1:
            raise _bad(f"{_show(name)} is encrypted: make the archive without a password and submit again.")
        is_dir = info.is_dir() or stat.S_ISDIR(mode)
        yield Member(path, is_dir, 0 if is_dir else info.file_size, bool(mode & 0o111),
                     lambda info=info: zf.open(info))


def _tar_members(tf: tarfile.TarFile, limits: UnpackLimits) -> Iterator[Member]:
    members: list[tarfile.TarInfo] = []
    while (ti := tf.next()) is not None:  # stop reading headers as soon as there are too many
        members.append(ti)
        _check_count(len(members), limits)
    for ti in members:
        path = clean_path(ti.name)
        if ti.issym() or ti.islnk():
            raise _link_error(ti.name)
        if not (ti.isreg() or ti.isdir()):
            raise _special_error(ti.name, _describe_tar(ti))
        yield Member(path, ti.isdir(), 0 if ti.isdir() else ti.size, bool(ti.mode & 0o111),
                     lambda ti=ti: tf.extractfile(ti))


def _describe(mode: int) -> str:
    for test, what in ((stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return what
    return "special file"


def _describe_tar(ti: tarfile.TarInfo) -> str:
    if ti.ischr():
        return "character device"
    if ti.isblk():
        return "block device"
    if ti.isfifo():
        return "FIFO"
    return f"special file (tar type {ti.type!r})"


def _check_count(count: int, limits: UnpackLimits) -> None:
    if count > limits.max_members:
        raise _bad(f"The entry archive holds more than {limits.max_members} members: ship fewer files "
                   "(pack many small ones into one) and submit again.")


def _check_layout(members: list[Member]) -> None:
    """Refuse duplicate names and files that other members treat as directories."""
    seen: dict[str, bool] = {}
    for m in members:
        if not m.path:
            if m.is_dir:
                continue  # "./": the entry's home itself
            raise _bad("The entry archive holds a file with an empty name: remove it and submit again.")
        if m.path in seen:
            raise _bad(f"{_show(m.path)} appears more than once in the entry archive: keep one and "
                       "submit again.")
        seen[m.path] = m.is_dir
    for m in members:
        parts = m.path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if seen.get(parent) is False:
                raise _bad(f"{_show(m.path)} lies inside {_show(parent)}, which is a file: rename one of "
                           "them and submit again.")


def _check_totals(members: list[Member], archive_size: int, limits: UnpackLimits) -> None:
    """Refuse by declared sizes, before anything is written."""
    total = sum(m.size for m in members)
    if total > limits.max_unpacked:
        raise _bad(f"The entry archive unpacks to more than {limits.max_unpacked} bytes ({total} declared): "
                   "make the entry smaller and submit again.")
    _check_ratio(total, archive_size, limits)


def _check_ratio(total: int, archive_size: int, limits: UnpackLimits) -> None:
    if total > RATIO_FLOOR and total > limits.max_ratio * max(archive_size, 1):
        raise _bad(f"The entry archive unpacks to {total / max(archive_size, 1):.0f} times its own size, "
                   f"more than the {limits.max_ratio:g} allowed: leave out the highly compressible data "
                   "and submit again.")


@contextmanager
def _opened(archive: Path, kind: str) -> Iterator[Callable[[UnpackLimits], Iterator[Member]]]:
    if kind == "zip":
        with zipfile.ZipFile(archive) as zf:
            yield lambda limits: _zip_members(zf, limits)
    elif kind == "tar.gz":
        with tarfile.open(archive, mode="r:gz") as tf:
            yield lambda limits: _tar_members(tf, limits)
    else:
        raise ValueError(f"unknown archive kind {kind!r}")


class _Writer:
    """Writes checked members under dest, counting the bytes actually written."""

    def __init__(self, dest: Path, archive_size: int, limits: UnpackLimits):
        self.dest, self.archive_size, self.limits = dest, archive_size, limits
        self.total = 0

    def make_dir(self, rel: str) -> None:
        path = self.dest
        for part in rel.split("/"):
            path = path / part
            if not path.is_dir():
                path.mkdir()
                os.chmod(path, 0o755)

    def write_file(self, m: Member) -> None:
        parent = m.path.rpartition("/")[0]
        if parent:
            self.make_dir(parent)
        mode = 0o755 if m.executable else 0o644
        fd = os.open(self.dest / m.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), mode)
            with _reading(m.path):
                src = m.open()
            with src:
                while True:
                    with _reading(m.path):
                        chunk = src.read(CHUNK)
                    if not chunk:
                        break
                    self.total += len(chunk)
                    if self.total > self.limits.max_unpacked:
                        raise _bad(f"The entry archive unpacks to more than {self.limits.max_unpacked} bytes "
                                   f"(stopped while writing {_show(m.path)}): make the entry smaller and "
                                   "submit again.")
                    _check_ratio(self.total, self.archive_size, self.limits)
                    out.write(chunk)


@contextmanager
def _reading(what: str | None) -> Iterator[None]:
    """Turn a library's complaint about damaged data into the participant's error."""
    try:
        yield
    except EntryError:
        raise
    except CORRUPT as exc:
        where = f" at {_show(what)}" if what else ""
        raise _bad(f"The entry archive is damaged{where} ({exc or type(exc).__name__}): make it again with "
                   "`zip -r` or `tar czf` and submit again.") from exc


def _clear(dest: Path, created: bool) -> None:
    if created:
        shutil.rmtree(dest, ignore_errors=True)
        return
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def unpack(archive: Path, kind: str, dest: Path, limits: UnpackLimits = UnpackLimits()) -> list[str]:
    """Check every member of `archive` ("zip" or "tar.gz"), then extract it into `dest`
    (absent or empty). Returns the sorted relative POSIX paths of the regular files written.

    Raises EntryError("bad-archive", ...) for anything wrong with the archive, and
    InfrastructureError("host-disk", ...) when the host cannot write; either way `dest` is
    left absent or empty.
    """
    archive, dest = Path(archive), Path(dest)
    created = not dest.exists()
    if not created and (not dest.is_dir() or any(dest.iterdir())):
        raise VmjudgeError(f"cannot unpack the entry into {dest}: it is not an empty directory.")
    archive_size = archive.stat().st_size
    try:
        with ExitStack() as stack:
            with _reading(None):  # only reading the archive: a write error is the host's
                scan = stack.enter_context(_opened(archive, kind))
                members = list(scan(limits))
            _check_layout(members)
            _check_totals(members, archive_size, limits)
            if created:
                dest.mkdir(parents=True)
                os.chmod(dest, 0o755)
            writer = _Writer(dest, archive_size, limits)
            for m in sorted((m for m in members if m.is_dir and m.path), key=lambda m: m.path):
                writer.make_dir(m.path)
            for m in members:
                if not m.is_dir:
                    writer.write_file(m)
    except OSError as exc:
        _clear(dest, created)
        if exc.errno == errno.ENAMETOOLONG:
            raise _bad(f"A member name is too long for a Linux file system ({exc}): shorten it and "
                       "submit again.") from exc
        raise InfrastructureError("host-disk", f"could not unpack the entry into {dest}: "
                                               f"{exc.strerror or exc}.") from exc
    except BaseException:
        if dest.exists():
            _clear(dest, created)
        raise
    return sorted(m.path for m in members if not m.is_dir)


def find_required(root: Path, required: list[str]) -> list[str]:
    """The names in `required` missing under `root` ("sources/" means a directory, any
    other name a regular file), for the "missing-component" reason."""
    missing = []
    for name in required:
        path = Path(root) / name.rstrip("/")
        if path.is_symlink():
            missing.append(name)
        elif name.endswith("/"):
            if not path.is_dir():
                missing.append(name)
        elif not path.is_file():
            missing.append(name)
    return missing
