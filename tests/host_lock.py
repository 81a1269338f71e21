"""One VM-using session per host: the test suite clears every vmj- domain an interrupted
session left, and checks after each test that none is left, so a second suite or a benchmark
booting VMs on the same libvirt at the same time would be destroyed by it, or fail it.

By default a second session stops at once with a sentence. With VMJUDGE_WAIT_FOR_HOST=1 it
waits its turn instead: for developers running a benchmark and a test session one after
the other without watching for the first to end."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import tempfile
from argparse import ArgumentParser, Namespace
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from vmjudge.config import load_site
from vmjudge.config.layout import Layout
from vmjudge.config.site import profile_line

LOCK = Path("/var/tmp/vmjudge-vm-session.lock")
# Another file in its place: for a test holding the lock in a child process's stead, without
# waiting for the real host (which another session may hold).
LOCK_ENV = "VMJUDGE_HOST_LOCK"


class HostBusy(Exception):
    pass


@contextmanager
def exclusive_host(what: str) -> Iterator[None]:
    path = Path(os.environ.get(LOCK_ENV, LOCK))
    with open(path, "a") as lock:
        wait = os.environ.get("VMJUDGE_WAIT_FOR_HOST") == "1"
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise HostBusy(f"another test session or benchmark is booting VMs on this host (it holds {path}): "
                           f"wait for it to end before starting {what}.") from None
        yield


def run_holding_host(main: Callable[[Namespace], None], parser: ArgumentParser,
                     what: str = "this benchmark") -> None:
    """A benchmark's entry point: its arguments parsed, then `main(args)` with the host held, or one
    sentence if it is busy. Parsed first so that `--help` and a wrong option never wait for the host."""
    args = parser.parse_args()
    try:
        with exclusive_host(what):
            main(args)
    except HostBusy as exc:
        raise SystemExit(str(exc)) from None


def trial_guests() -> None:
    """A benchmark that boots VMs runs its guests under TCG on purpose, which the production profile
    refuses: the trial profile, said on its first line so no one takes its runs for a production host's."""
    os.environ.setdefault("VMJUDGE_ACCEL", "tcg")
    os.environ.setdefault("VMJUDGE_PROFILE", "trial")
    print(profile_line(Path(sys.argv[0]).name), file=sys.stderr)


def linked_home(base: Path, prefix: str) -> Path:
    """A new site home in `base` whose guest images are base's (a link): crossable by qemu's user."""
    home = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    os.chmod(home, 0o711)
    Layout(home).images.symlink_to(Layout(base).images)
    return home


def in_own_home(base: Path, body: Callable[[Path, Path], dict], prefix: str = "bench-") -> dict:
    """`body(home, work)` in a site home of its own made in `base` (sharing its built images), removed
    after: a benchmark's challenges and entries never enter the home it was pointed at."""
    load_site(base).layout.ensure()
    home = linked_home(base, prefix)
    try:
        (home / "work").mkdir()
        return body(home, home / "work")
    finally:
        shutil.rmtree(home, ignore_errors=True)
