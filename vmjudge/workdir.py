"""The state directory and per-run scratch directories that libvirt's qemu can reach.

Debian runs qemu as the unprivileged user libvirt-qemu, which must open the VM's disks
and CD: every directory on the way must be crossable by other users (mode o+x), while
listing them stays reserved to the judge (0711).
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from .config import Site


def ensure_home(site: Site) -> None:
    for path, mode in ((site.home, 0o711), (site.run_dir, 0o711), (site.images_dir, 0o755)):
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, mode)


class RunDir:
    """A scratch directory for one VM run, removed with everything in it on exit."""

    def __init__(self, site: Site, label: str):
        ensure_home(site)
        self.path = site.run_dir / f"{label}-{secrets.token_hex(4)}"

    def __enter__(self) -> "RunDir":
        self.path.mkdir(mode=0o755)
        os.chmod(self.path, 0o755)
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
