"""GPU slots (#14) with real queue state: which slot takes which stage, what a card that fails
does to its slot, and what `status` and `vmjudge gpu` say. The daemon here is the real one
(serve, its slot pool, run_stage, the queue's retry policy) on libvirt's test driver; only the
stage body, which would boot a VM, is a stand-in that records the slot it was given. The GPUs
are fake sysfs trees (no GPU is lent to these machines)."""

from __future__ import annotations

import json
import logging
import shutil
import threading
import zipfile
from pathlib import Path

import pytest

from vmjudge.config import load_site
from vmjudge.errors import GpuFault
from vmjudge.queue import retry
from vmjudge.queue.db import Queue
from vmjudge.stages.context import StageOutcome
from vmjudge.supervisor import evaluate
from vmjudge.supervisor.daemon import serve
from vmjudge.supervisor.slots import SlotPool
from vmjudge.vm.pinning import SlotCores, plan_cores

from .cli import run_cli
from .fake_sysfs import FakeHost

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GOOD, BOUND_TO_NVIDIA, SPARE = "0000:65:00.0", "0000:66:00.0", "0000:67:00.0"
T4_MODELS = ("any", "t4")


@pytest.fixture
def fake(tmp_path):
    return FakeHost(tmp_path / "fake")


def make_site(tmp_path: Path, fake: FakeHost, devices: tuple[str, ...], monkeypatch):
    monkeypatch.setenv("VMJUDGE_URI", "test:///default")
    monkeypatch.setenv("VMJUDGE_ACCEL", "kvm")  # a GPU is lent only to kvm VMs; nothing boots here
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    listed = ", ".join(f'"{d}"' for d in devices)
    # Up to 3 GPU slots beside the CPU slots: more than a small machine's cores, and no VM boots.
    (home / "site.toml").write_text(f'[gpu]\ndevices = [{listed}]\nsysfs = "{fake.sys}"\ndev = "{fake.dev}"\n'
                                    "[slots]\novercommit = true\n")
    site = load_site(home)
    site.layout.ensure()
    return site, Queue(site.layout.queue_db)


def register(queue: Queue, tmp_path: Path) -> None:
    for name, gpu in (("cpu", None), ("t4", "t4"), ("anycard", "any")):
        queue.add_challenge(name, tmp_path / name, "key", gpu=gpu)


def submit(queue: Queue, challenge: str) -> int:
    return queue.add_entry(challenge, "alice", False, "0" * 64, "x-entry.zip", Path("/nonexistent"))


def test_each_kind_of_slot_takes_only_its_own_work_oldest_first(tmp_path, fake, monkeypatch):
    _, queue = make_site(tmp_path, fake, (), monkeypatch)
    register(queue, tmp_path)
    g1, c1, a1, g2 = submit(queue, "t4"), submit(queue, "cpu"), submit(queue, "anycard"), submit(queue, "t4")
    # A CPU slot passes over the older GPU entry and takes the CPU one; then nothing is left for it.
    assert queue.claim_next().id == c1
    assert queue.claim_next() is None
    # A T4 slot takes the oldest GPU stage, "t4" or "any"; a slot of another card only "any".
    assert queue.claim_next(gpu=("any",)).id == a1
    assert queue.claim_next(gpu=("any",)) is None
    assert queue.claim_next(gpu=T4_MODELS).id == g1
    assert queue.claim_next(gpu=T4_MODELS).id == g2
    assert queue.claim_next(gpu=T4_MODELS) is None
    # A GPU challenge's stage 4 runs on the host: a CPU slot's, never waiting for a card.
    run = queue.start_stage(g1, "exam", 1)
    queue.finish_stage(run, "passed", "ok", {}, next_stage="score")
    assert queue.claim_next(gpu=T4_MODELS) is None
    assert queue.claim_next().id == g1


def test_waiting_counts_only_the_work_this_host_can_run(tmp_path, fake, monkeypatch):
    _, queue = make_site(tmp_path, fake, (), monkeypatch)
    register(queue, tmp_path)
    submit(queue, "t4")
    assert not queue.waiting()  # no GPU slot: a GPU stage is not work for this host
    assert not queue.waiting(gpu=("any",))  # a card that is no T4 cannot run it either
    assert queue.waiting(gpu=T4_MODELS)
    assert queue.waiting_for_gpu() == {"t4": 1}
    submit(queue, "cpu")
    assert queue.waiting()


