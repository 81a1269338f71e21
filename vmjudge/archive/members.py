"""Each member of an entry archive checked, before anything is written: its name, its type
and its place among the others.

An entry archive is hostile until proven otherwise: a member may try to climb out of the
destination (`../x`, `/etc/x`), or plant a link, a device or a FIFO. Links of any kind are
refused outright: entries hold only regular files and directories. The layout is the
participant's: no leading directory is stripped.

Names must survive the trip into the VM: the entry goes there on a CD (ISO 9660 with Rock Ridge
and Joliet), so a name must be UTF-8, no name part may pass Joliet's 64 UTF-16 code units, and
no path may be more than 32 parts deep (deep trees only ever come from hostile archives, and the
tools that copy the tree on the host and in the guest walk it recursively).
"""

from __future__ import annotations

import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Protocol

from ..errors import EntryError
from .joliet import JOLIET_MAX, joliet_length
from .zip_data import SUPPORTED, open_member

PATH_MAX = 4000
MAX_DEPTH = 32  # path parts
SHOWN_MAX = 160  # characters of a name quoted in a message


class MemberData(Protocol):
    """A member's data as unpack reads it: a file object of the archive's library, or zip_data's
    bounded decompressor."""

    def read(self, n: int, /) -> bytes: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Member:
    """One checked archive member: its clean relative POSIX path, whether it is a directory,
    its declared size, whether any execute bit is set, and how to open its data."""

    path: str
    is_dir: bool
    size: int
    executable: bool
    open: Callable[[], MemberData]


def quote(name: str) -> str:
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


def bad_archive(message: str) -> EntryError:
    return EntryError("bad-archive", message)


def _link_error(name: str) -> EntryError:
    return bad_archive(f"{quote(name)} is a link; entries may hold only regular files and directories: "
                       "put a copy of the file it points to in its place and submit again.")


def _special_error(name: str, what: str) -> EntryError:
    return bad_archive(f"{quote(name)} is a {what}; entries may hold only regular files and directories: "
                       "remove it and submit again.")


def clean_path(name: str, raw: str | None = None) -> str:
    """The member's path relative to the entry's home ("" for the home itself), or an
    EntryError when it is absolute, climbs with "..", holds a NUL or backslash, is not UTF-8,
    or would not fit the CD that takes it into the VM (see the module's docstring)."""
    shown = quote(raw if raw is not None else name)
    if "\0" in (raw or name) or "\\" in name:
        raise bad_archive(f"The member name {shown} holds a NUL or backslash character: rename the file "
                          "and submit again.")
    if not _is_utf8(name):
        raise bad_archive(f"The member name {shown} is not valid UTF-8: rename the file (plain letters, digits, "
                          "'.', '-' and '_' are safe) and submit again.")
    if name.startswith("/"):
        raise bad_archive(f"The member {shown} has an absolute path: make the archive from inside the entry's "
                          "folder (e.g. `cd entry && zip -r ../entry.zip .`) and submit again.")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise bad_archive(f"The member {shown} climbs out of the entry with '..': make the archive with "
                          "relative paths from inside the entry's folder and submit again.")
    if len(parts) > MAX_DEPTH:
        raise bad_archive(f"The member {shown} lies {len(parts)} levels deep, more than the {MAX_DEPTH} allowed: "
                          "flatten its folders and submit again.")
    for part in parts:
        if (units := joliet_length(part)) > JOLIET_MAX:
            raise bad_archive(f"The name {quote(part)} (in {shown}) is {units} UTF-16 code units long, more than "
                              f"the {JOLIET_MAX} that names on the judge's CD may have (an emoji counts as two): "
                              "shorten it and submit again.")
    path = "/".join(parts)
    if len(path.encode("utf-8")) > PATH_MAX:
        raise bad_archive(f"The member name {shown} is too long for a Linux file system: shorten it and "
                          "submit again.")
    return path


def zip_members(zf: zipfile.ZipFile, archive: Path) -> Iterator[Member]:
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
            raise bad_archive(f"{quote(name)} is encrypted: make the archive without a password and submit again.")
        is_dir = info.is_dir() or stat.S_ISDIR(mode)
        if not is_dir and info.compress_type not in SUPPORTED:
            raise bad_archive(f"{quote(name)} is compressed with zip method {info.compress_type}, which vmjudge cannot "
                              f"unpack (it reads {', '.join(SUPPORTED.values())}): make the archive with `zip -r` and "
                              "submit again.")
        yield Member(path, is_dir, 0 if is_dir else info.file_size, bool(mode & 0o111),
                     partial(open_member, zf, archive, info))


def _member_data(tf: tarfile.TarFile, ti: tarfile.TarInfo) -> MemberData:
    data = tf.extractfile(ti)
    if data is None:  # only for what is not a regular file, which tar_members refuses first
        raise tarfile.ReadError(f"{ti.name} holds no data")
    return data


def tar_members(tf: tarfile.TarFile, headers: list[tarfile.TarInfo]) -> Iterator[Member]:
    for ti in headers:
        path = clean_path(ti.name)
        if ti.issym() or ti.islnk():
            raise _link_error(ti.name)
        if not (ti.isreg() or ti.isdir()):
            raise _special_error(ti.name, _describe_tar(ti))
        yield Member(path, ti.isdir(), 0 if ti.isdir() else ti.size, bool(ti.mode & 0o111),
                     partial(_member_data, tf, ti))


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


def check_layout(members: list[Member]) -> None:
    """Refuse duplicate names and files that other members treat as directories."""
    seen: dict[str, bool] = {}
    for m in members:
        if not m.path:
            if m.is_dir:
                continue  # "./": the entry's home itself
            raise bad_archive("The entry archive holds a file with an empty name: remove it and submit again.")
        if m.path in seen:
            raise bad_archive(f"{quote(m.path)} appears more than once in the entry archive: keep one and "
                              "submit again.")
        seen[m.path] = m.is_dir
    for m in members:
        parts = m.path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if seen.get(parent) is False:
                raise bad_archive(f"{quote(m.path)} lies inside {quote(parent)}, which is a file: rename one of "
                                  "them and submit again.")
