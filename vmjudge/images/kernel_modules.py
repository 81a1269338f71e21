"""Trim the guest kernel's module tree to what a machine with no network can use.

The judge and the replica run Debian's generic kernel (the cloud kernel has no USB or AHCI
drivers, so the replica could not boot from a stick on a real computer). Its module tree is
400 MB; network, radio, sound and camera drivers are a third of it and have no use in a guest
that must have no network. Removing the network drivers also makes "no network" hold on a
participant's own hardware, where the replica would otherwise find and name their NIC.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ..errors import ImageError

# Under lib/modules/VERSION/kernel/.
PRUNED = ("drivers/net", "drivers/bluetooth", "drivers/nfc", "drivers/infiniband", "drivers/isdn",
          "drivers/media", "drivers/staging", "drivers/comedi", "drivers/iio",
          "net/wireless", "net/mac80211", "net/bluetooth", "net/nfc", "sound")


def read_modules_dep(modules_dir: Path) -> dict[str, list[str]]:
    deps: dict[str, list[str]] = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
    return deps


def prune_modules(root: Path, kernel_version: str) -> int:
    """Remove the modules under PRUNED and every module that needs one of them; returns the
    bytes freed. modules.dep, written by the kernel package, lists each module's whole
    dependency closure, so one pass finds them all; depmod then rewrites the index."""
    modules_dir = root / "lib" / "modules" / kernel_version
    if not (modules_dir / "modules.dep").is_file():
        raise ImageError(f"the guest kernel {kernel_version} has no modules.dep: "
                         "keep linux-image-amd64 in the base packages.")
    deps = read_modules_dep(modules_dir)
    removed = {m for m in deps if any(m.startswith(f"kernel/{p}/") for p in PRUNED)}
    removed |= {m for m, needs in deps.items() if removed.intersection(needs)}
    freed = sum((modules_dir / m).stat().st_size for m in removed)
    for rel in removed:
        (modules_dir / rel).unlink()
    for pruned in PRUNED:
        shutil.rmtree(modules_dir / "kernel" / pruned, ignore_errors=True)  # now only empty directories
    depmod = subprocess.run(["chroot", str(root), "depmod", kernel_version], capture_output=True, text=True)
    if depmod.returncode != 0:
        raise ImageError(f"depmod failed on the trimmed guest kernel modules: {depmod.stderr.strip()}")
    return freed