class StandIn:
    """The stage body a slot runs, recording which slot ran what; every stage passes (stage 4
    scores), except that the first VM stage given `fail_on` finds its GPU not working. The first
    stages hold their slots until `together` run at once, so that the daemon must fill its other
    slots while those are busy (and must not give a busy one a second stage); then none waits."""

    def __init__(self, fail_on: str | None = None, together: int = 1):
        self.fail_on, self.together = fail_on, together
        self.runs: list[tuple[int, str, int | None, str | None]] = []  # entry, stage, slot number, gpu
        self.busy: set[int] = set()
        self.most_at_once = 0
        self.gate_open = together <= 1
        self.overlaps: list[int] = []
        self.changed = threading.Condition()

    def __call__(self, queue, site, entry, stage, run, slot, cancel):
        with self.changed:
            if slot.number in self.busy:
                self.overlaps.append(slot.number)
            self.busy.add(slot.number)
            self.most_at_once = max(self.most_at_once, len(self.busy))
            self.gate_open = self.gate_open or len(self.busy) >= self.together
            self.runs.append((entry.id, stage.name, slot.number, slot.gpu))
            self.changed.notify_all()
            self.changed.wait_for(lambda: self.gate_open, timeout=60)
        try:
            if slot.gpu is not None and slot.gpu == self.fail_on:
                self.fail_on = None
                raise GpuFault("gpu-guest", f"the GPU {slot.gpu} did not work in the VM: RmInitAdapter failed",
                               slot.gpu)
            if stage.name == "score":
                return StageOutcome("scored", "scored", scores={"score": 1.0}, manifest={"stage": "score"})
            return StageOutcome("passed", "ok", manifest={"stage": stage.name})
        finally:
            with self.changed:
                self.busy.discard(slot.number)
                self.changed.notify_all()


def serve_until_idle(site, queue, stand_in, monkeypatch, cpu_slots=1):
    monkeypatch.setattr(evaluate, "_run", stand_in)
    monkeypatch.setattr(retry, "RETRY_DELAYS", (0.05, 0.05))  # the retry of a failed GPU's stage, at once
    serve(site, queue, cpu_slots, until_idle=True)


def test_gpu_stages_run_only_on_good_gpus_and_cpu_stages_only_on_cpu_slots(tmp_path, fake, monkeypatch):
    fake.add(GOOD, group="1")
    fake.add(BOUND_TO_NVIDIA, driver="nvidia", group="2")
    fake.add(SPARE, group="3")
    site, queue = make_site(tmp_path, fake, (GOOD, BOUND_TO_NVIDIA, SPARE), monkeypatch)
    register(queue, tmp_path)
    gpu_entries = [submit(queue, "t4") for _ in range(3)] + [submit(queue, "anycard")]
    cpu_entries = [submit(queue, "cpu") for _ in range(3)]
    stand_in = StandIn(fail_on=GOOD, together=3)  # the CPU slot and both good cards at once
    serve_until_idle(site, queue, stand_in, monkeypatch)

    for entry_id in gpu_entries + cpu_entries:
        assert queue.entry(entry_id).outcome == "scored"
    cpu_slot = 0
    for entry_id, stage, number, gpu in stand_in.runs:
        if entry_id in gpu_entries and stage != "score":
            assert gpu in (GOOD, SPARE) and number in (1, 3), (entry_id, stage, number, gpu)
        else:  # CPU challenges' stages, and every stage 4, in the CPU slot and never on a card
            assert (number, gpu) == (cpu_slot, None), (entry_id, stage, number, gpu)
    assert not [r for r in stand_in.runs if r[3] == BOUND_TO_NVIDIA]
    assert stand_in.most_at_once == 3  # the slots ran side by side ...
    assert stand_in.overlaps == []  # ... one VM per slot, so one per GPU, at a time

    # The card bound to nvidia failed its preflight; the good one failed in a guest, once: both
    # are out of service, with why; the stage it failed ran again, on the spare card.
    slots = {row.address: row for row in queue.gpu_slots.all()}
    assert not slots[BOUND_TO_NVIDIA].in_service
    assert "is bound to nvidia, not vfio-pci" in slots[BOUND_TO_NVIDIA].reason
    assert not slots[GOOD].in_service and "RmInitAdapter failed" in slots[GOOD].reason
    assert slots[SPARE].in_service
    on_good = [r for r in stand_in.runs if r[3] == GOOD]
    assert len(on_good) == 1  # out of service after its failure: nothing more was given to it
    failed_entry, failed_stage = on_good[0][:2]
    again = [r for r in stand_in.runs if r[:2] == (failed_entry, failed_stage) and r[3] != GOOD]
    assert again and again[0][3] == SPARE
    infra = [r for r in queue.stage_runs(failed_entry) if r.status == "infra"]
    assert [(r.stage, r.reason) for r in infra] == [(failed_stage, "gpu-guest")]  # the card's, not the entry's


