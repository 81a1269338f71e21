"""One reading of an image: vmjudge's tar reader (archive/image_tar.py) against Go's archive/tar,
the reader skopeo and umoci unpack with, built here from tests/go_tar with Debian's Go.

Whatever vmjudge's reader accepts, Go must read the same: the same members, names, types, sizes,
link targets, owners, permission bits and data, and reach the end without an error. Fuzzed tars
(tests/raw_tar.py: headers as tools write them and as no tool does) and the known differences
between Python's tarfile and Go, each shown to be real with both readers, then refused.
"""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path

import pytest

from vmjudge.archive.image_tar import TarReader, TarRefused

from . import go_tar_reader as go
from . import raw_tar
from .raw_tar import GNU, POSIX, V7, Header, gnu_long, member, pax, tar

CASES = 4000


@pytest.fixture(scope="module")
def tarlist(tmp_path_factory) -> Path:
    return go.build(tmp_path_factory.mktemp("go"))


def go_read(tarlist: Path, tmp_path: Path, data: bytes) -> dict:
    path = tmp_path / "x.tar"
    path.write_bytes(data)
    return go.go_listings(tarlist, [path])[0]


def tarfile_names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
        return [ti.name for ti in tf]


def test_whatever_vmjudge_accepts_go_reads_the_same(tarlist, tmp_path):
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    tars = [raw_tar.random_tar(rng) for _ in range(CASES)]
    paths = []
    for i, data in enumerate(tars):
        paths.append(tmp_path / f"{i}.tar")
        paths[-1].write_bytes(data)
    accepted = 0
    for path, data, listing in zip(paths, tars, go.go_listings(tarlist, paths), strict=True):
        ours = go.ours(data)
        if isinstance(ours, str):
            continue
        accepted += 1
        assert listing["error"] == "", f"seed {seed}: {path.name} accepted here, refused by Go: {listing['error']}"
        assert go.comparable(listing) == ours, f"seed {seed}: {path.name} read differently"
    assert accepted > CASES // 10  # the fuzzing reaches the accepted side, not only refusals


def test_tools_tars_are_read_alike(tarlist, tmp_path):
    """What tarfile writes in each of its formats, long names and links included, is accepted and
    read as Go reads it."""
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=fmt) as tf:
            for name, kind, data in [("d", tarfile.DIRTYPE, b""), ("d/" + "n" * 90, tarfile.REGTYPE, b"x" * 700),
                                     ("l" * 150 if fmt != tarfile.USTAR_FORMAT else "l", tarfile.SYMTYPE, b""),
                                     ("café", tarfile.REGTYPE, b"y")]:
                ti = tarfile.TarInfo(name)
                ti.type, ti.size, ti.linkname = kind, len(data), "t" * 120 if kind == tarfile.SYMTYPE else ""
                if fmt == tarfile.USTAR_FORMAT and kind == tarfile.SYMTYPE:
                    ti.linkname = "t"
                tf.addfile(ti, io.BytesIO(data) if data else None)
        ours = go.ours(out.getvalue())
        assert not isinstance(ours, str), ours
        assert go.comparable(go_read(tarlist, tmp_path, out.getvalue())) == ours


# Each difference between tarfile and Go that a hostile archive could use: built, shown to be read
# two ways by the real readers, and refused by vmjudge's.

def v7_prefix() -> bytes:
    """An old header (no ustar magic) with a prefix: tarfile joins it, Go does not."""
    return tar(member(Header(b"manifest.json", prefix=b"x", magic=V7, size=2), b"[]"))


def gnu_times_as_prefix() -> bytes:
    """GNU magic with an access time where ustar's prefix is: tarfile reads the time as a prefix."""
    h = Header(b"a", magic=GNU, size=1)
    h.fields[345] = b"00000000017\x00"
    return tar(member(h, b"a"))


def sparse_pax() -> bytes:
    """The review's sparse bomb: GNU.sparse.numblocks, offset, numbytes and realsize (PAX 0.0 with no
    GNU.sparse.size), then size=512: a 512-byte file to tarfile (the last record wins), a sparse file
    of `realsize` bytes to Go, which umoci writes out whole."""
    records = [("GNU.sparse.numblocks", "1"), ("GNU.sparse.offset", "0"), ("GNU.sparse.numbytes", "512"),
               ("GNU.sparse.realsize", str(1 << 20)), ("size", "512")]
    return tar(pax(records), member(Header(b"big", size=512), bytes(512)), member(Header(b"after", size=1), b"x"))


