"""Reading a participant's archive, which is untrusted data, at a bounded cost.

`submit` (checks.py) and prep (unpack.py) both list entry archives through this
module, so they agree on what a readable archive is, and neither can be made to spend memory
or time without bound before it refuses:

- A zip's central directory is counted before zipfile parses it, because zipfile builds an
  object for every record at once (a 50 MB zip can hold a million records).
- tar headers are read one at a time, stopping past the member limit, and with their extended
  headers bounded: tarfile reads a GNU long name or a pax header whole into memory whatever size
  it declares (a 300 KB tar.gz made it take 300 MiB), keeps every member's pax headers and copies
  the global ones into each member, and lets GNU sparse maps grow without limit. No entry needs
  a sparse file, so sparse members are refused.
- tarfile ends a listing without a word at a damaged header past the first, or at an end
  marker with more members behind it (two tars joined): the members after it would be lost
  silently, so such a header is damage, and past the end only zeros may follow.
- Damaged data makes the libraries raise almost anything (zipfile alone: BadZipFile,
  NotImplementedError, EOFError, UnicodeDecodeError, struct.error, lzma.LZMAError, OSError
  without errno, ...), so `host_error` picks out the one kind that is not the archive's fault,
  the host's own disk failing, and every other Exception counts as damage.
"""

from __future__ import annotations

import errno
import struct
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import EntryError

HEADER_MAX = 1 << 20  # bytes of one GNU long name or pax header
HEADERS_TOTAL = 16 << 20  # bytes of all of an archive's long names and pax headers
GLOBAL_MAX = 16 << 10  # bytes of global pax headers (git archive writes one of 52 bytes)
_EXTENDED = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
             tarfile.SOLARIS_XHDTYPE)
# A central directory record: its signature, then the lengths of the name, extra field and comment.
# The internals of tarfile and zipfile this module works alongside (typeshed lists only their
# public API); the tests pin the behaviour that depends on them.
_TARFILE: Any = tarfile
_ZIPFILE: Any = zipfile
_CENTRAL = struct.Struct("<4s24xHHH12x")
_CENTRAL_SIGNATURE = b"PK\x01\x02"


def too_many_members(limit: int) -> EntryError:
    return EntryError("bad-archive", f"The entry archive holds more than {limit} members: ship fewer files "
                                     "(pack many small ones into one) and submit again.")


def host_error(exc: BaseException) -> OSError | MemoryError | None:
    """The host's own I/O error behind `exc`, or None when `exc` is the archive's fault.

    An OSError with an errno (EIO, ENOSPC, ...) is the host's disk; so is one that a library
    re-raised as its own error `from` it (tarfile turns any OSError while it opens a tar.gz into
    ReadError). EINVAL is the exception: on a regular file it is a seek to an offset that the
    archive's own headers made up. MemoryError is the host's too: the ways an archive could make
    the libraries allocate without bound are closed here and in zip_data.py."""
    for e in (exc, exc.__cause__):
        if isinstance(e, MemoryError):
            return e
        if isinstance(e, OSError) and e.errno is not None and e.errno != errno.EINVAL:
            return e
    return None


class Refused(tarfile.ReadError):
    """A tar header that vmjudge will not read (too large, or a sparse file): not damage, but
    refused all the same; its message says what the archive holds."""


class _BoundedTarInfo(tarfile.TarInfo):
    """tarfile's TarInfo, with its extended headers bounded and sparse members refused.

    _proc_member is tarfile's documented hook for subclasses; the _proc_gnusparse_* methods are
    where pax-style sparse maps are read."""

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> _BoundedTarInfo:
        try:
            return super().frombuf(buf, encoding, errors)
        except (_TARFILE.InvalidHeaderError, _TARFILE.TruncatedHeaderError):
            # tarfile raises these only at the first header and otherwise just stops.
            raise Refused("a damaged tar header") from None

    def _proc_member(self, tf: _BoundedTarFile) -> tarfile.TarInfo:
        if self.size < 0:  # base-256 allows it; tarfile would step back and read the archive again and again
            raise Refused(f"a tar header with a negative size ({self.size})")
        if self.type == tarfile.GNUTYPE_SPARSE:
            _refuse_sparse()
        if self.type in _EXTENDED:
            tf.extended_bytes += self.size
            if self.type == tarfile.XGLTYPE:
                tf.global_bytes += self.size
            if self.size > HEADER_MAX or tf.extended_bytes > tf.headers_total or tf.global_bytes > GLOBAL_MAX:
                raise Refused(f"extended tar headers larger than vmjudge reads ({self.size} bytes in one, "
                               f"{tf.extended_bytes} in all)")
        member: tarfile.TarInfo = _TARFILE.TarInfo._proc_member(self, tf)
        member.pax_headers = {}  # not needed once applied, and a copy of the global ones each
        return member

    def _proc_gnusparse_00(self, *args: object) -> None:
        _refuse_sparse()

    def _proc_gnusparse_01(self, *args: object) -> None:
        _refuse_sparse()

    def _proc_gnusparse_10(self, *args: object) -> None:
        _refuse_sparse()


