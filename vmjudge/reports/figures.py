"""What a stage run's figures (stages/figures.py) say to a participant, and to an organiser.

Stage 1 and the quiz run on files the participant has: they get every figure beside its
limit, the slowest records and a per-record table. The exam is silent, and timing is a
channel: an entry can encode test labels in how long each record takes, or how much memory
it holds. So of the exam a participant gets two numbers only, its time and its peak memory
as a share of their caps in whole tenths, rounded up (docs/participants.md, "Reading a report", gives
the bits this leaves). Organisers get everything, per record, the exam's included.
"""

from __future__ import annotations

from typing import Any

from ..queue.publish import tenths

SLOWEST = 5  # records named in a report's list of the slowest
USAGE = ("cpu_seconds", "peak_memory", "oom_kills", "processes")


def size(n: float | None) -> str:
    if n is None:
        return "unknown"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def seconds(s: float | None) -> str:
    return "unknown" if s is None else f"{s:.1f} s"


def duration(s: float | None) -> str:
    """A cap as people say it: "1 h", "90 min", "60 s"."""
    if not s:
        return "unknown"
    if s >= 3600 and s % 3600 == 0:
        return f"{s / 3600:g} h"
    return f"{s / 60:g} min" if s >= 60 and s % 60 == 0 and s != 60 else f"{s:g} s"


def memory_cap(figures: dict[str, Any]) -> float | None:
    """What the entry's memory is held to: its cgroup's cap in the VM (below the VM's memory)."""
    return figures.get("memory_limit") or figures.get("vm_memory")


def _peak(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    known = [r for r in rows if r.get("peak_memory") is not None]
    return max(known, key=lambda r: r["peak_memory"]) if known else None


def _oom(rows: list[dict[str, Any]]) -> str | None:
    killed = [r for r in rows if r.get("oom_kills")]
    if not killed:
        return None
    total = sum(int(r["oom_kills"]) for r in killed)
    names = ", ".join(r["name"] for r in killed[:SLOWEST]) + (", ..." if len(killed) > SLOWEST else "")
    return (f"the out-of-memory killer ended {total} process{'es' if total != 1 else ''} ({names}): "
            "the memory cap was reached")


def slowest(rows: list[dict[str, Any]], n: int = SLOWEST) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: -r["seconds"])[:n]


def participant_view(stage: str, figures: dict[str, Any]) -> dict[str, Any]:
    """The figures a participant may see of one stage run (show --json, the portal)."""
    cap = memory_cap(figures)
    rows = figures.get("commands", [])
    peak = _peak(rows)
    if stage == "exam":  # of the VM's memory as configured: the cgroup's cap moves with each boot's kernel by pages
        vm = figures.get("vm_memory") or cap
        return {"time_tenths": tenths(figures.get("stage_seconds"), figures.get("stage_limit")),
                "time_cap_seconds": figures.get("stage_limit"),
                "memory_tenths": tenths(peak["peak_memory"] if peak else None, vm), "memory_cap": vm}
    doc: dict[str, Any] = {"command_limit": figures.get("command_limit"), "memory_limit": cap,
                           "peak_memory": peak["peak_memory"] if peak else None,
                           "home_used": figures.get("home_used"), "home_size": figures.get("home_size"),
                           "instance": figures.get("instance")}
    if stage == "quiz":  # each training case's samples over time too: the participant's own files
        doc.update({"stage_seconds": figures.get("stage_seconds"), "stage_limit": figures.get("stage_limit"),
                    "slowest": [r["name"] for r in slowest(rows)], "vcpus": (figures.get("vm") or {}).get("vcpus"),
                    "gpu_memory": figures.get("gpu_memory"),
                    "records": [{"record": r["name"], "status": r["status"], "seconds": r["seconds"],
                                 **{k: r.get(k) for k in USAGE},
                                 **({"samples": r["samples"]} if r.get("samples") else {})} for r in rows]})
    else:
        doc.update({k: v for k, v in (rows[0] if rows else {}).items() if k in ("seconds", "status", *USAGE)})
    return doc


