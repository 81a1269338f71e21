"""Data disks (#57): a record set as a read-only ISO 9660 disk made once, what it holds, who may read it,
what gc keeps, and how a job, its CD and its VM's XML carry it. The guest's side is in
tests/test_data_disk_vm.py."""

from __future__ import annotations

import fcntl
import grp
import io
import os
import shutil
import stat
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pycdlib
import pytest

from vmjudge.cli import upkeep
from vmjudge.config import load_challenge
from vmjudge.errors import ChallengeError, InfrastructureError
from vmjudge.images import data_disk
from vmjudge.images.data_disk import DataDisks, content_key
from vmjudge.images.data_store import collect_data_disks, store_bytes
from vmjudge.images.iso import write_iso
from vmjudge.queue.db import Queue
from vmjudge.stages.data_sets import challenge_sets, make_disks, set_media, used_keys
from vmjudge.stages.records import record_job
from vmjudge.vm.domain_xml import DATA_TARGETS, DomainSpec, domain_xml
from vmjudge.vm.job import Command, Job
from vmjudge.vm.runner import make_tmp_disk

from .test_challenge_new import new_challenge


def record_set(tmp_path: Path, records=("A1", "A2"), size=1000) -> dict[str, Path | bytes]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    files: dict[str, Path | bytes] = {"RECORDS": "".join(f"{r}\n" for r in records).encode()}
    for r in records:
        for ext in ("hea", "mat"):
            path = src / f"{r}.{ext}"
            path.write_bytes(os.urandom(size))
            path.chmod(0o600)  # the organiser's mode: the disk gives 0444 whatever it is
            files[f"{r}.{ext}"] = path
    return files


def listing(disk: Path) -> dict[str, str]:
    """path -> "mode size" of each file and directory on the disk (its Rock Ridge tree, as Linux reads it)."""
    iso = pycdlib.PyCdlib()
    iso.open(str(disk))
    found = {}
    try:
        for top, dirs, files in iso.walk(rr_path="/"):
            for name in dirs + files:
                path = top.rstrip("/") + "/" + name
                record = iso.get_record(rr_path=path)
                mode = stat.filemode(record.rock_ridge.get_file_mode())
                found[path] = mode if name in dirs else f"{mode} {iso_size(iso, path)}"
    finally:
        iso.close()
    return found


def iso_size(iso: pycdlib.PyCdlib, path: str) -> int:
    out = io.BytesIO()
    iso.get_file_from_iso_fp(out, rr_path=path)
    return len(out.getvalue())


def cat(disk: Path, name: str) -> bytes:
    iso = pycdlib.PyCdlib()
    iso.open(str(disk))
    try:
        out = io.BytesIO()
        iso.get_file_from_iso_fp(out, rr_path="/" + name)
        return out.getvalue()
    finally:
        iso.close()


def test_a_record_set_is_one_disk_with_the_cds_names_bytes_and_modes(tmp_path):
    files = record_set(tmp_path)
    (tmp_path / "src" / "run.sh").write_bytes(b"#!/bin/sh\n")
    (tmp_path / "src" / "run.sh").chmod(0o700)
    files["sub dir/a \"quoted\" name"] = b"deep"
    files["run.sh"] = tmp_path / "src" / "run.sh"
    with DataDisks(tmp_path / "store").held("training", files) as disk:
        assert disk.cd_dir == "training" and disk.key == content_key(files)
        assert disk.path == tmp_path / "store" / f"{disk.key}.iso"
        seen = listing(disk.path)
        assert seen["/A1.mat"] == "-r--r--r-- 1000"  # the CD's modes (iso.py), whatever the organiser's
        assert seen["/run.sh"] == "-r-xr-xr-x 10"
        assert seen["/sub dir"] == "dr-xr-xr-x"
        assert seen['/sub dir/a "quoted" name'] == "-r--r--r-- 4"
        assert set(seen) == {"/RECORDS", "/A1.hea", "/A1.mat", "/A2.hea", "/A2.mat", "/run.sh", "/sub dir",
                             '/sub dir/a "quoted" name'}
        assert cat(disk.path, "A2.hea") == (tmp_path / "src" / "A2.hea").read_bytes()
        assert cat(disk.path, "RECORDS") == b"A1\nA2\n"
        st = disk.path.stat()
        # Root's, readable by qemu's group alone: test records, which no other user may read, no qemu write.
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, 0, grp.getgrnam("libvirt-qemu").gr_gid)
        assert stat.S_IMODE((tmp_path / "store").stat().st_mode) == 0o711
    assert not list((tmp_path / "store" / ".work").iterdir())


