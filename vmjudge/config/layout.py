"""Every path under the judge's home, named here and nowhere else, with the modes its directories need.

Debian runs qemu as the unprivileged user libvirt-qemu, which must open the VM's disks
and CD: every directory on the way must be crossable by other users (mode o+x), while
listing them stays reserved to the judge (0711). What qemu never opens (the spool, the
results archive) is closed to everyone else (0700; see private.py).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import private


@dataclass(frozen=True)
class EntryFiles:
    """HOME/results/ID: what the judge keeps of one entry (logs, disks, report) between its
    stages and after them; `vmjudge gc` removes the biggest of them by their names."""

    directory: Path

    @property
    def entry(self) -> Path:
        """The unpacked entry on the host (stage 1 makes it; later stages read submitted answers)."""
        return self.directory / "entry"

    @property
    def install(self) -> Path:
        return self.directory / "install"

    @property
    def home_disk(self) -> Path:
        return self.directory / "home.qcow2"

    @property
    def report(self) -> Path:
        return self.directory / "report.html"

    @property
    def entry_root(self) -> Path:
        """A container entry's root as stage 1 made it (images/root_use.py): its
        squashfs under HOME/entry-roots and the image's run settings, for the quiz and the exam."""
        return self.directory / "entry-root.json"

    @property
    def metrics(self) -> Path:
        """The metrics.json the last evaluation container wrote for the entry ([score] kind = "container"),
        per-case metrics and all: the organiser's (`show --organiser`), never a participant's."""
        return self.directory / "metrics.json"

    @property
    def exam_files(self) -> Path:
        """Stage 3's result files while it runs (style "files")."""
        return self.directory / "exam-files.partial"

    @property
    def legacy_results(self) -> Path:
        """Where a home made before the results store kept stage 3's results (read once, then archived)."""
        return self.directory / "exam-results.json"

    def overlay(self, stage: str) -> Path:
        """The throw-away overlay of the home disk that a stage after setup runs on."""
        return self.directory / f"{stage}-overlay.qcow2"

    def stage_log(self, stage: str) -> Path:
        return self.directory / f"{stage}.log"

    def console_log(self, stage: str, attempt: int) -> Path:
        return self.directory / f"console-{stage}-{attempt}.log"

    def agent_log(self, stage: str, attempt: int) -> Path:
        """The replica's stand-in for the console log: what its agent printed."""
        return self.directory / f"agent-{stage}-{attempt}.log"

    def media(self, stage: str, attempt: int) -> Path:
        """A stage's ISO, kept with site.toml's [results] keep_media."""
        return self.directory / f"{stage}-{attempt}.iso"

    def logs(self) -> list[Path]:
        """The stage and console logs, for organisers."""
        return sorted(self.directory.glob("*.log")) if self.directory.is_dir() else []