def test_gpu_work_waits_while_no_gpu_slot_is_in_service_and_cpu_work_goes_on(tmp_path, fake, monkeypatch, caplog):
    fake.add(GOOD, driver="nouveau")
    site, queue = make_site(tmp_path, fake, (GOOD,), monkeypatch)
    register(queue, tmp_path)
    waiting, cpu = submit(queue, "t4"), submit(queue, "cpu")
    stand_in = StandIn()
    with caplog.at_level(logging.WARNING):
        serve_until_idle(site, queue, stand_in, monkeypatch, cpu_slots=2)
    assert queue.entry(cpu).outcome == "scored"
    assert queue.entry(waiting).state == "queued" and queue.stage_runs(waiting) == []
    assert not [r for r in stand_in.runs if r[0] == waiting]
    said = caplog.text
    assert f"GPU {GOOD} is taken out of service: the GPU {GOOD} failed its preflight: {GOOD} is bound to " \
           "nouveau, not vfio-pci" in said
    assert 'GPU stages wait (1 for gpu = "t4") but no GPU slot of this host in service can run them' in said

    # Fixed and put back by the organiser: the waiting stage now runs, on that card.
    fake.sys.joinpath("devices", "pci0000:65", GOOD, "driver").unlink()
    fake.sys.joinpath("devices", "pci0000:65", GOOD, "driver").symlink_to("../../../bus/pci/drivers/vfio-pci")
    (fake.sys / "bus" / "pci" / "drivers" / "vfio-pci").mkdir(parents=True, exist_ok=True)
    assert queue.gpu_slots.put_back(queue.host, GOOD)
    serve_until_idle(site, queue, stand_in, monkeypatch)
    assert queue.entry(waiting).outcome == "scored"
    assert {r[3] for r in stand_in.runs if r[0] == waiting and r[1] != "score"} == {GOOD}


def test_a_site_under_tcg_lends_no_gpu(tmp_path, fake, monkeypatch, caplog):
    fake.add(GOOD)
    site, queue = make_site(tmp_path, fake, (GOOD,), monkeypatch)
    monkeypatch.setenv("VMJUDGE_ACCEL", "tcg")
    site = load_site(site.home)
    register(queue, tmp_path)
    entry_id = submit(queue, "t4")
    with caplog.at_level(logging.WARNING):
        serve_until_idle(site, queue, StandIn(), monkeypatch)
    assert queue.entry(entry_id).state == "queued"
    assert "a GPU is lent only to a kvm VM, so no GPU slot is used" in caplog.text


