"""The report page's parts, made from the participant's page document (reports/participant.py
report_page) and nothing else: each stage's message split into its sentence and the output
excerpts it quotes, and each resource figure as a bar of its limit with the figure in words; the
quiz's training cases' use over time as small charts (usage_chart.py).

The exam's bars are its tenths out of ten, the same two numbers the document carries, so a bar
can be no finer than the text. Figures of the participant's own files (stage 1 and the quiz)
are marked `training`: they vary with the machine's noise, and tests that compare two
entries' pages leave them out by that mark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..reports.figures import duration, seconds, size
from .usage_chart import UsageChart, usage_charts

# A stage's message quotes a command's output under a line "--- setup.sh output ---" (or
# "--- output of a101 ---"): the sentence above is the verdict, each quote an excerpt.
QUOTE = re.compile(r"^--- (.{1,200}?) ---$", re.M)
STATUS = {"passed": "Passed", "failed": "Failed", "dry-run": "Dry run", "not-run": "Not run", "running": "Running",
          "waiting": "Waiting", "stopped": "Stopped on the judge's side", "kept-back": "Kept back until published"}
# The hardware fingerprint's fields (participant.HARDWARE) as a reader names them.
HARDWARE = {"host": "Host", "cpu": "CPU", "host_cores": "Host cores", "kernel": "Kernel", "qemu": "QEMU",
            "libvirt": "libvirt", "vcpus": "vCPUs", "memory_mib": "Memory (MiB)", "accel": "Accelerator", "gpu": "GPU"}


@dataclass(frozen=True)
class Bar:
    label: str
    value: float  # as the document gives it: the exam's are whole tenths
    limit: float
    words: str
    training: bool


@dataclass(frozen=True)
class Step:
    stage: str
    title: str
    status: str
    said: str  # STATUS's words for the status
    reason: str | None
    summary: str
    excerpts: list[tuple[str, str]]
    bars: list[Bar]
    notes: list[str]
    records: list[tuple[str, str, str, str, str]]  # the quiz's: record, status, time, CPU, peak memory
    charts: list[UsageChart]  # the quiz's: its training cases' use over time (usage_chart.py)
    sampled: int  # the quiz's cases with samples, drawn or not


def split_message(message: str | None) -> tuple[str, list[tuple[str, str]]]:
    """The message's sentence, and each quoted output as (its heading, its text)."""
    if not message:
        return "", []
    marks = list(QUOTE.finditer(message))
    if not marks:
        return message.strip(), []
    quotes = [(m.group(1), message[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(message)].strip("\n"))
              for i, m in enumerate(marks)]
    return message[:marks[0].start()].strip(), quotes


def _bar(label: str, used: float | None, limit: float | None, words: str, training: bool = True) -> list[Bar]:
    if used is None or not limit:
        return []
    return [Bar(label, used, limit, words, training)]


def _disk_and_memory(view: dict[str, Any]) -> list[Bar]:
    peak, cap = view.get("peak_memory"), view.get("memory_limit")
    used, home = view.get("home_used"), view.get("home_size")
    return [*_bar("Peak memory", peak, cap, f"{size(peak)} of {size(cap)}"),
            *_bar("Home disk", used, home, f"{size(used)} of {size(home)} used")]


def bars(stage: str, view: dict[str, Any]) -> list[Bar]:
    """A stage's figures as bars of their limits: the exam's in tenths of its caps only."""
    if stage == "exam":
        t, m = view.get("time_tenths"), view.get("memory_tenths")
        return [*_bar("Time", t, 10, f"{t}/10 of the {duration(view.get('time_cap_seconds'))} cap", False),
                *_bar("Peak memory", m, 10, f"{m}/10 of the VM's {size(view.get('memory_cap'))}", False)]
    limit = view.get("command_limit")
    if stage == "quiz":
        records = view.get("records") or []
        slowest = max(records, key=lambda r: r.get("seconds") or 0.0, default=None)
        took, cap = view.get("stage_seconds"), view.get("stage_limit")
        out = _bar("The quiz", took, cap, f"{seconds(took)} of {seconds(cap)}")
        if slowest is not None:
            out += _bar(f"Slowest record ({slowest['record']})", slowest.get("seconds"), limit,
                        f"{seconds(slowest.get('seconds'))} of {seconds(limit)}")
        return out + _disk_and_memory(view)
    took = view.get("seconds")
    return _bar("setup.sh", took, limit, f"{seconds(took)} of {seconds(limit)}") + _disk_and_memory(view)


def notes(stage: str, view: dict[str, Any]) -> list[str]:
    """What has no limit to be a bar of: stage 1's CPU time and processes, the OOM killer; and the
    cloud instance the limits mirror ([vm] instance)."""
    out = [f"The VM mirrors {view['instance']}."] if view.get("instance") else []
    if stage == "prep" and view.get("cpu_seconds") is not None:
        out.append(f"CPU {seconds(view.get('cpu_seconds'))}, at most {view.get('processes') or 'unknown'} processes")
    killed = view.get("oom_kills") or sum(r.get("oom_kills") or 0 for r in view.get("records") or [])
    if killed:
        out.append(f"the out-of-memory killer ended {killed} process(es): the memory cap was reached")
    return out


def steps(doc: dict[str, Any]) -> list[Step]:
    figures = doc.get("figures") or {}
    out = []
    for s in doc["steps"]:
        summary, excerpts = split_message(s["message"])
        view = figures.get(s["stage"]) or {}
        charts, sampled = usage_charts(view) if s["stage"] == "quiz" else ([], 0)
        out.append(Step(s["stage"], s["title"], s["status"], STATUS.get(s["status"], s["status"]), s["reason"],
                        summary, excerpts, bars(s["stage"], view), notes(s["stage"], view),
                        [(r["record"], r["status"], seconds(r.get("seconds")), seconds(r.get("cpu_seconds")),
                          size(r.get("peak_memory"))) for r in view.get("records") or []], charts, sampled))
    return out


def budget_bar(doc: dict[str, Any]) -> list[Bar]:
    """The owner's VM time on the board, in the tenths the document gives ("3/10")."""
    budget = doc.get("budget")
    if not budget or not re.fullmatch(r"\d+/10", str(budget.get("used"))):
        return []
    tenths = int(str(budget["used"]).split("/")[0])
    return _bar("VM time on this board", tenths, 10, f"{budget['used']} of the {budget['vm_hours']:g} h budget used",
                False)


def hardware(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """Where the entry's latest VM stage ran, as (name, value): the fields the document has."""
    return [(HARDWARE.get(k, k), str(v)) for k, v in (doc.get("hardware") or {}).items() if v is not None]
