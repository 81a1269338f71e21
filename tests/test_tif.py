"""The judge's TIFF reader (vmjudge/scorers/tif.py) against tifffile, the library Grand Challenge's
importer reads TIFFs with: on files tifffile writes, in every form a participant's tools might
leave (classic and BigTIFF, both byte orders, strips and tiles, compressed, several pages, each
resolution unit and colour space), both read the same tags, and the judge's spacing is panimg's.
Cut short or corrupted, the same files give a TifError, never another exception."""

from __future__ import annotations

import contextlib
import io
import itertools
import random

import numpy
import pytest
import tifffile

from vmjudge.scorers import tif

FORMS = [dict(zip(("byteorder", "bigtiff", "unit", "photometric", "layout"), form, strict=True))
         for form in itertools.product(("<", ">"), (False, True), ("INCH", "CENTIMETER", "NONE", None),
                                       ("minisblack", "rgb"), ("strips", "tiles", "zlib", "pages"))]


def written(form: dict) -> bytes:
    shape = (37, 53, 3) if form["photometric"] == "rgb" else (37, 53)
    data = numpy.arange(numpy.prod(shape), dtype=numpy.uint16).reshape(shape)
    if form["layout"] == "pages":
        data = numpy.stack([data, data])
    extra: dict = {"tile": (16, 16)} if form["layout"] == "tiles" else {}
    if form["layout"] == "zlib":
        extra["compression"] = "zlib"
    if form["unit"] is not None:
        extra.update(resolution=(20.5, 7), resolutionunit=form["unit"])
    out = io.BytesIO()
    tifffile.imwrite(out, data, byteorder=form["byteorder"], bigtiff=form["bigtiff"],
                     photometric=form["photometric"], **extra)
    return out.getvalue()


def tifffiles_answer(data: bytes) -> tuple:
    """What panimg makes of a TIFF's first page, through tifffile: (size, spacing) or the tag at fault."""
    with tifffile.TiffFile(io.BytesIO(data)) as f:
        tags = f.pages[0].tags
        value = {name: tags[name].value if name in tags else None
                 for name in ("ImageWidth", "ImageLength", "PhotometricInterpretation", "XResolution",
                              "YResolution", "ResolutionUnit")}
    unit = getattr(value["ResolutionUnit"], "name", None)
    if unit not in ("INCH", "CENTIMETER"):
        return ("unit", int(value["ResolutionUnit"]) if value["ResolutionUnit"] is not None else None)
    mm = 25.4 if unit == "INCH" else 10.0
    spacing = tuple(mm / (value[k][0] / value[k][1]) for k in ("XResolution", "YResolution"))
    return (float(value["ImageWidth"]), float(value["ImageLength"])), spacing


@pytest.mark.parametrize("form", FORMS, ids=lambda f: "-".join(str(v) for v in f.values()))
def test_the_judge_reads_what_tifffile_reads(form):
    data = written(form)
    wanted = tifffiles_answer(data)
    if wanted[0] == "unit":
        with pytest.raises(tif.TifError, match=rf"resolution unit \({wanted[1]}\)"):
            tif.geometry(data)
        return
    size, spacing = tif.geometry(data)
    assert size == wanted[0] == (53.0, 37.0)
    assert spacing == pytest.approx(wanted[1], rel=1e-12)


def test_a_colour_space_panimg_does_not_know_is_refused():
    out = io.BytesIO()
    tifffile.imwrite(out, numpy.zeros((4, 4), numpy.uint8), photometric="miniswhite",
                     resolution=(10, 10), resolutionunit="CENTIMETER")
    with pytest.raises(tif.TifError, match=r"colour space \(photometric 0\)"):
        tif.geometry(out.getvalue())


def test_cut_or_corrupted_files_give_a_tiferror_and_nothing_else():
    """Every prefix of a small file, and a thousand files with random bytes changed."""
    rng = random.Random(55)
    for form in (FORMS[0], FORMS[len(FORMS) - 1], FORMS[13]):
        data = written(form)
        for end in range(len(data)):
            with contextlib.suppress(tif.TifError):
                tif.geometry(data[:end])
        for _ in range(300):
            spoilt = bytearray(data)
            for _ in range(rng.randint(1, 8)):
                spoilt[rng.randrange(min(len(spoilt), 400))] = rng.randrange(256)
            with contextlib.suppress(tif.TifError):
                tif.geometry(bytes(spoilt))


def test_a_tag_given_twice_is_read_as_tifffile_reads_it():
    """An entry's file with ImageWidth twice must not show the judge one grid and the evaluation another:
    the first copy counts, as in tifffile. Here BitsPerSample's entry is renamed ImageWidth (value 16)."""
    data = bytearray(written(FORMS[0]))
    first_ifd = int.from_bytes(data[4:8], "little")
    count = int.from_bytes(data[first_ifd:first_ifd + 2], "little")
    entries = [first_ifd + 2 + 12 * i for i in range(count)]
    bits = next(at for at in entries if int.from_bytes(data[at:at + 2], "little") == 258)
    data[bits:bits + 2] = (256).to_bytes(2, "little")
    with tifffile.TiffFile(io.BytesIO(bytes(data))) as f:
        wanted = f.pages[0].tags["ImageWidth"].value
    assert tif.geometry(bytes(data))[0][0] == wanted == 53
