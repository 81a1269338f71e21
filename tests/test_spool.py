"""The entry spool: archives stored by content, durably, idempotently, and never in part."""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import os
import shutil
import stat
import struct
import tarfile
import time
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from vmjudge import files
from vmjudge.archive.checks import check_archive
from vmjudge.archive.names import check_archive_name
from vmjudge.archive.unpack import UnpackLimits, listed
from vmjudge.config import load_challenge
from vmjudge.errors import EntryError, VmjudgeError
from vmjudge.queue import spool as spool_mod
from vmjudge.queue.spool import Spool, StoredArchive

UNPACKED = 1 << 30  # the default max_unpacked


def make_tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return path


def make_zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if not p.is_dir()) if root.exists() else []


# --- names ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, kind", [
    ("entry.zip", "zip"), ("entry.tar.gz", "tar.gz"),
    ("alice-entry.tar.gz", "tar.gz"), ("alice-entry.zip", "zip"),
])
def test_accepts_physionet_archive_names(name, kind):
    assert check_archive_name(name) == kind


@pytest.mark.parametrize("name", ["entry.tgz", "solution.zip", "entry.tar", "entry.zip.bak", "ENTRY.ZIP", ""])
def test_refuses_other_archive_names(name):
    with pytest.raises(EntryError) as info:
        check_archive_name(name)
    assert info.value.reason == "bad-archive"
    assert f"Improper name ({name})" in str(info.value)


# --- readability ---------------------------------------------------------------------

def check_readable(path, kind, max_members, max_unpacked, name=None):
    """The archive's checked listing (unpack.listed), one reading of its headers, as `submit` makes it: its
    members' paths."""
    with listed(path, kind, UnpackLimits(max_members, max_unpacked, max_ratio=1e9), name=name or path.name) as members:
        return [m.path for m in members]


def test_readable_archives_pass(tmp_path):
    check_readable(make_zip(tmp_path / "entry.zip", {"setup.sh": b"x"}), "zip", 10, UNPACKED)
    check_readable(make_tar(tmp_path / "entry.tar.gz", {"setup.sh": b"x"}), "tar.gz", 10, UNPACKED)


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_a_file_that_is_not_an_archive_is_refused(tmp_path, kind):
    path = tmp_path / f"entry.{kind}"
    path.write_text("just some text\n")
    with pytest.raises(EntryError) as info:
        check_readable(path, kind, 10, UNPACKED)
    assert info.value.reason == "bad-archive"
    assert f"entry.{kind} is not a readable {kind} archive" in str(info.value)


def test_a_truncated_tar_gz_is_refused_under_its_given_name(tmp_path):
    path = make_tar(tmp_path / "x.tar.gz", {"a": os.urandom(100_000), "b": os.urandom(100_000)})
    path.write_bytes(path.read_bytes()[:120_000])
    with pytest.raises(EntryError) as info:
        check_readable(path, "tar.gz", 10, UNPACKED, name="bob-entry.tar.gz")
    assert str(info.value).startswith("bob-entry.tar.gz is not a readable tar.gz archive")


def test_a_zip_cut_short_is_refused(tmp_path):
    path = make_zip(tmp_path / "entry.zip", {"a": os.urandom(10_000)})
    path.write_bytes(path.read_bytes()[:5_000])
    with pytest.raises(EntryError, match=r"^entry.zip is not a readable zip archive, or is damaged: make it again "
                                         r"with `zip -r` or `tar czf` and submit again.$"):
        check_readable(path, "zip", 10, UNPACKED)


# --- storing -------------------------------------------------------------------------

def test_store_puts_the_archive_under_its_sha256_and_fsyncs_file_and_directory(tmp_path, monkeypatch):
    source = make_tar(tmp_path / "alice-entry.tar.gz", {"setup.sh": b"#!/bin/sh\n"})
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd):
        mode = os.fstat(fd).st_mode
        synced.append("dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other")
        real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)
    spool = Spool(tmp_path / "spool")
    stored = spool.store(source)

    sha = hashlib.sha256(source.read_bytes()).hexdigest()
    assert stored == StoredArchive(sha, tmp_path / "spool" / sha[:2] / f"{sha}.tar.gz",
                                   source.stat().st_size, "alice-entry.tar.gz")
    assert stored.kind == "tar.gz"
    assert hashlib.sha256(stored.path.read_bytes()).hexdigest() == sha
    assert synced[0] == "file" and "dir" in synced[1:]
    assert all_files(tmp_path / "spool") == [stored.path]
    assert spool.exists(sha, "entry.tar.gz") and not spool.exists(sha, "entry.zip")
    with spool.open(stored) as f:
        assert f.read() == source.read_bytes()


def test_store_is_idempotent(tmp_path):
    source = make_zip(tmp_path / "entry.zip", {"setup.sh": b"x"})
    spool = Spool(tmp_path / "spool")
    first = spool.store(source)
    second = spool.store(source)
    assert first == second
    other = tmp_path / "bob"
    other.mkdir()
    again = spool.store(shutil.copy(source, other / "bob-entry.zip"))
    assert again.path == first.path and again.name == "bob-entry.zip"
    assert all_files(tmp_path / "spool") == [first.path]


