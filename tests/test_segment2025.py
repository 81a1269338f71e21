"""examples/segment2025 on the host (no VM): its data reproducible, the built-in Dice scorer against
a Dice the host computes with numpy from the same masks, the scorer's MetaImage reader under
whatever bytes an entry may write, and the sample images as admission and the root's making see
them. Their VM runs are in test_container_pipeline.py's one daemon run."""

from __future__ import annotations

import os
import shutil
import stat
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from vmjudge.archive.container_image import check_image
from vmjudge.config import ImageRecipe, load_challenge
from vmjudge.config.layout import Layout
from vmjudge.errors import EntryError
from vmjudge.images.build import build_image
from vmjudge.images.entry_root import entry_root
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.builtin import dice
from vmjudge.scorers.loader import load_scorer
from vmjudge.scorers.mha import MhaError, read_mha, write_mha

from .conftest import the_test_site
from .needs import cannot_run
from .segment_images import EXAMPLE, REFUSED, refused_images, sample_images

GENERATED = ("training", "test", "reference", "entries/good/submitted")


def numpy_mask(path_or_bytes: Path | bytes) -> np.ndarray:
    """A mask read by the host independently of vmjudge: the header up to ElementDataFile, then the
    voxels as the header's type says (these files are uncompressed and little-endian)."""
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else path_or_bytes.read_bytes()
    head, _, body = data.partition(b"ElementDataFile = LOCAL\n")
    fields = dict(line.split(" = ", 1) for line in head.decode().splitlines())
    dtype = {"MET_UCHAR": np.uint8, "MET_SHORT": "<i2"}[fields["ElementType"]]
    shape = tuple(reversed([int(n) for n in fields["DimSize"].split()]))
    return np.frombuffer(body, dtype=dtype).reshape(shape) != 0


def host_dice(reference: Path, answers: dict[str, bytes | None]) -> float:
    """The mean over the records of 2|A∩B|/(|A|+|B|), numpy doing the counting."""
    values = []
    for record, answer in answers.items():
        truth = numpy_mask(reference / f"REFERENCE-{record}.mha")
        found = numpy_mask(answer) if answer is not None else np.zeros_like(truth)
        values.append(2 * int(np.sum(truth & found)) / (int(truth.sum()) + int(found.sum())))
    return sum(values) / len(values)


def run_good_on_host(subset: str, record: str, out: Path) -> bytes:
    """The good entry's inference.py, with the host's python3, on one record."""
    given = out / "input"
    shutil.rmtree(given, ignore_errors=True)
    given.mkdir(parents=True)
    for f in (EXAMPLE / subset).glob(f"{record}.*"):
        shutil.copyfile(f, given / f.name)
    env = {"PATH": "/usr/bin:/bin", "VMJUDGE_RECORD": record, "SEGMENT_INPUT": str(given),
           "SEGMENT_OUTPUT": str(out)}
    subprocess.run([sys.executable, "-I", "-B", str(EXAMPLE / "entries/good/inference.py")], env=env, check=True,
                   capture_output=True, timeout=120)
    return (out / f"{record}.mha").read_bytes()


