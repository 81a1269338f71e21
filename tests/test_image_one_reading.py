"""One reading of an image, end to end (security round three): what admission checks is what
skopeo and umoci unpack, and unpacking cannot fill the judge's disk whatever it is given.

The real skopeo, umoci and mksquashfs make each root here, on the host; no VM.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import random
import subprocess
import threading
from pathlib import Path

import pytest

from vmjudge.archive.container_image import CheckedImage, ImageLimits, chain_id, check_image
from vmjudge.archive.image_layers import LayerFacts
from vmjudge.archive.image_tar import TarReader
from vmjudge.config.layout import Layout
from vmjudge.errors import EntryError
from vmjudge.images.entry_root import RULES, entry_root, scratch_bytes

from . import oci_images as oci
from .needs import root_making_tools
from .oci_images import Image, Layer, file
from .raw_tar import GNU, POSIX, V7, Header, gnu_long, member, pax, tar

MIB = 1 << 20


@pytest.fixture(autouse=True)
def tools():
    root_making_tools()


def raw_outer(members: list[tuple[bytes, bytes]], first: bytes = b"") -> bytes:
    """An outer archive of plain ustar members, after `first` (raw member bytes)."""
    return tar(first, *(member(Header(name, size=len(data)), data) for name, data in members))


def docker_members(image: Image) -> list[tuple[bytes, bytes]]:
    return [(n.encode(), d) for n, d in oci.docker_members(image)]


def test_the_v7_prefix_decoy_is_refused_at_admission(tmp_path):
    """The hidden image's manifest.json as an old header with prefix "x" (x/manifest.json to
    Python, manifest.json to skopeo, which takes the first), then a harmless decoy image: before,
    admission checked the decoy and skopeo unpacked the hidden one."""
    hidden = Image([Layer.of([file("bin/evil", b"hidden")], None)], cmd=["/bin/evil"])
    decoy = Image([Layer.of([file("bin/app", b"decoy")], None)])
    hidden_members = docker_members(hidden)
    manifest = dict(hidden_members)[b"manifest.json"]
    first = member(Header(b"manifest.json", prefix=b"x", magic=V7, size=len(manifest)), manifest)
    others = [(n, d) for n, d in hidden_members if n not in (b"manifest.json", b"repositories")]
    path = tmp_path / "decoy-image.tar"
    path.write_bytes(raw_outer(others + docker_members(decoy), first))
    with pytest.raises(EntryError, match="an old-style tar header") as info:
        check_image(path)
    assert info.value.reason == "bad-archive"


def test_a_root_is_made_only_from_the_image_admission_read(tmp_path):
    """Whatever made skopeo read another image than admission did, the root is not made, nor
    stored under the admitted image's name: the copy skopeo wrote is checked first."""
    admitted = oci.docker_save(tmp_path / "admitted-image.tar", Image([Layer.of([file("app", b"checked")], None)]))
    other = oci.docker_save(tmp_path / "other-image.tar", Image([Layer.of([file("app", b"unchecked")], None)]))
    image = check_image(admitted)
    home = Layout(tmp_path / "home")
    with pytest.raises(EntryError, match="holds another image than the one admission read") as info:
        entry_root(home, other, image, 1 << 30)
    assert info.value.reason == "bad-image"
    store = home.entry_roots / RULES
    assert not list(store.glob("*.squashfs")) and not [p for p in store.iterdir() if p.name.startswith(".work-")]


def sparse_bomb_layer(realsize: int) -> bytes:
    records = [("GNU.sparse.numblocks", "1"), ("GNU.sparse.offset", "0"), ("GNU.sparse.numbytes", "512"),
               ("GNU.sparse.realsize", str(realsize)), ("size", "512")]
    return tar(pax(records), member(Header(b"big", size=512), b"z" * 512))


def test_the_sparse_bomb_is_refused_at_admission(tmp_path):
    path = oci.oci_archive(tmp_path / "bomb-image.tar", Image([Layer.raw(sparse_bomb_layer(4 << 60), None)]))
    with pytest.raises(EntryError, match="GNU.sparse") as info:
        check_image(path)
    assert info.value.reason == "bad-image"


