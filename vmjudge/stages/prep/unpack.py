"""Unpack an entry archive on the host, checking every member before anything is written.

An entry archive is hostile until proven otherwise: a member may try to climb out of the
destination (`../x`, `/etc/x`), plant a link, a device or a FIFO, or unpack to far more
than it claims (a zip bomb). So all members are read and checked first; only a clean
archive is extracted, one member at a time, with the bytes actually written counted
(headers can lie) and the run stopped the moment it passes the limit. Links of any kind
are refused outright: entries hold only regular files and directories. The layout is the
participant's: no leading directory is stripped. On any failure the destination is left
as it was found (absent or empty). Whatever the archive libraries raise while reading the
archive is the entry's (damage), except the host's own I/O errors (entry_archive.host_error).

Names must survive the trip into the VM: the entry goes there on a CD (ISO 9660 with Rock Ridge
and Joliet), so a name must be UTF-8, no name part may pass Joliet's 64 UTF-16 code units, and
no path may be more than 32 parts deep (deep trees only ever come from hostile archives, and the
tools that copy the tree on the host and in the guest walk it recursively).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ...entry_archive import Refused, host_error, open_tar, open_zip, tar_headers, too_large
from ...errors import EntryError, InfrastructureError, VmjudgeError
from ...images.joliet import JOLIET_MAX, joliet_length
from .zip_data import SUPPORTED, open_member

CHUNK = 1 << 20
RATIO_FLOOR = 10 << 20  # below this total, a high compression ratio is harmless
PATH_MAX = 4000
MAX_DEPTH = 32  # path parts
SHOWN_MAX = 160  # characters of a name quoted in a message


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
    """A name as a message quotes it: bytes that are not UTF-8 as \\xNN, unprintable ones
    escaped, and a very long name cut short."""
    name = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    shown = name if name.isprintable() else repr(name)
    return shown if len(shown) <= SHOWN_MAX else shown[:SHOWN_MAX - 1] + "…"


def _is_utf8(name: str) -> bool:
    """tarfile decodes names with surrogateescape, so bytes that are not UTF-8 arrive as lone
    surrogates, which the CD's names (and any report) cannot hold."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
    EntryError when it is absolute, climbs with "..", holds a NUL or backslash, is not UTF-8,
    or would not fit the CD that takes it into the VM (see the module's docstring)."""
    shown = _show(raw if raw is not None else name)
    if "\0" in (raw or name) or "\\" in name:
        raise _bad(f"The member name {shown} holds a NUL or backslash character: rename the file "
                   "and submit again.")
    if not _is_utf8(name):
        raise _bad(f"The member name {shown} is not valid UTF-8: rename the file (plain letters, digits, "
                   "'.', '-' and '_' are safe) and submit again.")
    if name.startswith("/"):
        raise _bad(f"The member {shown} has an absolute path: make the archive from inside the entry's "
                   "folder (e.g. `cd entry && zip -r ../entry.zip .`) and submit again.")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _bad(f"The member {shown} climbs out of the entry with '..': make the archive with "
                   "relative paths from inside the entry's folder and submit again.")
    if len(parts) > MAX_DEPTH:
        raise _bad(f"The member {shown} lies {len(parts)} levels deep, more than the {MAX_DEPTH} allowed: "
                   "flatten its folders and submit again.")
    for part in parts:
        if (units := joliet_length(part)) > JOLIET_MAX:
            raise _bad(f"The name {_show(part)} (in {shown}) is {units} UTF-16 code units long, more than the "
                       f"{JOLIET_MAX} that names on the judge's CD may have (an emoji counts as two): shorten it "
                       "and submit again.")
    path = "/".join(parts)
    if len(path.encode("utf-8")) > PATH_MAX:
        raise _bad(f"The member name {shown} is too long for a Linux file system: shorten it and "
                   "submit again.")
    return path


def _zip_members(zf: zipfile.ZipFile, archive: Path) -> Iterator[Member]:
    for info in zf.infolist():
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
        if not is_dir and info.compress_type not in SUPPORTED:
            raise _bad(f"{_show(name)} is compressed with zip method {info.compress_type}, which vmjudge cannot "
                       f"unpack (it reads {', '.join(SUPPORTED.values())}): make the archive with `zip -r` and "
                       "submit again.")
        yield Member(path, is_dir, 0 if is_dir else info.file_size, bool(mode & 0o111),
                     lambda info=info: open_member(zf, archive, info))


def _tar_members(tf: tarfile.TarFile, headers: list[tarfile.TarInfo]) -> Iterator[Member]:
    for ti in headers:
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
        raise too_large(limits.max_unpacked, total)
    _check_ratio(total, archive_size, limits)


def _check_ratio(total: int, archive_size: int, limits: UnpackLimits) -> None:
    if total > RATIO_FLOOR and total > limits.max_ratio * max(archive_size, 1):
        raise _bad(f"The entry archive unpacks to {total / max(archive_size, 1):.0f} times its own size, "
                   f"more than the {limits.max_ratio:g} allowed: leave out the highly compressible data "
                   "and submit again.")


def _list(archive: Path, kind: str, limits: UnpackLimits, stack: ExitStack) -> list[Member]:
    """Every member, checked, reading headers only; the archive stays open on `stack` for
    extracting. Only the libraries' own reading is taken for damage, never vmjudge's checks."""
    if kind == "zip":
        with _reading(None):
            zf = stack.enter_context(open_zip(archive, limits.max_members))
        return list(_zip_members(zf, archive))
    if kind == "tar.gz":
        with _reading(None):
            tf = stack.enter_context(open_tar(archive))
            headers = list(tar_headers(tf, limits.max_members, limits.max_unpacked))
        return list(_tar_members(tf, headers))
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
    """Turn a library's complaint about the archive into the participant's error; the host's
    own I/O errors go on as OSError (see entry_archive.host_error)."""
    try:
        yield
    except EntryError:
        raise
    except Refused as exc:
        raise _bad(f"The entry archive holds {exc}: make it again with `zip -r` or `tar czf` and "
                   "submit again.") from exc
    except Exception as exc:
        host = host_error(exc)
        if host is exc:
            raise
        if host is not None:
            raise host from exc
        if isinstance(exc, UnicodeDecodeError):
            raise _bad(f"The entry archive holds a member name that is not valid UTF-8 ({exc}): rename the "
                       "file (plain letters, digits, '.', '-' and '_' are safe) and submit again.") from exc
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
    InfrastructureError("host-disk", ...) when the host cannot read or write; either way `dest` is
    left absent or empty.
    """
    archive, dest = Path(archive), Path(dest)
    created = not dest.exists()
    if not created and (not dest.is_dir() or any(dest.iterdir())):
        raise VmjudgeError(f"cannot unpack the entry into {dest}: it is not an empty directory.")
    archive_size = archive.stat().st_size
    try:
        with ExitStack() as stack:
            members = _list(archive, kind, limits, stack)
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
