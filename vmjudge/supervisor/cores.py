"""The daemon's and the doctor's core plan (vm/pinning.py): how many slots this site runs and
how large its largest VM is, read from the site and the queue.

The largest VM is the largest [vm] vcpus among the challenges registered, whose copies on
this host can be read: a slot must hold any stage it may be given, and the slots' cores are
fixed when the daemon starts. A challenge whose copy is missing or unreadable here is left
out, as this host judges none of its stages (environment.py says why). With no challenge
registered yet a VM still needs a core, so the plan counts 1.

The cores split are the VM host's: this daemon's own (its CPU affinity) when libvirt runs
here, those libvirt reports online when site.toml's uri names another machine (pinning.py).
"""

from __future__ import annotations

import logging

import libvirt

from ..config import Site, load_challenge
from ..errors import VmjudgeError
from ..queue.db import Queue
from ..vm import domain
from ..vm.libvirt_uri import is_local
from ..vm.pinning import CorePlan, online_cores, plan_cores, usable_cores
from .slots import lendable_gpus

log = logging.getLogger(__name__)


def largest_vcpus(queue: Queue, also: tuple[int, ...] = ()) -> int:
    """The largest [vm] vcpus among the registered challenges and `also` (the doctor's
    --challenge), 1 when there is none."""
    found = list(also)
    for row in queue.challenges():
        try:
            found.append(load_challenge(row["here"]).vm.vcpus)
        except VmjudgeError as exc:
            log.info("challenge %s is left out of the core plan: %s", row["name"], exc)
    return max(found, default=1)


def slot_count(site: Site, cpu_slots: int) -> int:
    """Every slot SlotPool makes: the CPU slots, then one per GPU it may lend."""
    return cpu_slots + len(lendable_gpus(site))


def host_cores(site: Site, conn: libvirt.virConnect | None = None) -> tuple[int, ...]:
    """The cores the VMs may be pinned to: this process's when libvirt is local; otherwise the
    remote host's online ones, asked through `conn` or a connection of its own."""
    if is_local(site.uri):
        return usable_cores()
    if conn is not None:
        return online_cores(conn, site.uri)
    own = domain.connect(site.uri)
    try:
        return online_cores(own, site.uri)
    finally:
        own.close()


def core_plan(site: Site, queue: Queue, cpu_slots: int, also: tuple[int, ...] = ()) -> CorePlan:
    """Each slot's cores for this site, or Overcommitted (one sentence, the fix) when they do
    not suffice and site.toml does not say [slots] overcommit = true."""
    return plan_cores(host_cores(site), slot_count(site, cpu_slots), largest_vcpus(queue, also), site.overcommit)
