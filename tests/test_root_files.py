"""A container entry's submitted results read on the host from its root's squashfs
(images/root_files.py): only regular files, never through a link of the image's, never more
than the bounds, whatever the image puts at the submitted paths. Squashfs images made here with
mksquashfs from trees holding what a hostile image would."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from vmjudge.errors import EntryError
from vmjudge.images.root_files import ResultBounds, list_paths, read_submitted

BOUNDS = ResultBounds(per_file=1 << 20, total=4 << 20)
PATHS = {"r1": "/submitted/r1.txt", "r2": "/submitted/r2.txt"}


def squash(tree: Path, out: Path) -> Path:
    subprocess.run(["mksquashfs", str(tree), str(out), "-noappend", "-quiet", "-no-progress"], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def image(tmp_path: Path, make) -> Path:
    tree = tmp_path / "tree"
    (tree / "submitted").mkdir(parents=True)
    (tree / "etc").mkdir()
    (tree / "etc" / "secret").write_text("the image's secret\n")
    make(tree)
    return squash(tree, tmp_path / "root.sqfs")


def stored(dest: Path) -> dict[str, bytes]:
    return {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}


def test_regular_files_are_copied_and_a_missing_one_left_out(tmp_path):
    root = image(tmp_path, lambda t: (t / "submitted" / "r1.txt").write_bytes(b"APPLE\n"))
    dest = tmp_path / "entry"
    dest.mkdir()
    assert read_submitted(root, PATHS, dest, BOUNDS) == 1
    assert stored(dest) == {"submitted/r1.txt": b"APPLE\n"}
    assert (dest / "submitted").stat().st_mode & 0o777 == 0o700
    assert (dest / "submitted" / "r1.txt").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("what, make", [
    ("a link out of the image", lambda t: (t / "submitted" / "r1.txt").symlink_to("/etc/shadow")),
    ("a link to the image's own file", lambda t: (t / "submitted" / "r1.txt").symlink_to("../etc/secret")),
    ("a directory", lambda t: (t / "submitted" / "r1.txt").mkdir()),
    ("a FIFO", lambda t: os.mkfifo(t / "submitted" / "r1.txt")),
])
def test_anything_but_a_regular_file_is_the_entrys_fault(tmp_path, what, make):
    root = image(tmp_path, make)
    dest = tmp_path / "entry"
    dest.mkdir()
    with pytest.raises(EntryError, match=r"The image's /submitted/r1.txt is not a regular file") as caught:
        read_submitted(root, PATHS, dest, BOUNDS)
    assert caught.value.reason == "bad-image" and stored(dest) == {}, what


def test_a_linked_directory_on_the_way_is_not_followed(tmp_path):
    def make(tree: Path) -> None:
        (tree / "submitted").rmdir()
        (tree / "elsewhere").mkdir()
        (tree / "elsewhere" / "r1.txt").write_text("through a link\n")
        (tree / "submitted").symlink_to("elsewhere")
    root = image(tmp_path, make)
    dest = tmp_path / "entry"
    dest.mkdir()
    assert read_submitted(root, PATHS, dest, BOUNDS) == 0 and stored(dest) == {}


def test_a_directory_of_many_files_at_a_path_costs_a_bounded_listing(tmp_path):
    def make(tree: Path) -> None:
        big = tree / "submitted" / "r1.txt"
        big.mkdir()
        for i in range(3000):
            (big / f"f{i:05d}-{'x' * 100}").touch()
    root = image(tmp_path, make)
    listed = list_paths(root, sorted(PATHS.values()), timeout=60)
    assert listed == {"/submitted/r1.txt": listed["/submitted/r1.txt"]} and listed["/submitted/r1.txt"].mode == "d"


def test_results_larger_than_the_judge_keeps_are_refused_before_they_are_read(tmp_path):
    def make(tree: Path) -> None:
        with open(tree / "submitted" / "r1.txt", "wb") as f:
            f.truncate(3 << 30)  # 3 GiB of holes: a squashfs of a few blocks
    root = image(tmp_path, make)
    dest = tmp_path / "entry"
    dest.mkdir()
    with pytest.raises(EntryError, match=r"/submitted/r1.txt is 3,221,225,472 bytes, more than the 1,048,576") as c:
        read_submitted(root, PATHS, dest, BOUNDS)
    assert c.value.reason == "answers-too-large" and stored(dest) == {}


def test_all_results_together_are_bounded_too(tmp_path):
    def make(tree: Path) -> None:
        for r in ("r1", "r2"):
            (tree / "submitted" / f"{r}.txt").write_bytes(b"x" * 1000)
    root = image(tmp_path, make)
    dest = tmp_path / "entry"
    dest.mkdir()
    with pytest.raises(EntryError, match="2,000 bytes together, more than the 1,500 bytes"):
        read_submitted(root, PATHS, dest, ResultBounds(per_file=1000, total=1500))
    assert read_submitted(root, PATHS, dest, ResultBounds(per_file=1000, total=2000)) == 2