def test_status_and_gpu_commands_show_and_restore_a_slot(tmp_path, fake, monkeypatch):
    fake.add(GOOD, driver="nvidia")
    site, queue = make_site(tmp_path, fake, (GOOD,), monkeypatch)
    listed = run_cli("gpu", "list", home=site.home)
    assert listed.returncode == 0
    assert f"GPU {GOOD} on {queue.host}: in service" in listed.stdout
    assert f"preflight: {GOOD} is bound to nvidia, not vfio-pci" in listed.stdout

    queue.gpu_slots.take_out(queue.host, GOOD, f"the GPU {GOOD} failed its preflight: it is bound to nvidia")
    status = run_cli("status", home=site.home)
    assert f"GPU {GOOD} on {queue.host}: OUT OF SERVICE since " in status.stdout
    assert "failed its preflight: it is bound to nvidia" in status.stdout
    doc = json.loads(run_cli("status", "--json", home=site.home).stdout)
    assert doc["gpus"][0]["address"] == GOOD and doc["gpus"][0]["in_service"] is False

    refused = run_cli("gpu", "enable", GOOD, home=site.home)
    assert refused.returncode == 1
    assert f"GPU {GOOD} still fails its preflight, so it stays out of service: {GOOD} is bound to nvidia" \
        in refused.stderr
    assert not queue.gpu_slots.in_service(queue.host, GOOD)
    unknown = run_cli("gpu", "enable", "0000:99:00.0", home=site.home)
    assert unknown.returncode == 1 and "is not among site.toml's [gpu] devices" in unknown.stderr

    fake.sys.joinpath("devices", "pci0000:65", GOOD, "driver").unlink()
    (fake.sys / "bus" / "pci" / "drivers" / "vfio-pci").mkdir(parents=True, exist_ok=True)
    fake.sys.joinpath("devices", "pci0000:65", GOOD, "driver").symlink_to("../../../bus/pci/drivers/vfio-pci")
    enabled = run_cli("gpu", "enable", GOOD, home=site.home)
    assert enabled.returncode == 0, enabled.stderr
    assert queue.gpu_slots.in_service(queue.host, GOOD)


def test_evaluate_says_when_no_gpu_slot_here_can_run_the_entry(tmp_path, fake, monkeypatch):
    """`vmjudge evaluate` of a GPU challenge's entry on a host whose only card fails its preflight:
    one sentence, exit 1, and the entry kept in the queue. beats2014 registered as a GPU challenge
    straight in the queue (its GPU image is not built here; no stage can start, so none is needed)."""
    fake.add(GOOD, driver="nouveau")
    site, queue = make_site(tmp_path, fake, (GOOD,), monkeypatch)
    challenge = tmp_path / "gpuch"
    shutil.copytree(EXAMPLES / "beats2014", challenge, ignore=shutil.ignore_patterns("entries", "__pycache__"))
    toml = challenge / "challenge.toml"
    toml.write_text(toml.read_text().replace("[vm]", '[vm]\ngpu = "t4"').replace(
        "[image]", '[image]\ngpu = "nvidia-535"'))
    queue.add_challenge("beats2014", challenge, "key", gpu="t4")
    archive = tmp_path / "good-entry.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in sorted((EXAMPLES / "beats2014" / "entries" / "good").rglob("*")):
            if f.is_file():
                z.write(f, f.relative_to(EXAMPLES / "beats2014" / "entries" / "good"))
    done = run_cli("evaluate", "beats2014", str(archive), home=site.home)
    assert done.returncode == 1
    assert "entry 1 waits for a GPU slot at stage prep, and this host has none in service that can run it " \
           "(`vmjudge gpu list` says why); it stays queued for a daemon that has one." in done.stderr
    assert queue.entry(1).state == "queued" and queue.stage_runs(1) == []
    assert not queue.gpu_slots.in_service(queue.host, GOOD)


def test_every_slot_cpu_and_gpu_gets_its_own_cores_as_numbered(tmp_path, fake, monkeypatch):
    """The core plan reaches each slot by its number: CPU slots 0 and 1, then the GPU's slot 2."""
    fake.add(GOOD, group="1")
    site, queue = make_site(tmp_path, fake, (GOOD,), monkeypatch)
    pool = SlotPool(site, queue, 2, plan_cores(tuple(range(6)), 3, 2, overcommit=False))
    assert {s.number: (s.gpu, s.cores) for s in pool.free} == {
        0: (None, SlotCores((0, 1))), 1: (None, SlotCores((2, 3))), 2: (GOOD, SlotCores((4, 5)))}
