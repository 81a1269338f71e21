"""Shared fixtures: a real site home, the real guest image, real libvirt.

The test home lives under /var/tmp (not pytest's 0700 temp dirs) because libvirt's qemu
user must reach the VM files. The image is built once and cached there by recipe hash.
Every test is followed by a check that no vmj- domain and no run file is left behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import libvirt
import pytest

from vmjudge.config import ImageRecipe, Site, load_site
from vmjudge.config.layout import RunDir
from vmjudge.config.site import profile_line
from vmjudge.errors import InfrastructureError
from vmjudge.images.build import build_image
from vmjudge.vm import domain
from vmjudge.vm.job import Job
from vmjudge.vm.reading import JobRun, Limits
from vmjudge.vm.runner import make_blank_disk, run_job

from .host_lock import HostBusy, exclusive_host
from .libvirtd import Libvirtd
from .s3_server import s3_server

TEST_HOME = Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test"))
# The limits of a test's VM run unless the test gives its own.
TEST_LIMITS = Limits(boot_timeout=120)


# The tests run 2 slots of 2-vCPU VMs on 2-core machines: their timings are not compared.
TEST_SITE_TOML = "[slots]\novercommit = true\n"


def the_test_site() -> Site:
    TEST_HOME.mkdir(parents=True, exist_ok=True)
    site_toml = TEST_HOME / "site.toml"
    if not site_toml.exists():
        site_toml.write_text(TEST_SITE_TOML)
    os.environ.setdefault("VMJUDGE_ACCEL", "tcg")
    s = load_site(TEST_HOME)
    s.layout.ensure()
    return s


def pytest_addoption(parser):
    parser.addoption("--part", choices=("host", "vm"), default=None,
                     help="only the tests that need this host's VMs (vm: every test using the `site` fixture, "
                          "which holds the host) or only the others (host); both when not given")


def pytest_collection_modifyitems(config, items):
    """`make test` runs the two parts one after the other: the host tests, which need no VM and no
    host lock, in several pytest-xdist workers; the VM tests in one session, which holds the host."""
    part = config.getoption("--part")
    if part is not None:
        keep: list = []
        drop: list = []
        for item in items:
            (keep if ("site" in getattr(item, "fixturenames", ())) == (part == "vm") else drop).append(item)
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_configure(config):
    """The suite runs guests under TCG on purpose, on hosts with no AppArmor: the trial profile,
    for this session and every command it runs (tests/test_confinement.py sets production where it
    shows the refusal)."""
    os.environ["VMJUDGE_PROFILE"] = "trial"


def pytest_sessionstart(session):
    """Said first, whatever the verbosity: these tests judge where production would refuse."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(profile_line("vmjudge tests"))


def pytest_collection_finish(session):
    """Build the guest image (the first time: minutes) before any test runs, so that no test's
    timeout has to allow for it, whichever test the random order puts first."""
    if any("image" in item.fixturenames for item in session.items):
        build_image(the_test_site(), ImageRecipe(), progress=lambda m: print(m))


@pytest.fixture(scope="session")
def site() -> Iterator[Site]:
    s = the_test_site()
    try:
        with exclusive_host("the tests"):
            clear_what_an_interrupted_session_left(s)
            yield s
    except HostBusy as exc:
        pytest.exit(str(exc), 2)


def clear_what_an_interrupted_session_left(site: Site) -> None:
    """A session killed mid-test (CI cut off, a restarted machine) leaves its VMs and run
    directories; each test checks that it leaves none, so the next session starts from none."""
    try:
        conn = domain.connect(site.uri)
    except InfrastructureError:
        return  # no libvirt, so no VM left (the tests that need one say so themselves)
    try:
        for dom in conn.listAllDomains():
            if dom.name().startswith(domain.DOMAIN_PREFIX):
                print(f"destroying {dom.name()}, left by an interrupted session")
                if dom.isActive():
                    dom.destroy()
                if dom.isPersistent():
                    dom.undefine()
    finally:
        conn.close()
    for leftover in site.layout.runs.iterdir():
        print(f"removing {leftover}, left by an interrupted session")
        shutil.rmtree(leftover)


@pytest.fixture(scope="session")
def image(site):
    return build_image(site, ImageRecipe(), progress=lambda m: print(m))