def _refuse_sparse() -> None:
    raise Refused("a sparse file (made with tar --sparse), which vmjudge does not unpack")


class _BoundedTarFile(tarfile.TarFile):
    tarinfo = _BoundedTarInfo
    extended_bytes = 0
    global_bytes = 0
    headers_total = HEADERS_TOTAL


class _CountedTarFile(_BoundedTarFile):
    """A tar whose extended headers' total its reader bounds itself, from `extended_bytes`: an
    image's layer, whose long names count against the image's whole budget (a layer of a
    hundred thousand files with long paths carries tens of megabytes of them)."""

    headers_total = 1 << 62


def open_tar(path: Path, compression: str = "gz") -> tarfile.TarFile:
    """A tar.gz (or, with compression "", a plain tar) opened for reading with bounded extended
    headers (see the module's docstring)."""
    return _BoundedTarFile.open(path, mode="r:gz" if compression == "gz" else "r:")


def open_tar_stream(fileobj: BinaryIO) -> tarfile.TarFile:
    """A plain tar read from a stream, front to back, its headers bounded one by one; the caller
    bounds their total from the TarFile's `extended_bytes` (_CountedTarFile)."""
    return _CountedTarFile.open(fileobj=fileobj, mode="r|")


def too_large(limit: int, declared: int) -> EntryError:
    return EntryError("bad-archive", f"The entry archive unpacks to more than {limit} bytes ({declared} declared): "
                                     "make the entry smaller and submit again.")


def tar_headers(tf: tarfile.TarFile, max_members: int, max_unpacked: int) -> Iterator[tarfile.TarInfo]:
    """Each member's header in turn, refusing the archive once it has more than `max_members`,
    or once its members declare more than `max_unpacked` bytes: reaching the next header means
    decompressing the member before it, so a gzip of zeros could otherwise cost a thousand times
    its size in time before anything refused it."""
    count = declared = 0
    while (ti := tf.next()) is not None:
        count += 1
        if count > max_members:
            raise too_many_members(max_members)
        declared += ti.size
        if declared > max_unpacked:
            raise too_large(max_unpacked, declared)
        yield ti
    check_end(tf, count, max_unpacked - declared)


def check_end(tf: tarfile.TarFile, count: int, budget: int) -> None:
    """Only zeros may follow the last member: tar pads to its blocking factor (GNU tar's -b 4096
    writes 2 MiB of zeros). Reading the padding costs decompression, so it counts against what is
    left of max_unpacked."""
    read = 0
    while chunk := tf.fileobj.read(1 << 20):
        if chunk.strip(b"\0"):
            raise Refused(f"data after the end of its {count} members: two archives joined, or damage")
        read += len(chunk)
        if read > budget:
            raise Refused(f"more zeros after its end than max_unpacked leaves room for ({read} bytes)")


def zip_record_count(fp: BinaryIO, stop_after: int) -> int:
    """How many records the zip's central directory holds, counting no further than
    `stop_after` + 1; nothing is kept.

    It walks the very bytes zipfile's own parser walks (found by zipfile's _EndRecData, with the
    same offset arithmetic), so that zipfile, which builds an object per record, is only ever
    asked to parse a directory this count has bounded."""
    try:
        end = _ZIPFILE._EndRecData(fp)
    except OSError:
        end = None
    if not end:
        raise zipfile.BadZipFile("File is not a zip file")
    size = end[_ZIPFILE._ECD_SIZE]
    start = end[_ZIPFILE._ECD_LOCATION] - size  # zipfile: offset + (location - size - offset)
    if end[_ZIPFILE._ECD_SIGNATURE] == _ZIPFILE.stringEndArchive64:
        start -= _ZIPFILE.sizeEndCentDir64 + _ZIPFILE.sizeEndCentDir64Locator
    if start < 0:
        raise zipfile.BadZipFile("Bad offset for central directory")
    fp.seek(start)
    count = walked = 0
    while walked < size and count <= stop_after:
        record = fp.read(_CENTRAL.size)
        if len(record) != _CENTRAL.size:
            raise zipfile.BadZipFile("Truncated central directory")
        signature, name, extra, comment = _CENTRAL.unpack(record)
        if signature != _CENTRAL_SIGNATURE:
            raise zipfile.BadZipFile("Bad magic number for central directory")
        fp.seek(name + extra + comment, 1)
        walked += _CENTRAL.size + name + extra + comment
        count += 1
    return count


def open_zip(path: Path, max_members: int) -> zipfile.ZipFile:
    """The zip opened for reading, once its central directory is known to hold at most
    `max_members` records."""
    with open(path, "rb") as fp:
        if zip_record_count(fp, max_members) > max_members:
            raise too_many_members(max_members)
    return zipfile.ZipFile(path)
