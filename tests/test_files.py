"""The one durable write and the one file hash that the spool, the results store and the
leaderboard share."""

from __future__ import annotations

import errno
import hashlib
import os
import stat

import pytest

from vmjudge import files
from vmjudge.files import DurableFile, durable_write, sha256_file


def test_sha256_file_reads_past_one_chunk(tmp_path):
    path = tmp_path / "big"
    data = os.urandom(files.CHUNK + 12345)
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("mode", [0o600, 0o644])
def test_durable_write_replaces_the_file_whole_with_exactly_its_mode(tmp_path, mode):
    path = tmp_path / "board.html"
    path.write_bytes(b"old")
    old_umask = os.umask(0o077)
    try:
        digest = durable_write(path, [b"new ", b"content"], mode=mode)
    finally:
        os.umask(old_umask)
    assert path.read_bytes() == b"new content" and digest == hashlib.sha256(b"new content").hexdigest()
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert os.listdir(tmp_path) == ["board.html"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch):
    path = tmp_path / "results"
    path.write_bytes(b"old")

    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", fsync)
    with pytest.raises(OSError, match="No space left on device"):
        durable_write(path, [b"new"])
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["results"]


def test_an_uncommitted_file_is_removed(tmp_path):
    with DurableFile(tmp_path, prefix=".put.", suffix=".tmp") as f:
        f.write(b"already stored")
        assert f.temp.parent == tmp_path and f.temp.exists()
    assert os.listdir(tmp_path) == []