def lying(archive: Path, image: Image, layer: bytes, unpacked: int) -> CheckedImage:
    """What admission would have recorded had it read `archive` (one uncompressed layer) the way
    tarfile did: `unpacked` bytes. Only a reader that disagrees with Go's could give this."""
    config, manifest = oci.oci_manifest(image)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    facts = LayerFacts(diff_id, diff_id, None, 1, unpacked, 0, 0)
    return CheckedImage("oci-archive", False, "sha256:" + hashlib.sha256(config).hexdigest(),
                        "sha256:" + hashlib.sha256(manifest).hexdigest(), chain_id([diff_id]), (facts,),
                        check_image(oci.oci_archive(archive.with_name("plain-image.tar"), Image([Layer.of(
                            [file("x")], None)]))).config, "amd64", "linux", archive.stat().st_size, unpacked, 6, 0, 0,
                        False)


def test_unpacking_writes_no_more_than_the_image_declared_whatever_it_holds(tmp_path):
    """The review's bomb, past admission (as a reader that disagreed with Go's would have let it):
    umoci makes a 2 GiB sparse file of it. It writes into a scratch file system sized from what
    admission found, so the judge's disk takes no more than max_unpacked, and the stage is the
    entry's verdict, not the judge's."""
    layer = sparse_bomb_layer(2 << 30)
    image = Image([Layer.raw(layer, None)])
    archive = oci.oci_archive(tmp_path / "bomb-image.tar", image)
    checked = lying(archive, image, layer, 512)
    max_unpacked = 64 * MIB
    assert scratch_bytes(checked) <= max_unpacked
    home = Layout(tmp_path / "home")
    store = home.entry_roots / RULES
    peak = {"allocated": 0, "apparent": 0}
    done = threading.Event()

    def listed() -> list[Path]:
        try:  # the unpacking's work directory may go while it is read
            return list(store.glob(".work-*/*")) if store.is_dir() else []
        except OSError:
            return []

    def watch() -> None:
        while not done.wait(0.002):
            for path in listed():
                try:
                    st = path.lstat()
                except OSError:
                    continue
                if path.is_file():
                    peak["allocated"] = max(peak["allocated"], st.st_blocks * 512)
                    peak["apparent"] = max(peak["apparent"], st.st_size)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with pytest.raises(EntryError) as info:
            entry_root(home, archive, checked, max_unpacked)
    finally:
        done.set()
        watcher.join()
    assert info.value.reason == "bad-image"
    assert "unpacked to more than its files' headers declare" in str(info.value)
    assert 0 < peak["allocated"] <= max_unpacked and peak["apparent"] <= max_unpacked
    assert not list(store.glob("*.squashfs")) and not [p for p in store.iterdir() if p.name.startswith(".work-")]


def test_a_nul_in_a_pax_path_is_the_entrys_verdict_at_admission(tmp_path):
    layer = tar(pax([("path", b"bin/a\x00b")]), member(Header(b"bin/a", size=1), b"x"))
    path = oci.oci_archive(tmp_path / "nul-image.tar", Image([Layer.raw(layer)]))
    with pytest.raises(EntryError, match="NUL") as info:
        check_image(path)
    assert info.value.reason == "bad-image"


ZEROS = 64 * MIB


