"""Unpacking entry archives: hostile members are refused before anything is written, the
bytes actually written are capped whatever the headers say, and on failure nothing stays."""

from __future__ import annotations

import errno
import gzip
import io
import os
import random
import stat
import struct
import tarfile
import tracemalloc
import warnings
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from vmjudge.archive import unpack as unpack_mod
from vmjudge.archive.bounded import tar_headers
from vmjudge.archive.components import check_components
from vmjudge.archive.unpack import UnpackLimits, unpack
from vmjudge.config import EntryRules, load_challenge
from vmjudge.errors import EntryError, InfrastructureError, VmjudgeError
from vmjudge.stages.prep.unpacked import listed_tree

from .hostile.cases import tars_joined

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

LINK_SENTENCE = "is a link; entries may hold only regular files and directories"
DEFAULT_LIMITS = UnpackLimits()


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


def refused(archive: Path, kind: str, dest: Path, limits: UnpackLimits = DEFAULT_LIMITS) -> str:
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


def skip_declared_checks(monkeypatch) -> None:
    """As if the headers understated the sizes: neither the listing nor the totals refuse."""
    monkeypatch.setattr(unpack_mod, "_check_totals", lambda *args: None)
    monkeypatch.setattr(unpack_mod, "tar_headers", lambda tf, members, _unpacked: tar_headers(tf, members, 1 << 62))


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_streaming_cap_counts_bytes_written_not_headers(tmp_path, monkeypatch, kind):
    # With the declared-size checks out of the way, the running count alone must stop it,
    # and the small file already written must be removed.
    skip_declared_checks(monkeypatch)
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
    skip_declared_checks(monkeypatch)
    archive = make_tar(tmp_path / "entry.tar.gz", [reg("d/small", b"s"), reg("big", bytes(2 << 20))])
    dest = tmp_path / "home"
    dest.mkdir()
    with pytest.raises(EntryError, match=r"^The entry archive unpacks to more than 1048576 bytes \(stopped while "
                                         r"writing big\): make the entry smaller"):
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


def unterminated_tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    """The members' headers and data (GNU format), without the end marker tarfile writes on close,
    for a test to append to."""
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for ti, data in members:
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        return tar.getvalue()[:tar.tell()]


def test_a_damaged_header_past_the_first_is_the_entrys_not_a_silent_end(tmp_path):
    """tarfile itself ends the listing at such a header: setup.sh would be judged without next.sh."""
    raw = bytearray(unterminated_tar(reg("setup.sh", b"echo set up\n"), reg("next.sh", b"echo next\n")))
    raw[512 * 2 + 148] ^= 0x01  # the second header's checksum
    archive = tmp_path / "entry.tar.gz"
    archive.write_bytes(gzip.compress(bytes(raw) + bytes(1024)))
    with tarfile.open(archive) as plain:
        assert plain.getnames() == ["setup.sh"]  # what tarfile alone would make of it
    assert "damaged tar header" in refused(archive, "tar.gz", tmp_path / "home")


def test_two_tars_joined_are_refused_not_cut_at_the_first_end(tmp_path):
    archive = tars_joined(tmp_path)  # the good entry's three files, then a second tar
    assert "data after the end of its 3 members" in refused(archive, "tar.gz", tmp_path / "home")


def negative_size_header(name: str, size: int) -> bytes:
    """A tar header whose size field holds a negative number in base-256, which tarfile accepts."""
    ti = tarfile.TarInfo(name)
    block = bytearray(ti.tobuf(tarfile.GNU_FORMAT)[:512])
    block[124:136] = b"\xff" + (size % (1 << 88)).to_bytes(11, "big")
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def test_a_negative_size_is_refused_not_followed_back(tmp_path):
    """A size of -(one header and one data block) sends tarfile back to the first member, silently
    ending the listing (or, aimed past gzip's buffer, decompressing the archive again and again)."""
    body = unterminated_tar(reg("setup.sh", b"echo set up\n"))
    archive = tmp_path / "entry.tar.gz"
    archive.write_bytes(gzip.compress(body + negative_size_header("jump", -(len(body) + 512)) + bytes(1024)))
    assert "a tar header with a negative size" in refused(archive, "tar.gz", tmp_path / "home")


