"""The tar format of an image export, written and read here rather than by `tarfile`.

An export is a handful of regular files at the top level, so the format needs no more than the
ustar header (with GNU's base-256 size for a root over 8 GiB), which any `tar` lists. Reading is
the import's defence against a file that is not what `vmjudge image export` wrote: Python's
tarfile would first read pax and GNU long-name headers of any size into memory and follow
their rules; this reader takes only plain headers, checks each one's checksum, type, name
and size before a byte of data is read, and knows where every member must end.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from ..errors import ImageError
from ..files import CHUNK

BLOCK = 512
GNU_MAGIC = b"ustar  \0"  # magic and version together, as GNU tar and tarfile's GNU_FORMAT write them
POSIX_MAGIC = b"ustar\x0000"
REGULAR = (b"0", b"\0")
KINDS = {b"1": "a hard link", b"2": "a symbolic link", b"3": "a character device", b"4": "a block device",
         b"5": "a directory", b"6": "a FIFO", b"7": "a contiguous file", b"x": "a pax header",
         b"g": "a pax global header", b"L": "a GNU long name", b"K": "a GNU long link name", b"S": "a sparse file"}
COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\0": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
OCTAL_SIZE_LIMIT = 8 ** 11  # 11 octal digits; larger sizes take base-256


class Sink(Protocol):
    def write(self, chunk: bytes) -> None: ...


class TarWriter:
    """Members appended to `out` one after another; `add` returns the sha256 of what it wrote."""

    def __init__(self, out: Sink):
        self.out = out

    def add(self, name: str, f: BinaryIO, size: int, mtime: int) -> str:
        self.out.write(_header(name, size, mtime))
        digest = hashlib.sha256()
        left = size
        while left:
            chunk = f.read(min(CHUNK, left))
            if not chunk:
                raise ImageError(f"{name} shrank while it was being exported: export the image again.")
            digest.update(chunk)
            self.out.write(chunk)
            left -= len(chunk)
        self.out.write(bytes(-size % BLOCK))
        return digest.hexdigest()

    def close(self) -> None:
        self.out.write(bytes(2 * BLOCK))


def _header(name: str, size: int, mtime: int) -> bytes:
    raw = name.encode()
    assert 0 < len(raw) < 100 and "/" not in name, name
    # Over 11 octal digits, GNU's base-256: the first byte's high bit set, the number big-endian in the rest.
    size_field = b"%011o\0" % size if size < OCTAL_SIZE_LIMIT else b"\x80" + size.to_bytes(11, "big")
    header = bytearray(BLOCK)
    header[0:len(raw)] = raw
    header[100:108] = b"0000644\0"
    header[108:116] = header[116:124] = b"0000000\0"
    header[124:136] = size_field
    header[136:148] = b"%011o\0" % max(0, min(mtime, 8 ** 11 - 1))
    header[148:156] = b" " * 8
    header[156:157] = b"0"
    header[257:265] = GNU_MAGIC
    header[265:269] = header[297:301] = b"root"
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header)


def read_members(f: BinaryIO, path: Path, limits: dict[str, int]) -> Iterator[tuple[str, int, Iterator[bytes]]]:
    """Each member of the tar in `f` as (name, size, its data a chunk at a time). Only regular files
    named in `limits`, once each and no larger than their limit, pass; anything else, a damaged
    header, data cut short or anything but zeros after the end is refused with a sentence. Each
    member's data must be read (or is skipped) before the next is looked at."""
    seen: set[str] = set()
    first = True
    while True:
        header = _read(f, BLOCK)
        if first and (kind := next((k for m, k in COMPRESSED.items() if header.startswith(m)), None)):
            raise ImageError(f"{path} is {kind}-compressed, and an image export is a plain tar (its root is compressed "
                             "already): decompress it, or copy the file `vmjudge image export` wrote as it is.")
        first = False
        if len(header) < BLOCK:
            raise ImageError(f"{path} ends {'before its end-of-archive marker' if not header else 'inside a header'}: "
                             "the copy is truncated; copy it again from the exporting host.")
        if header == bytes(BLOCK):
            _zeros_to_the_end(f, path)
            return
        name, size = _parse(header, path, limits)
        if name in seen:
            raise _bad(path, f"it holds {name} twice")
        seen.add(name)
        data = _data(f, path, name, size)
        yield name, size, data
        for _ in data:  # what the caller left unread
            pass


