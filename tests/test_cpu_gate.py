"""A host takes only the stages its guests' CPU can run (#41), decided before any VM: a challenge
whose [vm] cpu_level the guests do not reach is left to other hosts, on a single host's SQLite
queue too, and a site whose [vm] cpu the host cannot give is refused before the daemon takes
any work. What guests get is asked of this host's real libvirt (qemu:///system, read-only CPU
queries under TCG: no domain is started); the queue is a real one with real entries."""

from __future__ import annotations

import json
import logging
import shutil
import tarfile
from pathlib import Path

import libvirt
import pytest

from vmjudge.config import QueueSite, Site
from vmjudge.errors import ConfigError
from vmjudge.queue.db import Queue
from vmjudge.supervisor.cpu_gate import CpuGate, level_shortfall, refuse_unfit_site
from vmjudge.supervisor.daemon import serve
from vmjudge.supervisor.environment import Environment
from vmjudge.vm.cpu_offer import CpuOffer

from .cli import REPO, run_cli
from .needs import cannot_run
from .test_image_transfer import fake_image, home


@pytest.fixture(autouse=True)
def system_libvirt():
    try:
        libvirt.open("qemu:///system").close()
    except libvirt.libvirtError as exc:
        cannot_run(f"libvirt at qemu:///system does not answer ({exc.get_error_message()})")


def tcg_site(home: Path, cpu: str | None) -> Site:
    """Under TCG on purpose, so the trial profile (#33): production would refuse the daemon for TCG
    before its CPU gate is asked."""
    home.mkdir(parents=True, exist_ok=True)
    return Site(home=home, accel="tcg", cpu=cpu, overcommit=True, queue=QueueSite(host="judge1"), profile="trial")


def register(queue: Queue, root: Path, name: str, level: str | None) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "challenge.toml").write_text(f'name = "{name}"\n' + (f'[vm]\ncpu_level = "{level}"\n' if level else ""))
    queue.add_challenge(name, d, "key")


def test_a_challenge_above_the_guests_level_is_left_to_other_hosts_said_once(tmp_path, caplog):
    queue = Queue(tmp_path / "queue.db", host="judge1")
    for name, level in (("plain", None), ("v1", "x86-64-v1"), ("v3", "x86-64-v3"), ("v4", "x86-64-v4")):
        register(queue, tmp_path / "c", name, level)
    caplog.set_level(logging.WARNING)
    # qemu64: the 2003 baseline. max under this qemu's TCG: x86-64-v3, no AVX-512.
    assert Environment(tcg_site(tmp_path / "old", "qemu64"), queue).allowed() == ("plain", "v1")
    env = Environment(tcg_site(tmp_path / "max", None), queue)
    assert env.allowed() == ("plain", "v1", "v3")
    env._checked = float("-inf")  # the next check: verdicts kept, nothing said again
    assert env.allowed() == ("plain", "v1", "v3")
    said = [r.getMessage() for r in caplog.records if "challenge v4" in r.getMessage()]
    assert said[-1] == ('challenge v4 needs guests of x86-64-v4, and this host\'s get x86-64-v3 (cpu = "max" under '
                        "tcg): set a higher [vm] cpu in site.toml, or let a host that has it take them; its stages "
                        "are left to other hosts.")
    assert len([s for s in said if "(cpu = \"max\"" in s]) == 1
    # A stage of the v3 challenge is never claimed by the qemu64 host, and is by the other.
    queue.add_entry("v3", "ann", False, "ab" * 32, "ann-entry.zip", tmp_path / "x.zip")
    assert queue.claim_next(challenges=Environment(tcg_site(tmp_path / "old", "qemu64"), queue).allowed()) is None
    claimed = queue.claim_next(challenges=env.allowed())
    assert claimed is not None and claimed.challenge == "v3"


def test_with_no_level_asked_a_single_host_claims_everything_as_before(tmp_path):
    queue = Queue(tmp_path / "queue.db", host="judge1")
    register(queue, tmp_path / "c", "plain", None)
    assert Environment(tcg_site(tmp_path / "h", "qemu64"), queue).allowed() is None


def test_a_level_libvirt_cannot_confirm_is_not_taken_and_asked_again():
    assert "libvirt has not said" in level_shortfall("c", "x86-64-v1", None)
    unknown = CpuOffer("max", "tcg", None, frozenset())
    assert "libvirt has not said" in level_shortfall("c", "x86-64-v1", unknown)
    gate = CpuGate(Site(home=Path("/nonexistent"), accel="tcg", uri="qemu+unix:///system?socket=/nonexistent"))
    assert gate.offer() is None and not gate.known


