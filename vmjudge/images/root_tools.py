"""The well-kept tools a container entry's root is made with, run with a deadline, a bounded
log and a bounded disk: skopeo (Debian's; from a saved image to an OCI layout), umoci (the
layout's layers applied into a tree, whiteouts, opaque directories and hard links by the OCI
rules) and mksquashfs.

The disk: skopeo and umoci write only into a scratch file system of their own (`scratch`: ext4
in a sparse file, mounted nodev,nosuid,noexec), sized from what admission found the image to
hold, so that whatever the tools make of an image, they cannot write more than that on the
judge's disk (a sparse file of 4 EiB that Go's reader would make of a header tarfile reads as
512 bytes, say: admission now refuses it, and this bounds what it or the next such difference
could cost). Each tool also runs under a file size limit (prlimit --fsize), which bounds
mksquashfs's output, written beside the scratch file system. A tool that fills its space or
passes its file size limit unpacked more than the image declared: the entry's verdict.

The image was checked through at admission (archive/container_image.py), so a tool failing on
it is taken for the judge's failure (InfrastructureError "entry-root", retried and then parked
for the organiser with the tool's last words), never charged to the entry on a guess; a full
disk is "host-disk-full", a tool past its deadline "entry-root-timeout". The one exception is
umoci refusing one entry of a layer for what the layers do to each other, which admission
cannot see without applying them (_layer_fault): that is the entry's (EntryError "bad-image"). Each tool runs
with a small environment of its own: HOME and TMPDIR in the work directory (skopeo unpacks an
OCI archive into TMPDIR, which must be on the disk whose room was checked), and skopeo's
signature policy off (`--insecure-policy`: a local file has no signatures to check; this only
spares reading /etc/containers/policy.json).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import EntryError, ImageError, InfrastructureError

TAIL = 2048  # bytes of a failing tool's log quoted
FULL = 64 << 20  # free bytes under which a tool's failure is taken for the disk's
SCRATCH_FULL = 4 << 20  # free bytes of a scratch file system under which a tool filled it
# What a tool says when the host, not the image, failed it.
HOST_FAULTS = ("input/output error", "read-only file system", "cannot allocate memory", "too many open files",
               "no space left", "disk quota", "resource temporarily unavailable")
PACKAGES = {"skopeo": "skopeo", "umoci": "umoci", "mksquashfs": "squashfs-tools", "mkfs.ext4": "e2fsprogs"}
# What a tool says when the image unpacked to more than the space sized from what it declared.
TOO_BIG = ("no space left on device", "file too large", "disk quota exceeded")
# What Go's tar reader or umoci says when the image it reads is not the one admission read.
NOT_ADMITTED = ("invalid tar header", "diffid mismatch", "archive/tar:")
INODE_BYTES = 256  # ext4's inode, of which the scratch file system has one per member it may hold
TOO_BIG_SENTENCE = ("The image unpacked to more than its files' headers declare, which no image tool writes: build "
                    "the image with `docker build` or `podman build`, save it and submit again.")


def _env(work: Path) -> dict[str, str]:
    tmp = work / "tmp"
    tmp.mkdir(exist_ok=True)
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(work), "TMPDIR": str(tmp), "LC_ALL": "C.UTF-8"}


def _tail(log: Path) -> str:
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - TAIL))
        return f.read().decode("utf-8", "replace").strip()


def run_tool(argv: list[str], work: Path, timeout: float, file_limit: int | None = None,
             host: Path | None = None) -> None:
    """Run one tool in `work` (its output to a log there), within `timeout` seconds, its files no
    larger than `file_limit` bytes. `host`: a directory on the host's disk when `work` is in a
    scratch file system, whose space is then the image's, not the host's."""
    tool = argv[0]
    log = work / f"{tool}.log"
    limit = ["prlimit", f"--fsize={file_limit}", "--"] if file_limit is not None else []
    with open(log, "wb") as out:
        try:
            proc = subprocess.run(limit + argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  env=_env(work), cwd=work, timeout=timeout, check=False)
        except FileNotFoundError:
            raise ImageError(f"{tool} is not installed: install Debian's {PACKAGES.get(tool, tool)} (make setup does) "
                             "and run the stage again.") from None
        except subprocess.TimeoutExpired:
            raise InfrastructureError("entry-root-timeout", f"{tool} did not finish within {timeout:.0f} s while "
                                                            "making the entry's root.") from None
    if proc.returncode != 0:
        raise _failure(tool, proc.returncode, _tail(log), work, host)


def _failure(tool: str, status: int, said: str, work: Path, host: Path | None) -> Exception:
    """Whose fault a tool's failure is: the host's disk, the image's size, the image, the judge."""
    lowered = said.lower()
    if shutil.disk_usage(host or work).free < FULL:  # its log may be on the very disk that filled, and hold nothing
        return InfrastructureError("host-disk-full", f"{tool} ran out of disk space while making the entry's root "
                                                     f"in {work}: {said[-300:] or 'it could not even log'}")
    if any(h in lowered for h in ("input/output error", "cannot allocate memory", "too many open files")):
        return InfrastructureError("entry-root", f"{tool} failed (exit status {status}) on the host's side; its last "
                                                 f"words: {said}")
    full = host is not None and shutil.disk_usage(work).free < SCRATCH_FULL
    if status == -signal.SIGXFSZ or full or any(w in lowered for w in TOO_BIG):
        return EntryError("bad-image", TOO_BIG_SENTENCE)
    if any(w in lowered for w in NOT_ADMITTED):
        return EntryError("bad-image", "The image archive, read by skopeo and umoci, is not the image admission "
                                       "read (a tar header the two read differently): build the image with "
                                       "`docker build` or `podman build`, save it and submit again.")
    layer_fault = _layer_fault(tool, said, work)
    if layer_fault is not None:
        return layer_fault
    return InfrastructureError("entry-root", f"{tool} failed (exit status {status}) on an image that passed "
                                             f"admission; its last words: {said}")


