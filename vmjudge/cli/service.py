"""`vmjudge service install`: the daemon as a systemd service, so that it survives reboots and
restarts after a crash without every organiser writing their own unit.

The unit carries no setting that site.toml holds (no VMJUDGE_PROFILE, no VMJUDGE_ACCEL, which would
silently win over the file's): a service judges real entries, so it runs under site.toml's
[site] profile, "production" unless the file says otherwise, and a daemon on a host that does not
confine qemu refuses to start, with the reason in the journal (supervisor/confinement.py).

Stopping it sends SIGTERM to the daemon alone (KillMode=mixed): the daemon destroys its VMs and
puts their stages back in the queue, which takes a few seconds per slot, well inside the stop
timeout; only what is left after it gets SIGKILL. libvirt's domains are not in the unit's
cgroup (libvirtd starts qemu), so the daemon's own clean-up is what ends them.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import click

from ..config import load_site
from ..errors import VmjudgeError
from .echo import echo
from .home import site_of

# Paths written into the unit as they are: systemd splits on spaces and expands % and $.
SAFE_PATH = re.compile(r"/[A-Za-z0-9_./-]*")
STOP_TIMEOUT = 120  # seconds: destroying each slot's domain and writing the queue, with room to spare


def executable() -> str:
    """The vmjudge command of this installation (its virtualenv's), not whichever is first on PATH."""
    beside = Path(sys.executable).with_name("vmjudge")
    found = str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("vmjudge")
    if found is None:
        raise VmjudgeError("the vmjudge command is not installed beside this Python: run `make setup` (or "
                           "`pip install .`) first, so that the unit has a command to start.")
    return found


def site_accel(home: Path) -> str:
    """The accelerator site.toml gives, without VMJUDGE_ACCEL of this shell: the unit's daemon's."""
    saved = os.environ.pop("VMJUDGE_ACCEL", None)
    try:
        return load_site(home).accel
    finally:
        if saved is not None:
            os.environ["VMJUDGE_ACCEL"] = saved


def unit_text(home: Path, slots: int, command: str) -> str:
    for what, value in (("home", str(home)), ("vmjudge command", command)):
        if not SAFE_PATH.fullmatch(value):
            raise VmjudgeError(f"the {what} {value!r} has characters a systemd unit would read otherwise (spaces, "
                               "quotes, % or $): use a path of letters, digits, '.', '_', '-' and '/'.")
    return f"""[Unit]
Description=vmjudge daemon ({home})
Documentation=file://{home}
Wants=libvirtd.service virtlogd.service
After=libvirtd.service virtlogd.service

[Service]
Type=simple
Environment=VMJUDGE_HOME={home}
ExecStart={command} daemon --slots {slots}
KillMode=mixed
KillSignal=SIGTERM
TimeoutStopSec={STOP_TIMEOUT}
Restart=on-failure
RestartSec=10

[Install]
WantedBy=multi-user.target
"""


@click.group()
def service() -> None:
    """Run the daemon as a systemd service."""


@service.command("install")
@click.option("--slots", type=click.IntRange(1, 64), default=1, show_default=True, help="VMs at a time.")
@click.option("--name", default="vmjudge", show_default=True, help="The unit's name (one per home).")
@click.option("--unit-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("/etc/systemd/system"),
              show_default=True, help="Where the unit is written.")
@click.option("--print", "print_only", is_flag=True, help="Print the unit; write nothing.")
@click.pass_context
def install(ctx: click.Context, slots: int, name: str, unit_dir: Path, print_only: bool) -> None:
    """Write a systemd unit for `vmjudge daemon` on this home, and say how to enable it."""
    site = site_of(ctx)
    text = unit_text(site.home.resolve(), slots, executable())
    if print_only:
        echo(text, nl=False)
        return
    if not name.replace("-", "").replace("_", "").isalnum():
        raise VmjudgeError(f"--name {name!r} is not a unit name: use letters, digits, '-' and '_'.")
    path = unit_dir / f"{name}.service"
    try:
        unit_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise VmjudgeError(f"cannot write {path} ({exc.strerror}): run it as root, or give --unit-dir.") from None
    echo(f"wrote {path}; enable and start it with:")
    echo("  systemctl daemon-reload")
    echo(f"  systemctl enable --now {name}.service")
    echo(f"and follow it with `journalctl -u {name} -f`; `systemctl stop {name}` puts running stages back in "
         "the queue.")
    echo("It runs under site.toml's [site] profile (\"production\" unless the file says \"trial\"), which refuses a "
         "host that does not confine qemu: run `vmjudge doctor` first." +
         "".join(f" {var}={os.environ[var]} in this shell is not written into the unit{also}."
                 for var, also in (("VMJUDGE_PROFILE", ""), ("VMJUDGE_ACCEL", ": the unit's daemon runs with [libvirt] "
                                   f"accel of site.toml ({site_accel(site.home)})")) if os.environ.get(var)))