def test_store_refuses_a_badly_named_archive(tmp_path):
    source = make_zip(tmp_path / "solution.rar", {"setup.sh": b"x"})  # a .zip of any name may be a submission
    with pytest.raises(EntryError, match=r"^Improper name \(solution.rar\) for entry: name it entry.zip"):
        Spool(tmp_path / "spool").store(source)
    assert all_files(tmp_path / "spool") == []


def test_store_refuses_when_the_disk_is_nearly_full(tmp_path, monkeypatch):
    source = make_zip(tmp_path / "entry.zip", {"setup.sh": b"x"})
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(spool_mod.shutil, "disk_usage",
                        lambda path: type(usage)(total=1 << 30, used=(1 << 30) - (10 << 20), free=10 << 20))
    with pytest.raises(VmjudgeError) as info:
        Spool(tmp_path / "spool").store(source)
    message = str(info.value)
    assert "has 10 MB free, not enough for this 1 MB archive" in message
    assert "free some space and submit again." in message
    assert all_files(tmp_path / "spool") == []


def test_a_failed_copy_leaves_nothing_behind(tmp_path, monkeypatch):
    source = make_zip(tmp_path / "entry.zip", {"setup.sh": b"x"})

    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", fsync)
    with pytest.raises(VmjudgeError) as info:
        Spool(tmp_path / "spool").store(source)
    assert "No space left on device" in str(info.value)
    assert all_files(tmp_path / "spool") == []


def test_path_for_refuses_what_is_not_a_sha256(tmp_path):
    spool = Spool(tmp_path)
    with pytest.raises(ValueError):
        spool.path_for("../../etc/passwd", "entry.zip")
    sha = "ab" * 32
    assert spool.path_for(sha, "x-entry.zip") == tmp_path / "ab" / f"{sha}.zip"


# --- listing stops at the member limit (issue 11) ----------------------------------------

def many_member_tar(path: Path, count: int) -> Path:
    """A real tar.gz of `count` empty members named f0000000, f0000001, ... (built by hand:
    tarfile takes seconds for 200 000)."""
    template = bytearray(tarfile.TarInfo("").tobuf(format=tarfile.USTAR_FORMAT))
    template[148:156] = b" " * 8
    base = sum(template)
    blocks = []
    for i in range(count):
        name = b"f%07d" % i
        block = bytearray(template)
        block[:len(name)] = name
        block[148:156] = b"%06o\0 " % (base + sum(name))
        blocks.append(bytes(block))
    path.write_bytes(gzip.compress(b"".join(blocks) + bytes(1024), compresslevel=1))
    return path


def many_member_zip(path: Path, count: int) -> Path:
    """A real zip (with zip64 end records, as more than 65535 members need) of `count` empty
    stored members, built by hand for speed."""
    local, central = [], []
    offset = 0
    for i in range(count):
        name = b"f%07d" % i
        header = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0x21, 0, 0, 0, len(name), 0) + name
        central.append(struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 0, 0, 0x21, 0, 0, 0, len(name),
                                   0, 0, 0, 0, 0, offset) + name)
        local.append(header)
        offset += len(header)
    directory = b"".join(central)
    end64 = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, len(directory), offset)
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, offset + len(directory), 1)
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, len(directory), offset, 0)
    path.write_bytes(b"".join(local) + directory + end64 + locator + end)
    return path


@pytest.mark.parametrize("build", [many_member_tar, many_member_zip])
def test_hand_built_archives_are_real(tmp_path, build):
    path = build(tmp_path / ("entry.zip" if build is many_member_zip else "entry.tar.gz"), 3)
    assert check_readable(path, "zip" if build is many_member_zip else "tar.gz", 3, UNPACKED) == \
        ["f0000000", "f0000001", "f0000002"]


@pytest.fixture(scope="module")
def huge_archives(tmp_path_factory):
    """200 000 empty members: 1.9 MB as tar.gz, 18 MB as zip."""
    d = tmp_path_factory.mktemp("huge")
    return {"tar.gz": many_member_tar(d / "entry.tar.gz", 200_000), "zip": many_member_zip(d / "entry.zip", 200_000)}


def test_a_tar_with_200000_members_is_read_only_up_to_the_limit(huge_archives, monkeypatch):
    real = tarfile.TarInfo.fromtarfile.__func__
    headers = []

    def counting(cls, tf):
        headers.append(1)
        return real(cls, tf)

    monkeypatch.setattr(tarfile.TarInfo, "fromtarfile", classmethod(counting))
    with pytest.raises(EntryError) as info:
        check_readable(huge_archives["tar.gz"], "tar.gz", 100, UNPACKED)
    assert str(info.value) == ("The entry archive holds more than 100 members: ship fewer files (pack many small "
                               "ones into one) and submit again.")
    assert info.value.reason == "bad-archive"
    assert len(headers) == 101  # not 200 000


