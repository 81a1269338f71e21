"""`vmjudge service install` (#16): the daemon's systemd unit, verified by systemd itself
(`systemd-analyze verify`, Debian's systemd package), and its ExecStart run as the unit would
run it, with the unit's environment."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from .cli import run_cli


def unit_fields(text: str) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("["):
            fields.setdefault(key, []).append(value)
    return fields


def test_the_unit_is_written_verified_and_printed_alike(tmp_path):
    home, units = tmp_path / "home", tmp_path / "units"
    done = run_cli("service", "install", "--slots", "3", "--unit-dir", str(units), home=home)
    assert done.returncode == 0, done.stderr
    unit = units / "vmjudge.service"
    assert f"wrote {unit}; enable and start it with:\n  systemctl daemon-reload\n  systemctl enable --now " \
           "vmjudge.service\n" in done.stdout
    text = unit.read_text()
    assert run_cli("service", "install", "--slots", "3", "--print", home=home).stdout == text
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
    fields = unit_fields(text)
    assert fields["Wants"] == ["libvirtd.service virtlogd.service"]
    assert fields["After"] == ["libvirtd.service virtlogd.service"]
    assert (fields["Restart"], fields["KillSignal"], fields["KillMode"]) == (["on-failure"], ["SIGTERM"], ["mixed"])
    assert int(fields["TimeoutStopSec"][0]) >= 60  # room for each slot to destroy its VM and requeue its stage
    assert f"VMJUDGE_HOME={home}" in fields["Environment"]
    assert not any(e.startswith("VMJUDGE_ACCEL=") for e in fields["Environment"])  # site.toml's [libvirt] accel
    assert fields["ExecStart"][0].endswith(" daemon --slots 3")
    assert not any(e.startswith("VMJUDGE_PROFILE=") for e in fields["Environment"])  # site.toml's, production
    assert "It runs under site.toml's [site] profile (\"production\" unless the file says \"trial\")" in done.stdout
    assert "VMJUDGE_PROFILE=trial in this shell is not written into the unit." in done.stdout  # the suite's


def test_the_units_command_runs_as_the_unit_would_run_it(tmp_path):
    """ExecStart with the unit's environment (and nothing else of the test's), on an empty queue,
    with --until-idle so that it ends; libvirt's test driver stands in for qemu:///system. As the
    unit has it, the daemon is production's, which refuses the suite's TCG in one sentence; with
    site.toml's profile = "trial" it runs."""
    home = tmp_path / "home"
    fields = unit_fields(run_cli("service", "install", "--print", home=home, env={"VMJUDGE_ACCEL": "tcg"}).stdout)
    argv = shlex.split(fields["ExecStart"][0]) + ["--until-idle"]
    env = dict(e.split("=", 1) for e in fields["Environment"])
    assert "VMJUDGE_ACCEL" not in env  # the shell's is not the service's: site.toml says, as on this machine
    home.mkdir(exist_ok=True)
    (home / "site.toml").write_text('[libvirt]\naccel = "tcg"\n')
    proc = subprocess.run(argv, env={**env, "PATH": os.defpath, "VMJUDGE_URI": "test:///default"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.startswith(
        "vmjudge: profile = \"production\" refuses to judge on this host: its guests would run under TCG"), proc.stderr
    assert proc.stderr.count("\n") == 1
    (home / "site.toml").write_text('[libvirt]\naccel = "tcg"\n[site]\nprofile = "trial"\n')
    proc = subprocess.run(argv, env={**env, "PATH": os.defpath, "VMJUDGE_URI": "test:///default"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (home / "queue.db").exists()  # it ran on the unit's home, not the test's


def test_a_home_systemd_would_misread_is_refused(tmp_path):
    home = tmp_path / "my home"
    proc = run_cli("service", "install", "--print", home=home)
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"the home '{home}' has characters a systemd unit would read otherwise" in proc.stderr


def test_an_unwritable_unit_directory_is_one_sentence(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    proc = run_cli("service", "install", "--unit-dir", str(blocked / "units"), home=tmp_path / "home")
    assert proc.returncode == 1
    assert f"cannot write {blocked / 'units' / 'vmjudge.service'}" in proc.stderr
    assert not Path(blocked / "units").exists()
