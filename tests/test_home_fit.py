"""Whether an entry fits in the home disk: the capacity estimate against the real mkfs.ext4 the
guest runs (measured here, on sparse image files), and the entry's need."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from vmjudge.archive.home_fit import MKFS, check_need, home_capacity, members_need
from vmjudge.errors import EntryError
from vmjudge.stages.prep.unpacked import listed_tree

from .needs import cannot_run

GUEST = Path(__file__).resolve().parent.parent / "vmjudge" / "images" / "guest"  # the agent's modules
# Around the rules' thresholds: the smallest home, 1 KiB blocks, the last size before 4 KiB blocks,
# the first after, a last group mke2fs drops, and the default home.
SIZES = [64, 100, 511, 512, 513, 1024]


def need_tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        cannot_run(f"{name} is not installed (e2fsprogs)")
    return path


def formatted(tmp_path: Path, mib: int) -> Path:
    """A sparse `mib` MiB image file formatted as the agent formats the home disk."""
    need_tool("mkfs.ext4")
    image = tmp_path / f"home-{mib}.img"
    with open(image, "wb") as f:
        f.truncate(mib << 20)
    subprocess.run([need_tool(MKFS[0]), *MKFS[1:], str(image)], check=True, capture_output=True, timeout=300)
    return image


@contextmanager
def mounted(image: Path, where: Path) -> Iterator[Path]:
    """The image on a loop device, lost+found removed as the agent removes it (on the first mount)."""
    if os.geteuid() != 0:
        cannot_run("mounting a loop device needs root")
    where.mkdir()
    proc = subprocess.run(["mount", "-o", "loop", str(image), str(where)], capture_output=True, text=True,
                          check=False, timeout=300)
    if proc.returncode != 0:
        cannot_run(f"cannot mount a loop device here: {proc.stderr.strip()}")
    try:
        if (where / "lost+found").exists():
            (where / "lost+found").rmdir()
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True, timeout=300)


def superblock(image: Path) -> dict[str, str]:
    out = subprocess.run([need_tool("dumpe2fs"), "-h", str(image)], check=True, capture_output=True,
                         text=True, timeout=300).stdout
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines()) if v}


@pytest.mark.parametrize("mib", SIZES)
def test_capacity_is_what_the_mounted_file_system_offers(tmp_path, mib):
    image = formatted(tmp_path, mib)
    with mounted(image, tmp_path / "mnt") as mnt:
        st = os.statvfs(mnt)
    home = home_capacity(mib)
    assert (home.block_size, home.bytes, home.inodes) == (st.f_frsize, st.f_bavail * st.f_frsize, st.f_favail)


@pytest.mark.parametrize("mib", SIZES)
def test_capacity_agrees_with_dumpe2fs(tmp_path, mib):
    """Without mounting: mkfs's own free counts once lost+found is removed (with debugfs), less
    the blocks the ext4 driver keeps back, min(2 %, 4096), which only a mount would show."""
    image = formatted(tmp_path, mib)
    subprocess.run([need_tool("debugfs"), "-w", "-R", "rmdir /lost+found", str(image)], check=True,
                   capture_output=True, timeout=300)
    sb = superblock(image)
    block, count = int(sb["Block size"]), int(sb["Block count"])
    home = home_capacity(mib)
    assert home.block_size == block
    assert home.bytes == (int(sb["Free blocks"]) - min(count // 50, 4096)) * block
    assert home.inodes == int(sb["Free inodes"])


def entry_need(root: Path, block_size: int):
    """What stage 1 counts of an unpacked tree (prep/unpacked.py listed_tree), as `submit` counts an archive's."""
    listed = listed_tree(root)
    return members_need(listed.files.values(), len(listed.folders), block_size)


def check_fits(root: Path, home_mib: int) -> None:
    check_need(entry_need(root, home_capacity(home_mib).block_size), home_mib)


def test_an_entry_refused_as_too_large_really_does_not_fit(tmp_path):
    """The rule is to refuse only what cannot fit at all: one block more than the estimate must
    fail to copy into the real file system, and 64 blocks fewer must copy."""
    home = home_capacity(64)
    image = formatted(tmp_path, 64)
    for blocks, fits in ((home.bytes // home.block_size + 1, False), (home.bytes // home.block_size - 64, True)):
        entry = tmp_path / f"entry-{blocks}"
        (entry / "data").mkdir(parents=True)
        with open(entry / "data" / "big", "wb") as f:
            f.truncate((blocks - 1) * home.block_size)  # the folder takes the other block
        assert entry_need(entry, home.block_size).bytes == blocks * home.block_size
        if fits:
            check_fits(entry, 64)
        else:
            with pytest.raises(EntryError, match=r"^The unpacked entry needs \d+ MB but the home disk holds "
                                                 r"about 56 MB: make the entry smaller"):
                check_fits(entry, 64)
        with mounted(image, tmp_path / f"mnt-{blocks}") as mnt:
            try:
                shutil.copytree(entry, mnt / "home", dirs_exist_ok=True)
                copied = True
            except OSError as exc:
                assert "No space left on device" in str(exc)
                copied = False
            finally:
                shutil.rmtree(mnt / "home", ignore_errors=True)
        assert copied is fits


def test_need_counts_started_blocks_folders_and_inodes(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    for name, size in (("empty", 0), ("one", 1), ("full", 1024), ("more", 1025), ("a/b/deep", 3000)):
        (tmp_path / name).write_bytes(b"x" * size)
    need = entry_need(tmp_path, 1024)
    assert need.bytes == (0 + 1 + 1 + 2 + 3 + 2) * 1024  # files, then the folders a and a/b
    assert need.inodes == 7
    assert entry_need(tmp_path, 4096).bytes == (0 + 1 + 1 + 1 + 1 + 2) * 4096


def test_too_large_an_entry_is_refused_in_one_sentence(tmp_path):
    with open(tmp_path / "model.bin", "wb") as f:
        f.truncate(60 << 20)  # sparse here, 60 MiB of blocks in the guest
    with pytest.raises(EntryError) as info:
        check_fits(tmp_path, 64)
    assert info.value.reason == "entry-too-large"
    assert str(info.value) == ("The unpacked entry needs 63 MB but the home disk holds about 56 MB: make the entry "
                               "smaller and submit again.")
    check_fits(tmp_path, 128)


def test_too_many_files_is_refused_for_want_of_inodes(tmp_path):
    home = home_capacity(64)
    for i in range(home.inodes + 1):
        (tmp_path / f"f{i}").touch()
    with pytest.raises(EntryError) as info:
        check_fits(tmp_path, 64)
    assert str(info.value) == (f"The unpacked entry holds {home.inodes + 1} files and folders but the home disk has "
                               f"room for {home.inodes}: pack many small files into one and submit again.")


def test_the_agent_makes_the_file_system_this_estimate_assumes():
    """The estimate holds for this mkfs command only; the guest's agent must run exactly it."""
    calls = [node for module in sorted(GUEST.glob("*.py")) for node in ast.walk(ast.parse(module.read_text()))
             if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant)
             and node.elts[0].value == "mkfs.ext4"]
    assert len(calls) == 1
    argv = [e.value for e in calls[0].elts if isinstance(e, ast.Constant)]
    assert tuple(argv) == MKFS and len(calls[0].elts) == len(MKFS) + 1  # + the device