@pytest.mark.parametrize("kind", ["tar.gz", "zip"])
def test_listing_200000_members_past_the_limit_costs_little_memory(huge_archives, monkeypatch, kind):
    # Listing all 200 000 took 89 MiB more for the tar.gz. Up to the limit, tarfile keeps the
    # 10 001 headers it read (about 5 MiB): the bound is 8 MiB. zipfile must not build a single
    # ZipInfo, since the count refuses the zip before zipfile parses its directory.
    made = []
    real_init = zipfile.ZipInfo.__init__

    def counting_init(self, *args, **kwargs):
        made.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipInfo, "__init__", counting_init)
    tracemalloc.start()
    try:
        with pytest.raises(EntryError, match="more than 10000 members"):
            check_readable(huge_archives[kind], kind, 10000, UNPACKED)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak >> 20} MiB"
    assert made == []


def test_the_member_limit_counts_exactly(tmp_path):
    path = many_member_zip(tmp_path / "entry.zip", 50)
    assert len(check_readable(path, "zip", 50, UNPACKED)) == 50
    with pytest.raises(EntryError, match="more than 49 members"):
        check_readable(path, "zip", 49, UNPACKED)
    path = many_member_tar(tmp_path / "entry.tar.gz", 50)
    assert len(check_readable(path, "tar.gz", 50, UNPACKED)) == 50
    with pytest.raises(EntryError, match="more than 49 members"):
        check_readable(path, "tar.gz", 49, UNPACKED)


def test_a_tar_gz_declaring_more_than_max_unpacked_is_refused_before_its_data_is_decompressed(tmp_path):
    """Each header is reached by decompressing the member before it: 64 MiB of zeros (64 KiB as
    gzip) is refused at its own header, with its data never read, when 1 MiB is allowed."""
    path = tmp_path / "entry.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, size in (("setup.sh", 3), ("zeros", 64 << 20), ("next.sh", 3)):
            info = tarfile.TarInfo(name)
            info.size = size
            tf.addfile(info, io.BytesIO(b"\0" * size))
    assert path.stat().st_size < 1 << 20
    read = []
    real = gzip.GzipFile.read

    def counting(self, size=-1):
        data = real(self, size)
        read.append(len(data))
        return data

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gzip.GzipFile, "read", counting)
        with pytest.raises(EntryError) as info:
            check_readable(path, "tar.gz", 100, 1 << 20, name="eve-entry.tar.gz")
    assert str(info.value) == (f"The entry archive unpacks to more than {1 << 20} bytes ({(64 << 20) + 3} declared): "
                               "make the entry smaller and submit again.")
    assert sum(read) < 1 << 20
    assert len(check_readable(path, "tar.gz", 100, 65 << 20)) == 3


def test_a_huge_tar_header_is_refused_at_submit_too(tmp_path):
    from .test_unpack import tar_with_huge_long_name

    path = tar_with_huge_long_name(tmp_path / "entry.tar.gz", 32 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(EntryError) as info:
            check_readable(path, "tar.gz", 100, UNPACKED, name="eve-entry.tar.gz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(info.value).startswith("eve-entry.tar.gz holds extended tar headers larger than vmjudge reads")
    assert peak < 8 << 20, f"peak {peak >> 20} MiB"


def test_a_host_read_error_at_submit_is_not_the_archives(tmp_path, monkeypatch):
    path = make_tar(tmp_path / "entry.tar.gz", {"setup.sh": b"x"})

    def fail(*args, **kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(gzip.GzipFile, "read", fail)
    ch = load_challenge(Path(__file__).resolve().parent.parent / "examples" / "minimal")
    with pytest.raises(VmjudgeError) as info:
        check_archive(ch, ch.name, path)
    assert not isinstance(info.value, EntryError)
    assert "Input/output error" in str(info.value)


def test_store_says_whether_it_added_the_file_and_remove_takes_back_only_that(tmp_path):
    source = make_zip(tmp_path / "entry.zip", {"setup.sh": b"x"})
    spool = Spool(tmp_path / "spool")
    first, again = spool.store(source), spool.store(source)
    assert first.new and not again.new and first == again
    with pytest.raises(ValueError, match="may be another entry's"):
        spool.remove(again)
    assert first.path.is_file()
    spool.remove(first)
    assert all_files(tmp_path / "spool") == []


def test_a_staged_copy_a_crash_left_is_swept_a_day_later_and_a_fresh_one_kept(tmp_path):
    spool = Spool(tmp_path / "spool")
    source = make_zip(tmp_path / "entry.zip", {"setup.sh": b"x"})
    left, fresh = spool.stage(source), spool.stage(source)  # as if two admissions died after staging
    day_old = time.time() - 24 * 3600 - 60
    os.utime(left.path, (day_old, day_old))
    spool.discard(spool.stage(source))
    assert all_files(spool.incoming) == [fresh.path]
