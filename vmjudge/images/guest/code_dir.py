"""DrivenData's runtime layout in the guest (#60): the entry's home, where prep installed its unzipped
submission, seen at the code directory (/code_execution), the working directory of its commands, with
the record set read-only in its data directory (/code_execution/data).

Made by the agent (root) after the home is mounted and the record sets' disks are, before any command:
no process of the entry's runs then, so nothing can stand in for the directories it makes. The data
directory is a new directory of root's in the home (prep refused a submission holding one, and an
earlier command's writing never reaches a later stage: each runs on a new overlay of prep's home), the
record set bound on it read-only, and the home bound, with it, at the code directory, which the agent
makes in the guest's root (memory, root's: the entry cannot write there). The data cannot be replaced
by the entry: a mount point is busy to rename and remove.

A stepped job's data is each command's own (enter_step, before each step, when no process of the entry's is
left): an overlay of the steps so far, read-only, over the code directory's data, and the CD, with every
step on it, kept from the entry (the agent's /media made root's alone).
Overlayfs reads its layers with the mounter's rights, so the entry reads the steps it is given and no other.
"""

import errno
import os
import re
import stat
import time

from media import CDROM, HOME
from run_guard import ENTRY_CGROUP
from system import EntryFault, JobError, run_quiet

_PATH_RE = re.compile(r"^(/[A-Za-z0-9_.-]+)+$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_STEP_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*$")


def mount_code_dir(code):
    """`code`: job.json's {"path", "data", "from", "stepped"} (vm/job.py CodeDir)."""
    path, data, source = (code.get(k) for k in ("path", "data", "from")) if isinstance(code, dict) else (None,) * 3
    if not (isinstance(path, str) and _PATH_RE.fullmatch(path) and ".." not in path.split("/")
            and isinstance(data, str) and _NAME_RE.fullmatch(data) and data not in (".", "..")
            and isinstance(source, str) and _NAME_RE.fullmatch(source) and source not in (".", "..")):
        raise JobError(f"job.json names a code directory wrongly: {code!r}")
    records = os.path.join(CDROM, source)
    if not os.path.isdir(records) or os.path.islink(records):
        raise JobError(f"the CD has no directory {source} to give as the data")
    point = os.path.join(HOME, data)
    try:
        os.mkdir(point, 0o755)  # never follows a link: one in its place is refused (FileExistsError)
    except FileExistsError:
        raise EntryFault("bad-archive", f"the entry's home already holds {data}, where the data goes") from None
    except OSError as exc:  # a home the submission filled to its last inode or block: the entry's doing
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise EntryFault("entry-too-large", "the submission fills its home disk, and the runtime needs room "
                                                "for its data directory: make it smaller") from None
        raise
    if code.get("stepped") is True:
        os.chmod(os.path.dirname(CDROM), 0o700)  # the replica's runner gives its /media back after the job
        # The base each step's data is mounted over: the point is never a bare directory of the entry's home,
        # which the entry could remove and put a link in the place of between two steps.
        run_quiet(["mount", "-t", "tmpfs", "-o", "ro,nosuid,nodev,noexec,size=4k,mode=0555", "vmjudge-nostep", point])
    else:
        run_quiet(["mount", "--bind", "-o", "ro", records, point])
        run_quiet(["mount", "-o", "remount,bind,ro,nosuid,nodev,noexec", point])
    os.makedirs(path, mode=0o755, exist_ok=True)
    if os.path.islink(path) or not os.path.isdir(path):
        raise JobError(f"the guest's {path} is not a directory the code can be given at")
    run_quiet(["mount", "--rbind", HOME, path])


def check_steps(job, i, cmd):
    """A command's steps: the job's code directory is stepped, and they are paths in its data set."""
    steps = cmd.get("steps")
    code = job.get("code")
    if not (isinstance(code, dict) and code.get("stepped") is True and cmd.get("cwd") == code.get("path")
            and isinstance(steps, list) and 0 < len(steps) <= 500
            and all(isinstance(s, str) and _STEP_RE.fullmatch(s) for s in steps)
            and all(isinstance(c, str) and _NAME_RE.fullmatch(c) and c not in (".", "..")
                    for c in cmd.get("collect", []))):
        raise JobError(f"command {i}'s steps are not a stepped code directory's: {steps!r}")


def enter_step(code, steps, collect):
    """Before a step, once no process of the entry's is left: the data directory shows `steps` (the
    latest first) and nothing else, and the files the step must leave are not there yet (the last step's
    are gone, whatever they were: a file, a link, a FIFO; a directory in the way stays, and the step
    leaves none)."""
    point = os.path.join(code["path"], code["data"])
    entry_gone()
    while _mounts_at(point) > 1:  # the last step's data, over the base (mount_code_dir)
        run_quiet(["umount", point])
    for name in collect:
        target = os.path.join(HOME, name)
        try:
            if not stat.S_ISDIR(os.lstat(target).st_mode):
                os.unlink(target)
        except OSError:  # gone, or the entry's own doing: the step is judged by what it leaves
            pass
    base = os.path.join(CDROM, code["from"])
    for step in steps:
        where = os.path.join(base, step)
        if not os.path.isdir(where) or os.path.islink(where):
            raise JobError(f"the data set {code['from']} on the CD has no step {step}")
    if len(steps) == 1:  # overlayfs stacks two layers at least
        run_quiet(["mount", "--bind", "-o", "ro", os.path.join(base, steps[0]), point])
        run_quiet(["mount", "-o", "remount,bind,ro,nosuid,nodev,noexec", point])
        return
    # Named from the set's directory (the mount's working directory): the shortest option, for the most steps.
    run_quiet(["mount", "-t", "overlay", "vmjudge-step", "-o",
               "ro,nosuid,nodev,noexec,lowerdir=" + ":".join(steps), point], cwd=base)


def _mounts_at(point):
    with open("/proc/self/mountinfo") as f:
        return sum(1 for line in f if line.split()[4] == point)


def entry_gone(seconds=5.0):
    """Wait until the entry's cgroup holds no process (each command's was killed as it ended); JobError if one
    is still there, which the kernel's cgroup.kill should have made impossible."""
    events = ENTRY_CGROUP + "/cgroup.events"
    deadline = time.monotonic() + seconds
    while True:
        with open(events) as f:
            if "populated 0" in f.read():
                return
        if time.monotonic() > deadline:
            raise JobError("a process of the entry's outlived its command: the next step cannot begin")
        time.sleep(0.01)
