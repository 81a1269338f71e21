"""Unpacking entry archives: hostile members are refused before anything is written, the
bytes actually written are capped whatever the headers say, and on failure nothing stays."""

from __future__ import annotations

import errno
import io
import os
import stat
import struct
import tarfile
import warnings
import zipfile
from pathlib import Path

import pytest

from vmjudge.errors import EntryError, InfrastructureError, VmjudgeError
from vmjudge.stages.prep import unpack as unpack_mod
from vmjudge.stages.prep.unpack import UnpackLimits, find_required, unpack

LINK_SENTENCE = "is a link; entries may hold only regular files and directories"


def make_zip(path: Path, members: list[tuple[str, bytes, int]],
             compression: int = zipfile.ZIP_DEFLATED) -> Path:
    """members: (name, data, st_mode); a mode of 0 leaves external_attr empty."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names are made on purpose
        with zipfile.ZipFile(path, "w", compression) as zf:
            for name, data, mode in members:
                info = zipfile.ZipInfo(name)
                info.compress_type = compression
                info.external_attr = mode << 16
                if stat.S_ISDIR(mode):
                    info.external_attr |= 0x10
                zf.writestr(info, data)
    return path


def tar_info(name: str, type_: bytes = tarfile.REGTYPE, mode: int = 0o644, size: int = 0,
             linkname: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.size, ti.linkname = type_, mode, size, linkname
    return ti


def make_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for ti, data in members:
            if data is not None:
                ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    return path


def reg(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    return tar_info(name, mode=mode), data


def refused(archive: Path, kind: str, dest: Path, limits: UnpackLimits = UnpackLimits()) -> str:
    """Unpack must fail with bad-archive and leave dest absent; returns the message."""
    with pytest.raises(EntryError) as info:
        unpack(archive, kind, dest, limits)
    assert info.value.reason == "bad-archive"
    assert not dest.exists()
    return str(info.value)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- good archives -------------------------------------------------------------------

def test_good_zip_unpacks_with_modes_and_layout(tmp_path):
    archive = make_zip(tmp_path / "entry.zip", [
        ("setup.sh", b"#!/bin/sh\nexit 0\n", stat.S_IFREG | 0o755),
        ("next.sh", b"#!/bin/sh\n", stat.S_IFREG | 0o744),
        ("AUTHORS", b"Alice\n", stat.S_IFREG | 0o600),
        ("sources/", b"", stat.S_IFDIR | 0o700),
        ("sources/a.c", b"int main(){}\n", 0),
        ("deep/er/b.txt", b"b", stat.S_IFREG | 0o644),
    ])
    dest = tmp_path / "home"
    files = unpack(archive, "zip", dest, UnpackLimits())
    assert files == ["AUTHORS", "deep/er/b.txt", "next.sh", "setup.sh", "sources/a.c"]
    assert (dest / "setup.sh").read_bytes() == b"#!/bin/sh\nexit 0\n"
    assert mode_of(dest / "setup.sh") == 0o755
    assert mode_of(dest / "next.sh") == 0o755
    assert mode_of(dest / "AUTHORS") == 0o644
    assert mode_of(dest / "sources/a.c") == 0o644
    for d in ("sources", "deep", "deep/er"):
        assert mode_of(dest / d) == 0o755


def test_good_tar_made_with_dot_prefix_unpacks(tmp_path):
    archive = make_tar(tmp_path / "entry.tar.gz", [
        (tar_info("./", tarfile.DIRTYPE, 0o700), None),
        reg("./setup.sh", b"#!/bin/sh\n", 0o700),
        reg("./answers.txt", b"a100,1\n", 0o664),
        (tar_info("./sources", tarfile.DIRTYPE, 0o700), None),
        reg("./sources/x.py", b"print(1)\n"),
    ])
    dest = tmp_path / "home"
    assert unpack(archive, "tar.gz", dest, UnpackLimits()) == ["answers.txt", "setup.sh", "sources/x.py"]
    assert mode_of(dest / "setup.sh") == 0o755
    assert mode_of(dest / "answers.txt") == 0o644
    assert mode_of(dest / "sources") == 0o755
    assert mode_of(dest) == 0o755


def test_single_leading_directory_is_not_stripped(tmp_path):
    archive = make_tar(tmp_path / "entry.tar.gz", [reg("entry/setup.sh"), reg("entry/next.sh")])
    dest = tmp_path / "home"
    assert unpack(archive, "tar.gz", dest, UnpackLimits()) == ["entry/next.sh", "entry/setup.sh"]
    assert not (dest / "setup.sh").exists()


def test_unpacks_into_an_existing_empty_directory(tmp_path):
    archive = make_zip(tmp_path / "entry.zip", [("setup.sh", b"x", 0)])
    dest = tmp_path / "home"
    dest.mkdir()
    assert unpack(archive, "zip", dest, UnpackLimits()) == ["setup.sh"]


def test_refuses_a_non_empty_destination(tmp_path):
    archive = make_zip(tmp_path / "entry.zip", [("setup.sh", b"x", 0)])
    dest = tmp_path / "home"
    dest.mkdir()
    (dest / "old").write_text("old")
    with pytest.raises(VmjudgeError):
        unpack(archive, "zip", dest, UnpackLimits())
    assert [p.name for p in dest.iterdir()] == ["old"]


def test_tiny_archive_with_high_ratio_is_fine(tmp_path):
    archive = make_zip(tmp_path / "entry.zip", [("zeros", bytes(1 << 20), 0)])
    assert unpack(archive, "zip", tmp_path / "home", UnpackLimits()) == ["zeros"]


# --- hostile tar members -------------------------------------------------------------

@pytest.mark.parametrize("member, words", [
    (tar_info("lnk", tarfile.SYMTYPE, linkname="/etc/passwd"), LINK_SENTENCE),
    (tar_info("inside", tarfile.SYMTYPE, linkname="setup.sh"), LINK_SENTENCE),
    (tar_info("hard", tarfile.LNKTYPE, linkname="setup.sh"), LINK_SENTENCE),
    (tar_info("tty", tarfile.CHRTYPE), "character device"),
    (tar_info("disk", tarfile.BLKTYPE), "block device"),
    (tar_info("pipe", tarfile.FIFOTYPE), "FIFO"),
])
def test_tar_refuses_links_and_special_files(tmp_path, member, words):
    archive = make_tar(tmp_path / "entry.tar.gz", [reg("setup.sh"), (member, None)])
    message = refused(archive, "tar.gz", tmp_path / "home")
    assert words in message and member.name in message


@pytest.mark.parametrize("name, words", [
    ("../x", ".."),
    ("a/../../x", ".."),
    ("sources/../../etc/x", ".."),
    ("/etc/x", "absolute"),
    ("a\\b", "backslash"),
])
def test_tar_refuses_escaping_and_odd_names(tmp_path, name, words):
    archive = make_tar(tmp_path / "entry.tar.gz", [reg("setup.sh"), reg(name)])
    message = refused(archive, "tar.gz", tmp_path / "home")
    assert words in message and name in message


def test_tar_refuses_duplicate_names(tmp_path):
    archive = make_tar(tmp_path / "entry.tar.gz", [reg("setup.sh", b"1"), reg("./setup.sh", b"2")])
    assert "more than once" in refused(archive, "tar.gz", tmp_path / "home")


def test_tar_refuses_a_file_used_as_a_directory(tmp_path):
    archive = make_tar(tmp_path / "entry.tar.gz", [reg("a"), reg("a/b")])
    assert "which is a file" in refused(archive, "tar.gz", tmp_path / "home")


# --- hostile zip members -------------------------------------------------------------

@pytest.mark.parametrize("mode, words", [
    (stat.S_IFLNK | 0o777, LINK_SENTENCE),
    (stat.S_IFCHR | 0o644, "character device"),
    (stat.S_IFIFO | 0o644, "FIFO"),
    (stat.S_IFSOCK | 0o644, "socket"),
])
def test_zip_refuses_links_and_special_files(tmp_path, mode, words):
    archive = make_zip(tmp_path / "entry.zip", [("setup.sh", b"x", 0), ("odd", b"/etc/passwd", mode)])
    message = refused(archive, "zip", tmp_path / "home")
    assert words in message and "odd" in message


@pytest.mark.parametrize("name, words", [
    ("../x", ".."),
    ("a/../../x", ".."),
    ("/etc/x", "absolute"),
    ("a\\b.txt", "backslash"),
])
def test_zip_refuses_escaping_and_odd_names(tmp_path, name, words):
    archive = make_zip(tmp_path / "entry.zip", [("setup.sh", b"x", 0), (name, b"x", 0)])
    assert words in refused(archive, "zip", tmp_path / "home")


def test_zip_refuses_a_nul_in_a_name(tmp_path):
    # zipfile will not write a NUL in a name: write a placeholder and patch both headers.
    archive = make_zip(tmp_path / "entry.zip", [("aQQQb.txt", b"x", 0)])
    data = archive.read_bytes()
    assert data.count(b"aQQQb.txt") == 2
    archive.write_bytes(data.replace(b"aQQQb.txt", b"a\0QQb.txt"))
    assert "NUL" in refused(archive, "zip", tmp_path / "home")


def test_zip_refuses_duplicate_names(tmp_path):
    archive = make_zip(tmp_path / "entry.zip", [("setup.sh", b"1", 0), ("setup.sh", b"2", 0)])
    assert "more than once" in refused(archive, "zip", tmp_path / "home")


def test_zip_refuses_encrypted_members(tmp_path):
    archive = make_zip(tmp_path / "entry.zip", [("secret", b"x", 0)], zipfile.ZIP_STORED)
    data = bytearray(archive.read_bytes())
    local, central = data.find(b"PK\x03\x04"), data.find(b"PK\x01\x02")
    data[local + 6] |= 1
    data[central + 8] |= 1
    archive.write_bytes(bytes(data))
    assert "encrypted" in refused(archive, "zip", tmp_path / "home")


# --- size limits ---------------------------------------------------------------------

def test_refuses_more_than_max_members(tmp_path):
    archive = make_zip(tmp_path / "entry.zip", [(f"f{i}", b"", 0) for i in range(10001)], zipfile.ZIP_STORED)
    assert "more than 10000 members" in refused(archive, "zip", tmp_path / "home")


def test_tar_stops_reading_headers_past_max_members(tmp_path):
    archive = make_tar(tmp_path / "entry.tar.gz", [reg(f"f{i}") for i in range(30)])
    assert "more than 20 members" in refused(archive, "tar.gz", tmp_path / "home",
                                             UnpackLimits(max_members=20))


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_refuses_declared_total_over_max_unpacked(tmp_path, kind):
    big = os.urandom(3000)
    if kind == "zip":
        archive = make_zip(tmp_path / "entry.zip", [("a", big, 0)])
    else:
        archive = make_tar(tmp_path / "entry.tar.gz", [reg("a", big)])
    message = refused(archive, kind, tmp_path / "home", UnpackLimits(max_unpacked=2000))
    assert "more than 2000 bytes" in message


def test_refuses_a_zip_bomb_by_ratio(tmp_path):
    archive = make_zip(tmp_path / "entry.zip", [("zeros", bytes(12 << 20), 0)])
    assert archive.stat().st_size < 100_000
    assert "times its own size" in refused(archive, "zip", tmp_path / "home")


def test_zip_whose_header_understates_its_size_is_refused(tmp_path):
    # A member holding 5 MiB of zeros whose headers claim 100 bytes: never more than the
    # claimed bytes are written, and the mismatch makes the archive damaged.
    archive = make_zip(tmp_path / "entry.zip", [("setup.sh", b"ok", 0), ("bomb", bytes(5 << 20), 0)])
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as zf:
        local = zf.getinfo("bomb").header_offset
    central = data.find(b"PK\x01\x02", data.find(b"PK\x01\x02") + 4)  # second entry: bomb
    assert data[central + 46:central + 50] == b"bomb"
    struct.pack_into("<I", data, local + 22, 100)
    struct.pack_into("<I", data, central + 24, 100)
    archive.write_bytes(bytes(data))
    with zipfile.ZipFile(archive) as zf:
        assert zf.getinfo("bomb").file_size == 100
    refused(archive, "zip", tmp_path / "home")


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_streaming_cap_counts_bytes_written_not_headers(tmp_path, monkeypatch, kind):
    # With the declared-size check out of the way, the running count alone must stop it,
    # and the small file already written must be removed.
    monkeypatch.setattr(unpack_mod, "_check_totals", lambda *args: None)
    big = bytes(5 << 20)
    if kind == "zip":
        archive = make_zip(tmp_path / "entry.zip", [("small", b"s", 0), ("big", big, 0)])
    else:
        archive = make_tar(tmp_path / "entry.tar.gz", [reg("small", b"s"), reg("big", big)])
    limits = UnpackLimits(max_unpacked=3 << 20)
    message = refused(archive, kind, tmp_path / "home", limits)
    assert f"more than {3 << 20} bytes" in message and "stopped while writing big" in message


def test_streaming_ratio_check_catches_lying_headers(tmp_path, monkeypatch):
    monkeypatch.setattr(unpack_mod, "_check_totals", lambda *args: None)
    archive = make_zip(tmp_path / "entry.zip", [("zeros", bytes(12 << 20), 0)])
    assert "times its own size" in refused(archive, "zip", tmp_path / "home")


def test_failure_leaves_an_existing_destination_empty(tmp_path, monkeypatch):
    monkeypatch.setattr(unpack_mod, "_check_totals", lambda *args: None)
    archive = make_tar(tmp_path / "entry.tar.gz", [reg("d/small", b"s"), reg("big", bytes(2 << 20))])
    dest = tmp_path / "home"
    dest.mkdir()
    with pytest.raises(EntryError):
        unpack(archive, "tar.gz", dest, UnpackLimits(max_unpacked=1 << 20))
    assert dest.is_dir() and list(dest.iterdir()) == []


# --- damaged archives ----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_refuses_a_file_that_is_not_an_archive(tmp_path, kind):
    archive = tmp_path / f"entry.{kind}"
    archive.write_text("#!/bin/sh\necho I am not an archive\n")
    assert "damaged" in refused(archive, kind, tmp_path / "home")


def test_refuses_a_truncated_tar_gz(tmp_path):
    archive = make_tar(tmp_path / "entry.tar.gz", [reg("setup.sh", os.urandom(50_000)),
                                                   reg("next.sh", os.urandom(50_000))])
    data = archive.read_bytes()
    archive.write_bytes(data[:len(data) * 2 // 3])
    refused(archive, "tar.gz", tmp_path / "home")


def test_refuses_a_zip_with_damaged_data(tmp_path):
    archive = make_zip(tmp_path / "entry.zip", [("setup.sh", b"ok", 0), ("data", os.urandom(1) * 200_000, 0)])
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as zf:
        start = zf.getinfo("data").header_offset + 30 + len("data")
    for i in range(start + 5, start + 40):
        data[i] ^= 0x5A
    archive.write_bytes(bytes(data))
    refused(archive, "zip", tmp_path / "home")


# --- host errors ---------------------------------------------------------------------

def test_host_write_error_is_infrastructure_and_cleans_up(tmp_path, monkeypatch):
    archive = make_zip(tmp_path / "entry.zip", [("a", b"a", 0), ("b", b"b", 0)])
    real = os.fchmod
    calls = []

    def fchmod(fd, mode):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, mode)

    monkeypatch.setattr(unpack_mod.os, "fchmod", fchmod)
    dest = tmp_path / "home"
    with pytest.raises(InfrastructureError) as info:
        unpack(archive, "zip", dest, UnpackLimits())
    assert info.value.reason == "host-disk"
    assert not dest.exists()


# --- required components -------------------------------------------------------------

def test_find_required_reports_missing_files_and_directories(tmp_path):
    (tmp_path / "setup.sh").write_text("x")
    (tmp_path / "sources").mkdir()
    (tmp_path / "AUTHORS").mkdir()          # a directory where a file is required
    (tmp_path / "data").write_text("x")     # a file where a directory is required
    (tmp_path / "next.sh").symlink_to(tmp_path / "setup.sh")
    required = ["setup.sh", "next.sh", "AUTHORS", "sources/", "data/", "answers.txt"]
    assert find_required(tmp_path, required) == ["next.sh", "AUTHORS", "data/", "answers.txt"]
    assert find_required(tmp_path, ["setup.sh", "sources/"]) == []
