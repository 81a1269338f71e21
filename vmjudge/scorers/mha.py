"""MetaImage (.mha) volumes as segmentation challenges exchange them (ITK's format, read by
SimpleITK and Grand Challenge): a text header of `Key = Value` lines ending with `ElementDataFile
= LOCAL`, then the voxels, raw or zlib-compressed. Read here for the built-in Dice scorer, from
bytes an entry wrote: so every size is checked before it is used (the header is at most HEADER_MAX
bytes, the volume at most MAX_VOXELS, its compressed data inflated to no more than the volume
needs), and anything not understood is a MhaError naming why, never a crash of the scorer.

What is read: NDims 1 to 4, DimSize, ElementType (the integer and float types of ITK), one channel,
little- or big-endian (BinaryDataByteOrderMSB / ElementByteOrderMSB), CompressedData. What a Dice
needs of it is which voxels are foreground: `foreground` gives that as one byte (0 or 1) per voxel.
"""

from __future__ import annotations

import math
import sys
import zlib
from array import array
from dataclasses import dataclass

HEADER_MAX = 64 << 10
MAX_VOXELS = 1 << 28
# ITK's element types, as the array module's codes of the same size.
TYPES = {"MET_UCHAR": "B", "MET_CHAR": "b", "MET_USHORT": "H", "MET_SHORT": "h", "MET_UINT": "I", "MET_INT": "i",
         "MET_ULONG_LONG": "Q", "MET_LONG_LONG": "q", "MET_FLOAT": "f", "MET_DOUBLE": "d"}
TRUE = ("true", "1")


class MhaError(ValueError):
    """Bytes that are not a MetaImage volume this reader takes, and why."""


@dataclass(frozen=True)
class Volume:
    shape: tuple[int, ...]  # DimSize as written: x first
    element: str  # ElementType
    data: bytes  # the voxels, uncompressed, in the file's byte order

    def values(self) -> array:
        """The voxels as numbers, in the host's byte order."""
        out = array(TYPES[self.element])
        out.frombytes(self.data)
        return out

    def foreground(self) -> bytes:
        """One byte per voxel: 1 where it is not zero (a label other than background), else 0."""
        if self.element in ("MET_UCHAR", "MET_CHAR"):
            return self.data.translate(bytes([0] + [1] * 255))
        return bytes(1 if v else 0 for v in self.values())


def _header(data: bytes) -> tuple[dict[str, str], int]:
    """The header's fields (keys as written) and where the voxels begin."""
    fields: dict[str, str] = {}
    at = 0
    while True:
        end = data.find(b"\n", at, HEADER_MAX)
        if end < 0:
            raise MhaError(f"no ElementDataFile line within the first {HEADER_MAX} bytes: not a MetaImage file")
        line = data[at:end].rstrip(b"\r").decode("ascii", "replace")
        at = end + 1
        key, eq, value = line.partition("=")
        if not eq:
            raise MhaError(f"a header line is not Key = Value: {line[:80]!r}")
        key, value = key.strip(), value.strip()
        if key in fields:
            raise MhaError(f"the header names {key} twice")
        fields[key] = value
        if key == "ElementDataFile":
            if value != "LOCAL":
                raise MhaError(f"the voxels are in another file ({value[:80]!r}): write them in the .mha (LOCAL)")
            return fields, at


def _int(fields: dict[str, str], key: str) -> list[int]:
    try:
        return [int(v) for v in fields[key].split()]
    except KeyError:
        raise MhaError(f"the header has no {key}") from None
    except ValueError:
        raise MhaError(f"{key} is not whole numbers: {fields[key][:80]!r}") from None


