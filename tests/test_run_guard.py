"""The guest's run guard (images/guest/run_guard.py) and command loop (command.py) on the host,
with real processes: the guest modules are plain standard-library Python, run here as the agent
runs them (their directory first on the path, -I -S) in a process of their own, which becomes a
subreaper as the agent does and whose waitpid(-1) reaps touch no child of pytest's.

At a timeout the command is killed before anyone waited for it, and kill_user's reap (the
agent collects every ended child between its passes) could collect it first: proc.wait() then
found no child, and subprocess reads that as exit code 0. So a command killed at its limit was
reported as "timeout" with exit code 0 rather than -9. The command here leaves a process in a
session of its own (setsid), as entries do, so that kill_user finds a live process and reaps."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import subprocess
import sys

from vmjudge.images import build

from .needs import cannot_run

WATCH = '''
import json, os, pwd, sys, time
sys.path.insert(0, sys.argv[1])
import command, run_guard
uid, timeout, script = int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
run_guard.become_subreaper()
entry = pwd.struct_passwd(("entry", "x", uid, uid, "", "/", "/bin/sh"))

class Channel:  # what watch() sends on: nothing to send it to here
    last_sent = time.monotonic()
    def send(self, kind, data=b""): self.last_sent = time.monotonic()
    def send_json(self, kind, payload): self.last_sent = time.monotonic()

class Cmd:
    heartbeat = 2.0

Cmd.timeout = timeout
ended = []
for _ in range(3):
    read_fd, write_fd = os.pipe()
    argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sh", "-c", script]
    proc = run_guard.start_command(argv, "root", entry, "/", write_fd)  # as uid by setpriv: no entry cgroup here
    os.close(write_fd)
    status = command.watch(Channel(), Cmd(), proc, {read_fd: ("out", command.OutputCap(4096, 0))}, time.monotonic(),
                           entry, True)
    os.close(read_fd)
    run_guard.kill_user(uid)
    run_guard.reap()
    ended.append([status, proc.returncode])
print(json.dumps(ended))
'''


def idle_uid() -> int:
    """A uid that no account names and no process has: kill_user kills everything it owns."""
    owners = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            owners.add(os.stat(f"/proc/{pid}").st_uid)
    taken = {p.pw_uid for p in pwd.getpwall()} | owners
    return next(uid for uid in range(59000, 60000) if uid not in taken)


def watched(script: str, timeout: float) -> list[list]:
    if os.geteuid() != 0:
        cannot_run("the run guard kills another user's processes: root only")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", WATCH, str(build.GUEST_DIR), str(idle_uid()), str(timeout),
                           script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_command_killed_at_its_limit_reads_minus_9_not_0():
    """Three times over: before the fix every run read ["timeout", 0]."""
    assert watched("setsid sleep 60 & exec sleep 60", timeout=1.0) == [["timeout", -9]] * 3


def test_a_command_that_ends_by_itself_keeps_its_own_exit_code():
    assert watched("setsid sleep 60 & exit 3", timeout=30.0) == [[None, 3]] * 3
    assert watched("kill -TERM $$", timeout=30.0) == [[None, -15]] * 3