def _parse(header: bytes, path: Path, limits: dict[str, int]) -> tuple[str, int]:
    """A header's name and size, once its checksum, type, name and size are as an export's."""
    stored = _octal(header[148:156])
    if stored is None or stored not in (sum(header[:148]) + 8 * 32 + sum(header[156:]),
                                        _signed_sum(header[:148]) + 8 * 32 + _signed_sum(header[156:])):
        raise _bad(path, "a header's checksum is wrong (the file is damaged, or not a tar)")
    if header[257:265] not in (GNU_MAGIC, POSIX_MAGIC):
        raise _bad(path, "a header is not a ustar header")
    name = header[:100].split(b"\0", 1)[0].decode("utf-8", "backslashreplace")
    if header[257:265] == POSIX_MAGIC and header[345:500].strip(b"\0"):
        name = header[345:500].split(b"\0", 1)[0].decode("utf-8", "backslashreplace") + "/" + name
    kind = header[156:157]
    if kind not in REGULAR:
        raise _bad(path, f"its member '{name}' is {KINDS.get(kind, f'of tar type {kind!r}')}, and an export holds "
                         "regular files only")
    if name not in limits:
        why = "has a path" if "/" in name or ".." in name else "is not one of the image's files"
        raise _bad(path, f"its member '{name}' {why} (an export holds {', '.join(limits)} at its top level)")
    size = _size(header[124:136])
    if size is None:
        raise _bad(path, f"the size of {name} in its header is not a number")
    if size > limits[name]:
        raise _bad(path, f"its {name} is {size} bytes, more than an image's {name} may be ({limits[name]})")
    return name, size


def _data(f: BinaryIO, path: Path, name: str, size: int) -> Iterator[bytes]:
    left = size
    while left:
        chunk = f.read(min(CHUNK, left))
        if not chunk:
            raise ImageError(f"{path} ends inside {name} ({size - left} of its {size} bytes): the copy is truncated; "
                             "copy it again from the exporting host.")
        left -= len(chunk)
        yield chunk
    if len(_read(f, -size % BLOCK)) < -size % BLOCK:
        raise ImageError(f"{path} ends inside the padding after {name}: the copy is truncated; copy it again from "
                         "the exporting host.")


def _zeros_to_the_end(f: BinaryIO, path: Path) -> None:
    """After the end-of-archive block nothing may follow but zeros (a second tar appended would
    otherwise be silently ignored)."""
    while chunk := f.read(CHUNK):
        if chunk.strip(b"\0"):
            raise _bad(path, "something other than zeros follows its end-of-archive marker")


def _read(f: BinaryIO, n: int) -> bytes:
    """`n` bytes, or fewer only at the end of the file."""
    parts, left = [], n
    while left and (chunk := f.read(left)):
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _octal(field: bytes) -> int | None:
    digits = field.split(b"\0", 1)[0].strip(b" ")
    if not digits or any(c not in b"01234567" for c in digits):
        return None
    return int(digits, 8)


def _size(field: bytes) -> int | None:
    if field[0] == 0x80:  # base-256, positive
        return int.from_bytes(field[1:], "big")
    return _octal(field)


def _signed_sum(data: bytes) -> int:
    """The checksum as some old tars computed it, with signed bytes."""
    return sum(b - 256 if b > 127 else b for b in data)


def _bad(path: Path, problem: str) -> ImageError:
    return ImageError(f"{path} is not an image export as `vmjudge image export` writes it: {problem}; export the "
                      "image again on the host that built it.")
