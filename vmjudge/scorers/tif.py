"""TIFF images as Grand Challenge takes them for an image socket, held to the rules of its importer
(panimg, which reads a TIFF's first page's tags with tifffile): the first page must give a width
and a height, a colour space panimg knows (its GRAY, RGB and YCBCR: photometric MinIsBlack, RGB or
YCbCr), and X and Y resolutions in inches or centimetres, from which the voxel spacing in mm is
25.4 or 10 over the resolution. panimg reads no pixels, and neither does this: a TIFF whose pixels
cannot be decoded passes here (an evaluation container that then fails on it holds the entry for the
organiser; the built-in scorers read no TIFF).

Read here, not with tifffile, because the check also runs in the replica's guest, whose Python has
no numpy (tifffile needs it); tests/test_tif.py holds this reader to tifffile's answers on files
tifffile writes (classic and BigTIFF, both byte orders, every unit). Bytes are an entry's: every
offset is checked against the data before it is read, and anything not understood is a TifError
naming why.
"""

from __future__ import annotations

import struct
from typing import Any

# TIFF field types this reads: SHORT, LONG, RATIONAL, LONG8 (BigTIFF); their sizes.
TYPE_SIZES = {3: 2, 4: 4, 5: 8, 16: 8}
WIDTH, LENGTH, PHOTOMETRIC, XRES, YRES, UNIT = 256, 257, 262, 282, 283, 296
COLOUR_SPACES = {1: "GRAY", 2: "RGB", 6: "YCBCR"}  # panimg's ColorSpace, by photometric
MM_PER_UNIT = {2: 25.4, 3: 10.0}  # inch, centimetre: panimg's _get_voxel_spacing_mm
MAX_ENTRIES = 4096


class TifError(ValueError):
    """Bytes that are not a TIFF image Grand Challenge would take, and why."""


def geometry(data: bytes, full: bool = False) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(size, spacing) of the first page, x first as a MetaImage's DimSize: (width, height) and
    the voxel spacing in mm. `full` is the MetaImage reader's argument, and changes nothing: as
    Grand Challenge, the judge reads no pixels of a TIFF."""
    tags = first_page(data)
    width, height = tags.get(WIDTH), tags.get(LENGTH)
    if not isinstance(width, int) or not isinstance(height, int) or width < 1 or height < 1:
        raise TifError("its width and height cannot be read")
    colour = tags.get(PHOTOMETRIC)
    if colour not in COLOUR_SPACES:
        raise TifError(f"its colour space (photometric {colour}) is not one Grand Challenge takes "
                       "(MinIsBlack, RGB or YCbCr)")
    unit = tags.get(UNIT)
    if unit not in MM_PER_UNIT:
        raise TifError(f"its resolution unit ({unit}) is not inches (2) or centimetres (3), so it has no "
                       "voxel spacing in mm")
    spacing = []
    for tag, name in ((XRES, "XResolution"), (YRES, "YResolution")):
        value = tags.get(tag)
        if not isinstance(value, tuple) or not value[0] or not value[1]:
            raise TifError(f"its {name} is not a resolution")
        spacing.append(MM_PER_UNIT[unit] * value[1] / value[0])
    return (float(width), float(height)), tuple(spacing)


def first_page(data: bytes) -> dict[int, int | tuple[int, int]]:
    """The first IFD's tags this reads, each its first value (a RATIONAL as (numerator, denominator))."""
    order = {b"II": "<", b"MM": ">"}.get(data[:2])
    if order is None:
        raise TifError("it does not begin as a TIFF file (II or MM)")
    version = _unpack(data, order + "H", 2)
    if version == 42:
        offset, count_fmt, entry_size, value_size = _unpack(data, order + "I", 4), "H", 12, 4
    elif version == 43:
        if _unpack(data, order + "HH", 4) != (8, 0):
            raise TifError("its BigTIFF header is not one of 8-byte offsets")
        offset, count_fmt, entry_size, value_size = _unpack(data, order + "Q", 8), "Q", 20, 8
    else:
        raise TifError(f"its version ({version}) is neither TIFF (42) nor BigTIFF (43)")
    if offset == 0:
        raise TifError("it holds no image")
    count = _unpack(data, order + count_fmt, offset)
    if not 1 <= count <= MAX_ENTRIES:
        raise TifError(f"its first page has {count} tags")
    start = offset + struct.calcsize(count_fmt)
    tags: dict[int, int | tuple[int, int]] = {}
    for i in range(count):
        at = start + i * entry_size
        tag, kind = _unpack(data, order + "HH", at)
        n = _unpack(data, order + ("I" if value_size == 4 else "Q"), at + 4)
        if tag not in (WIDTH, LENGTH, PHOTOMETRIC, XRES, YRES, UNIT) or kind not in TYPE_SIZES or n < 1 \
                or tag in tags:  # a tag given twice: its first copy, as tifffile (and so the evaluation) reads it
            continue
        where = at + 4 + value_size
        if TYPE_SIZES[kind] > value_size:  # too big to sit in the entry: an offset to it
            where = _unpack(data, order + ("I" if value_size == 4 else "Q"), where)
        fmt = {3: "H", 4: "I", 5: "II", 16: "Q"}[kind]
        value = _unpack(data, order + fmt, where)
        tags[tag] = value
    return tags


def _unpack(data: bytes, fmt: str, at: int) -> Any:
    """One field (an int) or several (a tuple) at `at`, which must lie within `data`."""
    size = struct.calcsize(fmt)
    if not 0 <= at <= len(data) - size:
        raise TifError(f"it ends before offset {at}, which its header points to")
    values = struct.unpack_from(fmt, data, at)
    return values[0] if len(values) == 1 else values