def test_generate_reproduces_the_committed_files(tmp_path):
    copy = tmp_path / "segment2025"
    shutil.copytree(EXAMPLE, copy)
    for sub in GENERATED:
        shutil.rmtree(copy / sub)
    done = subprocess.run([sys.executable, "-B", str(copy / "generate.py"), "--out", str(copy)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    committed = {p.relative_to(EXAMPLE): p.read_bytes() for p in EXAMPLE.rglob("*") if p.is_file()}
    generated = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    assert generated == committed


def test_the_challenge_and_its_layout():
    ch = load_challenge(EXAMPLE)
    assert (ch.entry.kind, ch.scorer, ch.results.pattern) == ("container", "dice", "{record}.mha")
    assert ch.training == ("case01", "case02") and ch.test == ("case11", "case12", "case13")
    for subset, records in (("training", ch.training), ("test", ch.test)):
        for record in records:
            assert sorted(f.name for f in ch.record_files(subset, record)) == [f"{record}.ct.mha", f"{record}.pt.mha"]
    # The test set's masks are only in reference/; the training set's are beside its records but
    # are none of a record's files (RECORD.*), so no entry is given one.
    assert sorted(p.name for p in (EXAMPLE / "reference").iterdir()) == [f"REFERENCE-{r}.mha" for r in ch.test]
    assert not any(p.name.startswith("REFERENCE") for p in (EXAMPLE / "test").iterdir())
    assert 10 <= len((EXAMPLE / "README.md").read_text().splitlines()) <= 20
    assert sum(p.stat().st_size for p in EXAMPLE.rglob("*") if p.is_file()) < 600_000
    for path in EXAMPLE.rglob("*"):
        assert not (path.is_file() and path.stat().st_mode & 0o111), path


def test_dice_scores_what_the_host_computes(tmp_path):
    """The good entry on the test records, run on the host; the built-in scorer's Dice against
    numpy's, exactly; the reference against itself scores 1; a missing mask scores 0."""
    ch = load_challenge(EXAMPLE)
    answers: dict[str, bytes | None] = {r: run_good_on_host("test", r, tmp_path) for r in ch.test}
    scorer = load_scorer("dice")
    got = scorer(ExamResults(records=ch.test, files=answers), EXAMPLE / "reference")
    assert got["score"] == host_dice(EXAMPLE / "reference", answers)
    assert 0.5 < got["score"] < 1 and got["records"] == 3 and got["failed"] == 0
    truth = {r: (EXAMPLE / "reference" / f"REFERENCE-{r}.mha").read_bytes() for r in ch.test}
    assert scorer(ExamResults(records=ch.test, files=truth), EXAMPLE / "reference")["score"] == 1.0
    answers["case12"] = None
    missing = scorer(ExamResults(records=ch.test, files=answers), EXAMPLE / "reference")
    assert missing["score"] == host_dice(EXAMPLE / "reference", answers) and missing["failed"] == 1
    # The submitted training masks are what the good entry makes of the training records.
    for record in ch.training:
        assert run_good_on_host("training", record, tmp_path) == \
            (EXAMPLE / "entries/good/submitted" / f"{record}.mha").read_bytes()


def test_the_mha_reader_reads_what_itk_writes_and_refuses_the_rest():
    voxels = bytes([0, 1, 2, 0, 0, 255, 0, 0])
    plain = write_mha((2, 2, 2), "MET_UCHAR", voxels)
    assert read_mha(plain).foreground() == bytes([0, 1, 1, 0, 0, 1, 0, 0])
    compressed = plain.replace(b"CompressedData = False", b"CompressedData = True").replace(
        voxels, zlib.compress(voxels))
    assert read_mha(compressed).foreground() == read_mha(plain).foreground()
    shorts = struct.pack(">8h", 0, 1, -2, 0, 0, 300, 0, 0)
    big = write_mha((2, 2, 2), "MET_SHORT", shorts).replace(b"MSB = False", b"MSB = True")
    assert read_mha(big).values().tolist() == [0, 1, -2, 0, 0, 300, 0, 0]
    floats = write_mha((8,), "MET_FLOAT", struct.pack("<8f", 0, -0.0, 0.5, 0, 0, 0, 0, 1))
    assert read_mha(floats).foreground() == bytes([0, 0, 1, 0, 0, 0, 0, 1])
    bad = {
        "no header end": b"NDims = 3\n" * 10000,
        "another file": plain.replace(b"= LOCAL", b"= /etc/shadow"),
        "too few voxels": plain[:-1],
        "too many voxels": plain + b"\0",
        "a bomb": compressed[:compressed.index(b"ElementDataFile")] + b"ElementDataFile = LOCAL\n" +
        zlib.compress(bytes(1 << 24)),
        "huge dims": plain.replace(b"DimSize = 2 2 2", b"DimSize = 100000 100000 100000"),
        "a type it lacks": plain.replace(b"MET_UCHAR", b"MET_STRING"),
        "channels": plain.replace(b"ElementType", b"ElementNumberOfChannels = 3\nElementType"),
        "two NDims": plain.replace(b"NDims = 3\n", b"NDims = 3\nNDims = 2\n"),
        "not numbers": plain.replace(b"DimSize = 2 2 2", b"DimSize = 2 x 2"),
        "damaged zlib": compressed[:-3],
        "binary junk": os.urandom(4096),
    }
    for why, data in bad.items():
        with pytest.raises(MhaError):
            read_mha(data)
        print(why, "refused")
    # An entry's mask is read to its reference's size: one declaring more is refused before it is inflated.
    huge = compressed.replace(b"DimSize = 2 2 2", b"DimSize = 4096 4096 4096")
    with pytest.raises(MhaError, match="its DimSize 4096 4096 4096 is not 2 2 2"):
        read_mha(huge, (2, 2, 2))


def test_a_mask_of_the_wrong_shape_or_unreadable_scores_0_and_never_crashes(tmp_path):
    reference = tmp_path / "reference"
    reference.mkdir()
    truth = bytes([0, 1, 1, 0, 0, 1, 0, 0])
    (reference / "REFERENCE-a.mha").write_bytes(write_mha((2, 2, 2), "MET_UCHAR", truth))
    (reference / "REFERENCE-b.mha").write_bytes(write_mha((2, 2, 2), "MET_UCHAR", bytes(8)))
    for answer in (write_mha((8,), "MET_UCHAR", truth), b"\x89PNG junk", write_mha((2, 2, 2), "MET_UCHAR", bytes(8))):
        got = dice.score(ExamResults(records=("a",), files={"a": answer}), reference)
        assert got["score"] == 0.0 and got["dice_aggregated"] == 0.0
    # Both empty: 0/0, left out of the mean ("omit") or counted 0 ("zero").
    both_empty = ExamResults(records=("a", "b"), files={"a": write_mha((2, 2, 2), "MET_UCHAR", truth),
                                                         "b": write_mha((2, 2, 2), "MET_UCHAR", bytes(8))})
    assert dice.score(both_empty, reference)["score"] == 1.0
    assert dice.score(both_empty, reference)["undefined_records"] == 1
    from vmjudge.config import ScoreOptions
    assert dice.score(both_empty, reference, ScoreOptions(undefined="zero"))["score"] == 0.5


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("umoci") is None:
        cannot_run("making an entry's root needs root and umoci (make setup installs it)")
    root_sqfs = build_image(the_test_site(), ImageRecipe(), progress=lambda m: print(m)).root
    out = tmp_path_factory.mktemp("segment-images")
    return out, sample_images(root_sqfs, out), refused_images(out)


def test_the_sample_images_share_one_root_and_the_hostile_one_is_neutralised(images, tmp_path):
    out, samples, _ = images
    layout = Layout(tmp_path / "home")
    roots = {}
    for name, archive in samples.items():
        image = check_image(archive, name=archive.name)
        roots[name] = entry_root(layout, archive, image, 1 << 30)
        assert image.config.command == ("python3", f"/app/{name}/inference.py")
    assert len({r.digest for name, r in roots.items() if name != "hostile"}) == 1
    hostile = roots["hostile"]
    assert hostile.digest != roots["good"].digest
    assert (hostile.devices_removed, hostile.setid_cleared) == (1, 1)
    listing = subprocess.run(["unsquashfs", "-lln", str(hostile.path), "app/hostile", "output", "dev"],
                             capture_output=True, text=True, check=True).stdout
    suid = next(line for line in listing.splitlines() if line.endswith("/app/hostile/suid"))
    assert suid.startswith("-rwxr-xr-x"), suid
    assert "/app/hostile/escape -> ../../../../../../etc/shadow" in listing
    assert "/output -> /etc" in listing and "/dev/sda" not in listing
    # What the image's python3 runs as the judge would see it: the Debian layer works on its own.
    tree = tmp_path / "tree"
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(tree), str(roots["good"].path)], check=True)
    said = subprocess.run(["chroot", "--userspec=1000:1000", str(tree), "python3", "-c",
                           "import json, socket, struct, zlib; print('python ok')"], capture_output=True, text=True)
    assert said.stdout == "python ok\n", said.stderr
    assert stat.S_IMODE((tree / "app/good/inference.py").stat().st_mode) == 0o644


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_hostile_layers_are_refused_at_admission_each_saying_why(images, name):
    _, _, refused = images
    ch = load_challenge(EXAMPLE)
    from vmjudge.archive.checks import check_container
    with pytest.raises(EntryError) as info:
        check_container(ch, "segment2025", refused[name])
    assert info.value.reason == "bad-image" and REFUSED[name] in str(info.value), str(info.value)
