"""The state directory and per-run scratch directories that libvirt's qemu can reach.

Debian runs qemu as the unprivileged user libvirt-qemu, which must open the VM's disks
and CD: every directory on the way must be crossable by other users (mode o+x), while
listing them stays reserved to the judge (0711). What qemu never opens (the spool, the
results archive) is closed to everyone else (0700; see private.py).
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from . import private
from .config import Site


def ensure_home(site: Site) -> None:
    """The home's directories with their modes; a home made by an older vmjudge is fixed."""
    for path, mode in ((site.home, private.CROSSABLE_DIR), (site.run_dir, private.CROSSABLE_DIR),
                       (site.images_dir, 0o755),  # qemu reads the kernel, initramfs and root here
                       (site.home / "results", private.CROSSABLE_DIR),
                       (site.home / "archive", private.DIR), (site.home / "spool", private.DIR)):
        private.make_dir(path, mode)


def results_dir(site: Site, entry_id: int) -> Path:
    """HOME/results/ID, made if missing. Both directories stay crossable, because the entry's
    home disk is here and libvirt's qemu opens it; the judge's own files here are 0600."""
    path = site.home / "results" / str(entry_id)
    path.mkdir(parents=True, exist_ok=True)
    for p in (site.home / "results", path):
        os.chmod(p, private.CROSSABLE_DIR)
    return path


class RunDir:
    """A scratch directory for one VM run, removed with everything in it on exit."""

    def __init__(self, site: Site, label: str):
        ensure_home(site)
        self.path = site.run_dir / f"{label}-{secrets.token_hex(4)}"

    def __enter__(self) -> "RunDir":
        self.path.mkdir(mode=0o711)
        os.chmod(self.path, 0o711)  # qemu opens the run's CD here; no one may list it
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