def test_a_daemon_on_a_site_the_host_cannot_give_refuses_before_any_work(tmp_path):
    site = tcg_site(tmp_path / "home", "x86-64-v4")
    with pytest.raises(ConfigError) as err:
        refuse_unfit_site(site)
    assert str(err.value).startswith(f'{site.layout.site_toml}: [vm] cpu = "x86-64-v4" is more than this host can '
                                     "give its guests under tcg (it lacks avx512f")
    queue = Queue(tmp_path / "queue.db", host="judge1")
    register(queue, tmp_path / "c", "plain", None)
    eid = queue.add_entry("plain", "ann", False, "ab" * 32, "ann-entry.zip", tmp_path / "x.zip")
    with pytest.raises(ConfigError, match="x86-64-v4"):
        serve(site, queue, slots=1, until_idle=True)
    assert queue.entry(eid).state == "queued"  # nothing was claimed
    refuse_unfit_site(tcg_site(tmp_path / "fine", "x86-64-v3"))  # this qemu's TCG has AVX2: no refusal


def test_doctor_prints_what_guests_get_and_whether_a_challenge_is_reached(tmp_path):
    """Its cpu line comes from libvirt alone; no image exists here, so no test boot is tried."""
    ch = tmp_path / "c"
    register(Queue(tmp_path / "queue.db", host="judge1"), tmp_path / "c", "needs4", "x86-64-v4")
    env = {"VMJUDGE_ACCEL": "tcg", "VMJUDGE_URI": "qemu:///system"}
    plain = run_cli("doctor", "--json", home=tmp_path / "home", env=env)
    [cpu] = [c for c in json.loads(plain.stdout)["checks"] if c["name"] == "cpu"]
    assert cpu["ok"] and cpu["detail"].startswith('cpu = "max" under tcg: x86-64-v3 (libvirt\'s nearest model ')
    assert cpu["detail"].endswith("; AVX, AVX2, FMA: yes, yes, yes)")
    needs = run_cli("doctor", "--challenge", str(ch / "needs4"), home=tmp_path / "home", env=env)
    line = next(ln for ln in needs.stdout.splitlines() if ln.split()[1:2] == ["cpu"])
    assert line.startswith("FAIL  cpu") and "challenge needs4 needs guests of x86-64-v4" in line
    assert needs.returncode == 1 and "the test boot was not tried" in needs.stdout


def test_challenge_add_and_evaluate_say_when_this_host_will_not_take_a_challenge(tmp_path):
    """The hostile corpus's small challenge asking for x86-64-v4, on a home whose image is a stand-in
    (no build): `challenge add` warns, and `evaluate` ends at once with the entry queued and says
    why, without a VM (TCG's max here is x86-64-v3)."""
    ch = tmp_path / "hostile"
    shutil.copytree(REPO / "tests" / "hostile" / "challenge", ch)
    with open(ch / "challenge.toml", "a") as f:
        f.write('\n[image]\n')
    toml = (ch / "challenge.toml").read_text().replace("[vm]\n", '[vm]\ncpu_level = "x86-64-v4"\n')
    (ch / "challenge.toml").write_text(toml)
    env = {"VMJUDGE_ACCEL": "tcg", "VMJUDGE_URI": "qemu:///system"}
    site = home(tmp_path / "home")
    fake_image(site, ch)
    added = run_cli("challenge", "add", str(ch), home=site.home, env=env)
    assert added.returncode == 0, added.stderr
    assert ("challenge hostile needs guests of x86-64-v4, and this host's get x86-64-v3 (cpu = \"max\" under tcg): "
            "set a higher [vm] cpu in site.toml, or let a host that has it take them: this host's daemon will take "
            "none of its stages.") in added.stderr
    archive = tmp_path / "good-entry.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for p in sorted((REPO / "tests" / "hostile" / "good").iterdir()):
            tar.add(p, arcname=p.name)
    ran = run_cli("evaluate", "hostile", str(archive), home=site.home, env=env, timeout=120)
    assert ran.returncode == 1, ran.stderr
    assert ran.stderr.strip().endswith("stays queued: challenge hostile needs guests of x86-64-v4, and this host's "
                                       "get x86-64-v3 (cpu = \"max\" under tcg): set a higher [vm] cpu in site.toml, "
                                       "or let a host that has it take them.")
