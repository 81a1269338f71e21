"""Go's archive/tar, the reader skopeo and umoci unpack with, built from tests/go_tar with the
host's Go (Debian's golang-go, as skopeo and umoci are built with it) and asked to list tars.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

from vmjudge.archive.image_tar import TarReader, TarRefused

from .needs import cannot_run

SOURCE = Path(__file__).parent / "go_tar"


def build(out: Path) -> Path:
    """The lister, built into `out`."""
    if shutil.which("go") is None:
        cannot_run("Go is not installed (make setup installs Debian's golang-go)")
    binary = out / "tarlist"
    env = {**os.environ, "GOCACHE": str(out / "gocache"), "GOPATH": str(out / "gopath"), "GOFLAGS": "-mod=mod",
           "CGO_ENABLED": "0"}
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=SOURCE, env=env, check=True, capture_output=True,
                   timeout=600)
    return binary


def go_listings(binary: Path, paths: list[Path]) -> list[dict]:
    """Each tar as Go reads it: {"members": [...], "error": "..."} (error "" when it read to the end)."""
    out = subprocess.run([str(binary), *map(str, paths)], check=True, capture_output=True, timeout=600).stdout
    return [json.loads(line) for line in out.splitlines()]


def ours(data: bytes) -> list[dict] | str:
    """The tar as vmjudge reads it, in the lister's terms, or the sentence refusing it."""
    reader = TarReader(io.BytesIO(data))
    members = []
    try:
        for m in reader:
            digest, read = hashlib.sha256(), 0
            for chunk in reader.data():
                digest.update(chunk)
                read += len(chunk)
            members.append({"name": m.name.encode("utf-8", "surrogateescape").hex(), "type": m.type.decode(),
                            "size": m.size, "linkname": m.linkname.encode("utf-8", "surrogateescape").hex(),
                            "mode": m.mode, "uid": m.uid, "gid": m.gid, "sha256": digest.hexdigest(), "read": read})
    except TarRefused as exc:
        return str(exc)
    return members


def comparable(go: dict) -> list[dict]:
    """Go's members as `ours` gives them (the permission bits of the mode alone)."""
    return [{**m, "mode": m["mode"] & 0o7777} for m in go["members"] or []]
