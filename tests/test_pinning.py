"""Comparable timings (#20): which host cores each slot gets (vm/pinning.py, pure logic), the
<cputune> built from them, and the site's [slots] overcommit."""

from __future__ import annotations

import libvirt
import pytest

from vmjudge.config import load_site
from vmjudge.errors import ConfigError
from vmjudge.vm.pinning import CpuTune, Overcommitted, SlotCores, cpuset, online_cores, plan_cores


def test_each_slot_gets_cores_of_its_own_and_no_two_slots_share_one():
    plan = plan_cores(tuple(range(8)), 3, 2, overcommit=False)
    assert plan.slots == ((0, 1), (2, 3), (4, 5)) and not plan.shared  # cores 6 and 7 go to nobody
    assert plan.of(2) == SlotCores((4, 5))
    seen = [c for cores in plan.slots for c in cores]
    assert len(seen) == len(set(seen))


def test_cores_are_counted_from_those_the_daemon_may_use():
    """Affinity 2,3,5,7 (taskset, CPUAffinity=): the slots split those, never core 0 or 1."""
    plan = plan_cores((2, 3, 5, 7), 2, 2, overcommit=False)
    assert plan.slots == ((2, 3), (5, 7))
    assert plan.of(1).tune(2) == CpuTune(("5", "7"), "5,7")


def test_vcpu_j_on_the_slots_jth_core_and_the_emulator_on_all_the_slots_cores():
    cores = SlotCores((4, 5, 6, 7))
    assert cores.tune(2) == CpuTune(("4", "5"), "4-7")  # a smaller VM: its emulator has the spare cores
    assert cores.tune(4) == CpuTune(("4", "5", "6", "7"), "4-7")


def test_a_vm_larger_than_its_slot_stays_on_its_slots_cores():
    """A challenge registered after the plan was made: round-robin over its own slot's cores."""
    assert SlotCores((2, 3)).tune(3) == CpuTune(("2", "3", "2"), "2-3")


@pytest.mark.parametrize("usable, slots, vcpus, fix", [
    ((0, 1), 2, 2, "use --slots 1 or fewer (GPU slots count), fewer [vm] vcpus, or set overcommit = true under "
                   "[slots] in site.toml."),
    ((0, 1), 3, 1, "use --slots 2 or fewer"),
    ((0, 1), 1, 4, "use [vm] vcpus = 2 or fewer, or set overcommit = true under [slots] in site.toml."),
])
def test_too_few_cores_are_refused_in_one_sentence_with_the_fix(usable, slots, vcpus, fix):
    with pytest.raises(Overcommitted) as err:
        plan_cores(usable, slots, vcpus, overcommit=False)
    said = str(err.value)
    assert said.startswith(f"{slots} slot(s) × {vcpus} vCPU(s) need {slots * vcpus} cores but vmjudge may use 2 (0-1)")
    assert fix in said and said.count(". ") == 0 and said.endswith(".")


def test_overcommit_lets_every_slot_float_over_all_usable_cores():
    plan = plan_cores((0, 1), 3, 2, overcommit=True)
    assert plan.shared and plan.slots == ((0, 1),) * 3
    assert plan.of(2).tune(2) == CpuTune(("0-1", "0-1"), "0-1")
    assert plan.notice().startswith("timings are not comparable: 3 slot(s) × 2 vCPU(s) exceed the 2 usable core(s), "
                                    "so the slots share cores")


def test_overcommit_changes_nothing_when_the_cores_suffice():
    assert plan_cores((0, 1), 2, 1, overcommit=True) == plan_cores((0, 1), 2, 1, overcommit=False)
    assert not plan_cores((0, 1), 2, 1, overcommit=True).shared


@pytest.mark.parametrize("cores, text", [((0,), "0"), ((0, 1, 2, 3), "0-3"), ((6, 0, 1, 2, 3), "0-3,6"),
                                         ((1, 3, 4, 5, 9), "1,3-5,9")])
def test_cpuset_is_written_as_libvirt_reads_it(cores, text):
    assert cpuset(cores) == text


def test_site_toml_slots_overcommit(tmp_path):
    assert load_site(tmp_path).overcommit is False
    (tmp_path / "site.toml").write_text("[slots]\novercommit = true\n")
    assert load_site(tmp_path).overcommit is True
    (tmp_path / "site.toml").write_text('[slots]\novercommit = "yes"\n')
    with pytest.raises(ConfigError) as err:
        load_site(tmp_path)
    assert str(err.value) == f"{tmp_path / 'site.toml'}: [slots] overcommit = 'yes' is not allowed: use true or false."
    (tmp_path / "site.toml").write_text("[slots]\ncount = 2\n")
    with pytest.raises(ConfigError, match=r"\[slots\] has unknown key\(s\) count: remove or correct them\."):
        load_site(tmp_path)


def test_a_remote_hosts_cores_are_those_its_libvirt_reports_online_or_a_sentence(tmp_path):
    """The test driver's host has 8 CPUs of which 0, 2 and 4 are online; a libvirt that will
    not say (here a closed connection) refuses pinning in one sentence."""
    conn = libvirt.open("test:///default")
    assert online_cores(conn, "qemu+ssh://judge2/system") == (0, 2, 4)
    conn.close()
    with pytest.raises(ConfigError) as err:
        online_cores(conn, "qemu+ssh://judge2/system")
    said = str(err.value)
    assert said.startswith("libvirt at qemu+ssh://judge2/system would not say which of its host's cores are online (")
    assert said.endswith("), so its VMs cannot be pinned to cores of their own.") and said.count(". ") == 0
