"""Warm starts with real VMs (vm/warm.py, guest/wake.py): a stage restored from a saved VM is a
fresh one to the entry: its own randomness, the host's time, its own disks; a state that is
damaged or that libvirt refuses sends the stage to a cold boot, never to a failure."""

from __future__ import annotations

import fcntl
import json
import time
from dataclasses import replace
from pathlib import Path

import libvirt
import pytest

from vmjudge.config import Site
from vmjudge.config.layout import Layout
from vmjudge.files import sha256_file
from vmjudge.images.image import GuestImage
from vmjudge.vm import warm, warm_rules
from vmjudge.vm.job import Command, Job
from vmjudge.vm.runner import make_blank_disk, run_job

from .conftest import output

# A shape no other test uses, so this module decides when its states are made and damaged.
SHAPE = {"vcpus": 1, "memory_mib": 576}
# In a fresh process each: 64 bytes of /dev/urandom, the 16 AT_RANDOM bytes the kernel gave
# it, and where its stack and its heap were put.
PROBE = """
import ctypes, os, time
libc = ctypes.CDLL(None)
libc.getauxval.restype = ctypes.c_ulong
at_random = ctypes.string_at(libc.getauxval(25), 16).hex()
maps = open('/proc/self/maps').read().splitlines()
stack = [line.split('-')[0] for line in maps if line.endswith('[stack]')][0]
heap = hex(id(object()))
print(os.urandom(64).hex(), at_random, stack, heap, repr(time.time()))
"""


class Runner:
    def __init__(self, conn, site, image, rundir: Path):
        self.conn, self.site, self.image, self.rundir = conn, site, image, rundir
        self.count = 0

    def disk(self) -> Path:
        self.count += 1
        path = self.rundir / f"home{self.count}.qcow2"
        make_blank_disk(path, 64)
        return path

    def __call__(self, *commands: Command, home: Path | None = None, site=None):
        self.count += 1
        return run_job(self.conn, site or self.site, self.image, Job(commands=commands), home_disk=home or self.disk(),
                       workdir=self.rundir, console_log=self.rundir / f"console{self.count}.log", label="warm",
                       **SHAPE)

    def seats(self) -> list[warm.Seat]:
        directory = self.site.layout.warm / self.image.key / self.shape.key
        return [warm.Seat(directory, n, self.image, self.shape, warm.states_tag(self.site)) for n in range(warm.SEATS)]

    def clear(self) -> None:
        """No state in this shape's seats, nor another run's failure to make one (no waiting it out here)."""
        for seat in self.seats():
            seat.discard()
            seat.failed.unlink(missing_ok=True)

    @property
    def shape(self) -> warm.Shape:
        return warm.Shape(self.site.accel, SHAPE["vcpus"], SHAPE["memory_mib"])


@pytest.fixture
def runner(conn, site, image, rundir):
    r = Runner(conn, site, image, rundir)
    r.clear()
    yield r
    r.clear()


def probe(run) -> dict:
    urandom, at_random, stack, heap, when = output(run).split()
    return {"urandom": urandom, "at_random": at_random, "stack": stack, "heap": heap, "time": float(when)}


def probed(runner) -> tuple[dict, dict]:
    run = runner(Command("probe", ("python3", "-c", PROBE), 30))
    assert run.transcript.commands[0].exit_code == 0, output(run)
    # The host's wall time when the probe's end frame arrived, a moment after it read the clock.
    end = [at for _seq, kind, at in run.transcript.timeline if kind == "end"][-1]
    return probe(run) | {"host_time": time.time() - (time.monotonic() - end), "boot": run.transcript.hello.get("boot"),
                         "boot_seconds": run.boot_seconds}, run.start


