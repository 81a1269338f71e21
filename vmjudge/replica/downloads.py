"""What the portal offers for download (issue 58), each made once and kept in HOME/downloads:
the training set as one archive, the sample entry as an archive it can upload as it is, and the
replica ISO.

Each is named by a key of what it is made from (every file's path, size and time; the replica
also its image and the judge's own code), so a changed training set makes a new archive and an
unchanged one is never made twice; its sha256 is kept beside it for the page to show. The archives
are the same bytes for the same files on any host (names sorted, owners, modes and times fixed,
gzip's own time zero), so a participant can check one against another host's sha256.

The training archive holds exactly what the replica carries (build.training_files): RECORDS, the
records' files and REFERENCE*, never a file of a test set or a reference. A file whose real path
lies in one of those (a link in the training set pointing there) stops the making of the archive
with the organiser's error, so no route can serve one.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config import Challenge, Site
from ..config.portal_page import overlaps
from ..errors import ConfigError
from ..files import sha256_file
from ..images.build import find_image
from ..sources import package_files
from .build import build_replica, training_files


@dataclass(frozen=True)
class Download:
    path: Path  # where it is kept, named by its key
    name: str  # the name a browser saves it as: an entry's archive named as upload takes it
    sha256: str
    size: int


def _key(files: dict[str, Path], *more: str) -> str:
    h = hashlib.sha256()
    for part in more:
        h.update(part.encode() + b"\0")
    for name, path in sorted(files.items()):
        st = path.stat()
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:20]


def _checked(ch: Challenge, files: dict[str, Path]) -> dict[str, Path]:
    for name, path in files.items():
        if overlaps(path, ch.secret_dirs):
            raise ConfigError(f"{path} (offered as {name}) is, or links to, a file of a test set or a reference, which "
                              "never leave the judge: replace the link with a copy of a training file.")
    return files


def _zip(files: dict[str, Path], out: Path) -> None:
    """A zip of `files` (a submission's sample): the same files give the same bytes."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if os.access(files[name], os.X_OK) else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(files[name], "rb") as f, z.open(info, "w") as w:
                shutil.copyfileobj(f, w)


def _tar_gz(files: dict[str, Path], out: Path) -> None:
    """A gzip'd tar of `files` at their names: the same files give the same bytes."""
    with open(out, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = files[name].stat().st_size, 0
            info.mode = 0o755 if os.access(files[name], os.X_OK) else 0o644  # setup.sh and next.sh stay runnable
            with open(files[name], "rb") as f:
                tar.addfile(info, f)


def _kept(directory: Path, name: str, served: str, make: Callable[[Path], None]) -> Download:
    """HOME/downloads/NAME, made by `make` (into the path it is given) unless it is there; two
    callers at once make it once, and a making cut short leaves nothing that is taken for it."""
    directory.mkdir(parents=True, exist_ok=True)
    path, sums = directory / name, directory / f"{name}.sha256"
    with open(directory / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path.is_file() and sums.is_file()):
            part = directory / f".{name}.part"
            try:
                make(part)
                part.chmod(0o644)
                os.replace(part, path)
            finally:
                part.unlink(missing_ok=True)
            sums.write_text(f"{sha256_file(path)}  {name}\n")
    return _download(path, sums, served)


def _download(path: Path, sums: Path, served: str) -> Download:
    return Download(path=path, name=served, sha256=sums.read_text().split()[0], size=path.stat().st_size)


def _label(ch: Challenge) -> str:
    return ch.name + (f"-{ch.phase.name}" if ch.phase is not None else "")


def sample_files(ch: Challenge) -> dict[str, Path]:
    """The sample entry's files by their path in it (its directory's top is the archive's)."""
    if ch.portal.sample is None:
        return {}
    top = ch.directory / ch.portal.sample
    return {p.relative_to(top).as_posix(): p for p in sorted(top.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def _files(ch: Challenge, what: str) -> dict[str, Path]:
    return _checked(ch, training_files(ch) if what in ("training", "replica") else sample_files(ch))


def served_name(ch: Challenge, what: str) -> str:
    """The name it is downloaded as: the sample's is one upload takes as it is."""
    if what == "sample":
        return f"{ch.name}-sample-" + ("submission.zip" if ch.entry.kind == "submission" else "entry.tar.gz")
    return f"{_label(ch)}-{what}" + (".iso" if what == "replica" else ".tar.gz")


def file_name(site: Site, ch: Challenge, what: str) -> str:
    """Where `what` ("training", "sample" or "replica") is kept: named by a key of what it is made
    from (the replica's also by its image, challenge.toml and the judge's code)."""
    files = _files(ch, what)
    if what != "replica":
        return f"{served_name(ch, what).rsplit('.', 2)[0]}-{_key(files)}.{served_name(ch, what).split('.', 1)[1]}"
    image = find_image(site, ch.image)
    files |= {"challenge.toml": ch.directory / "challenge.toml", **package_files()}
    return f"{_label(ch)}-replica-{_key(files, image.key, json.dumps(image.manifest['sha256'], sort_keys=True))}.iso"


def made(site: Site, ch: Challenge, what: str) -> Download:
    """`what`, made now unless it is kept (the replica takes a minute or more: run it aside)."""
    files = _files(ch, what)

    def make(out: Path) -> None:
        if what == "replica":
            build_replica(site, ch, out, progress=lambda _m: None)
        elif what == "sample" and ch.entry.kind == "submission":
            _zip(files, out)
        else:
            _tar_gz(files, out)
    return _kept(site.layout.downloads, file_name(site, ch, what), served_name(ch, what), make)


def kept(site: Site, ch: Challenge, what: str) -> Download | None:
    """`what` if it was made, without making it."""
    path = site.layout.downloads / file_name(site, ch, what)
    sums = path.with_name(f"{path.name}.sha256")
    return _download(path, sums, served_name(ch, what)) if path.is_file() and sums.is_file() else None
