"""`vmjudge gpu`: this host's GPU slots, and putting one back in service once it is fixed.

A slot is taken out of service by the daemon (a failed preflight, a VM that would not start
with the card, a card that did not work in the guest); only the organiser puts it back, after
a look, and only once it passes the preflight again."""

from __future__ import annotations

import json

import click

from ..errors import VmjudgeError
from ..queue.gpu_slots import GpuSlotRow
from ..vm.gpu_preflight import check_gpu
from .echo import echo
from .home import site_and_queue


def slot_line(row: GpuSlotRow) -> str:
    state = "in service" if row.in_service else f"OUT OF SERVICE since {row.changed_at}: {row.reason}"
    return f"GPU {row.address} on {row.host}: {state}"


def slot_json(row: GpuSlotRow) -> dict:
    return {"host": row.host, "address": row.address, "in_service": row.in_service, "reason": row.reason,
            "changed_at": row.changed_at}


@click.group()
def gpu() -> None:
    """This host's GPU slots (site.toml [gpu] devices)."""


@gpu.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def gpu_list(ctx: click.Context, as_json: bool) -> None:
    """Each GPU slot: in service or not (and why), and what its preflight says now."""
    site, queue = site_and_queue(ctx)
    rows = queue.gpu_slots.register(queue.host, site.gpu.devices)
    now = {row.address: check_gpu(site.gpu, row.address) for row in rows}
    if as_json:
        echo(json.dumps([{**slot_json(r), "preflight": now[r.address]} for r in rows], indent=2))
        return
    for row in rows:
        echo(slot_line(row))
        echo("    preflight: " + ("passes" if not now[row.address] else now[row.address][0]))
    if not rows:
        echo("no GPU slots: list the cards in site.toml [gpu] devices")


@gpu.command("enable")
@click.argument("address")
@click.pass_context
def gpu_enable(ctx: click.Context, address: str) -> None:
    """Put the GPU at ADDRESS back in service, if it passes its preflight."""
    site, queue = site_and_queue(ctx)
    if address not in site.gpu.devices:
        raise VmjudgeError(f"{address} is not among site.toml's [gpu] devices ({', '.join(site.gpu.devices) or 'none'})"
                           ": give the address as listed there.")
    queue.gpu_slots.register(queue.host, site.gpu.devices)
    found = check_gpu(site.gpu, address)
    if found:
        raise VmjudgeError(f"GPU {address} still fails its preflight, so it stays out of service: {found[0]}")
    queue.gpu_slots.put_back(queue.host, address)
    echo(f"GPU {address} is in service again")
