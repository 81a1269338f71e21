"""A container entry's own results for the training records, read on the host from its root's
squashfs in stage 1: what the quiz compares the entry's runs with, as it does an archive entry's
submitted files.

Every byte of the image is the entry's: a submitted path may be a link (to the host's
/etc/shadow, or to another file of the image), a directory of a million files, a FIFO or a file
of gigabytes. So the host first lists exactly those paths (`unsquashfs -lln` with `-max-depth`,
which follows no link and does not descend into a directory found there; its output read to a
bound), keeps the regular files, refuses anything else at a submitted path, and then reads each
file with `unsquashfs -cat` (which would follow a link inside the image, so it is only ever given
a path the listing showed to be a regular file), no more than the listed size plus one byte.
The squashfs is the judge's own file, made once and never changed, so what was listed is what is
read. Nothing of the image is written to the host but these files, under names of the
challenge's (the image's names never become host paths).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import private
from ..errors import EntryError, ImageError, InfrastructureError

TOP = "squashfs-root/"  # how unsquashfs names the root in its listing
LINE = 512  # bytes a listing line can need for one of our paths (mode, owner, size, time, the path)
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


@dataclass(frozen=True)
class ResultBounds:
    """The most the host reads: each submitted file (one larger could never match, as the judge
    keeps no more of a produced file), and all of them together."""

    per_file: int
    total: int


@dataclass(frozen=True)
class Listed:
    mode: str  # ls's: "-" a regular file, "l" a link, "d" a directory, …
    size: int


def _run_bounded(argv: list[str], limit: int, timeout: float) -> tuple[bytes, bool, int]:
    """A tool's stdout, at most `limit` bytes (True when it had more: the tool is then ended) and
    its exit status."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=ENV)
    except FileNotFoundError:
        raise ImageError("unsquashfs is not installed: install Debian's squashfs-tools (make setup does) and run "
                         "the stage again.") from None
    assert proc.stdout is not None
    chunks, got, over = [], 0, False
    try:
        while chunk := proc.stdout.read(min(1 << 16, limit + 1 - got)):
            chunks.append(chunk)
            got += len(chunk)
            if got > limit:
                over = True
                break
    finally:
        if over:
            proc.kill()
        proc.stdout.close()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise InfrastructureError("entry-root", f"unsquashfs did not finish within {timeout:.0f} s reading "
                                                    "the entry's submitted results.") from None
    return b"".join(chunks)[:limit], over, code


def list_paths(squashfs: Path, paths: list[str], timeout: float) -> dict[str, Listed]:
    """What the image holds at each of `paths` (absolute, all as deep as one another), by path;
    a path it does not hold is absent. A path listed twice (a name of the image's forging a line)
    is taken as not a regular file."""
    depth = max(p.strip("/").count("/") + 1 for p in paths)
    names = [p.lstrip("/") for p in paths]
    limit = LINE * (len(paths) + depth + 2)
    out, over, code = _run_bounded(["unsquashfs", "-lln", "-n", "-max-depth", str(depth), str(squashfs), *names],
                                   limit, timeout)
    if code != 0 and not over:
        raise InfrastructureError("entry-root", f"unsquashfs could not list the entry's root {squashfs} (exit status "
                                                f"{code}): it was made by the judge and should be readable.")
    wanted = {TOP + n: p for p, n in zip(paths, names, strict=True)}
    found: dict[str, Listed] = {}
    for line in out.decode("utf-8", "replace").splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6:
            continue
        mode, size, rest = fields[0], fields[2], fields[5]
        name = rest.split(" -> ", 1)[0] if mode.startswith("l") else rest
        if name in wanted:
            path = wanted[name]
            seen = path in found
            found[path] = Listed("?" if seen else mode[:1], int(size) if size.isdigit() and not seen else 0)
    if over:  # only a directory at a path could list this much, and -max-depth stops that: treat all as suspect
        return {p: Listed("?", 0) for p in found}
    return found


def read_submitted(squashfs: Path, paths: Mapping[str, str], dest: Path, bounds: ResultBounds,
                   timeout: float = 120.0) -> int:
    """Each regular file of the image at `paths` (record -> absolute path in the image) written to
    dest/<path without its leading "/">; a path the image does not hold is left out (the quiz
    then says the entry has no such file). Returns how many were written. Anything but a regular
    file at a path, a file over bounds.per_file or files over bounds.total together are the
    entry's (EntryError); unsquashfs failing on the judge's own squashfs is the judge's."""
    if not paths:
        return 0
    listed = list_paths(squashfs, sorted(set(paths.values())), timeout)
    odd = sorted(p for p, item in listed.items() if item.mode != "-")
    if odd:
        raise EntryError("bad-image", f"The image's {odd[0]} is not a regular file"
                                      f"{f' (nor are {len(odd) - 1} more submitted results)' if len(odd) > 1 else ''}"
                                      ": put the results themselves there, not links, directories or devices, and "
                                      "submit again.")
    big = sorted((item.size, p) for p, item in listed.items() if item.size > bounds.per_file)
    if big:
        raise EntryError("answers-too-large", f"The image's {big[-1][1]} is {big[-1][0]:,} bytes, more than the "
                                              f"{bounds.per_file:,} bytes the judge keeps of a result file, so it "
                                              "could never match: submit the results the command really writes.")
    total = sum(item.size for item in listed.values())
    if total > bounds.total:
        raise EntryError("answers-too-large", f"The image's submitted results are {total:,} bytes together, more "
                                              f"than the {bounds.total:,} bytes of results a stage keeps: submit the "
                                              "results the command really writes.")
    for path, item in sorted(listed.items()):
        data, over, code = _run_bounded(["unsquashfs", "-cat", str(squashfs), path.lstrip("/")], item.size, timeout)
        if over or code != 0 or len(data) != item.size:
            raise InfrastructureError("entry-root", f"unsquashfs read {len(data)}{'+' if over else ''} bytes of "
                                                    f"{path} in {squashfs}, which its listing gave as {item.size} "
                                                    f"(exit status {code}).")
        target = stored(dest, path)
        for parent in reversed(target.relative_to(dest).parents):  # the challenge's names, made private
            private.make_dir(dest / parent)
        with private.create(target) as f:
            f.write(data)
    return len(listed)


def stored(dest: Path, path: str) -> Path:
    """Where read_submitted put the file of `path` (absolute in the image)."""
    return dest / path.lstrip("/")

