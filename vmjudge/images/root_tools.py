"""The well-kept tools a container entry's root is made with, run with a deadline and a bounded
log: skopeo (Debian's; from a saved image to an OCI layout), umoci (the layout's layers applied
into a tree, whiteouts, opaque directories and hard links by the OCI rules) and mksquashfs.

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
import subprocess
from pathlib import Path

from ..errors import EntryError, ImageError, InfrastructureError

TAIL = 2048  # bytes of a failing tool's log quoted
FULL = 64 << 20  # free bytes under which a tool's failure is taken for the disk's
# What a tool says when the host, not the image, failed it.
HOST_FAULTS = ("input/output error", "read-only file system", "cannot allocate memory", "too many open files",
               "no space left", "disk quota", "resource temporarily unavailable")
PACKAGES = {"skopeo": "skopeo", "umoci": "umoci", "mksquashfs": "squashfs-tools"}


def _env(work: Path) -> dict[str, str]:
    tmp = work / "tmp"
    tmp.mkdir(exist_ok=True)
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(work), "TMPDIR": str(tmp), "LC_ALL": "C.UTF-8"}


def _tail(log: Path) -> str:
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - TAIL))
        return f.read().decode("utf-8", "replace").strip()


def run_tool(argv: list[str], work: Path, timeout: float) -> None:
    """Run one tool in `work` (its output to a log there), within `timeout` seconds."""
    tool = argv[0]
    log = work / f"{tool}.log"
    with open(log, "wb") as out:
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  env=_env(work), cwd=work, timeout=timeout, check=False)
        except FileNotFoundError:
            raise ImageError(f"{tool} is not installed: install Debian's {PACKAGES.get(tool, tool)} (make setup does) "
                             "and run the stage again.") from None
        except subprocess.TimeoutExpired:
            raise InfrastructureError("entry-root-timeout", f"{tool} did not finish within {timeout:.0f} s while "
                                                            "making the entry's root.") from None
    if proc.returncode != 0:
        said = _tail(log)
        # Its log may be on the very disk that filled, and hold nothing: the disk says so then.
        if "no space left on device" in said.lower() or shutil.disk_usage(work).free < FULL:
            raise InfrastructureError("host-disk-full", f"{tool} ran out of disk space while making the entry's root "
                                                        f"in {work}: {said[-300:] or 'it could not even log'}")
        layer_fault = _layer_fault(tool, said, work)
        if layer_fault is not None:
            raise layer_fault
        raise InfrastructureError("entry-root", f"{tool} failed (exit status {proc.returncode}) on an image that "
                                                f"passed admission; its last words: {said}")


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
    """Remove a work tree whatever it holds, never following a link: with GNU rm, which walks
    any depth (Python 3.11's shutil.rmtree recurses, and an image's links can make a tree
    thousands of directories deep: `l -> /x/x/…/x` and then `l/f` in a later layer). A tree left
    behind is removed by the next call for the same root, so a failure here is not raised."""
    if os.path.lexists(path):
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=3600, check=False)
