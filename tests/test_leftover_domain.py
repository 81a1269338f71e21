"""Domains a dead run left, and connections libvirtd closed. A dead run's domain is destroyed
only once libvirt has finished the call the dead run left under way on it (destroy_leftover):
libvirtd 9.0 crashed when a destroy landed in the middle of a killed daemon's restore. A cold
start on a connection that died opens another. libvirt's part is faked: the calls are the point."""

from __future__ import annotations

import libvirt
import pytest

from vmjudge.errors import InfrastructureError
from vmjudge.vm import domain
from vmjudge.vm.domain import Domain


class BusyDomain:
    """A virDomain whose job ends after `busy` polls; records when it was destroyed."""

    def __init__(self, busy: int, state: int = libvirt.VIR_DOMAIN_CONTROL_JOB):
        self.busy, self.state, self.polls, self.destroyed_after = busy, state, 0, None

    def name(self) -> str:
        return "vmj-test-leftover"

    def controlInfo(self) -> list[int]:
        self.polls += 1
        return [self.state if self.polls <= self.busy else libvirt.VIR_DOMAIN_CONTROL_OK, 0, 0]

    def destroy(self) -> int:
        self.destroyed_after = self.polls
        return 0


def test_a_leftover_is_destroyed_only_after_its_job_ends():
    for state in (libvirt.VIR_DOMAIN_CONTROL_JOB, libvirt.VIR_DOMAIN_CONTROL_OCCUPIED):
        dom = BusyDomain(busy=3, state=state)
        Domain(dom).destroy_leftover(settle=30.0, poll=0.001)
        assert dom.destroyed_after == 4  # three busy answers, then the idle one, then the destroy


def test_an_idle_leftover_is_destroyed_at_once():
    dom = BusyDomain(busy=0)
    Domain(dom).destroy_leftover(settle=30.0, poll=0.001)
    assert dom.destroyed_after == 1


def test_a_leftover_busy_past_the_settle_time_is_destroyed_all_the_same():
    dom = BusyDomain(busy=10**9)
    Domain(dom).destroy_leftover(settle=0.05, poll=0.001)
    assert dom.destroyed_after is not None and dom.destroyed_after >= 2


class DeadConnection:
    """A libvirt connection whose libvirtd restarted: every call on it fails."""

    def isAlive(self) -> int:
        return 0

    def createXML(self, xml: str, flags: int):
        raise libvirt.libvirtError("internal error: client socket is closed")


class LiveConnection:
    """The connection libvirtd answers on after its restart: starts the domain."""

    def __init__(self, uri: str):
        self.uri, self.started, self.closed = uri, [], False

    def createXML(self, xml: str, flags: int) -> BusyDomain:
        self.started.append((xml, flags))
        return BusyDomain(busy=0)

    def close(self) -> int:
        self.closed = True
        return 0


def test_a_cold_start_on_a_connection_libvirtd_closed_opens_another(monkeypatch):
    """The case of 2026-11-26: libvirtd restarted while a warm start woke, the warm start broke
    off, and its cold boot was refused on the stage's dead connection ("client socket is closed")."""
    opened: list[LiveConnection] = []
    monkeypatch.setattr(domain, "connect", lambda uri: opened.append(LiveConnection(uri)) or opened[-1])
    started = Domain.start_paused(DeadConnection(), "<domain/>", "qemu:///system")
    paused = libvirt.VIR_DOMAIN_START_PAUSED
    assert [(c.uri, c.started) for c in opened] == [("qemu:///system", [("<domain/>", paused)])]
    started.destroy()  # the domain's own connection goes with it
    assert opened[0].closed
    with pytest.raises(InfrastructureError) as err:  # no URI to reopen: refused, as before
        Domain.start_paused(DeadConnection(), "<domain/>")
    assert err.value.reason == "vm-start" and len(opened) == 1
