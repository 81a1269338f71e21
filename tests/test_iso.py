"""ISO media: Rock Ridge names and modes, Joliet, deterministic bytes, large files streamed."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from dataclasses import replace

import pycdlib
import pytest

from vmjudge.errors import MediaError
from vmjudge.images.iso import write_iso


@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "entry"
    (src / "sources" / "deep").mkdir(parents=True)
    (src / "setup.sh").write_text("#!/bin/sh\necho hi\n")
    (src / "setup.sh").chmod(0o755)
    (src / "answers.txt").write_text("100,N\n")
    (src / "sources" / "deep" / ("long-name-" * 10 + ".c")).write_text("int main;")
    return src


def read_back(path):
    iso = pycdlib.PyCdlib()
    iso.open(str(path))
    found = {}
    for root, _dirs, files in iso.walk(rr_path="/"):
        for name in files:
            rr = f"{root.rstrip('/')}/{name}"
            out = io.BytesIO()
            iso.get_file_from_iso_fp(out, rr_path=rr)
            mode = iso.get_record(rr_path=rr).rock_ridge.get_file_mode()
            found[rr] = (out.getvalue(), mode & 0o777)
    joliet = sorted(f"{r.rstrip('/')}/{n}" for r, _d, fs in iso.walk(joliet_path="/") for n in fs)
    iso.close()
    return found, joliet


def test_names_modes_and_contents_survive(tmp_path, tree):
    out = write_iso(tmp_path / "a.iso", {"entry": tree, "job.json": b'{"x": 1}'})
    found, joliet = read_back(out)
    long_name = "/entry/sources/deep/" + "long-name-" * 10 + ".c"
    assert found["/job.json"] == (b'{"x": 1}', 0o444)
    assert found["/entry/setup.sh"] == (b"#!/bin/sh\necho hi\n", 0o555)
    assert found["/entry/answers.txt"][1] == 0o444
    assert found[long_name][0] == b"int main;"
    assert "/entry/setup.sh" in joliet and long_name not in joliet  # Joliet stops at 64 characters


def test_same_inputs_give_the_same_bytes(tmp_path, tree, monkeypatch):
    first = write_iso(tmp_path / "1.iso", {"entry": tree, "job.json": b"{}"}).read_bytes()
    monkeypatch.setattr(time, "time", lambda: 1.9e9)  # a later clock and another time zone
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        second = write_iso(tmp_path / "2.iso", {"job.json": b"{}", "entry": tree}).read_bytes()
    finally:
        monkeypatch.undo()
        time.tzset()
    assert first == second


@pytest.mark.parametrize("name", ["/abs", "../up", "a/../../b"])
def test_paths_must_stay_inside(tmp_path, name):
    with pytest.raises(MediaError, match="relative and stay inside"):
        write_iso(tmp_path / "x.iso", {name: b"x"})


def test_links_and_missing_files_are_refused(tmp_path, tree):
    (tree / "link").symlink_to("/etc/passwd")
    with pytest.raises(MediaError, match="link or special file"):
        write_iso(tmp_path / "x.iso", {"entry": tree})
    with pytest.raises(MediaError, match="does not exist"):
        write_iso(tmp_path / "x.iso", {"f": tmp_path / "nope"})
    assert not (tmp_path / "x.iso").exists() and not (tmp_path / "x.iso.part").exists()


def peak_rss_writing(tmp_path, size: int) -> int:
    """Peak RSS (KiB) of a fresh process writing an ISO that holds one sparse file of `size` bytes."""
    big = tmp_path / f"big-{size}.dat"
    with open(big, "wb") as f:
        f.truncate(size)
    iso = tmp_path / f"big-{size}.iso"
    script = (f"import resource\nfrom pathlib import Path\nfrom vmjudge.images.iso import write_iso\n"
              f"write_iso(Path({str(iso)!r}), {{'data/big.dat': Path({str(big)!r})}})\n"
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    peak = int(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True,
                              timeout=300).stdout)
    assert iso.stat().st_size > size
    iso.unlink()
    big.unlink()
    return peak


def test_large_files_are_streamed_not_loaded(tmp_path):
    # The lower of two runs each: a stray allocation can only add to a peak, never hide growth.
    small = min(peak_rss_writing(tmp_path, 40 << 20) for _ in range(2))
    large = min(peak_rss_writing(tmp_path, 400 << 20) for _ in range(2))
    # Ten times the data may not cost more than a few MiB more memory (360 MiB if it were loaded).
    assert large - small < 16 * 1024, f"40 MiB: {small} KiB peak, 400 MiB: {large} KiB peak"


def test_efi_hybrid_leaves_room_for_its_backup_gpt_after_the_data(tmp_path):
    """pycdlib puts the backup GPT at the end of the padding to a whole MiB; an image whose
    data ends on (or just before) a MiB boundary must still keep every byte of its files."""
    from vmjudge.images.iso import CYLINDER, ElTorito
    from vmjudge.replica.build import ISOLINUX_BIN

    def files(filler: int) -> dict:
        return {"isolinux/isolinux.bin": ISOLINUX_BIN, "efi/efiboot.img": b"\xeb" * 4096,
                "zz/filler": b"\xa5" * filler}

    boot = ElTorito(loader="isolinux/isolinux.bin", catalog="isolinux/boot.cat", efi="efi/efiboot.img")
    probe = write_iso(tmp_path / "probe.iso", files(2048), boot=replace(boot, hybrid=False)).read_bytes()
    blocks = int.from_bytes(probe[16 * 2048 + 80:16 * 2048 + 84], "little")  # the volume space size
    for short in (0, 2048, 16 * 1024):  # the data ends this far before a MiB boundary
        filler = 2048 + (-(blocks * 2048) % CYLINDER) - short
        out = write_iso(tmp_path / "hybrid.iso", files(filler), boot=boot)
        data = out.read_bytes()
        assert len(data) % CYLINDER == 0 and data[-512:-504] == b"EFI PART"
        iso = pycdlib.PyCdlib()
        iso.open(str(out))
        try:
            back = io.BytesIO()
            iso.get_file_from_iso_fp(back, rr_path="/zz/filler")
        finally:
            iso.close()
        assert back.getvalue() == b"\xa5" * filler, short


def test_joliet_counts_utf16_code_units(tmp_path):
    """Joliet allows 64 UTF-16 code units per name: 40 emoji are 80 of them, so such a name is
    reachable through Rock Ridge only. pycdlib checks 64 bytes of UTF-8 instead, so 32 emoji
    (64 units, 128 bytes) and 40 "é" (40 units, 80 bytes) go without a Joliet name too, rather
    than make pycdlib refuse the whole ISO; 16 emoji (64 bytes) keep theirs."""
    from vmjudge.images.iso import joliet_length

    emoji = "\U0001F600"
    assert joliet_length(emoji * 40) == 80 and joliet_length("é" * 64) == 64
    names = {emoji * 40: b"80 units", emoji * 32: b"64 units", "é" * 40: b"80 bytes", emoji * 16: b"64 bytes"}
    out = write_iso(tmp_path / "e.iso", {f"entry/{name}": data for name, data in names.items()})
    found, joliet = read_back(out)
    assert {path: data for path, (data, _mode) in found.items()} == {f"/entry/{n}": d for n, d in names.items()}
    assert joliet == ["/entry/" + emoji * 16]
