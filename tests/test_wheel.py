"""The install for an organiser who does not clone: `python -m build` makes a wheel holding every
file of the package (the guest agent's scripts, the replica's boot files, the portal's templates, the
host's set-up script), which installs into a new virtualenv whose `vmjudge` is the wheel's own and
runs: its version, `setup-host --help`, `reasons`, and `doctor` on a fresh home.

The new virtualenv takes vmjudge's dependencies from the test virtualenv's site-packages (a path in
a .pth file, which puts them after the virtualenv's own: the editable vmjudge there is not seen),
so the test needs no index; pip still checks that every dependency the wheel names is there."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import pytest

import vmjudge

from .cli import REPO

TIMEOUT = 300


def _run(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=TIMEOUT)


def package_files() -> set[str]:
    """The package's files as git has them (tracked, or new and not ignored)."""
    listed = _run("git", "ls-files", "--cached", "--others", "--exclude-standard", "vmjudge", cwd=REPO)
    assert listed.returncode == 0, listed.stderr
    return {n for n in listed.stdout.split() if (REPO / n).is_file()}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for name in [*package_files(), "setup.cfg", "pyproject.toml", "README.md", "LICENSE"]:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    built = _run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", work / "dist", source,
                 cwd=work)
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (work / "dist").glob("vmjudge-*.whl")
    venv = work / "venv"
    assert _run(sys.executable, "-m", "venv", venv, cwd=work).returncode == 0
    purelib = _run(venv / "bin/python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=work)
    (Path(purelib.stdout.strip()) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = _run(venv / "bin/python", "-m", "pip", "install", "--no-index", "--quiet", wheel, cwd=work)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return wheel, venv, work


def test_the_wheel_holds_every_file_of_the_package(installed):
    wheel, _, _ = installed
    with zipfile.ZipFile(wheel) as z:
        held = {n for n in z.namelist() if n.startswith("vmjudge/")}
    assert held == package_files()
    assert {"vmjudge/images/guest/init", "vmjudge/images/guest/gpu-init", "vmjudge/host/setup-host",
            "vmjudge/replica/boot/init", "vmjudge/web/templates/reasons.html"} <= held


def test_the_installed_vmjudge_is_the_wheels_and_runs(installed):
    _, venv, work = installed
    where = _run(venv / "bin/python", "-c", "import vmjudge; print(vmjudge.__file__)", cwd=work)
    assert Path(where.stdout.strip()).is_relative_to(venv)
    version = _run(venv / "bin/vmjudge", "--version", cwd=work)
    assert version.stdout.strip() == f"vmjudge, version {vmjudge.__version__}"
    assert "Debian packages judging needs" in _run(venv / "bin/vmjudge", "setup-host", "--help", cwd=work).stdout
    assert "vm-restore (" in _run(venv / "bin/vmjudge", "reasons", "vm-restore", cwd=work).stdout


def test_the_installed_vmjudge_checks_a_fresh_host_with_doctor(installed):
    """No image is built in the fresh home, so doctor says so (and does not boot); the rest it checks."""
    _, venv, work = installed
    home = Path(tempfile.mkdtemp(prefix="vmjudge-wheel-", dir="/var/tmp"))  # qemu's user crosses into it
    try:
        done = _run(venv / "bin/vmjudge", "--home", home, "doctor", "--json", cwd=work)
    finally:
        shutil.rmtree(home)
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert done.returncode == 1 and not checks["image"]["ok"] and "vmjudge image build" in checks["image"]["detail"]
    assert checks["qemu"]["ok"] and checks["libvirt"]["ok"] and checks["home"]["ok"], checks