@pytest.mark.parametrize("tail", [b"", b"\0" * 512, b"\0" * (2 << 20)], ids=["no-end-marker", "one-zero-block",
                                                                             "gnu-tar-b4096-2m-of-zeros"])
def test_a_tar_ending_in_zeros_or_nothing_unpacks(tmp_path, tail):
    archive = tmp_path / "entry.tar.gz"
    archive.write_bytes(gzip.compress(unterminated_tar(reg("setup.sh", b"echo set up\n")) + tail))
    assert unpack(archive, "tar.gz", tmp_path / "home") == ["setup.sh"]


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

def test_the_required_components_are_files_and_folders_at_the_top(tmp_path):
    (tmp_path / "setup.sh").write_text("x")
    (tmp_path / "sources").mkdir()
    (tmp_path / "AUTHORS").mkdir()          # a directory where a file is required
    (tmp_path / "data").write_text("x")     # a file where a directory is required
    ch = replace(load_challenge(EXAMPLES / "minimal"), entry=EntryRules(
        required=("setup.sh", "next.sh", "AUTHORS", "sources/", "data/", "answers.txt")))
    with pytest.raises(EntryError, match=r"^Missing component\(s\): next.sh, AUTHORS, data/, answers.txt: put them at "
                                         "the top of the archive and submit again.$") as caught:
        check_components(ch, listed_tree(tmp_path), "tar.gz")
    assert caught.value.reason == "missing-component"
    check_components(replace(ch, entry=EntryRules(required=("setup.sh", "sources/"))), listed_tree(tmp_path), "zip")


# --- names that must survive the CD into the VM (issue 11) -----------------------------

def test_tar_name_that_is_not_utf8_is_refused(tmp_path):
    # tarfile decodes names with surrogateescape: the byte 0xFF arrives as "\udcff".
    archive = make_tar(tmp_path / "entry.tar.gz", [reg("setup.sh"), reg("bad\udcffname")])
    with tarfile.open(archive) as tf:
        assert "bad\udcffname" in tf.getnames()
    message = refused(archive, "tar.gz", tmp_path / "home")
    assert "The member name bad\\xffname is not valid UTF-8" in message


def zip_with_raw_name(path: Path, raw: bytes, utf8_flag: bool) -> Path:
    """A zip whose one member's name is the bytes `raw` (zipfile writes only what it can encode)."""
    placeholder = b"Q" * len(raw)
    make_zip(path, [(placeholder.decode(), b"x", 0)], zipfile.ZIP_STORED)
    data = bytearray(path.read_bytes())
    assert data.count(placeholder) == 2
    local, central = data.find(b"PK\x03\x04"), data.find(b"PK\x01\x02")
    flags = 0x800 if utf8_flag else 0
    struct.pack_into("<H", data, local + 6, struct.unpack_from("<H", data, local + 6)[0] & ~0x800 | flags)
    struct.pack_into("<H", data, central + 8, struct.unpack_from("<H", data, central + 8)[0] & ~0x800 | flags)
    path.write_bytes(bytes(data).replace(placeholder, raw))
    return path


def test_zip_name_flagged_utf8_that_is_not_is_refused(tmp_path):
    archive = zip_with_raw_name(tmp_path / "entry.zip", b"bad\xffname", utf8_flag=True)
    with pytest.raises(UnicodeDecodeError):  # what zipfile gives
        zipfile.ZipFile(archive)
    assert "a member name that is not valid UTF-8" in refused(archive, "zip", tmp_path / "home")


def test_zip_name_without_the_utf8_flag_is_read_as_cp437(tmp_path):
    # The zip format's historical encoding: every byte is a character, so any name decodes.
    archive = zip_with_raw_name(tmp_path / "entry.zip", b"caf\x82", utf8_flag=False)
    assert unpack(archive, "zip", tmp_path / "home") == ["café"]


