"""The challenge's own build script, run inside the new guest root after its packages.

It runs offline on purpose: in a network namespace of its own (only a loopback that is
down), so a script that downloads fails on every host alike instead of building a
different image wherever the network happens to answer. Its pid namespace ends every
process it started when it ends or runs out of time; its mount namespace holds the
read-only view of the challenge's image/ directory and a scratch /tmp, both gone with it,
so neither the sources nor the build tree stay in root.sqfs.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..config import ImageRecipe
from ..errors import ImageError
from ..files import durable_write, sha256_file, stat_signature

MOUNT_POINT = "/run/vmjudge-build"
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
       "LANG": "C.UTF-8", "TMPDIR": "/tmp", "DEBIAN_FRONTEND": "noninteractive", "VMJUDGE_BUILD_DIR": MOUNT_POINT}
TAIL_LINES = 20
LINE_BYTES = 4096  # a longer line is cut: the output is shown, not kept whole
LISTED = 5000  # installed files named in the manifest; the count is always whole
# Not part of what the build installs: kernel file systems and the scratch areas.
UNLISTED = ("proc", "sys", "dev", "run", "tmp")

# Runs on the host inside the new namespaces: mounts that vanish with them, then the chroot.
_ENTER = """set -e
mount --bind "$1" "$2/run/vmjudge-build"
mount -o remount,bind,ro "$2/run/vmjudge-build"
mount --bind "$3" "$2/tmp"
mount -t tmpfs -o size=1g,mode=1777 tmpfs "$2/dev/shm"
shift 3
exec "$@"
"""

Progress = Callable[[str], None]


def tree_hash(directory: Path, known: Path | None = None) -> str:
    """The image/ directory by content: every path, whether it is executable, and its bytes.

    Permission bits other than x and times are left out: a checkout or a copy changes them
    without changing what the build does. Every VM stage finds its image by this key, so with
    `known` (a file of each file's stat signature and sha256 from the last pass) a file whose
    inode, size, mtime and ctime are unchanged is not read again: a challenge shipping hundreds
    of MB of weights there would otherwise pay for reading them at every stage."""
    digest = hashlib.sha256()
    before = _known_hashes(known)
    after: dict[str, list] = {}

    def unreadable(exc: OSError) -> None:
        raise ImageError(f"{exc.filename} cannot be read ({exc.strerror}): the image's key covers every file "
                         "under the challenge's image/ directory, so each must be readable.")

    for top, dirs, files in os.walk(directory, onerror=unreadable):
        dirs.sort()
        for name in sorted(dirs + files):
            path = Path(top) / name
            rel = path.relative_to(directory).as_posix()
            try:
                entry = _tree_entry(path, rel, before.get(rel), after)
            except OSError as exc:
                unreadable(exc)
            digest.update(entry.encode(errors="surrogateescape") + b"\n")
    if known is not None and after != before:
        with contextlib.suppress(OSError):  # only a shortcut: a key taken by a user who cannot write it is still right
            known.parent.mkdir(parents=True, exist_ok=True)
            durable_write(known, [json.dumps(after, sort_keys=True).encode()], mode=0o644, sync_dir=False)
    return digest.hexdigest()


def _known_hashes(known: Path | None) -> dict[str, list]:
    try:
        loaded = json.loads(known.read_text()) if known is not None else {}
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _tree_entry(path: Path, rel: str, seen: list | None, after: dict[str, list]) -> str:
    """The file's line of the tree's hash; `seen` its [signature, sha256] from the last pass, and
    what this pass found is put in `after`."""
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return f"l {rel}\0{os.readlink(path)}"
    if stat.S_ISDIR(st.st_mode):
        return f"d {rel}\0"
    if stat.S_ISREG(st.st_mode):
        signature = stat_signature(path)
        sha = seen[1] if isinstance(seen, list) and len(seen) == 2 and seen[0] == signature else sha256_file(path)
        if stat_signature(path) == signature:  # not written while it was read: safe to take without reading
            after[rel] = [signature, sha]
        return f"f{'x' if st.st_mode & 0o111 else '-'} {rel}\0{sha}"
    raise ImageError(f"{path} is neither a file, a directory nor a symbolic link: "
                     "keep only those under the challenge's image/ directory.")


def snapshot(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """What each file of the root is (mode, size, mtime, link target), to tell afterwards what the build changed."""
    seen = {}
    for top, dirs, files in os.walk(root):
        if top == str(root):
            dirs[:] = [d for d in dirs if d not in UNLISTED]
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
            seen["/" + os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns, target)
    return seen


def run_build(root: Path, recipe: ImageRecipe, tree: str, scratch: Path, progress: Progress) -> dict:
    """Run the recipe's build script in `root`; the manifest's record of it, or ImageError.

    `tree` is the hash of image/ that names the image: checked again afterwards, so that a file
    changed while the script read it cannot give an image whose key says other sources."""
    assert recipe.build is not None and recipe.build_dir is not None
    mount_point, tmp = root / MOUNT_POINT.lstrip("/"), root / "tmp"
    mount_point.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(exist_ok=True)
    before = snapshot(root)
    script = f"{MOUNT_POINT}/{recipe.build_script}"
    run = [script] if os.access(recipe.build_dir / recipe.build_script, os.X_OK) else ["/bin/sh", script]
    argv = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", f"--mount-proc={root}/proc",
            "/bin/sh", "-c", _ENTER, "enter", str(recipe.build_dir.resolve()), str(root), str(scratch),
            "chroot", str(root), "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in ENV.items()),
            "/bin/sh", "-c", f'cd {MOUNT_POINT} && exec "$@"', "build", *run]
    started = time.monotonic()
    scratch.mkdir()
    os.chmod(scratch, 0o1777)
    try:
        code, tail = _run(argv, recipe.build_timeout, progress)
    finally:
        os.rmdir(mount_point)
        shutil.rmtree(scratch)
    seconds = round(time.monotonic() - started, 1)
    if code != 0:
        what = (f"did not finish within {recipe.build_timeout:g} s" if code is None
                else f"failed (exit {code}) after {seconds:g} s")
        raise ImageError(f"the build script {recipe.build} {what}. It runs as root in the new guest root, without "
                         f"network, with the challenge's image/ directory read-only at {MOUNT_POINT}: ship "
                         "what it needs under image/. Its last lines:\n" + "\n".join(tail))
    if tree_hash(recipe.build_dir) != tree:
        raise ImageError(f"{recipe.build_dir} changed while the image was being built, so the image would not be "
                         "the one its key names: build it again once the directory is as it should be.")
    # A library installed under /usr/local/lib is found by the entry without LD_LIBRARY_PATH.
    subprocess.run(["chroot", str(root), "/bin/sh", "-c", "if command -v ldconfig >/dev/null; then ldconfig; fi"],
                   check=True, capture_output=True)
    after = snapshot(root)
    installed = sorted(path for path, what in after.items() if before.get(path) != what
                       and not stat.S_ISDIR(what[0]))
    return {"script": recipe.build, "sha256": sha256_file(recipe.build_dir / recipe.build_script),
            "tree_sha256": tree, "seconds": seconds, "installed_count": len(installed), "installed": installed[:LISTED]}


def _run(argv: list[str], timeout: float, progress: Progress) -> tuple[int | None, list[str]]:
    """Run the build, showing each line of its output; its exit code (None: out of time) and last lines."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

    def read() -> None:
        assert proc.stdout is not None
        while line := proc.stdout.readline(LINE_BYTES):
            text = line.decode(errors="replace").rstrip("\n")
            tail.append(text)
            progress("    | " + text)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code: int | None = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        # The pid namespace's first process dies with unshare (--kill-child), and the kernel
        # then ends every process left in it; the group kill covers unshare itself.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    reader.join(timeout=10)
    assert proc.stdout is not None
    proc.stdout.close()
    return code, list(tail)
