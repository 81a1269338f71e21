"""What the host can read of a running VM's qemu process: who it runs as, what the kernel still
lets it do, its command line and the memory its cgroup may hold.

An entry that breaks out of the guest kernel lands in this process, so these are the walls it
then meets. They are read from /proc and the cgroup tree, never from what libvirt says it did:
`vmjudge doctor` and the tests see what the kernel enforces. The process is found by libvirt's
pid file (RUN_DIR/NAME.pid, qemu:///system's) rather than by scanning /proc for the name: the
file is libvirt's own record of the pid it started for that domain, and the command line read
back must carry `-name guest=NAME,` or the pid is refused (a stale file whose pid was reused).
Every root is a parameter so that the tests can give recorded files for the cases this host
cannot show (qemu as root, no seccomp).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RUN_DIR = Path("/run/libvirt/qemu")
PROC = Path("/proc")
CGROUPS = Path("/sys/fs/cgroup")
# cgroup v2 writes "max" for no limit; v1 a page-rounded LONG_MAX.
_V1_UNLIMITED = 1 << 62


class NotFound(Exception):
    """The domain's qemu process is not there to read (gone, or libvirt is not this machine's)."""


@dataclass(frozen=True)
class QemuProcess:
    pid: int
    uid: int  # the real uid: libvirt's `user` in qemu.conf
    gid: int
    cap_eff: int  # effective capabilities, as the bit mask /proc shows in hex
    cap_prm: int  # permitted: what it could make effective again (capset), so none either
    no_new_privs: int  # 1: no exec can ever gain privileges (setuid, file capabilities)
    seccomp: int  # 0 none, 1 strict, 2 a filter (qemu's -sandbox)
    argv: tuple[str, ...]
    memory_limit: int | None  # bytes: the tightest limit of its memory cgroup and those above it
    limit_file: str | None  # where that limit was read, or None when there is none


def status_fields(text: str) -> dict[str, str]:
    """/proc/PID/status as a dict of its fields, each value stripped."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key] = value.strip()
    return fields


def qemu_pid(name: str, run_dir: Path = RUN_DIR, proc: Path = PROC) -> int:
    try:
        pid = int((run_dir / f"{name}.pid").read_text().strip())
        argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError) as exc:
        raise NotFound(f"no qemu process for domain {name} ({exc})") from None
    if not any(arg.decode(errors="replace").startswith(f"guest={name},") for arg in argv):
        raise NotFound(f"pid {pid} in {run_dir / (name + '.pid')} is not domain {name}'s qemu")
    return pid


def read_qemu(pid: int, proc: Path = PROC, cgroups: Path = CGROUPS) -> QemuProcess:
    try:
        status = status_fields((proc / str(pid) / "status").read_text())
        argv = tuple(a.decode(errors="replace") for a in (proc / str(pid) / "cmdline").read_bytes().split(b"\0") if a)
        cgroup = (proc / str(pid) / "cgroup").read_text()
    except OSError as exc:
        raise NotFound(f"qemu process {pid} could not be read ({exc})") from None
    limit, where = memory_limit(cgroup, cgroups)
    return QemuProcess(pid=pid, uid=int(status["Uid"].split()[0]), gid=int(status["Gid"].split()[0]),
                       cap_eff=int(status["CapEff"], 16), cap_prm=int(status["CapPrm"], 16),
                       no_new_privs=int(status.get("NoNewPrivs", "0")), seccomp=int(status.get("Seccomp", "0")),
                       argv=argv, memory_limit=limit, limit_file=where)


def memory_limit(cgroup: str, cgroups: Path = CGROUPS) -> tuple[int | None, str | None]:
    """The tightest memory limit over the process's memory cgroup and its parents (a limit on a
    parent binds the child too), from /proc/PID/cgroup: the v1 memory controller's
    memory.limit_in_bytes when it is mounted (a hybrid host, such as this project's machines),
    else cgroup v2's memory.max (libvirt under systemd: machine.slice/machine-qemu…scope)."""
    v1 = v2 = None
    for line in cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            v1 = path
        elif controllers == "":
            v2 = path
    if v1 is not None and (cgroups / "memory").is_dir():
        return _tightest(cgroups / "memory", v1, "memory.limit_in_bytes")
    if v2 is not None:
        base = cgroups / "unified" if (cgroups / "unified" / "cgroup.controllers").is_file() else cgroups
        return _tightest(base, v2, "memory.max")
    return None, None


def _tightest(base: Path, path: str, name: str) -> tuple[int | None, str | None]:
    best: tuple[int | None, str | None] = (None, None)
    directory = base / path.lstrip("/")
    while True:
        try:
            text = (directory / name).read_text().strip()
        except OSError:
            text = "max"
        if text != "max" and int(text) < _V1_UNLIMITED and (best[0] is None or int(text) < best[0]):
            best = (int(text), str(directory / name))
        if directory == base:
            return best
        directory = directory.parent
