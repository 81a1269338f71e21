"""The run guard: what confines one command and ends it, with everything it started.

An entry command runs as the unprivileged user `entry` in a session of its own, in the
entry's memory cgroup, with a cap on its processes and an IPC namespace of its own. When it
ends or its time is up, its session is killed and then every process the entry user still
has, from root, so nothing an entry starts outlives its command.

Both the guest agent and the replica's check (vmjudge.replica.local, which runs the agent
and must leave no entry process behind either) import this file, the first as a plain file
beside agent.py, the second as part of vmjudge: so it imports nothing beside it, only the
standard library. ctypes is imported where used, as the agent's other optional modules are:
every import is paid at each boot, before the first frame, under emulation.
"""

import contextlib
import functools
import os
import pwd
import resource
import signal
import subprocess

ENTRY_MAX_PROCESSES = 1024  # per entry user: enough for any real program, not for a fork bomb
CGROUPS = "/sys/fs/cgroup"
ENTRY_CGROUP = CGROUPS + "/entry"  # every entry command runs in it, capped below the VM's memory
CLONE_NEWIPC = 0x08000000
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38


def start_command(argv: list[str], user: str, entry: pwd.struct_passwd, home: str,
                  out_fd: int, cgroup: str = ENTRY_CGROUP, cwd: str | None = None) -> subprocess.Popen[bytes]:
    """Start `argv` in `home` (or `cwd`) as `user` ("entry" or "root"), its output and errors to `out_fd`,
    in a session of its own (so its whole process group can be killed); an entry command in
    `cgroup` (the entry's, or a child of it that measures the one command)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": home,
           "USER": user, "LOGNAME": user, "SHELL": "/bin/sh", "TMPDIR": "/tmp"}
    return subprocess.Popen(
        argv, cwd=cwd or home, env=env, stdin=subprocess.DEVNULL, stdout=out_fd, stderr=out_fd,
        start_new_session=True, close_fds=True,
        preexec_fn=(lambda: become_entry(entry, cgroup)) if user == "entry" else None)


def become_entry(entry: pwd.struct_passwd, cgroup: str = ENTRY_CGROUP) -> None:
    """In the child, before exec: killable by the OOM killer again (the agent is not), in the
    entry's memory cgroup, a cap on processes against fork bombs, a System V IPC namespace of
    its own (its shared memory dies with the command instead of pinning the VM's memory for
    the next one), no gaining privileges through setuid programs, then the entry user's
    identity. The OOM setting comes first: once the uid changes, /proc/self belongs to root
    until exec."""
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("0")
    with open(cgroup + "/cgroup.procs", "w") as f:  # root's file: before the uid changes
        f.write("0")
    libc = _libc()
    if libc.unshare(CLONE_NEWIPC) != 0:
        raise OSError(ctypes_errno(), "cannot make an IPC namespace for the command")
    with open("/proc/sys/kernel/shm_rmid_forced", "w") as f:  # a setting of each IPC namespace
        f.write("1")
    confine(libc)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)


def confine(libc) -> None:
    """In the child, before its ids change: a cap on the user's processes against fork bombs, no
    core files, and no gaining privileges through setuid programs or file capabilities. Shared
    with a command that runs in the entry's own root (root_start.py)."""
    resource.setrlimit(resource.RLIMIT_NPROC, (ENTRY_MAX_PROCESSES, ENTRY_MAX_PROCESSES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes_errno(), "cannot set no_new_privs for the command")


def stop_command(proc: subprocess.Popen[bytes], entry: pwd.struct_passwd, as_entry: bool) -> None:
    """SIGKILL the command's process group and, for entry commands, every process the entry
    user has; either may already be gone (the race at a deadline). At a timeout the command
    is killed before anyone waited for it, so kill_user's reap may collect it: its status is
    then kept on `proc`, whose own wait would find no child and read 0 (subprocess's answer
    to ECHILD) for a command that was killed."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if as_entry:
        reaped = kill_user(entry.pw_uid)
        if proc.pid in reaped and proc.returncode is None:
            proc.returncode = os.waitstatus_to_exitcode(reaped[proc.pid])


def kill_user(uid: int, passes: int = 50) -> dict[int, int]:
    """SIGKILL every process of `uid`, from root: nothing the entry does can stop it (a killer
    that took the entry's uid could itself be stopped by the entry, and wait for ever). Passes
    repeat until one finds no live process, so a process forked meanwhile is caught too.
    Between passes the caller's ended children are reaped (the agent is the subreaper of what
    it killed); returns their wait statuses by pid, for a caller whose own child was among them."""
    wanted = str(uid)
    reaped: dict[int, int] = {}
    for _ in range(passes):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/status") as f:
                    status = f.read()
            except OSError:
                continue
            state: list[str] | None = None
            uids: list[str] = []
            for line in status.splitlines():
                if line.startswith("State:"):
                    state = line.split()[1:2]
                elif line.startswith("Uid:"):
                    uids = line.split()[1:]
                    break
            if wanted not in uids or state in (["Z"], ["X"]):
                continue
            try:
                os.kill(int(name), signal.SIGKILL)
                found = True
            except OSError:
                pass
        if not found:
            return reaped
        reaped.update(reap())
    return reaped


def reap() -> dict[int, int]:
    """Collect orphans that were re-parented to the agent (it is their subreaper), and any
    child of its own that has ended; returns the wait status of each, by pid."""
    reaped: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped[pid] = status


def protect_from_oom() -> None:
    """An entry that eats all memory must lose its own processes, never the agent."""
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("-1000")


def become_subreaper() -> None:
    """Orphans of entry processes come to the agent (not PID 1), which reaps them."""
    _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


@functools.cache
def _libc():
    """libc through ctypes, loaded once (before any fork: a child must not import)."""
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def ctypes_errno() -> int:
    import ctypes
    return ctypes.get_errno()
