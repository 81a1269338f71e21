"""When a stage may start warm, and which code a warm state must have been made by (vm/warm.py).

Kept apart from warm.py's seats and restores: these are the rules a run is held to before any
state is touched, and `maker_sha256` names warm.py itself among the makers it hashes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..config import Site
from .libvirt_uri import is_local

# The modules whose code decides what a saved state holds beyond its XML (what is set on the live
# domain before it is saved, how it is woken): a state made by other code of them is made again.
MAKERS = ("warm.py", "domain.py", "domain_xml.py")


def why_cold(site: Site, gpu: str | None) -> str | None:
    """Why a run cannot start warm at all, or None when it may."""
    if not site.warm_start:
        return "warm starts are off in site.toml ([libvirt] warm_start = false)"
    if gpu is not None:
        return "a GPU stage boots cold: a VM with a passed-through (VFIO) device cannot be saved or restored"
    if site.channel != "virtio":
        return "warm starts need the virtio data channel (the agent is woken through it)"
    if not site.uri.startswith("qemu"):
        return "warm starts need libvirt's qemu driver"
    if not is_local(site.uri):
        return "warm starts need libvirt on this machine (the saved states are this machine's files)"
    return None


def maker_sha256() -> str:
    """The code that makes and restores states: another version of it (an upgrade, or another
    checkout sharing the images' directory) may have set on the live domain what its XML does not
    say (a CI run restored a state whose saved <memtune> this code never asks for, and libvirt could
    not start it), so its states are made again rather than trusted."""
    digest = hashlib.sha256()
    for name in MAKERS:
        digest.update(name.encode() + b"\0" + (Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()