def test_warm_started_stages_share_no_randomness_and_keep_the_hosts_time(runner):
    first, how = probed(runner)
    assert how["mode"] == "warm" and how["state"].startswith("made for this run (missing)"), how
    saved = json.loads(runner.seats()[0].record.read_text())["made"]
    while time.time() < saved + 5:  # a restore well after the save, so that a clock left as saved would show
        time.sleep(0.2)
    second, how = probed(runner)
    assert (how["mode"], how["state"]) == ("warm", "saved"), how
    cold, how = probed(replace_site(runner, warm_start=False))
    assert how == {"mode": "cold", "why": "warm starts are off in site.toml ([libvirt] warm_start = false)"}
    for key in ("urandom", "at_random", "stack", "heap"):
        assert len({first[key], second[key], cold[key]}) == 3, (key, first[key], second[key], cold[key])
    # The second restore ran more than 4 s after the state was saved: a clock left as saved would show it.
    assert second["host_time"] - saved > 4
    for run in (first, second):
        assert abs(run["time"] - run["host_time"]) < 2, run
    # A cold boot's hello says where its time went, step by step in the guest's clock (bench/boot.py
    # reports it); a restored VM's hello says nothing of the boot its state was saved from.
    assert first["boot"] is None and second["boot"] is None
    marks = cold["boot"]
    order = ["init", "modules", "root", "stage2", "python", "agent", "imported", "hello"]
    assert sorted(marks) == sorted(order), marks
    times = [marks[name] for name in order]
    assert all(a <= b for a, b in zip(times, times[1:], strict=False)), marks
    # Seconds since the guest's kernel started, which is after the host created the domain.
    assert 0 < marks["init"] < marks["hello"] < cold["boot_seconds"], (marks, cold["boot_seconds"])


def replace_site(runner, **changes) -> Runner:
    return Runner(runner.conn, replace(runner.site, **changes), runner.image, runner.rundir)


def test_the_home_disk_is_the_stages_own_and_the_state_holds_none(runner, conn):
    home = runner.disk()
    write = Command("write", ("sh", "-c", "ls /home/entry; echo mine > /home/entry/kept"), 20)
    read = Command("read", ("sh", "-c", "cat /home/entry/kept 2>&1; ls /home/entry"), 20)
    assert runner(write, home=home).start["mode"] == "warm"
    assert output(runner(read, home=home)) == "mine\nkept\n"  # the same entry's next stage: its disk
    other = runner(read)  # the next entry's fresh disk: nothing of the first
    assert other.start["mode"] == "warm"
    assert output(other).startswith("cat: ") and "No such file" in output(other), output(other)
    # What was saved: no home disk, an empty CD-ROM drive, the kernel told to wait to be woken.
    saved = conn.saveImageGetXMLDesc(str(runner.seats()[0].state))
    assert "<target dev='vdb'" not in saved
    cdrom = saved[saved.index("device='cdrom'"):]
    assert "<source" not in cdrom[:cdrom.index("</disk>")]
    assert warm.WARM_ARG in saved
    # And no memory bound: restored as saved, a hard limit would have libvirt raise the restored qemu's
    # locked-memory limit to it, which a libvirtd without CAP_SYS_RESOURCE cannot (vm/memory.py).
    assert "<memtune" not in saved


def test_a_home_that_links_the_images_restores_the_states_made_beside_them(runner, tmp_path):
    """Homes linking one images directory share the states beside it (Layout.warm): the daemon tests' and
    the benchmarks' homes do. The saved VM names the image's files by their real paths, so a run from
    such a home restores what the test home saved, and the test home what it saved: by each home's own
    link, each had the shared state made again (8-10 s under TCG), for the next home to remake."""
    echo = Command("echo", ("echo", "hi"), 20)
    assert runner(echo).start["mode"] == "warm"
    other = tmp_path / "other"
    other.mkdir()
    Layout(other).images.symlink_to(runner.site.layout.images)
    linked = GuestImage.load(Layout(other).images / runner.image.key)
    run = run_job(runner.conn, replace(runner.site, home=other), linked, Job(commands=(echo,)), home_disk=runner.disk(),
                  workdir=runner.rundir, console_log=runner.rundir / "linked.log", label="warm", **SHAPE)
    assert (run.start["mode"], run.start["state"], output(run)) == ("warm", "saved", "hi\n"), run.start
    again = runner(echo).start
    assert (again["mode"], again["state"]) == ("warm", "saved"), again


