"""What the portal offers for download (issue 58), each made once and kept in HOME/downloads:
the training set as one archive, the sample entry as an archive upload takes as it is, and the
replica ISO.

Making one reads the whole set, so it is never done for a page: `challenge add` makes the two
archives (and forgets the replica, which the portal makes aside when first asked for), and writes
an index per download (`NAME-training.json`: the file, its sha256 and size) that pages and
downloads read, no more. Each file is named by a key of what it was made from (every file's path,
size and time; the replica's also its image and the judge's own code), so a changed set makes a new
file. The archives are the same bytes for the same files on any host (names sorted, owners, modes
and times fixed, gzip's own time zero), so a participant can compare sha256s.

The training archive holds exactly what the replica carries (build.training_files): RECORDS, the
records' files and REFERENCE*; never a file of a test set or a reference. A file that leads into one
(its real path, or the same inode: a hard link) stops the making with the organiser's error.
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
from dataclasses import dataclass
from pathlib import Path

from ..config import Challenge, Site
from ..config.portal_page import overlaps
from ..errors import ConfigError
from ..files import durable_write, sha256_file
from ..images.build import find_image
from ..sources import package_files
from .build import build_replica, build_scripts, training_files

WHAT = ("training", "sample", "replica")


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


def _secret_inodes(ch: Challenge) -> set[tuple[int, int]]:
    found = set()
    for top in ch.secret_dirs:
        for path in top.rglob("*") if top.is_dir() else ():
            if path.is_file():
                st = path.stat()
                found.add((st.st_dev, st.st_ino))
    return found


def _checked(ch: Challenge, files: dict[str, Path]) -> dict[str, Path]:
    inodes = _secret_inodes(ch)
    for name, path in files.items():
        st = path.stat()
        if overlaps(path, ch.secret_dirs) or (st.st_dev, st.st_ino) in inodes:
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


def label(ch: Challenge, what: str) -> str:
    """The download's name in HOME/downloads (its index's) and among the things being made."""
    return (ch.name if what == "sample" or ch.phase is None else f"{ch.name}-{ch.phase.name}") + f"-{what}"


def served_name(ch: Challenge, what: str) -> str:
    """The name it is downloaded as: the sample's is one upload takes as it is."""
    if what == "sample":
        return f"{ch.name}-sample-" + ("submission.zip" if ch.entry.kind == "submission" else "entry.tar.gz")
    return label(ch, what) + (".iso" if what == "replica" else ".tar.gz")


def sample_files(ch: Challenge) -> dict[str, Path]:
    """The sample entry's files by their path in it (its directory's top is the archive's)."""
    if ch.portal.sample is None:
        return {}
    top = ch.directory / ch.portal.sample
    return {p.relative_to(top).as_posix(): p for p in sorted(top.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def _file_name(site: Site, ch: Challenge, what: str, files: dict[str, Path]) -> str:
    if what != "replica":
        stem, suffix = served_name(ch, what).split(".", 1)
        return f"{stem}-{_key(files)}.{suffix}"
    image = find_image(site, ch.image)
    mine = {"challenge.toml": ch.directory / "challenge.toml", **build_scripts(ch), **package_files()}
    key = _key(files | mine, image.key, json.dumps(image.manifest["sha256"], sort_keys=True))
    return f"{label(ch, what)}-{key}.iso"


def made(site: Site, ch: Challenge, what: str) -> Download:
    """`what`, made now unless its file for these files is kept (the replica takes a minute or more:
    the portal runs this aside), and its index written."""
    files = _checked(ch, training_files(ch) if what in ("training", "replica") else sample_files(ch))
    if what == "replica":
        _checked(ch, {"challenge.toml": ch.directory / "challenge.toml", **build_scripts(ch)})
    directory = site.layout.downloads
    directory.mkdir(parents=True, exist_ok=True)
    name = _file_name(site, ch, what, files)
    path, sums = directory / name, directory / f"{name}.sha256"
    with open(directory / f".{name}.lock", "w") as lock:  # two makers at once make it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path.is_file() and sums.is_file()):
            part = directory / f".{name}.part"
            try:
                if what == "replica":
                    build_replica(site, ch, part, progress=lambda _m: None)
                elif what == "sample" and ch.entry.kind == "submission":
                    _zip(files, part)
                else:
                    _tar_gz(files, part)
                part.chmod(0o644)
                os.replace(part, path)
            finally:
                part.unlink(missing_ok=True)
            sums.write_text(f"{sha256_file(path)}  {name}\n")
    got = Download(path=path, name=served_name(ch, what), sha256=sums.read_text().split()[0], size=path.stat().st_size)
    index = {"file": name, "sha256": got.sha256, "size": got.size}
    durable_write(directory / f"{label(ch, what)}.json", [json.dumps(index).encode()], mode=0o644)
    return got


def offered(site: Site, ch: Challenge, what: str) -> Download | None:
    """`what` as last made for the challenge (its index read, no file of the set), or None."""
    directory = site.layout.downloads
    try:
        index = json.loads((directory / f"{label(ch, what)}.json").read_text())
        path = directory / str(index["file"])
        if path.is_file() and "/" not in str(index["file"]):
            return Download(path=path, name=served_name(ch, what), sha256=str(index["sha256"]),
                            size=int(index["size"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def forget(site: Site, ch: Challenge, what: str) -> None:
    """No longer offer `what` as made (the replica, at `challenge add`: made again when next asked for)."""
    (site.layout.downloads / f"{label(ch, what)}.json").unlink(missing_ok=True)