def participant_lines(stage: str, figures: dict[str, Any]) -> list[str]:
    """The report's lines on what one stage run used, as participant_view allows."""
    view = participant_view(stage, figures)
    cap = size(view.get("memory_limit") or view.get("memory_cap"))
    if stage == "exam":
        time_part = (f"time {view['time_tenths']}/10 of the {duration(view['time_cap_seconds'])} cap"
                     if view["time_tenths"] is not None
                     else "time unknown")
        mem_part = (f"peak memory {view['memory_tenths']}/10 of the VM's {cap}" if view["memory_tenths"] is not None
                    else "peak memory unknown")
        return [f"Resources (the exam gives tenths of its caps only): {time_part}; {mem_part}."]
    rows = figures.get("commands", [])
    parts = []
    if stage == "quiz" and rows:
        top = slowest(rows)
        parts.append(f"slowest training record {top[0]['name']}: {seconds(top[0]['seconds'])} of "
                     f"{seconds(view['command_limit'])}")
        parts.append(f"the quiz took {seconds(view['stage_seconds'])} of {seconds(view['stage_limit'])}")
    elif rows:
        row = rows[0]
        parts.append(f"{row['name']} {seconds(row['seconds'])} of {seconds(view['command_limit'])} "
                     f"(CPU {seconds(row.get('cpu_seconds'))}, at most {row.get('processes') or 'unknown'} processes)")
    peak = _peak(rows)
    if peak is not None:
        parts.append(f"peak memory {size(peak['peak_memory'])} of {cap}"
                     + (f" ({peak['name']})" if stage == "quiz" else ""))
    if view.get("home_used") is not None:
        parts.append(f"home disk {size(view['home_used'])} of {size(view['home_size'])} used")
    sampled = over_time(view) if stage == "quiz" else None
    if sampled:
        parts.append(sampled)
    if view.get("instance"):
        parts.append(f"the VM mirrors {view['instance']}")
    oom = _oom(rows)
    if oom:
        parts.append(oom)
    lines = [f"Resources: {'; '.join(parts)}."] if parts else []
    if stage == "quiz" and len(rows) > 1:
        lines.append("Slowest records: " + ", ".join(f"{r['name']} {seconds(r['seconds'])} (CPU "
                                                      f"{seconds(r.get('cpu_seconds'))}, {size(r.get('peak_memory'))})"
                                                      for r in slowest(rows)) + ".")
    return lines


def over_time(view: dict[str, Any]) -> str | None:
    """The quiz's samples over time in a clause of its Resources line: how many training cases have them,
    and the busiest on average (the portal's report page draws each case)."""
    records = view.get("records") or []
    means = [(r["samples"][-1][1] / r["samples"][-1][0], r["record"]) for r in records
             if r.get("samples") and r["samples"][-1][0] > 0]
    if not means:
        return None
    mean, busiest = max(means)
    vcpus = f" of {view['vcpus']} vCPU(s)" if view.get("vcpus") else ""
    return (f"{len(means)} of {len(records)} training cases sampled over time, the busiest {busiest} "
            f"using {mean:.2f}{vcpus} on average")


def organiser_lines(stage: str, figures: dict[str, Any]) -> list[str]:
    """Every figure of one stage run in a few lines, the exam's per record included."""
    rows = figures.get("commands", [])
    vm = figures.get("vm", {})
    peak = _peak(rows)
    lines = [f"{stage}: {len(rows)} command(s) in {seconds(figures.get('stage_seconds'))} of "
             f"{seconds(figures.get('stage_limit'))}; peak memory {size(peak['peak_memory'] if peak else None)} "
             f"({peak['name'] if peak else '-'}) of {size(memory_cap(figures))}; home disk "
             f"{size(figures.get('home_used'))}; VM wall {seconds(vm.get('wall_seconds'))}, "
             f"CPU {seconds(vm.get('cpu_seconds'))} on {vm.get('vcpus')} vCPU(s)"]
    lines += [f"  {r['name']}: {r['status']} {seconds(r['seconds'])} of {seconds(figures.get('command_limit'))}, "
              f"CPU {seconds(r.get('cpu_seconds'))}, peak {size(r.get('peak_memory'))}, "
              f"processes {r.get('processes')}, OOM kills {r.get('oom_kills')}" for r in slowest(rows)]
    oom = _oom(rows)
    if oom:
        lines.append(f"  {oom}")
    return lines
