"""The entry spool: archives stored by content, durably, idempotently, and never in part."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from vmjudge.errors import EntryError, VmjudgeError
from vmjudge.queue import spool as spool_mod
from vmjudge.queue.spool import Spool, StoredArchive, check_archive_name, check_readable


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

def test_readable_archives_pass(tmp_path):
    check_readable(make_zip(tmp_path / "entry.zip", {"setup.sh": b"x"}), "zip")
    check_readable(make_tar(tmp_path / "entry.tar.gz", {"setup.sh": b"x"}), "tar.gz")


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_a_file_that_is_not_an_archive_is_refused(tmp_path, kind):
    path = tmp_path / f"entry.{kind}"
    path.write_text("just some text\n")
    with pytest.raises(EntryError) as info:
        check_readable(path, kind)
    assert info.value.reason == "bad-archive"
    assert f"entry.{kind} is not a readable {kind} archive" in str(info.value)


def test_a_truncated_tar_gz_is_refused_under_its_given_name(tmp_path):
    path = make_tar(tmp_path / "x.tar.gz", {"a": os.urandom(100_000), "b": os.urandom(100_000)})
    path.write_bytes(path.read_bytes()[:120_000])
    with pytest.raises(EntryError) as info:
        check_readable(path, "tar.gz", name="bob-entry.tar.gz")
    assert str(info.value).startswith("bob-entry.tar.gz is not a readable tar.gz archive")


def test_a_zip_cut_short_is_refused(tmp_path):
    path = make_zip(tmp_path / "entry.zip", {"a": os.urandom(10_000)})
    path.write_bytes(path.read_bytes()[:5_000])
    with pytest.raises(EntryError):
        check_readable(path, "zip")


# --- storing -------------------------------------------------------------------------

def test_store_puts_the_archive_under_its_sha256_and_fsyncs_file_and_directory(tmp_path, monkeypatch):
    source = make_tar(tmp_path / "alice-entry.tar.gz", {"setup.sh": b"#!/bin/sh\n"})
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd):
        mode = os.fstat(fd).st_mode
        synced.append("dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other")
        real_fsync(fd)

    monkeypatch.setattr(spool_mod.os, "fsync", fsync)
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
    source = make_zip(tmp_path / "solution.zip", {"setup.sh": b"x"})
    with pytest.raises(EntryError):
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

    monkeypatch.setattr(spool_mod.os, "fsync", fsync)
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
