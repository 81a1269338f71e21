"""What a GPU stage does on the host around its VM (#14), without a GPU: the preflight just
before the VM starts, a VM that will not start with its card, the agent finding the card not
working, the job that tells the agent a GPU was lent, and what the stage log and manifest keep
of the guest's GPU. Every GPU failure here must come out as GpuFault (the slot's, retried
elsewhere), never as the entry's."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import libvirt
import pytest

from vmjudge.errors import EntryError, GpuFault, InfrastructureError
from vmjudge.stages.context import StageContext
from vmjudge.stages.stage_log import StageLog, gpu_line
from vmjudge.vm.channel import FrameStream, Transcript, Watch
from vmjudge.vm.gpu_preflight import lendable_card
from vmjudge.vm.job import Command, Job
from vmjudge.vm.reading import JobRun, check_agent_error
from vmjudge.vm.runner import _start

from .fake_sysfs import T4, FakeHost
from .test_frames import hello, stream_of

OK = {"state": "ok", "name": "Tesla T4", "memory_mib": 15360, "driver": "535.216.03",
      "line": "Tesla T4, 15360, 535.216.03"}


def test_the_preflight_before_the_vm_gives_the_card_for_the_manifest(tmp_path):
    fake = FakeHost(tmp_path)
    fake.add(T4)
    card = lendable_card(fake.gpu(), T4)
    assert (card.address, card.ids, card.driver) == (T4, "10de:1eb8", "vfio-pci")


def test_a_card_that_fails_the_preflight_before_the_vm_is_a_gpu_fault(tmp_path):
    fake = FakeHost(tmp_path)
    fake.add(T4, driver="nvidia")
    with pytest.raises(GpuFault) as err:
        lendable_card(fake.gpu(), T4)
    assert (err.value.reason, err.value.address) == ("gpu-preflight", T4)
    assert str(err.value).startswith(f"the GPU {T4} failed its preflight: {T4} is bound to nvidia, not vfio-pci")
    with pytest.raises(GpuFault) as gone:
        lendable_card(fake.gpu("0000:66:00.0"), "0000:66:00.0")
    assert "there is no PCI device 0000:66:00.0" in str(gone.value)


def test_a_vm_that_will_not_start_with_its_card_is_the_cards_fault():
    conn = libvirt.open("test:///default")
    broken = "<domain type='test'><name>broken</name></domain>"  # no memory: refused
    try:
        with pytest.raises(GpuFault) as err:
            _start(conn, conn.getURI(), broken, T4, 1 << 20)
        assert (err.value.reason, err.value.address) == ("gpu-start", T4)
        assert str(err.value).startswith(f"the VM would not start with the GPU {T4}: the VM would not start")
        with pytest.raises(InfrastructureError) as plain:  # without a GPU it is libvirt's, as before
            _start(conn, conn.getURI(), broken, None, 1 << 20)
        assert not isinstance(plain.value, GpuFault) and plain.value.reason == "vm-start"
    finally:
        conn.close()


def test_the_agent_finding_its_gpu_broken_is_a_gpu_fault_only_when_one_was_lent():
    fs = FrameStream("n1")
    fs.feed(stream_of(hello(), ("error", {"message": "the GPU passed to this VM did not work: RmInitAdapter failed",
                                          "fault": "gpu"}), ("bye", {"commands": 0})))
    assert fs.transcript.gpu_fault
    with pytest.raises(GpuFault) as err:
        check_agent_error(fs.transcript, T4)
    assert err.value.reason == "gpu-guest" and "RmInitAdapter failed" in str(err.value)
    with pytest.raises(InfrastructureError) as no_gpu:  # a CPU VM was lent no card: the agent's error, as before
        check_agent_error(fs.transcript, None)
    assert not isinstance(no_gpu.value, GpuFault) and no_gpu.value.reason == "agent-error"


def test_an_entry_fault_stays_the_entrys_even_in_a_gpu_stage():
    transcript = Transcript(nonce="n1", agent_error="the entry does not fit", entry_fault="home-full")
    with pytest.raises(EntryError):
        check_agent_error(transcript, T4)


def test_the_job_tells_the_agent_a_gpu_was_lent_and_a_cpu_job_is_as_it_was():
    job = Job(commands=(Command("c", ("true",), 5.0),))
    assert json.loads(job.job_json("n", gpu=True))["gpu"] is True
    assert "gpu" not in json.loads(job.job_json("n"))


def test_the_stage_log_opens_with_the_guests_gpu(tmp_path):
    with StageLog(tmp_path / "prep.log", cap=1000, gpu=True) as log:
        fs = FrameStream("n1", watch=Watch(log=log))
        fs.feed(stream_of(("hello", {"nonce": "n1", "agent": "1.3", "protocol": 1, "gpu": OK})))
    assert (tmp_path / "prep.log").read_text() == \
        "gpu: Tesla T4, 15360 MiB, driver 535.216.03 (nvidia-smi: Tesla T4, 15360, 535.216.03)\n"
    with StageLog(tmp_path / "cpu.log", cap=1000) as log:  # a CPU image's log: nothing of a GPU
        fs = FrameStream("n1", watch=Watch(log=log))
        fs.feed(stream_of(("hello", {"nonce": "n1", "agent": "1.3", "protocol": 1,
                                     "gpu": {"state": "none", "why": "this image has no GPU driver"}})))
    assert (tmp_path / "cpu.log").read_text() == ""
    assert gpu_line({"state": "none", "why": "no GPU: NVRM: No NVIDIA GPU found."}) == \
        "gpu: none: no GPU: NVRM: No NVIDIA GPU found."
    assert len(gpu_line({"state": "failed", "why": "x\n" * 5000})) == 1000  # bounded, one line
    assert "\n" not in gpu_line({"state": "failed", "why": "x\n" * 5000})


def test_the_manifest_records_the_card_lent_and_what_the_guest_found(tmp_path):
    site, entry = SimpleNamespace(uri="qemu:///system", accel="kvm"), SimpleNamespace(id=1, archive_sha256="0" * 64)
    cpu_image = SimpleNamespace(key="k", manifest={"sha256": {}, "agent_version": "1.3"})
    no_driver = {"state": "none", "why": "this image has no GPU driver"}
    run = JobRun(domain="d", transcript=Transcript(nonce="n1", hello={"nonce": "n1", "agent": "1.3", "gpu": no_driver}),
                 iso_sha256="0" * 64, boot_seconds=1.0, total_seconds=2.0)
    cpu = StageContext(site=site, challenge=None, image=cpu_image, entry=entry, attempt=1)
    assert "gpu" not in cpu.manifest("prep", run)  # a CPU image's manifest says nothing of a GPU
    image = SimpleNamespace(key="g", manifest={"sha256": {}, "agent_version": "1.3", "gpu": {"driver": "nvidia-535"}})
    ctx = StageContext(site=site, challenge=None, image=image, entry=entry, attempt=1)
    lent = replace(run, gpu={"address": T4, "ids": "10de:1eb8"},
                   transcript=replace(run.transcript, hello={**run.transcript.hello, "gpu": OK}))
    assert ctx.manifest("prep", lent)["gpu"] == {"address": T4, "ids": "10de:1eb8", "guest": OK}
    none = {"state": "none", "why": "no GPU: NVRM: No NVIDIA GPU found."}  # the GPU image in a CPU VM
    cpu_vm = replace(run, transcript=replace(run.transcript, hello={**run.transcript.hello, "gpu": none}))
    assert ctx.manifest("prep", cpu_vm)["gpu"] == {"guest": none}