def read_mha(data: bytes, shape: tuple[int, ...] | None = None) -> Volume:
    """The volume in `data`; with `shape`, one of any other DimSize is refused before its voxels are
    read or inflated (an entry's mask is read to the size of its reference, never to its own word)."""
    fields, start = _header(data)
    given = _int(fields, "NDims")
    ndims = given[0] if len(given) == 1 else 0
    dims = tuple(_int(fields, "DimSize"))
    if not 1 <= ndims <= 4 or len(dims) != ndims or any(n < 1 for n in dims):
        raise MhaError(f"NDims {fields.get('NDims')!r} and DimSize {fields.get('DimSize')!r} do not describe a volume")
    if shape is not None and dims != shape:
        raise MhaError(f"its DimSize {' '.join(map(str, dims))} is not {' '.join(map(str, shape))}")
    element = fields.get("ElementType", "")
    if element not in TYPES:
        raise MhaError(f"ElementType {element[:40]!r} is not one of {', '.join(TYPES)}")
    if fields.get("ElementNumberOfChannels", "1").strip() != "1":
        raise MhaError("the volume has several channels per voxel: write one label per voxel")
    voxels = 1
    for n in dims:
        voxels *= n
    if voxels > MAX_VOXELS:
        raise MhaError(f"the volume has {voxels} voxels, more than the {MAX_VOXELS} read")
    size = voxels * array(TYPES[element]).itemsize
    body = data[start:]
    if fields.get("CompressedData", "False").lower() in TRUE:
        inflate = zlib.decompressobj()
        try:
            body = inflate.decompress(body, size + 1)
        except zlib.error as exc:
            raise MhaError(f"its compressed voxels cannot be read: {exc}") from None
        if len(body) <= size and not inflate.eof:
            raise MhaError("its compressed voxels end before their zlib stream does (damaged or cut short)")
    if len(body) != size:
        raise MhaError(f"it holds {len(body)}{'+' if len(body) > size else ''} bytes of voxels where DimSize and "
                       f"ElementType make {size}")
    msb = fields.get("BinaryDataByteOrderMSB", fields.get("ElementByteOrderMSB", "False")).lower() in TRUE
    if msb != (sys.byteorder == "big") and array(TYPES[element]).itemsize > 1:
        swapped = array(TYPES[element])
        swapped.frombytes(body)
        swapped.byteswap()
        body = swapped.tobytes()
    return Volume(dims, element, body)


def geometry(data: bytes, full: bool = False) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """(size, spacing, origin) from the header of `data`, spacing 1 and origin 0 where it says none
    (ITK's Offset, Origin or Position). With `full`, the voxels are read too (to the header's
    size, which the caller has checked is the one it expects: a header alone never makes the
    host inflate more than that)."""
    fields, _ = _header(data)
    dims = _int(fields, "DimSize")
    if not 1 <= len(dims) <= 4 or any(not 1 <= n <= MAX_VOXELS for n in dims):
        raise MhaError(f"DimSize {fields['DimSize'][:80]!r} does not describe a volume")
    size = tuple(float(n) for n in dims)
    if full:
        read_mha(data, tuple(dims))

    def floats(*keys: str, default: float) -> tuple[float, ...]:
        key = next((k for k in keys if k in fields), None)
        if key is None:
            return tuple(default for _ in size)
        try:
            values = tuple(float(v) for v in fields[key].split())
        except (ValueError, OverflowError):
            raise MhaError(f"{key} is not numbers: {fields[key][:80]!r}") from None
        if len(values) != len(size) or not all(math.isfinite(v) for v in values):
            raise MhaError(f"{key} {fields[key][:80]!r} does not give one finite number per dimension")
        return values
    return size, floats("ElementSpacing", default=1.0), floats("Offset", "Origin", "Position", default=0.0)


def write_mha(shape: tuple[int, ...], element: str, data: bytes, spacing: tuple[float, ...] | None = None) -> bytes:
    """A MetaImage file of `data` (host byte order, uncompressed): what the examples' generators and
    tests write, in the form ITK writes."""
    spacing = spacing or tuple(1.0 for _ in shape)
    header = (f"ObjectType = Image\nNDims = {len(shape)}\nBinaryData = True\n"
              f"BinaryDataByteOrderMSB = {sys.byteorder == 'big'}\nCompressedData = False\n"
              f"ElementSpacing = {' '.join(f'{s:g}' for s in spacing)}\nDimSize = {' '.join(map(str, shape))}\n"
              f"ElementType = {element}\nElementDataFile = LOCAL\n")
    return header.encode() + data