class LiveConn:
    """The tests' libvirt connection, reopened when a call finds it dead: one test restarts
    libvirtd, and a connection only learns it died when it next uses its socket."""

    def __init__(self, uri: str):
        self.uri = uri
        self._conn = domain.connect(uri)

    def __getattr__(self, name: str):
        attr = getattr(self._conn, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            try:
                return getattr(self._conn, name)(*args, **kwargs)
            except libvirt.libvirtError:
                if self._conn.isAlive():
                    raise
                self._conn = domain.connect(self.uri)
                return getattr(self._conn, name)(*args, **kwargs)
        return call


@pytest.fixture(scope="session")
def conn(site):
    c = LiveConn(site.uri)
    yield c
    c.close()


@pytest.fixture(autouse=True)
def nothing_left_behind(request):
    """After every test: no vmj- domain, no scratch file (only for tests that used VMs); and the
    libvirtd that answered before it still answers. A libvirtd that died in a test (a segfault,
    2026-11-26) would otherwise fail every VM test after it, hiding which one it was: that test
    fails, naming it, and libvirtd is started again for the rest."""
    uri = request.getfixturevalue("site").uri if "site" in request.fixturenames else None
    answered = uri is not None and domain.unreachable(uri) is None
    yield
    if answered and domain.unreachable(uri) is not None:
        Libvirtd(uri).start()
        pytest.fail(f"libvirtd stopped answering at {uri} during this test and was started again; "
                    "look for its crash in the kernel log (dmesg) and /var/log/libvirt/libvirtd.log.")
    if "conn" not in request.fixturenames:
        return
    conn = request.getfixturevalue("conn")
    site = request.getfixturevalue("site")
    assert domain.leftover_domains(conn) == []
    assert sorted(p.name for p in site.layout.runs.iterdir()) == []


@pytest.fixture
def rundir(site):
    with RunDir(site.layout, "test") as rd:
        yield rd.path


CONSOLE_TAIL = 60  # lines of each guest console log a failed test's report shows


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A VM test that fails shows the end of each guest console log of its run directory in its
    report: the directory is removed after the test, and on a CI machine the report is all there is
    (the guest's kernel messages of an agent that fell silent, 2026-11-27)."""
    outcome = yield
    report = outcome.get_result()
    path = item.funcargs.get("rundir") if hasattr(item, "funcargs") else None
    if report.when != "call" or not report.failed or not isinstance(path, Path):
        return
    for log in sorted(path.glob("console*.log")):
        lines = log.read_text(errors="replace").splitlines()[-CONSOLE_TAIL:]
        report.sections.append((f"guest console {log.name} (last {len(lines)} lines)", "\n".join(lines)))


class Booter:
    """Runs jobs in real VMs for a test, each with a fresh blank home unless given one."""

    def __init__(self, conn, site, image, rundir: Path):
        self.conn, self.site, self.image, self.rundir = conn, site, image, rundir
        self.count = 0

    def blank_home(self, size_mib: int = 128) -> Path:
        self.count += 1
        path = self.rundir / f"home{self.count}.qcow2"
        make_blank_disk(path, size_mib)
        return path

    def __call__(self, job: Job, home: Path | None = None, limits: Limits = TEST_LIMITS,
                 site: Site | None = None, label: str = "test") -> JobRun:
        self.count += 1
        return run_job(self.conn, site or self.site, self.image, job, home_disk=home or self.blank_home(),
                       workdir=self.rundir, console_log=self.rundir / f"console{self.count}.log", vcpus=1,
                       memory_mib=512, label=label, limits=limits)


@pytest.fixture
def boot(conn, site, image, rundir):
    return Booter(conn, site, image, rundir)


@pytest.fixture
def uart_site(site):
    return replace(site, channel="uart")


def output(run: JobRun, index: int = 0) -> str:
    return bytes(run.transcript.commands[index].output).decode("utf-8", "replace")



def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The test order's seed, at the end where a failure is read (-q hides the header)."""
    seed = getattr(config.option, "randomly_seed", None)
    if isinstance(seed, int):
        terminalreporter.write_line(f"test order: pytest-randomly seed {seed}; the same order again: "
                                    f"pytest --randomly-seed={seed}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """One throw-away PostgreSQL server for the session (tests/pg_server.py); its URL."""
    from .pg_server import postgres_server
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """One moto S3 server for the session (tests/s3_server.py); each test makes a bucket of its own."""
    with s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


@pytest.fixture
def pg_url(postgres, request) -> str:
    """A fresh, empty database on the session's server, for one test."""
    from .pg_server import fresh_database
    return fresh_database(postgres, "t_" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16])


@pytest.fixture(params=["sqlite", "postgresql"])
def queue_location(request, tmp_path) -> str | Path:
    """Where a queue test's queue lives: a SQLite file, then a PostgreSQL database; the queue
    tests run against both backends."""
    if request.param == "sqlite":
        return tmp_path / "queue.db"
    return request.getfixturevalue("pg_url")