@dataclass(frozen=True)
class Layout:
    """The home directory's layout; Site.layout gives the one of a site."""

    home: Path

    @property
    def site_toml(self) -> Path:
        return self.home / "site.toml"

    @property
    def queue_db(self) -> Path:
        return self.home / "queue.db"

    @property
    def daemon_lock(self) -> Path:
        return self.home / "daemon.lock"

    @property
    def submit_lock(self) -> Path:
        return self.home / "submit.lock"

    @property
    def spool(self) -> Path:
        """Every admitted archive, as submitted (re-running starts from here)."""
        return self.home / "spool"

    @property
    def images(self) -> Path:
        """The built guest images, one directory each; qemu reads the kernel, initramfs and root here."""
        return self.home / "images"

    @property
    def entry_roots(self) -> Path:
        """Container entries' root file systems, one read-only squashfs per image's layers, named
        by their chain ID (images/entry_root.py): the same image twice is unpacked once."""
        return self.home / "entry-roots"

    @property
    def data_disks(self) -> Path:
        """Record sets as read-only disks, one ISO 9660 image each named by its content (images/data_disk.py),
        shared by every VM that reads the set."""
        return self.home / "data-disks"

    @property
    def downloads(self) -> Path:
        """What the portal offers for download (replica/downloads.py): the training sets and sample
        entries as archives, and the replica ISOs, each made once and named by what it was made from."""
        return self.home / "downloads"

    @property
    def blob_cache(self) -> Path:
        """With an object store ([storage]), this host's notes of its copies of the blobs, which bound them
        (queue/blob_cache.py); the copies stay in the spool and the results store."""
        return self.home / "blob-cache"

    @property
    def runs(self) -> Path:
        """Scratch directories of the VM runs under way (RunDir)."""
        return self.home / "run"

    @property
    def warm(self) -> Path:
        """Saved VMs each stage is restored from (vm/warm.py), by image key and shape, beside the
        images they were made from: HOME/warm, or beside the directory HOME/images links to (homes
        that share their images share these too)."""
        return self.images.resolve().parent / "warm"

    def evaluation_check(self, image: Path) -> Path:
        """What admission found of a challenge's evaluation image, with the archive's stat signature
        (images/evaluation_root.py), so that each stage 4 does not read the whole archive again.
        Hidden in the roots' directory, whose stores are the directories not hidden."""
        named = hashlib.sha256(str(image.resolve()).encode(errors="surrogateescape")).hexdigest()[:20]
        return self.entry_roots / ".checked" / f"{named}.json"

    def tree_hashes(self, directory: Path) -> Path:
        """What the last pass over a challenge's image/ directory found of each file (stat
        signature, sha256; images/build_step.tree_hash), so finding its image reads no file that
        did not change. Hidden in the images' directory, as its locks and builds under way are."""
        named = hashlib.sha256(str(directory.resolve()).encode(errors="surrogateescape")).hexdigest()[:20]
        return self.images / ".trees" / f"{named}.json"

    @property
    def results(self) -> Path:
        return self.home / "results"

    @property
    def archive(self) -> Path:
        return self.home / "archive"

    @property
    def results_store(self) -> Path:
        """Stage 3's archived results, by content (sha256)."""
        return self.archive / "sha256"

    def ensure(self) -> None:
        """The home's directories with their modes; a home made by an older vmjudge is fixed."""
        for path, mode in ((self.home, private.CROSSABLE_DIR), (self.runs, private.CROSSABLE_DIR),
                           (self.images, 0o755),  # qemu reads the kernel, initramfs and root here
                           (self.results, private.CROSSABLE_DIR),
                           (self.archive, private.DIR), (self.spool, private.DIR)):
            private.make_dir(path, mode)

    def results_of(self, entry_id: int, make: bool = False) -> EntryFiles:
        """HOME/results/ID; with `make`, made if missing. Both directories stay crossable, because
        the entry's home disk is here and libvirt's qemu opens it; the judge's own files here are 0600."""
        files = EntryFiles(self.results / str(entry_id))
        if make:
            files.directory.mkdir(parents=True, exist_ok=True)
            for p in (self.results, files.directory):
                os.chmod(p, private.CROSSABLE_DIR)
        return files

    def stage_run_dir(self, entry_id: int, stage: str) -> RunDir:
        """A stage run's scratch directory, named so that the daemon finds it after a crash."""
        return RunDir(self, f"e{entry_id}-{stage}")

    def stage_run_leftovers(self) -> list[Path]:
        """The scratch directories of stage runs that a dead daemon left."""
        return list(self.runs.glob("e[0-9]*-*-*")) if self.runs.is_dir() else []


class RunDir:
    """A scratch directory for one VM run, removed with everything in it on exit."""

    def __init__(self, layout: Layout, label: str):
        layout.ensure()
        self.path = layout.runs / f"{label}-{secrets.token_hex(4)}"

    def __enter__(self) -> RunDir:
        self.path.mkdir(mode=0o711)
        os.chmod(self.path, 0o711)  # qemu opens the run's CD here; no one may list it
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
