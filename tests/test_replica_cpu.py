"""The judge's CPU level on the replica (#41): `replica build` asks this host's libvirt which level
its VMs give (read-only CPU queries under TCG, no domain started) and writes it into replica.json
and the README; `vmjudge-replica check` warns, in one sentence before its report, when the
participant's machine offers less or more. The booted replica's check is in test_replica.py."""

from __future__ import annotations

import json
from pathlib import Path

import libvirt
import pytest

from vmjudge.config import load_challenge
from vmjudge.replica.build import judge_cpu_of, replica_files
from vmjudge.replica.check import print_report
from vmjudge.replica.cpu_match import judge_cpu, readme_text, warning

from .needs import cannot_run
from .test_guest_cpu_report import CPUINFO
from .test_image_transfer import challenge, fake_image, home


def cpuinfo(tmp_path: Path, flags: str) -> str:
    path = tmp_path / f"cpuinfo-{abs(hash(flags))}"
    path.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n")
    return str(path)


V1 = "fpu cx8 cmov mmx fxsr sse sse2 syscall lm pni cx16"
V3 = CPUINFO.split("flags\t\t: ")[1].split("\nbogomips")[0]


def test_the_check_warns_when_this_machine_offers_less_or_more_than_the_judge(tmp_path):
    judge = judge_cpu("max", "x86-64-v3", {"avx", "avx2", "fma"})
    less = warning(judge, cpuinfo(tmp_path, V1))
    assert less == ("Warning: this machine's CPU is x86-64-v1, less than the judge's x86-64-v3: outputs can differ in "
                    "their last digits (or a program built for another level fail), so make the outputs you submit "
                    "on a machine of x86-64-v3.")
    more = warning(judge, cpuinfo(tmp_path, V3 + " avx512f avx512bw avx512cd avx512dq avx512vl"))
    assert more is not None and "x86-64-v4, more than the judge's x86-64-v3" in more
    assert warning(judge, cpuinfo(tmp_path, V3)) is None
    assert warning(judge_cpu("max", None), cpuinfo(tmp_path, V1)) is None  # the judge's level unknown: no guess
    assert warning(None, cpuinfo(tmp_path, V1)) is None  # a replica built before #41


def test_the_report_begins_with_the_warning(capsys):
    print_report({"report": "Stage 1 (prep): ok.\n", "results_dir": "/x", "cpu_warning": "Warning: this machine."})
    out = capsys.readouterr().out.splitlines()
    assert out[3:5] == ["Warning: this machine.", "Stage 1 (prep): ok."]


def test_the_replica_records_the_judges_level_and_its_readme_says_it(tmp_path, monkeypatch):
    try:
        libvirt.open("qemu:///system").close()
    except libvirt.libvirtError as exc:
        cannot_run(f"libvirt at qemu:///system does not answer ({exc.get_error_message()})")
    monkeypatch.setenv("VMJUDGE_ACCEL", "tcg")
    monkeypatch.setenv("VMJUDGE_URI", "qemu:///system")
    site = home(tmp_path / "home")
    ch = load_challenge(challenge(tmp_path / "c1"))
    (tmp_path / "c1" / "training").mkdir()
    (tmp_path / "c1" / "training" / "RECORDS").write_text("")
    judge = judge_cpu_of(site, ch)
    assert judge == {"setting": "max", "level": "x86-64-v3", "required": None, "avx_avx2_fma": [True, True, True]}
    files = replica_files(ch, fake_image(site, tmp_path / "c1"), judge)
    assert json.loads(files["vmjudge/replica.json"])["cpu"] == judge
    readme = files["README.txt"].decode()
    assert 'The judge\'s VMs give entries a CPU of level x86-64-v3 (site setting cpu = "max").' in readme
    assert "`vmjudge-replica check` warns when this machine's level differs" in readme


@pytest.mark.parametrize("level, required, says", [
    (None, None, "The judge did not record which CPU level its VMs give"),
    ("x86-64-v2", "x86-64-v2", "This challenge requires at least x86-64-v2: entries may use it."),
])
def test_the_readme_says_what_it_knows(level, required, says):
    assert says in readme_text(judge_cpu("qemu64", level, required=required))