def nul_in_pax_path() -> bytes:
    return tar(pax([("path", b"a\x00b")]), member(Header(b"a", size=1), b"x"))


def pax_then_long_name() -> bytes:
    """A PAX path and then a GNU long name before one member: tarfile takes the PAX path, Go the
    long name."""
    return tar(pax([("path", "from-pax")]), gnu_long(b"L", b"from-long-name"), member(Header(b"short", size=1), b"x"))


def global_pax() -> bytes:
    """A global PAX header's path: tarfile applies it to the members after it, Go does not."""
    return tar(pax([("path", "renamed")], b"g"), member(Header(b"a", size=1), b"x"))


def size_with_underscore() -> bytes:
    """A PAX size of "1_0": 10 to Python's int(), an error to Go."""
    return tar(pax([("size", "1_0")]), member(Header(b"a", size=10), b"0123456789"))


def old_regular_directory() -> bytes:
    """Type NUL (an old regular file) named "d/" by its header and "e" by a PAX path: a directory
    to tarfile, a file to Go."""
    return tar(pax([("path", "e")]), member(Header(b"d/", kind=b"\x00", size=0)))


def star_trailer_under_a_pax_path() -> bytes:
    """Found by the fuzzer (seed 1969057574): ustar magic and star's trailer "tar\\0" at byte 508, the prefix
    field full and a PAX path over it: Python reads the member by its PAX path, Go reads the header as star's
    and its times from where the prefix is, and refuses the archive."""
    return tar(pax([("path", "x")]), member(Header(b"a", prefix=b"p" * 155, size=1, fields={508: b"tar\x00"}), b"x"))


DIFFERENCES = {"v7-prefix": v7_prefix, "star-trailer-under-a-pax-path": star_trailer_under_a_pax_path,
               "gnu-times-as-prefix": gnu_times_as_prefix, "sparse-pax": sparse_pax,
               "nul-in-pax-path": nul_in_pax_path, "pax-then-long-name": pax_then_long_name,
               "global-pax": global_pax, "size-with-underscore": size_with_underscore,
               "old-regular-directory": old_regular_directory}


@pytest.mark.parametrize("case", sorted(DIFFERENCES))
def test_what_tarfile_and_go_read_differently_is_refused(tarlist, tmp_path, case):
    data = DIFFERENCES[case]()
    listing = go_read(tarlist, tmp_path, data)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
            python = [(ti.name, ti.size, ti.type) for ti in tf]
    except tarfile.TarError as exc:
        python = [("error", str(exc), b"")]
    golang = [(bytes.fromhex(m["name"]).decode("utf-8", "surrogateescape").rstrip("/"), m["size"],
               m["type"].encode()) for m in listing["members"] or []] + (
        [("error", listing["error"], b"")] if listing["error"] else [])
    assert python != golang, "the two readers agree on this case: it shows no difference"
    with pytest.raises(TarRefused):
        list(TarReader(io.BytesIO(data)))


def test_the_v7_decoy_names_two_manifests_two_ways(tarlist, tmp_path):
    """The review's decoy: the hidden manifest first, as an old header with prefix "x"; Python sees
    x/manifest.json and the decoy's manifest.json, Go sees manifest.json twice and skopeo takes the
    first."""
    data = tar(member(Header(b"manifest.json", prefix=b"x", magic=V7, size=8), b'["hide"]'),
               member(Header(b"manifest.json", magic=POSIX, size=9), b'["decoy"]'))
    assert tarfile_names(data) == ["x/manifest.json", "manifest.json"]
    names = [bytes.fromhex(m["name"]).decode() for m in go_read(tarlist, tmp_path, data)["members"]]
    assert names == ["manifest.json", "manifest.json"]
    with pytest.raises(TarRefused, match="an old-style tar header"):
        list(TarReader(io.BytesIO(data)))
