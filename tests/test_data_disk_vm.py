"""Data disks in real VMs (#57): the guest mounts each record set's disk over its directory of the
CD, read-only and inert; the entry reads its files where the CD held them, a file over 4 GiB
whole; the quiz's VM has the training set's disk and no other, the exam's the test set's; a
changed record is a new disk, and gc removes the old one. Host-side rules: tests/test_data_disk.py."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from vmjudge.config import load_challenge
from vmjudge.images.data_disk import SUFFIX, DataDisks
from vmjudge.images.data_store import collect_data_disks
from vmjudge.stages.data_sets import used_keys
from vmjudge.stages.records import record_job
from vmjudge.vm.job import Command, Job

from .conftest import output
from .test_challenge_new import new_challenge

LOOK = ("cat /sys/block/*/serial 2>/dev/null | sort; echo ---; grep ' /media/cdrom/' /proc/mounts | "
        "cut -d' ' -f2-4; echo ---; ls /media/cdrom | sort")


def inert(mount: str, subset: str) -> bool:
    """A /proc/mounts line's point, type and options: the set's disk over its CD directory, read-only and inert."""
    point, kind, options = mount.split()
    return (point, kind) == (f"/media/cdrom/{subset}", "iso9660") and \
        {"ro", "nosuid", "nodev", "noexec"} <= set(options.split(","))


def sh(name: str, script: str, timeout: float = 60, user: str = "entry", **kw) -> Command:
    return Command(name, ("sh", "-c", script), timeout, user=user, **kw)


def test_a_record_set_is_a_read_only_disk_mounted_where_the_cd_held_it(boot, rundir):
    data = os.urandom(3 << 20)
    (rundir / "A1.mat").write_bytes(data)
    job = Job(commands=(sh("read", "sha256sum A1.mat; readlink A1.mat; stat -L -c '%a %U' A1.mat; "
                                   "cat /media/cdrom/training/RECORDS", links=("training/A1.mat",)),
                        sh("write", "(echo x > /media/cdrom/training/A1.mat) 2>/dev/null || echo refused; "
                                    "touch /media/cdrom/training/new 2>/dev/null || echo refused"),
                        sh("look", LOOK, user="root")),
              media={"training/RECORDS": b"A1\n", "training/A1.mat": rundir / "A1.mat"}, data=("training",))
    run = boot(job)
    read, write, look = (output(run, i).split("\n") for i in range(3))
    assert read[0].split()[0] == hashlib.sha256(data).hexdigest()
    assert read[1:4] == ["/media/cdrom/training/A1.mat", "444 root", "A1"]  # the same path and mode as on the CD
    assert write[:2] == ["refused", "refused"]
    serials, mounts, top = "\n".join(look).split("---\n")
    assert serials.split() == ["vmjudge-data-0"]
    assert inert(mounts.strip(), "training")
    assert top.split() == ["job.json", "training"]
    assert run.data_disks == {"training": DataDisks(boot.site.layout.data_disks).known_key(
        job.data_files("training"))}


def test_an_entry_reads_a_record_file_over_4_gib_whole(boot, rundir):
    size = (4 << 30) + (1 << 20)
    with open(rundir / "BIG.dat", "wb") as f:
        f.truncate(size)
        f.seek(size - 16)
        f.write(b"the very end ok!")
    job = Job(commands=(sh("read it all", "dd if=BIG.dat bs=4M 2>dd.said | tail -c 16; echo; "
                                          "tail -n 1 dd.said | cut -d' ' -f1",
                           timeout=900, links=("training/BIG.dat",)),),
              media={"training/RECORDS": b"BIG\n", "training/BIG.dat": rundir / "BIG.dat"}, data=("training",))
    run = boot(job)
    assert run.transcript.commands[0].status == "ok"
    assert output(run).split("\n")[:2] == ["the very end ok!", str(size)]


def test_the_quizs_vm_has_the_training_sets_disk_and_no_other_and_the_exams_the_test_sets(boot, tmp_path):
    assert new_challenge(tmp_path / "ch", "answer-lines").returncode == 0
    ch = load_challenge(tmp_path / "ch")
    ctx = type("Ctx", (), {"challenge": ch})()
    seen = {}
    for subset, records in (("training", ch.training), ("test", ch.test)):
        job = record_job(ctx, subset, records, collect_each=False)  # the very job the quiz, the exam gives its VM
        job = Job(commands=(sh("look", LOOK + f"; find /media/cdrom/{subset} -type f | sort", user="root"),),
                  media=job.media, data=job.data)
        seen[subset] = output(boot(job))
    for subset, other, records, others in (("training", "test", ch.training, ch.test),
                                           ("test", "training", ch.test, ch.training)):
        serials, mounts, rest = seen[subset].split("---\n")
        assert serials.split() == ["vmjudge-data-0"]
        assert inert(mounts.split("\n")[0], subset)
        top, *files = rest.split()
        assert top == "job.json" or rest.split()[:2] == ["job.json", subset]
        names = {Path(f).name.split(".")[0] for f in files if f.startswith("/media/cdrom/")}
        assert names >= set(records) and not names & set(others), (subset, names)
        assert other not in rest.split()[:2]


def test_a_changed_record_is_read_from_a_new_disk_and_gc_removes_the_old_one(boot, tmp_path):
    assert new_challenge(tmp_path / "ch", "answer-lines").returncode == 0
    ch = load_challenge(tmp_path / "ch")
    ctx = type("Ctx", (), {"challenge": ch})()
    record = ch.training[0]
    first = ch.record_files("training", record)[0]

    def read():
        job = record_job(ctx, "training", ch.training, collect_each=False)
        job = Job(commands=(sh("read", f"sha256sum {first.name}", links=(f"training/{first.name}",)),),
                  media=job.media, data=job.data)
        run = boot(job)
        return output(run).split()[0], run.data_disks["training"]

    before, old = read()
    first.write_bytes(first.read_bytes() + b"\n# changed\n")
    after, new = read()
    assert (before, after) == (hashlib.sha256(first.read_bytes()[:-11]).hexdigest(),
                               hashlib.sha256(first.read_bytes()).hexdigest())
    disks = DataDisks(boot.site.layout.data_disks)
    assert new != old and disks.disk_path(old).is_file()
    gone = collect_data_disks(disks, used_keys(disks, [ch]), dry_run=False)
    assert old + SUFFIX in [r.name for r in gone.removals] and new + SUFFIX not in [r.name for r in gone.removals]
    assert not disks.disk_path(old).exists() and disks.disk_path(new).is_file()
