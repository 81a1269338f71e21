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
"""

import errno
import os
import re

from media import CDROM, HOME
from system import EntryFault, JobError, run_quiet

_PATH_RE = re.compile(r"^(/[A-Za-z0-9_.-]+)+$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def mount_code_dir(code):
    """`code`: job.json's {"path", "data", "from"} (vm/job.py CodeDir)."""
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
    run_quiet(["mount", "--bind", "-o", "ro", records, point])
    run_quiet(["mount", "-o", "remount,bind,ro,nosuid,nodev,noexec", point])
    os.makedirs(path, mode=0o755, exist_ok=True)
    if os.path.islink(path) or not os.path.isdir(path):
        raise JobError(f"the guest's {path} is not a directory the code can be given at")
    run_quiet(["mount", "--rbind", HOME, path])
