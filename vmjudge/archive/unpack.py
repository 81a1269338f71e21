"""Unpack an entry archive on the host, checking every member before anything is written.

An entry archive is hostile until proven otherwise: it may unpack to far more than it claims (a
zip bomb), and its members may be anything (members.py checks each one). So all members are read
and checked first; only a clean archive is extracted, one member at a time, with the bytes
actually written counted (headers can lie) and the run stopped the moment it passes the limit.
On any failure the destination is left as it was found (absent or empty). Whatever the archive
libraries raise while reading the archive is the entry's (damage), except the host's own I/O
errors (bounded.host_error).
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import EntryError, InfrastructureError, VmjudgeError
from .bounded import Refused, host_error, open_tar, open_zip, tar_headers, too_large
from .members import Member, bad_archive, check_layout, quote, tar_members, zip_members

CHUNK = 1 << 20
RATIO_FLOOR = 10 << 20  # below this total, a high compression ratio is harmless


@dataclass(frozen=True)
class UnpackLimits:
    """How much an entry may hold: members, total bytes, and uncompressed/archive size ratio
    (the ratio only counts once the total passes 10 MiB)."""

    max_members: int = 10000
    max_unpacked: int = 1 << 30
    max_ratio: float = 200.0


def _check_totals(members: list[Member], archive_size: int, limits: UnpackLimits) -> None:
    """Refuse by declared sizes, before anything is written."""
    total = sum(m.size for m in members)
    if total > limits.max_unpacked:
        raise too_large(limits.max_unpacked, total)
    _check_ratio(total, archive_size, limits)


def _check_ratio(total: int, archive_size: int, limits: UnpackLimits) -> None:
    if total > RATIO_FLOOR and total > limits.max_ratio * max(archive_size, 1):
        raise bad_archive(f"The entry archive unpacks to {total / max(archive_size, 1):.0f} times its own size, "
                          f"more than the {limits.max_ratio:g} allowed: leave out the highly compressible data "
                          "and submit again.")


def _list(archive: Path, kind: str, limits: UnpackLimits, stack: ExitStack, name: str | None) -> list[Member]:
    """Every member, checked, reading headers only; the archive stays open on `stack` for
    extracting. Only the libraries' own reading is taken for damage, never vmjudge's checks."""
    if kind == "zip":
        with _reading(None, name, kind):
            zf = stack.enter_context(open_zip(archive, limits.max_members))
        return list(zip_members(zf, archive))
    if kind == "tar.gz":
        with _reading(None, name, kind):
            tf = stack.enter_context(open_tar(archive))
            headers = list(tar_headers(tf, limits.max_members, limits.max_unpacked))
        return list(tar_members(tf, headers))
    raise ValueError(f"unknown archive kind {kind!r}")


@contextmanager
def listed(archive: Path, kind: str, limits: UnpackLimits, name: str | None = None) -> Iterator[list[Member]]:
    """Every member of `archive` checked (its name, its type, its place among the others, the declared
    totals) in one reading of its headers, the archive open for reading members' data meanwhile: what
    unpack checks before it writes anything, and `submit` before it accepts an entry. `name`: what the
    participant called the archive, for the messages (the spool's copy has a hash for a name)."""
    with ExitStack() as stack:
        members = _list(Path(archive), kind, limits, stack, name)
        check_layout(members)
        _check_totals(members, Path(archive).stat().st_size, limits)
        yield members


def read_head(m: Member, size: int) -> bytes:
    """The first `size` bytes of a member's data (fewer for a shorter member): a script's first lines."""
    with _reading(m.path):
        src = m.open()
    with closing(src):
        got = b""
        while len(got) < size:
            with _reading(m.path):
                chunk = src.read(size - len(got))
            if not chunk:
                break
            got += chunk
        return got


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
            with closing(src):
                while True:
                    with _reading(m.path):
                        chunk = src.read(CHUNK)
                    if not chunk:
                        break
                    self.total += len(chunk)
                    if self.total > self.limits.max_unpacked:
                        raise bad_archive(f"The entry archive unpacks to more than {self.limits.max_unpacked} bytes "
                                          f"(stopped while writing {quote(m.path)}): make the entry smaller and "
                                          "submit again.")
                    _check_ratio(self.total, self.archive_size, self.limits)
                    out.write(chunk)


@contextmanager
def _reading(what: str | None, name: str | None = None, kind: str = "") -> Iterator[None]:
    """Turn a library's complaint about the archive into the participant's error, in vmjudge's words
    (a library's own, "File is not a zip file", helps no one); the host's own I/O errors go on as
    OSError (see bounded.host_error). `what`: the member being read, None while the archive is opened
    and listed; `name`: the participant's name for the archive."""
    try:
        yield
    except EntryError:
        raise
    except Refused as exc:
        raise bad_archive(f"{name or 'The entry archive'} holds {exc}: make it again with `zip -r` or `tar czf` and "
                          "submit again.") from exc
    except Exception as exc:
        host = host_error(exc)
        if host is exc:
            raise
        if host is not None:
            raise host from exc
        if isinstance(exc, UnicodeDecodeError):
            raise bad_archive("The entry archive holds a member name that is not valid UTF-8: rename the file (plain "
                              "letters, digits, '.', '-' and '_' are safe) and submit again.") from exc
        if what is None:
            raise bad_archive(f"{name or 'The entry archive'} is not a readable {kind} archive, or is damaged: make "
                              "it again with `zip -r` or `tar czf` and submit again.") from exc
        raise bad_archive(f"The entry archive is damaged at {quote(what)}: make it again with `zip -r` or `tar czf` "
                          "and submit again.") from exc


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
        with listed(archive, kind, limits) as members:
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
            raise bad_archive(f"A member name is too long for a Linux file system ({exc}): shorten it and "
                              "submit again.") from exc
        raise InfrastructureError("host-disk", f"could not unpack the entry into {dest}: "
                                               f"{exc.strerror or exc}.") from exc
    except BaseException:
        if dest.exists():
            _clear(dest, created)
        raise
    return sorted(m.path for m in members if not m.is_dir)
