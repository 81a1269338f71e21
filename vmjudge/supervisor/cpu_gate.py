"""Which CPU this host's guests get, and so which challenges' stages it may take.

Asked of libvirt once (vm/cpu_offer.py), without a VM: a site whose [vm] cpu this host cannot
give is refused before the daemon takes any work (every VM would fail to start, and each
stage be retried and parked as the infrastructure's); a challenge whose [vm] cpu_level the
guests do not reach is left to other hosts, said once in one sentence, so that an entry
built for AVX2 never meets a CPU without it. Until libvirt answers, a challenge that asks for
a level is not taken: the level cannot be confirmed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..config import Site, load_challenge
from ..errors import ConfigError, InfrastructureError, VmjudgeError
from ..vm import cpu_offer, domain
from ..vm.cpu_offer import CpuOffer

log = logging.getLogger(__name__)


def refuse_unfit_site(site: Site) -> None:
    """ConfigError, one sentence, when this host cannot give its guests the site's [vm] cpu.
    A libvirt that does not answer yet is the daemon's libvirt watch's business, not a refusal."""
    try:
        conn = domain.connect(site.uri)
    except InfrastructureError as exc:
        log.warning("the guests' CPU is checked once libvirt answers: %s", exc)
        return
    try:
        why = cpu_offer.refusal(site, conn)
    finally:
        conn.close()
    if why is not None:
        raise ConfigError(f"{site.layout.site_toml}: {why}")


def level_shortfall(name: str, level: str, offered: CpuOffer | None) -> str | None:
    """Why this host must not take the stages of challenge `name`, which needs `level`, or None."""
    if offered is not None and offered.meets(level):
        return None
    if offered is None or not offered.known:
        return (f"challenge {name} needs guests of {level}, and libvirt has not said what this host's guests get "
                f"(cpu = \"{offered.setting if offered else '?'}\")")
    return (f"challenge {name} needs guests of {level}, and this host's get {offered.level or 'less than x86-64-v1'} "
            f"(cpu = \"{offered.setting}\" under {offered.accel}): set a higher [vm] cpu in site.toml, or let a host "
            "that has it take them")


class CpuGate:
    """The guests' CPU as libvirt describes it, asked once it answers, and each registered
    challenge's level against it."""

    def __init__(self, site: Site):
        self.site = site
        self._offer: CpuOffer | None = None

    @property
    def known(self) -> bool:
        """libvirt has answered (whatever it said of the flags)."""
        return self._offer is not None

    def offer(self) -> CpuOffer | None:
        if self._offer is None:
            try:
                conn = domain.connect(self.site.uri)
            except InfrastructureError:
                return None
            try:
                self._offer = cpu_offer.offer(conn, self.site)
            finally:
                conn.close()
        return self._offer

    def shortfall(self, name: str, directory: str) -> str | None:
        """Why this host must not take challenge `name`'s stages for its CPU level, or None; a copy
        that cannot be read says nothing here (environment.py and the stage say what is wrong)."""
        try:
            level = load_challenge(Path(directory)).vm.cpu_level
        except VmjudgeError:
            return None
        return None if level is None else level_shortfall(name, level, self.offer())