def test_a_state_whose_hash_does_not_match_or_another_code_made_is_not_restored(runner):
    echo = Command("echo", ("echo", "ran"), 20)
    assert runner(echo).start["mode"] == "warm"
    seat = runner.seats()[0]
    with open(seat.state, "r+b") as f:  # one byte of its memory changed, its record kept
        f.seek(-4096, 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    run = runner(echo)
    assert output(run) == "ran\n"
    assert run.start["mode"] == "cold" and "sha256" in run.start["why"] and "refused" in run.start["why"], run.start
    again = runner(echo)  # made anew for the next stage
    assert again.start["mode"] == "warm" and again.start["state"].startswith("made for this run"), again.start
    # A state another version of the judge's code made (another checkout sharing the images, an
    # upgrade) may hold what its XML does not say: made again, not restored.
    record = json.loads(seat.record.read_text())
    assert record["maker_sha256"] == warm_rules.maker_sha256()
    seat.record.write_text(json.dumps({**record, "maker_sha256": "0" * 64}))
    other = runner(echo)
    assert other.start["mode"] == "warm", other.start
    assert other.start["state"] == "made for this run (made for another image, qemu, libvirt, VM or version of " \
        "this code) in " + other.start["state"].rsplit(" in ", 1)[1], other.start


def test_a_restore_libvirt_refuses_falls_back_to_a_cold_boot(runner):
    echo = Command("echo", ("echo", "ran"), 20)
    assert runner(echo).start["mode"] == "warm"
    seat = runner.seats()[0]
    with open(seat.state, "r+b") as f:  # cut short (its header and XML intact); the record re-hashed to match
        f.truncate(f.seek(0, 2) // 2)
    record = json.loads(seat.record.read_text())
    seat.record.write_text(json.dumps({**record, "sha256": sha256_file(seat.state), "verified": None}))
    run = runner(echo)
    assert output(run) == "ran\n"
    assert run.start["mode"] == "cold" and "libvirt would not restore" in run.start["why"], run.start


def test_a_gpu_or_uart_stage_and_a_site_without_warm_starts_boot_cold():
    site = Site(home=Path("/nonexistent"))
    assert warm_rules.why_cold(site, None) is None
    assert "VFIO" in warm_rules.why_cold(site, "0000:65:00.0")
    assert "virtio" in warm_rules.why_cold(replace(site, channel="uart"), None)
    assert "warm_start = false" in warm_rules.why_cold(replace(site, warm_start=False), None)
    assert "this machine" in warm_rules.why_cold(replace(site, uri="qemu+ssh://judge2/system"), None)
    assert "qemu driver" in warm_rules.why_cold(replace(site, uri="test:///default"), None)


def test_a_state_that_could_not_be_made_is_not_tried_again_for_every_stage(tmp_path):
    seat = warm.Seat(tmp_path, 0, None, warm.Shape("tcg", 1, 512), "h000000")
    seat._not_failing_lately()  # never failed: may be made
    seat.failed.write_text(json.dumps({"at": time.time() - 60, "why": "no ready frame"}))
    with pytest.raises(warm.WarmFailed, match="failed 60 s ago \\(no ready frame\\); not tried again for 10 minutes"):
        seat._not_failing_lately()
    seat.failed.write_text(json.dumps({"at": time.time() - warm.FAILED_WAIT - 1, "why": "no ready frame"}))
    seat._not_failing_lately()  # long enough ago: tried again


def test_a_killed_runs_warm_domain_is_destroyed_by_the_next_daemons_recovery_unless_its_seat_is_held(tmp_path):
    """On libvirt's test driver (no VM): a domain under a seat's name whose lock nobody holds is a
    killed run's, left running with its home disk; one whose seat is held is a live run's."""
    site = Site(home=tmp_path)
    site.layout.images.mkdir()
    conn = libvirt.open("test:///default")
    names = {}
    for number in (0, 1):
        lock = site.layout.warm / "0123456789abcdef" / "tcg-1c-512m" / f"seat-{number}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.touch()
        names[number] = warm.seat_name(warm.states_tag(site), "0123456789abcdef", "tcg-1c-512m", number)
        conn.createXML(f"<domain type='test'><name>{names[number]}</name><memory>1024</memory>"
                       "<os><type>hvm</type></os></domain>", 0)
    with open(lock.parent / "seat-1.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert warm.recover(conn, site) == [names[0]]
    running = [d.name() for d in conn.listAllDomains() if d.isActive()]
    assert names[0] not in running and names[1] in running
    assert Site(home=tmp_path / "other").layout.warm != site.layout.warm
    assert warm.states_tag(Site(home=tmp_path / "other")) != warm.states_tag(site)
    conn.close()
