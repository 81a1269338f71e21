"""The guest's CPU (#41) without a VM: site.toml's [vm] cpu and challenge.toml's [vm] cpu_level
as read, the x86-64 levels of a flag list, the domain's <cpu> element, and what this host's
libvirt says guests get and refuses, through its real CPU comparison (read-only queries of
qemu:///system: no domain is started) and its test driver, which cannot compare."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import libvirt
import pytest

from vmjudge.config import Site, load_challenge, load_site
from vmjudge.config.cpu import LEVEL_FLAGS, LEVELS, level_of, missing
from vmjudge.errors import ConfigError
from vmjudge.vm import cpu_offer
from vmjudge.vm.domain_xml import DomainSpec, domain_xml
from vmjudge.vm.guest_cpu import cpu_element

from .needs import cannot_run

# /proc/cpuinfo's flags in a Debian 12 guest under qemu 7.2's TCG with its default model (qemu64), and
# with `-cpu max`, as their kernel prints them (the acceptance VM test reads them for real).
QEMU64_LINE = ("fpu de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 syscall "
               "nx lm rep_good nopl xtopology cpuid tsc_known_freq pni cx16 x2apic hypervisor lahf_lm svm abm sse4a "
               "vmmcall")
QEMU64_FLAGS = frozenset(QEMU64_LINE.split())
AVX2_MACHINE = QEMU64_FLAGS | {"ssse3", "sse4_1", "sse4_2", "popcnt", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma",
                               "movbe", "xsave"}


def site_toml(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "site.toml").write_text(text)
    return home


def test_the_default_cpu_is_the_hosts_under_kvm_and_max_under_tcg(tmp_path, monkeypatch):
    monkeypatch.delenv("VMJUDGE_ACCEL", raising=False)
    monkeypatch.setenv("VMJUDGE_ACCEL", "kvm")
    assert load_site(tmp_path).guest_cpu.setting == "host-passthrough"
    monkeypatch.setenv("VMJUDGE_ACCEL", "tcg")
    assert load_site(tmp_path).guest_cpu.setting == "max"
    assert load_site(site_toml(tmp_path / "v3", '[vm]\ncpu = "x86-64-v3"\n')).guest_cpu.kind == "level"
    assert load_site(site_toml(tmp_path / "m", '[vm]\ncpu = "Haswell-noTSX"\n')).guest_cpu.kind == "model"


@pytest.mark.parametrize("text, says", [
    ('[vm]\ncpu = "host-passthrough"\n', 'cpu = "host-passthrough" is not allowed under tcg'),
    ('[vm]\ncpu = "sky lake"\n', "[vm] cpu = 'sky lake' is not allowed: use \"host-passthrough\" (KVM only), \"max\""),
    ('[vm]\ncpu = 3\n', "[vm] cpu = 3 is not allowed"),
    ('[vm]\ncpus = "max"\n', "[vm] has unknown key(s) cpus"),
])
def test_bad_cpu_settings_are_refused_in_one_sentence_naming_the_key(tmp_path, monkeypatch, text, says):
    monkeypatch.setenv("VMJUDGE_ACCEL", "tcg")
    with pytest.raises(ConfigError) as err:
        load_site(site_toml(tmp_path, text))
    assert says in str(err.value) and str(err.value).count(". ") == 0


def challenge(tmp_path: Path, vm: str) -> Path:
    d = tmp_path / "c"
    d.mkdir(parents=True)
    (d / "challenge.toml").write_text(f'name = "c"\n[vm]\n{vm}')
    return d


def test_a_challenge_may_ask_for_a_level_and_nothing_else(tmp_path):
    assert load_challenge(challenge(tmp_path / "a", 'cpu_level = "x86-64-v3"\n')).vm.cpu_level == "x86-64-v3"
    assert load_challenge(challenge(tmp_path / "b", "")).vm.cpu_level is None
    with pytest.raises(ConfigError, match=r'\[vm\] cpu_level = .haswell. is not allowed: use "x86-64-v1" or '
                                          r'"x86-64-v2" or "x86-64-v3" or "x86-64-v4"'):
        load_challenge(challenge(tmp_path / "c", 'cpu_level = "haswell"\n'))


def test_levels_of_flag_lists():
    assert level_of(QEMU64_FLAGS) == "x86-64-v1"  # no ssse3, sse4, popcnt
    assert level_of(AVX2_MACHINE) == "x86-64-v3"
    assert level_of(AVX2_MACHINE | LEVEL_FLAGS["x86-64-v4"]) == "x86-64-v4"
    assert level_of(frozenset()) is None
    assert level_of(AVX2_MACHINE - {"fma"}) == "x86-64-v2"
    assert missing("x86-64-v3", QEMU64_FLAGS)[:4] == ["popcnt", "sse4_1", "sse4_2", "ssse3"]
    assert all(LEVEL_FLAGS[a] < LEVEL_FLAGS[b] for a, b in zip(LEVELS, LEVELS[1:], strict=False))


def spec(**kw) -> DomainSpec:
    return DomainSpec(name="vmj-x", kernel=Path("/k"), initrd=Path("/i"), root=Path("/r"), home=None, cdrom=None,
                      console_log=Path("/c"), **kw)


def test_the_domains_cpu_element_for_each_kind_of_setting():
    def cpu(**kw):
        return ET.fromstring(domain_xml(spec(**kw))).find("cpu")
    assert cpu(accel="kvm").attrib == {"mode": "host-passthrough"}
    assert cpu(accel="tcg").attrib == {"mode": "maximum"}  # qemu's -cpu max: no longer qemu64
    # without the "fast" rep movsb/stosb that TCG runs a byte at a time; KVM's max keeps them
    disabled = [(f.get("name"), f.get("policy")) for f in cpu(accel="tcg").findall("feature")]
    assert disabled == [("erms", "disable"), ("fsrm", "disable")]
    assert cpu(accel="kvm", cpu="max").attrib == {"mode": "maximum"}
    assert cpu(accel="kvm", cpu="max").findall("feature") == []
    level = cpu(accel="tcg", cpu="x86-64-v3")
    assert (level.get("mode"), level.get("match"), level.findtext("model")) == ("custom", "exact", "kvm64")
    assert level.find("model").get("fallback") == "forbid"
    required = {f.get("name") for f in level.findall("feature") if f.get("policy") == "require"}
    assert {"avx2", "fma", "sse4.2", "movbe"} <= required and "avx512f" not in required
    model = cpu(accel="kvm", cpu="Haswell-noTSX")
    assert (model.findtext("model"), model.findall("feature")) == ("Haswell-noTSX", [])
    with pytest.raises(ValueError, match="host-passthrough needs kvm"):
        cpu_element("host-passthrough", "tcg")


def system_libvirt() -> libvirt.virConnect:
    try:
        return libvirt.open("qemu:///system")
    except libvirt.libvirtError as exc:
        cannot_run(f"libvirt at qemu:///system does not answer ({exc.get_error_message()})")


def test_under_tcg_max_gives_this_qemus_avx_avx2_and_fma_and_qemu64_none(tmp_path):
    """Debian 12's qemu 7.2 emulates AVX, AVX2, FMA, F16C, BMI1/2 and MOVBE under TCG, not AVX-512:
    its `max` is x86-64-v3. Asked of libvirt's domain capabilities (qemu's query-cpu-model-expansion)."""
    conn = system_libvirt()
    try:
        tcg = Site(home=tmp_path, accel="tcg")
        offered = cpu_offer.offer(conn, tcg)
        assert cpu_offer.refusal(tcg, conn) is None
        assert offered.level == "x86-64-v3" and {"avx", "avx2", "fma"} <= offered.flags
        assert "avx512f" not in offered.flags
        assert "AVX, AVX2, FMA: yes, yes, yes" in offered.describe()
        old = Site(home=tmp_path, accel="tcg", cpu="qemu64")
        assert cpu_offer.refusal(old, conn) is None
        assert cpu_offer.offer(conn, old).level == "x86-64-v1" and "avx" not in cpu_offer.offer(conn, old).flags
        assert cpu_offer.offer(conn, old).meets("x86-64-v1") and not cpu_offer.offer(conn, old).meets("x86-64-v3")
    finally:
        conn.close()


def test_a_level_or_model_the_host_cannot_give_is_refused_in_one_sentence_naming_what_it_lacks(tmp_path):
    conn = system_libvirt()
    try:
        v4 = cpu_offer.refusal(Site(home=tmp_path, accel="tcg", cpu="x86-64-v4"), conn)
        assert v4 is not None and v4.startswith('[vm] cpu = "x86-64-v4" is more than this host can give its guests '
                                                "under tcg (it lacks avx512f, avx512bw")
        assert cpu_offer.refusal(Site(home=tmp_path, accel="tcg", cpu="x86-64-v3"), conn) is None
        assert "Skylake-Server" in cpu_offer.refusal(Site(home=tmp_path, accel="tcg", cpu="Skylake-Server"), conn)
        unknown = cpu_offer.refusal(Site(home=tmp_path, accel="tcg", cpu="Nehalem-Turbo"), conn)
        assert unknown is not None and "is not a CPU model libvirt at qemu:///system knows" in unknown
    finally:
        conn.close()


def test_a_libvirt_that_cannot_compare_refuses_a_model_and_leaves_max_unknown(tmp_path):
    conn = libvirt.open("test:///default")
    try:
        said = cpu_offer.refusal(Site(home=tmp_path, accel="tcg", cpu="x86-64-v2", uri="test:///default"), conn)
        assert said is not None and "cannot be checked" in said and said.count(". ") == 0
        offered = cpu_offer.offer(conn, Site(home=tmp_path, accel="tcg"))
        assert not offered.known and not offered.meets("x86-64-v1")
        assert offered.describe() == 'cpu = "max" under tcg: libvirt could not say which flags guests get'
    finally:
        conn.close()