EMOJI = "\U0001F600"


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_a_name_longer_than_joliet_allows_in_utf16_units_is_refused(tmp_path, kind):
    name = "src/" + EMOJI * 40  # 40 characters, 80 UTF-16 code units
    if kind == "zip":
        archive = make_zip(tmp_path / "entry.zip", [("setup.sh", b"x", 0), (name, b"x", 0)])
    else:
        archive = make_tar(tmp_path / "entry.tar.gz", [reg("setup.sh"), reg(name)])
    message = refused(archive, kind, tmp_path / "home")
    assert f"The name {EMOJI * 40} (in {name}) is 80 UTF-16 code units long, more than the 64" in message


def test_names_up_to_64_utf16_units_are_fine(tmp_path):
    names = [EMOJI * 32, "a" * 64, "é" * 64]
    archive = make_tar(tmp_path / "entry.tar.gz", [reg(n) for n in names])
    assert unpack(archive, "tar.gz", tmp_path / "home") == sorted(names)
    archive = make_tar(tmp_path / "long-entry.tar.gz", [reg("a" * 65)])
    assert "65 UTF-16 code units" in refused(archive, "tar.gz", tmp_path / "home2")


def test_a_path_1100_levels_deep_is_refused_without_recursion(tmp_path):
    deep = "/".join(["d"] * 1099) + "/f"
    archive = make_tar(tmp_path / "entry.tar.gz", [reg("setup.sh"), reg(deep)])
    message = refused(archive, "tar.gz", tmp_path / "home")
    assert "lies 1100 levels deep, more than the 32 allowed" in message
    assert len(message) < 400  # the name is cut short in the sentence


def test_32_levels_are_fine_and_33_are_not(tmp_path):
    ok = "/".join(["d"] * 31) + "/f"
    archive = make_tar(tmp_path / "entry.tar.gz", [reg(ok)])
    assert unpack(archive, "tar.gz", tmp_path / "home") == [ok]
    archive = make_zip(tmp_path / "entry.zip", [("d/" + ok, b"x", 0)])
    assert "lies 33 levels deep" in refused(archive, "zip", tmp_path / "home2")


# --- every kind of damage is the entry's (issue 11) ------------------------------------

PAYLOAD = random.Random(11).randbytes(60_000) * 3  # some 60 KB once compressed, by any method


def member_data_offset(archive: Path, name: str) -> tuple[int, int]:
    """Where the member's compressed bytes start in the file, and how many there are."""
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo(name)
    data = archive.read_bytes()
    n, m = struct.unpack_from("<HH", data, info.header_offset + 26)
    return info.header_offset + 30 + n + m, info.compress_size


def corrupt_member(archive: Path, name: str, skip: int, count: int = 32) -> Path:
    data = bytearray(archive.read_bytes())
    start, size = member_data_offset(archive, name)
    assert size > skip + count
    for i in range(start + skip, start + skip + count):
        data[i] ^= 0x5A
    archive.write_bytes(bytes(data))
    return archive


def patch_method(archive: Path, name: str, method: int) -> Path:
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as zf:
        local = zf.getinfo(name).header_offset
    central = data.find(b"PK\x01\x02" + data[local + 4:local + 6])  # this member's record
    while data[central + 46:central + 46 + len(name)] != name.encode():
        central = data.find(b"PK\x01\x02", central + 4)
    struct.pack_into("<H", data, local + 8, method)
    struct.pack_into("<H", data, central + 10, method)
    archive.write_bytes(bytes(data))
    return archive


def zip_member(tmp_path: Path, method: int) -> Path:
    return make_zip(tmp_path / "entry.zip", [("setup.sh", b"ok", 0), ("data", PAYLOAD, 0)], method)


