"""A zip member's data, read at a bounded cost whatever its headers claim.

zipfile bounds what one read of a deflated member produces, but decompresses each block of a
bzip2 or LZMA member whole: a 909-byte bzip2 member that declares a size of 100 bytes unpacks
2 GiB into memory at the first read (and a few megabytes of such data, terabytes). So bzip2 and
LZMA members are decompressed here, with at most the asked-for bytes out per read, and checked
as zipfile checks them (the declared size, then the CRC-32). Stored and deflated members go
through zipfile.
"""

from __future__ import annotations

import bz2
import lzma
import struct
import zipfile
import zlib
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from .bounded import Refused

SUPPORTED = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2",
             zipfile.ZIP_LZMA: "LZMA"}
INPUT = 64 << 10  # compressed bytes handed to the decompressor at a time
_LOCAL = struct.Struct("<4s22xHH")  # a local file header: signature, then name and extra lengths
_LOCAL_SIGNATURE = b"PK\x03\x04"
_UNSUPPORTED_FLAGS = 0x20 | 0x40  # compressed patched data, strong encryption


def open_member(zf: zipfile.ZipFile, archive: Path, info: zipfile.ZipInfo) -> IO[bytes] | _Decompressing:
    """The member's uncompressed data, as a file object whose reads are bounded."""
    if info.compress_type in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        return _Decompressing(archive, info)
    return zf.open(info)


class _Decompressing:
    """A bzip2 or LZMA member's data; each read returns at most the bytes asked for."""

    def __init__(self, archive: Path, info: zipfile.ZipInfo):
        if info.flag_bits & _UNSUPPORTED_FLAGS:
            raise NotImplementedError("compressed patched data or strong encryption")
        self.info = info
        with ExitStack() as unless_ready:  # the file is closed if the member cannot be read
            self.fp = unless_ready.enter_context(open(archive, "rb"))
            self.left = info.compress_size
            self.fp.seek(info.header_offset)
            head = self.fp.read(_LOCAL.size)
            if len(head) != _LOCAL.size:
                raise zipfile.BadZipFile("Truncated file header")
            signature, name, extra = _LOCAL.unpack(head)
            if signature != _LOCAL_SIGNATURE:
                raise zipfile.BadZipFile("Bad magic number for file header")
            self.fp.seek(name + extra, 1)
            self.decompressor = bz2.BZ2Decompressor() if info.compress_type == zipfile.ZIP_BZIP2 \
                else self._lzma()
            unless_ready.pop_all()  # ready: the file stays open until close()
        self.produced = 0
        self.crc = 0

    def _take(self, n: int) -> bytes:
        data = self.fp.read(min(n, self.left))
        if len(data) < min(n, self.left):
            raise EOFError("the member's compressed data ends early")
        self.left -= len(data)
        return data

    def _lzma(self) -> lzma.LZMADecompressor:
        """zip's LZMA: a version, the size of the properties, then LZMA1 properties (lc, lp, pb in
        one byte, then the dictionary size). No dictionary larger than the member's declared size
        is needed: a longer match would produce more than it declares, which is refused anyway,
        and liblzma allocates the whole dictionary up front (up to 4 GiB as the header asks)."""
        _version, size = struct.unpack("<2sH", self._take(4))
        props = self._take(size)
        if size != 5 or props[0] >= 9 * 5 * 5:
            raise lzma.LZMAError("Invalid or unsupported options")
        lc, lp, pb = props[0] % 9, props[0] // 9 % 5, props[0] // 45
        dict_size = min(int.from_bytes(props[1:], "little"), max(self.info.file_size, 4096))
        return lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[
            {"id": lzma.FILTER_LZMA1, "dict_size": dict_size, "lc": lc, "lp": lp, "pb": pb}])

    def read(self, n: int) -> bytes:
        while self.produced < self.info.file_size and not self.decompressor.eof:
            if self.decompressor.needs_input:
                if not self.left:
                    break
                chunk = self._take(INPUT)
            else:
                chunk = b""
            data = self.decompressor.decompress(chunk, min(n, self.info.file_size - self.produced + 1))
            if not data and not chunk:
                break  # neither input taken nor output given: the stream is stuck
            if data:
                self.produced += len(data)
                if self.produced > self.info.file_size:
                    raise Refused(f"a member {self.info.filename!r} that holds more than the {self.info.file_size} "
                                  "bytes its header declares")
                self.crc = zlib.crc32(data, self.crc)
                return data
        if self.produced != self.info.file_size:
            raise Refused(f"a member {self.info.filename!r} that ends before the {self.info.file_size} bytes its "
                          "header declares")
        if self.crc != self.info.CRC:
            raise zipfile.BadZipFile(f"Bad CRC-32 for file {self.info.filename!r}")
        return b""

    def close(self) -> None:
        self.fp.close()

    def __enter__(self) -> _Decompressing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
