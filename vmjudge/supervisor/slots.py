"""The daemon's VM slots: CPU slots for every stage that needs no GPU, and one slot per GPU
for the stages that need one.

A CPU slot never takes GPU work and a GPU slot never takes CPU work: a card is only ever busy
with what needs it, so a GPU stage waits for a GPU, never behind a CPU entry that happened to
be queued first, and a host with few cards still runs CPU challenges in all its CPU slots. The
queue picks, among the stages a slot may run, the one fair share puts first (Queue.claim_next,
queue/fair_share.py), for GPU slots as for CPU slots.

A GPU slot is checked (gpu_preflight, from sysfs) each time before it takes a stage; one that
fails is taken out of service in the queue's database, where `status` shows it, until the
organiser puts it back (`vmjudge gpu enable ADDRESS`). Stages then go to the other GPUs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..config import Site
from ..config.site import T4_ID
from ..errors import GpuFault
from ..queue.db import Queue
from ..queue.rows import EntryRow
from ..vm.gpu_preflight import PciFunction, lendable_card, read_gpu
from ..vm.pinning import CorePlan, SlotCores

log = logging.getLogger(__name__)

# What a card answers to in challenge.toml [vm] gpu: every card is "any"; a T4 is also "t4".
_T4_MODELS = ("any", "t4")
_OTHER_MODELS = ("any",)


def _models(card: PciFunction) -> tuple[str, ...]:
    return _T4_MODELS if card.ids == T4_ID else _OTHER_MODELS


def take_out(queue: Queue, address: str, reason: str) -> None:
    log.error("GPU %s is taken out of service: %s. Its stages go to other GPUs; once it is fixed, "
              "`vmjudge gpu enable %s` puts it back.", address, reason, address)
    queue.gpu_slots.take_out(queue.host, address, reason)


def lendable_gpus(site: Site) -> tuple[str, ...]:
    """The cards that get a slot: those site.toml lists, when VMs run under kvm (a GPU is lent
    only to a kvm VM)."""
    return site.gpu.devices if site.accel == "kvm" else ()


@dataclass(frozen=True)
class Slot:
    number: int  # recorded with each stage run; GPU slots are numbered after the CPU slots
    gpu: str | None = None  # the PCI address of the slot's card
    cores: SlotCores | None = None  # the host cores its VMs are pinned to (vm/pinning.py)

    def __str__(self) -> str:
        return f"GPU slot {self.gpu}" if self.gpu else f"slot {self.number}"


class SlotPool:
    """Which slots are free, and what each may take from the queue."""

    def __init__(self, site: Site, queue: Queue, cpu_slots: int, plan: CorePlan | None = None):
        """`plan`: each slot's cores (cores.core_plan, for every slot made here); None leaves the
        VMs unpinned."""
        self.site, self.queue, self.host = site, queue, queue.host
        devices = lendable_gpus(site)
        if site.gpu.devices and not devices:
            log.warning("site.toml lists %d GPU(s) but VMs run under %s: a GPU is lent only to a kvm VM, so no "
                        "GPU slot is used (set VMJUDGE_ACCEL=kvm, or remove [gpu] devices)", len(site.gpu.devices),
                        site.accel)

        def cores(number: int) -> SlotCores | None:
            return plan.of(number) if plan is not None else None
        self.gpus = [Slot(cpu_slots + i, address, cores(cpu_slots + i)) for i, address in enumerate(devices)]
        # GPU slots first: they take only GPU work
        self.free = self.gpus + [Slot(i, cores=cores(i)) for i in range(cpu_slots)]
        # The cards site.toml lists, lent or not here: a TCG run must not forget which are out of service.
        for row in queue.gpu_slots.register(self.host, site.gpu.devices):
            if not row.in_service:
                log.warning("GPU %s is out of service since %s (%s): `vmjudge gpu enable %s` puts it back once "
                            "fixed", row.address, row.changed_at, row.reason, row.address)

    def claim(self, only: int | None = None, challenges: tuple[str, ...] | None = None
              ) -> tuple[Slot, EntryRow] | None:
        """A free slot and the stage it now runs (marked running in the queue), or None when no
        free slot has anything to take."""
        for slot in list(self.free):
            if slot.gpu is None:
                entry = self.queue.claim_next(only, challenges=challenges)
            else:
                models = self.ready(slot)
                entry = self.queue.claim_next(only, gpu=models, challenges=challenges) if models else None
            if entry is not None:
                self.free.remove(slot)
                return slot, entry
        return None

    def release(self, slot: Slot) -> None:
        self.free.append(slot)
        self.free.sort(key=lambda s: (s.gpu is None, s.number))

    def ready(self, slot: Slot) -> tuple[str, ...] | None:
        """The models a GPU slot's card answers to, if it is in service and passes its
        preflight; a failed preflight takes it out of service (once: it is then skipped)."""
        assert slot.gpu is not None
        if not self.queue.gpu_slots.in_service(self.host, slot.gpu):
            return None
        try:
            return _models(lendable_card(self.site.gpu, slot.gpu))
        except GpuFault as exc:
            take_out(self.queue, slot.gpu, str(exc))
            return None

    def models_in_service(self) -> tuple[str, ...]:
        """Every model some GPU slot in service answers to (without a preflight: for deciding
        whether queued GPU work can still run here)."""
        models: set[str] = set()
        for slot in self.gpus:
            assert slot.gpu is not None
            if self.queue.gpu_slots.in_service(self.host, slot.gpu):
                card = read_gpu(self.site.gpu, slot.gpu).card
                models.update(_models(card) if card is not None else ())
        return tuple(sorted(models))