def test_an_unchanged_set_is_found_again_without_reading_a_file(tmp_path, monkeypatch):
    files = record_set(tmp_path)
    disks = DataDisks(tmp_path / "store")
    with disks.held("training", files) as first:
        made = first.path.stat()
    read: list[Path] = []
    real = data_disk.sha256_file
    monkeypatch.setattr(data_disk, "sha256_file", lambda p: read.append(p) or real(p))
    for _ in range(3):
        with disks.held("training", files) as again:
            assert again.key == first.key
    assert read == []  # the stat signature remembered after the making (its links changed each ctime)
    assert (again.path.stat().st_ino, again.path.stat().st_mtime_ns) == (made.st_ino, made.st_mtime_ns)


def test_a_changed_record_makes_a_new_disk_and_gc_removes_the_old_one_once_no_run_holds_it(tmp_path):
    files = record_set(tmp_path)
    disks = DataDisks(tmp_path / "store")
    with disks.held("test", files) as old:
        pass
    (tmp_path / "src" / "A1.mat").write_bytes(b"changed")
    with disks.held("test", files) as new:
        assert new.key != old.key and old.path.is_file()
        assert cat(new.path, "A1.mat") == b"changed"
        with disks.held("test", {**files, "A1.mat": b"held by a run"}) as running:
            kept = collect_data_disks(disks, used_keys_of(disks, files), dry_run=False)
            assert [r.name for r in kept.removals] == [old.path.name]
            assert (kept.in_use, kept.busy) == (1, 1) and running.path.is_file()
    assert not old.path.exists() and not disks.lock_path(old.key).exists()
    assert store_bytes(disks) == (2, new.path.stat().st_size + running.path.stat().st_size)
    again = collect_data_disks(disks, used_keys_of(disks, files), dry_run=False)
    assert [r.name for r in again.removals] == [running.path.name] and again.in_use == 1
    assert disks.known_key(files) == new.key


def used_keys_of(disks: DataDisks, files) -> set[str]:
    return {k for k in [disks.known_key(files)] if k is not None}