@contextmanager
def scratch(work: Path, size: int, inodes: int, timeout: float) -> Iterator[Path]:
    """A file system of `size` bytes and `inodes` files for the tools, in a sparse file in `work`,
    mounted nodev,nosuid,noexec at work/scratch until the block ends; what is written in it
    takes the host's disk as it is written, never more than `size`."""
    backing, mount_point = work / "scratch.ext4", work / "scratch"
    with open(backing, "wb") as f:
        f.truncate(size)
    mount_point.mkdir()
    run_tool(["mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", "-N", str(inodes), "-O", "^has_journal",
              "-E", "nodiscard,lazy_itable_init=1", str(backing)], work, timeout)
    try:
        mounted = subprocess.run(["mount", "-t", "ext4", "-o", "loop,nodev,nosuid,noexec", str(backing),
                                  str(mount_point)], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        _unmount(mount_point)  # it may have mounted just as its time ran out
        raise InfrastructureError("entry-root-timeout", f"mounting the scratch file system for the entry's root took "
                                                        f"more than {timeout:.0f} s.") from None
    if mounted.returncode != 0:
        raise InfrastructureError("entry-root", f"could not mount the scratch file system for the entry's root "
                                                f"({mounted.stderr.strip()[:300]}): the judge runs as root, with loop "
                                                "devices (modprobe loop).")
    try:
        yield mount_point
    finally:
        _unmount(mount_point)
        backing.unlink(missing_ok=True)


def _unmount(path: Path) -> None:
    subprocess.run(["umount", "--lazy", str(path)], stdin=subprocess.DEVNULL, capture_output=True, timeout=600,
                   check=False)


def _mounts_under(path: Path) -> list[Path]:
    """Mount points at or below `path` (a crash's scratch file system), deepest first."""
    prefix = str(path)
    found = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                point = line.split()[4].encode().decode("unicode_escape")
                if point == prefix or point.startswith(prefix + "/"):
                    found.append(Path(point))
    except OSError:
        return []
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _layer_fault(tool: str, said: str, work: Path) -> EntryError | None:
    """umoci's refusal to apply one entry of a layer ("unpack entry: PATH: …"), which is the
    image's own doing when the host's disk and memory are not to blame: a file under what a lower
    layer made a file (`a`, then `a/b` with no directory `a`), a path a link makes too long, and
    the like, which admission cannot see without applying the layers itself. The sentence
    quotes umoci without the host's paths."""
    lowered = said.lower()
    if tool != "umoci" or "unpack entry:" not in said or any(h in lowered for h in HOST_FAULTS):
        return None
    words = said[said.index("unpack entry:") + len("unpack entry:"):].strip()
    words = words.replace(str(work / "rootfs"), "").replace(str(work), "…").splitlines()[0][:300]
    return EntryError("bad-image", f"The image's layers cannot be applied one over another (umoci: {words}): a layer "
                                   "puts something where a lower layer left a file or link that no build tool would "
                                   "replace that way; build the image with `docker build` or `podman build`, save it "
                                   "and submit again.")


def version(tool: str) -> str:
    """A tool's version line, for the root's record ("" when it cannot say)."""
    flag = "-version" if tool == "mksquashfs" else "--version"
    try:
        out = subprocess.run([tool, flag], capture_output=True, text=True, timeout=30, check=False,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.splitlines()[0].strip() if out else ""


def remove_tree(path: Path) -> None:
    """Remove a work tree whatever it holds, a scratch file system left mounted in it (by a
    crash) unmounted first, never following a link: with GNU rm, which walks
    any depth (Python 3.11's shutil.rmtree recurses, and an image's links can make a tree
    thousands of directories deep: `l -> /x/x/…/x` and then `l/f` in a later layer). A tree left
    behind is removed by the next call for the same root, so a failure here is not raised."""
    for point in _mounts_under(path):
        _unmount(point)
    if os.path.lexists(path):
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=3600, check=False)