@pytest.mark.parametrize("build, words", [
    # an LZMA member whose compressed stream (after its 9-byte header) was damaged
    (lambda t: corrupt_member(zip_member(t, zipfile.ZIP_LZMA), "data", 9), "damaged at data"),
    # an LZMA member whose properties were damaged
    (lambda t: corrupt_member(zip_member(t, zipfile.ZIP_LZMA), "data", 0, 9), "damaged at data"),
    (lambda t: corrupt_member(zip_member(t, zipfile.ZIP_BZIP2), "data", 20), "damaged at data"),
    (lambda t: corrupt_member(zip_member(t, zipfile.ZIP_DEFLATED), "data", 0, 4), "damaged at data"),
    # one flipped byte of stored data: only the CRC can tell
    (lambda t: corrupt_member(zip_member(t, zipfile.ZIP_STORED), "data", 1000, 1), "damaged at data"),
    (lambda t: corrupt_member(zip_member(t, zipfile.ZIP_LZMA), "data", 3000, 1), "damaged at data"),
    # a stored member relabelled as LZMA: its first bytes are no LZMA header
    (lambda t: patch_method(zip_member(t, zipfile.ZIP_STORED), "data", zipfile.ZIP_LZMA), "damaged at data"),
    (lambda t: patch_method(zip_member(t, zipfile.ZIP_STORED), "data", 9),
     "data is compressed with zip method 9, which vmjudge cannot unpack"),
])
def test_damaged_zip_members_are_the_entrys(tmp_path, build, words):
    message = refused(build(tmp_path), "zip", tmp_path / "home")
    assert words in message and "submit again" in message
    for library in ("Corrupt input data", "Invalid data stream", "Error -3", "CRC", "Invalid or unsupported"):
        assert library not in message  # vmjudge's words, never a library's


def test_a_zip_needing_a_newer_version_is_the_entrys(tmp_path):
    archive = zip_member(tmp_path, zipfile.ZIP_STORED)
    data = bytearray(archive.read_bytes())
    struct.pack_into("<H", data, data.find(b"PK\x01\x02") + 6, 99)  # "version needed to extract" 9.9
    archive.write_bytes(bytes(data))
    assert refused(archive, "zip", tmp_path / "home").startswith("The entry archive is not a readable zip archive")


def test_a_truncated_gzip_member_is_the_entrys(tmp_path):
    # Cut inside the data of the last member: headers all read, the data ends early.
    archive = make_tar(tmp_path / "entry.tar.gz", [reg("setup.sh"), reg("data", PAYLOAD * 4)])
    data = archive.read_bytes()
    archive.write_bytes(data[:len(data) - 200])
    assert "damaged" in refused(archive, "tar.gz", tmp_path / "home")