def bomb_archive(path: Path, zeros: int = 4 << 30) -> Path:
    """A gzipped OCI archive holding, before its layout's documents as docker save orders them, a
    member of `zeros` zero bytes that no document names: gzip members of 64 MiB of zeros each, a
    few MB in all."""
    members = oci.oci_members([Image([Layer.of([file("app", b"x")])])])
    head = Header(b"blobs/sha256/" + b"0" * 64, size=zeros).block()
    rest = b"".join(member(Header(n.encode(), size=len(d)), d) for n, d in members) + bytes(1024)
    block = gzip.compress(bytes(ZEROS), compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(head, mtime=0))
        for _ in range(zeros // ZEROS):
            f.write(block)
        f.write(gzip.compress(rest, mtime=0))
    return path


def test_an_unnamed_member_of_zeros_is_refused_within_a_few_mib(tmp_path):
    """The review's 4 MB gzip holding 4 GiB of zeros in a member no manifest names: admitted after
    19 s of CPU reading it twice. Every blob is read as what it claims to be, once, so it is
    refused as soon as it is no tar: 4 MiB of zeros past a tar's end."""
    path = bomb_archive(tmp_path / "zeros-image.tar.gz")
    assert path.stat().st_size < 8 * MIB
    with pytest.raises(EntryError, match=r"more than 4 MiB of zeros after its end") as info:
        check_image(path, ImageLimits(max_unpacked=8 << 30))
    assert info.value.reason == "bad-image"


def test_a_member_no_tool_saves_is_refused_before_its_data(tmp_path):
    """A member of another name is refused at its header, its data never decompressed."""
    members = oci.oci_members([Image([Layer.of([file("app", b"x")])])])
    head = Header(b"junk.bin", size=1 << 40).block()
    path = tmp_path / "junk-image.tar.gz"
    path.write_bytes(gzip.compress(head + b"".join(member(Header(n.encode(), size=len(d)), d) for n, d in members),
                                   mtime=0))  # the junk's data is not even there
    with pytest.raises(EntryError, match="holds a file 'junk.bin', which is not one of the files"):
        check_image(path)


def test_the_outer_archive_is_bounded_by_what_the_image_may_hold(tmp_path):
    path = bomb_archive(tmp_path / "big-image.tar.gz", 2 * ZEROS)
    with pytest.raises(EntryError, match="members declare more than"):
        check_image(path, ImageLimits(max_unpacked=64 * MIB, max_members=100))


# --- the image-level differential: admission's reading against the root umoci makes ------------

SAFE_NAMES = ["a", "b/c", "b/d" * 40, "caf\xe9", "n" * 120, "dir/sub/file", "x y", "deep/" * 30 + "f"]


def random_layer(rng: random.Random) -> bytes:
    """A layer of regular files and directories, each header in one of the forms tools write:
    plain ustar, ustar with a prefix, GNU magic, a PAX path, a GNU long name, sizes in octal with
    spaces or NULs, or in base-256."""
    parts = []
    for i, name in enumerate(rng.sample(SAFE_NAMES, rng.randint(1, len(SAFE_NAMES)))):
        data = rng.randbytes(rng.choice([0, 1, 700, 5000]))
        raw = f"{name}{i}".encode()
        form = rng.choice(["plain", "prefix", "gnu", "pax", "long", "spaces", "base256"])
        h = Header(raw[-100:] if form not in ("pax", "long") else b"short", size=len(data))
        if form == "prefix" and b"/" in raw and len(raw) > 100:
            cut = raw.rindex(b"/", 0, 155)
            h.prefix, h.name = raw[:cut], raw[cut + 1:]
        elif len(raw) > 100 or form == "pax":
            parts.append(pax([("path", raw), ("mtime", "1700000000.5")]))
        elif form == "long":
            parts.append(gnu_long(b"L", raw))
            h.magic = GNU
        if form == "gnu":
            h.magic = GNU
        if form == "spaces":
            h.size_field = b"%11o " % len(data)
        if form == "base256":
            h.size_field = b"\x80" + len(data).to_bytes(11, "big")
        h.magic = h.magic if h.prefix == b"" else POSIX
        parts.append(member(h, data))
    return tar(*parts, zeros=rng.choice([1024, 10240]))


def admission_files(layer: bytes) -> dict[str, str]:
    """Each regular file as admission's reader sees it: path → sha256 of its data."""
    reader = TarReader(io.BytesIO(layer))
    out = {}
    for m in reader:
        if m.isreg():
            out["/".join(p for p in m.name.split("/") if p)] = hashlib.sha256(b"".join(reader.data())).hexdigest()
    return out


def test_admission_reads_each_layer_as_umoci_unpacks_it(tmp_path):
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    for n in range(12):
        layer = random_layer(rng)
        compression = rng.choice([None, "gzip"])
        archive = oci.oci_archive(tmp_path / f"{n}-image.tar", Image([Layer.raw(layer, compression)]))
        image = check_image(archive)
        root = entry_root(Layout(tmp_path / f"home{n}"), archive, image, 1 << 30)
        tree = tmp_path / f"tree{n}"
        subprocess.run(["unsquashfs", "-q", "-n", "-d", str(tree), str(root.path)], check=True, capture_output=True,
                       timeout=300)
        unpacked = {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in tree.rglob("*") if p.is_file() and not p.is_symlink()}
        assert unpacked == admission_files(layer), f"seed {seed}, layer {n}"
        assert image.unpacked_bytes == sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