def test_two_stages_at_once_make_the_disk_once(tmp_path, monkeypatch):
    files = record_set(tmp_path, records=tuple(f"R{i}" for i in range(20)), size=200_000)
    disks = DataDisks(tmp_path / "store")
    makings: list[str] = []
    real = DataDisks._make
    monkeypatch.setattr(DataDisks, "_make", lambda self, key, f, sig: makings.append(key) or real(self, key, f, sig))
    keys: list[str] = []
    barrier = threading.Barrier(4)

    def stage():
        barrier.wait()
        with disks.held("training", files) as disk:
            keys.append(disk.key)

    threads = [threading.Thread(target=stage) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(makings) == 1 and len(set(keys)) == 1 and len(keys) == 4


def test_a_file_over_4_gib_goes_on_the_disk_whole(tmp_path):
    big = tmp_path / "src" / "BIG.dat"
    big.parent.mkdir()
    with open(big, "wb") as f:
        f.truncate((4 << 30) + 4096)
        f.seek((4 << 30) + 4096 - 16)
        f.write(b"the end is here!")
    with DataDisks(tmp_path / "store").held("training", {"BIG.dat": big}) as disk:
        iso = pycdlib.PyCdlib()
        iso.open(str(disk.path))
        try:  # a multi-extent file (ISO 9660's flag 0x80 on each extent but the last): the last extent's record
            first = [r for r in iso.list_children(iso_path="/") if r.file_identifier().startswith(b"F")]
            assert [r.file_flags & 0x80 for r in first] == [0x80] and first[0].get_data_length() == 0xFFFFF800
            assert iso.get_record(rr_path="/BIG.dat").get_data_length() == (4 << 30) + 4096 - 0xFFFFF800
        finally:
            iso.close()
        assert disk.path.stat().st_size > (4 << 30) + 4096  # written whole (read whole in tests/test_data_disk_vm.py)


def test_a_job_gives_its_record_sets_apart_from_its_cd(tmp_path):
    media = {"training/RECORDS": b"A1\n", "training/A1.mat": b"x", "entry/next.sh": b"#!/bin/sh\n"}
    job = Job(commands=(Command("next.sh A1", ("./next.sh", "A1"), 10, links=("training/A1.mat",)),),
              media=media, data=("training",))
    assert job.data_files("training") == {"RECORDS": b"A1\n", "A1.mat": b"x"}
    assert job.cd_media() == {"entry/next.sh": b"#!/bin/sh\n"}
    doc = job.job_json("n" * 32, data_disks=True).decode()
    assert '"data_disks": [\n  {\n   "dir": "training",\n   "serial": "vmjudge-data-0"' in doc
    assert "data_disks" not in job.job_json("n" * 32).decode()  # the replica's: the files on its CD
    iso = write_iso(tmp_path / "cd.iso", job.cd_media(), directories=job.data)
    cd = pycdlib.PyCdlib()
    cd.open(str(iso))
    try:
        def names(path):
            return sorted(c.rock_ridge.name() for c in cd.list_children(rr_path=path)
                          if c.rock_ridge.name() not in (b".", b".."))

        assert names("/") == [b"entry", b"training"] and names("/training") == []
    finally:
        cd.close()
    for bad in ("a/b", "..", ""):
        with pytest.raises(ValueError):
            Job(commands=(), media={}, data=(bad,))


def test_each_data_disk_is_read_only_shared_and_found_by_its_serial(tmp_path):
    spec = DomainSpec(name="vmj-x", kernel=Path("/k"), initrd=Path("/i"), root=Path("/r"), home=Path("/h"),
                      cdrom=Path("/c"), console_log=Path("/l"), data_disks=(Path("/d/a.sqfs"), Path("/d/b.sqfs")))
    disks = [d for d in ET.fromstring(domain_xml(spec)).iter("disk") if d.find("serial") is not None and
             d.find("serial").text.startswith("vmjudge-data-")]
    assert [(d.find("target").get("dev"), d.find("serial").text, d.find("source").get("file")) for d in disks] == \
        [(DATA_TARGETS[0], "vmjudge-data-0", "/d/a.sqfs"), (DATA_TARGETS[1], "vmjudge-data-1", "/d/b.sqfs")]
    for d in disks:
        assert d.find("readonly") is not None and d.find("target").get("bus") == "virtio"
        assert d.find("source/seclabel").get("relabel") == "no"  # shared by every VM: never chowned back and forth
        assert d.find("shareable") is not None  # libvirt locks it for no one VM


@pytest.mark.parametrize("style", ["answer-lines", "files"])
def test_the_stages_sets_are_the_disks_challenge_add_makes_and_gc_keeps(tmp_path, style):
    assert new_challenge(tmp_path / "ch", style).returncode == 0
    ch = load_challenge(tmp_path / "ch")
    sets = dict(challenge_sets(ch))
    assert set(sets) == {"training", "test"}
    ctx = type("Ctx", (), {"challenge": ch})()
    job = record_job(ctx, "training", ch.training, collect_each=True)  # what the quiz gives its VM
    assert job.data == ("training",) and job.data_files("training") == sets["training"]
    assert set_media(ch, "test", ch.test) == {f"test/{k}": v for k, v in sets["test"].items()}
    disks = DataDisks(tmp_path / "store")
    made = make_disks(disks, ch)
    assert sorted(d.cd_dir for d, _ in made) == ["test", "training"]
    assert used_keys(disks, [ch]) == {d.key for d, _ in made}
    assert collect_data_disks(disks, used_keys(disks, [ch]), dry_run=False).removals == []


def test_the_cases_tmp_disk_takes_the_hosts_disk_only_for_what_is_written(tmp_path):
    """[container] tmp (#57): a large /tmp costs the host its file system's few blocks, not its size."""
    disk = tmp_path / "tmp.img"
    mib = min(100 << 10, (shutil.disk_usage(tmp_path).free >> 20) // 2)  # 100 GiB where the host has room for it
    assert mib >= 4 << 10
    make_tmp_disk(disk, mib)
    assert disk.stat().st_size == mib << 20 and disk.stat().st_blocks * 512 < 64 << 20
    with open(disk, "rb") as f:
        f.seek(1080)
        assert f.read(2) == b"\x53\xef"  # ext4's magic: made on the host, nothing for the guest to do


def test_gc_removes_no_disk_while_a_registered_challenge_cannot_be_read(tmp_path):
    assert new_challenge(tmp_path / "ch", "answer-lines").returncode == 0
    ch = load_challenge(tmp_path / "ch")
    queue = Queue(tmp_path / "queue.db")
    queue.add_challenge(ch.name, ch.directory, "key")
    disks = DataDisks(tmp_path / "store")
    made = {d.key for d, _ in make_disks(disks, ch)}
    with disks.held("other", {"X": b"a set no challenge has"}) as stale:
        pass
    toml = tmp_path / "ch" / "challenge.toml"
    text = toml.read_text()
    toml.write_text("name = [")  # broken while its organiser edits it
    kept = upkeep._collect_disks(disks.store, queue, dry_run=False)
    assert kept.removals == [] and "cannot be read" in kept.problems[0] and stale.path.is_file()
    toml.write_text(text)
    gone = upkeep._collect_disks(disks.store, queue, dry_run=False)
    assert [r.name for r in gone.removals] == [stale.path.name] and gone.in_use == len(made) and not gone.problems


def test_a_record_changed_while_its_set_is_hashed_leaves_no_disk_or_memo_that_is_not_the_files(tmp_path, monkeypatch):
    files = record_set(tmp_path)
    disks = DataDisks(tmp_path / "store")
    real = data_disk.content_key

    def edited_meanwhile(f):
        key = real(f)
        (tmp_path / "src" / "A1.mat").write_bytes(b"edited while hashed")
        return key

    monkeypatch.setattr(data_disk, "content_key", edited_meanwhile)
    with pytest.raises(InfrastructureError, match="changed while"), disks.held("training", files):
        pass
    assert disks.known_key(files) is None and not list((tmp_path / "store").glob("*.iso"))


def test_gc_never_takes_a_disk_being_made_for_one_made(tmp_path):
    disks = DataDisks(tmp_path / "store")
    with disks.held("training", {"A": b"a"}) as made:
        pass
    key = "e" * 64
    (disks.store / ".work").mkdir(exist_ok=True)
    half = disks.store / ".work" / f"{key}.iso.part"
    half.write_bytes(b"half a disk")
    (disks.store / ".work-x.iso").write_bytes(b"no disk")  # a name no disk has
    with open(disks.lock_path(key), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # its maker at work
        gone = collect_data_disks(disks, set(), dry_run=False)
        assert [r.name for r in gone.removals] == [made.path.name] and half.is_file()
    assert store_bytes(disks) == (0, 0)


def test_a_tmp_disk_the_host_has_no_room_for_is_refused_before_the_stage(tmp_path):
    with pytest.raises(InfrastructureError, match="does not fit") as caught:
        make_tmp_disk(tmp_path / "tmp.img", 1 << 40)  # 1 EiB
    assert caught.value.reason == "host-disk-full" and not (tmp_path / "tmp.img").exists()


def test_a_file_name_no_disk_can_hold_is_the_challenges_to_fix_not_a_retry(tmp_path):
    with pytest.raises(ChallengeError, match="no data disk can hold") as caught, \
            DataDisks(tmp_path / "store").held("training", {"a\nb.mha": b"x"}):
        pass
    assert caught.value.reason == "data-disk"