def test_a_negative_seek_made_up_by_the_archive_is_the_entrys(tmp_path):
    # The end record says the directory starts 1000 bytes later than it does: zipfile shifts
    # every member's offset back by 1000 and seeks to -1000, an OSError with errno EINVAL.
    archive = make_zip(tmp_path / "entry.zip", [("setup.sh", b"ok", 0)])
    data = bytearray(archive.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<I", data, end + 16, struct.unpack_from("<I", data, end + 16)[0] + 1000)
    archive.write_bytes(bytes(data))
    with zipfile.ZipFile(archive) as zf, pytest.raises(OSError) as info:
        zf.read("setup.sh")
    assert info.value.errno == errno.EINVAL
    assert refused(archive, "zip", tmp_path / "home").startswith("The entry archive is damaged at setup.sh")


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_a_member_that_lies_about_its_size_is_decompressed_within_bounds(tmp_path, method):
    # 64 MiB of zeros whose headers claim 100 bytes. zipfile would decompress the whole member at
    # the first read; prep's reader never holds more than the declared size and a little more.
    archive = tmp_path / "entry.zip"
    with zipfile.ZipFile(archive, "w", method) as zf:
        zf.writestr("setup.sh", b"ok")
        info = zipfile.ZipInfo("bomb")
        info.compress_type = method
        with zf.open(info, "w") as f:
            for _ in range(64):
                f.write(bytes(1 << 20))
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as zf:
        local = zf.getinfo("bomb").header_offset
    central = data.rfind(b"PK\x01\x02")
    assert data[central + 46:central + 50] == b"bomb"
    struct.pack_into("<I", data, local + 22, 100)
    struct.pack_into("<I", data, central + 24, 100)
    archive.write_bytes(bytes(data))
    message, peak = refused_with_peak(archive, "zip", tmp_path / "home")
    assert "holds more than the 100 bytes its header declares" in message
    assert peak < 8 << 20, f"peak {peak >> 20} MiB"


def test_bzip2_and_lzma_members_unpack(tmp_path):
    for method in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        dest = tmp_path / f"home{method}"
        assert unpack(zip_member(tmp_path, method), "zip", dest) == ["data", "setup.sh"]
        assert (dest / "data").read_bytes() == PAYLOAD


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_a_host_read_error_is_the_hosts(tmp_path, monkeypatch, kind):
    """EIO while reading the archive from the host's disk: infrastructure, never the entry's,
    even where tarfile re-raises it as its own ReadError."""
    if kind == "zip":
        archive = zip_member(tmp_path, zipfile.ZIP_DEFLATED)
        target, name = zipfile.ZipExtFile, "read"
    else:
        archive = make_tar(tmp_path / "entry.tar.gz", [reg("setup.sh")])
        target, name = gzip.GzipFile, "read"

    def fail(*args, **kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(target, name, fail)
    dest = tmp_path / "home"
    with pytest.raises(InfrastructureError) as info:
        unpack(archive, kind, dest)
    assert info.value.reason == "host-disk" and "Input/output error" in str(info.value)
    assert not dest.exists()


def refused_with_peak(archive: Path, kind: str, dest: Path) -> tuple[str, int]:
    """refused()'s sentence and the peak of Python memory it took to get there."""
    tracemalloc.start()
    try:
        message = refused(archive, kind, dest)
        return message, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --- tar headers are bounded (issue 11) --------------------------------------------------

def tar_with_huge_long_name(path: Path, size: int) -> Path:
    """A tar.gz whose GNU long-name header declares and holds `size` bytes (zeros: it compresses
    to almost nothing), then a real member."""
    with gzip.open(path, "wb") as out:
        header = tarfile.TarInfo("././@LongLink")
        header.type, header.size = tarfile.GNUTYPE_LONGNAME, size
        out.write(header.tobuf(format=tarfile.GNU_FORMAT))
        for _ in range(size >> 20):
            out.write(bytes(1 << 20))
        real = tarfile.TarInfo("setup.sh")
        real.size = 2
        out.write(real.tobuf() + b"ok".ljust(512, b"\0") + bytes(1024))
    return path


def test_a_huge_long_name_header_is_refused_without_reading_it(tmp_path):
    archive = tar_with_huge_long_name(tmp_path / "entry.tar.gz", 64 << 20)
    assert archive.stat().st_size < 200_000
    message, peak = refused_with_peak(archive, "tar.gz", tmp_path / "home")
    assert "holds extended tar headers larger than vmjudge reads" in message
    assert peak < 8 << 20, f"peak {peak >> 20} MiB"  # tarfile alone would hold all 64 MiB


def test_long_names_and_pax_headers_of_ordinary_size_are_fine(tmp_path):
    name = "/".join(["x" * 60] * 5)  # 304 characters: a GNU long name or a pax path
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        archive = tmp_path / f"{fmt}-entry.tar.gz"
        with tarfile.open(archive, "w:gz", format=fmt) as tf:
            ti = tarfile.TarInfo(name)
            ti.size = 1
            tf.addfile(ti, io.BytesIO(b"x"))
        assert unpack(archive, "tar.gz", tmp_path / f"home{fmt}") == [name]


def test_a_sparse_member_is_refused(tmp_path):
    archive = make_tar(tmp_path / "entry.tar.gz", [reg("setup.sh"), reg("holes", b"data")])
    raw = bytearray(gzip.decompress(archive.read_bytes()))
    at = raw.find(b"holes")
    raw[at + 156:at + 157] = tarfile.GNUTYPE_SPARSE  # typeflag
    raw[at + 148:at + 156] = b"        "
    raw[at + 148:at + 156] = b"%06o\0 " % sum(raw[at:at + 512])  # the header's checksum
    archive.write_bytes(gzip.compress(bytes(raw)))
    assert "holds a sparse file (made with tar --sparse)" in refused(archive, "tar.gz", tmp_path / "home")


def test_zeros_after_the_end_count_against_max_unpacked(tmp_path):
    archive = tmp_path / "entry.tar.gz"
    archive.write_bytes(gzip.compress(unterminated_tar(reg("setup.sh", b"echo set up\n")) + bytes(3 << 20)))
    assert "more zeros after its end than max_unpacked leaves room for" in \
        refused(archive, "tar.gz", tmp_path / "home", UnpackLimits(max_unpacked=2 << 20))
