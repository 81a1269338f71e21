"""Every reason the judge can record for an entry that failed, was refused or could not be judged,
in one list (`REASONS`), from which the reasons page (docs/reference/reasons.md, written by
scripts/mkdocs_hooks.py), `vmjudge reasons` and the portal's /reasons are all made: a reason the code
records without a row here fails tests/test_reasons.py, so no page can leave one out.

A reason's fault decides everything else about it, once (`FAULTS`): whether the stage runs again,
what the owner is charged, what the participant sees."""

from __future__ import annotations

from . import challenge, entry, infrastructure, refused
from .reason import Consequence, Fault, Reason

__all__ = ["FAULTS", "PAGE", "REASONS", "Consequence", "Fault", "Reason", "entry_reason", "explanation", "find", "link"]

REASONS: tuple[Reason, ...] = (*refused.REASONS, *entry.REASONS, *infrastructure.REASONS, *challenge.REASONS)

# The portal's page of them; a report's reason links to its row there.
PAGE = "/reasons"

FAULTS: dict[Fault, Consequence] = {
    "refused": Consequence(
        "Refused at upload", "No: nothing was run.", "Nothing: no entry was made.",
        "The sentence, as the portal, the API or `vmjudge submit` answers the upload."),
    "entry": Consequence(
        "The entry's fault", "No: the entry ends as failed, at the stage named.",
        "The VM time it used; a failed entry gives back its place under the entry limit.",
        "The stage and the reason; in prep and the quiz also the message and the entry's output, in the silent "
        "exam nothing more."),
    "infrastructure": Consequence(
        "The judge's fault", "Yes: the stage runs again, up to the retries; after them the entry is parked and "
        "the organisers are told.", "Nothing: the time the judge's own failures take is never charged.",
        "The entry in progress; once parked, that the judge had a problem on its side, never the reason."),
    "challenge": Consequence(
        "The challenge's fault", "No: the same run would fail again, so the entry is held (parked) at once and "
        "the organisers are told once.", "Nothing.",
        "The entry in progress, then that the judge had a problem on its side, never the reason; "
        "`vmjudge rescore` scores it once the challenge is fixed."),
}

_BY_CODE = {r.code: r for r in REASONS}


def find(code: str | None) -> Reason | None:
    return _BY_CODE.get(code or "")


def entry_reason(said: str) -> str:
    """The reason a guest gave for its entry's fault, if it is an entry reason of the list, else
    "entry-fault": the guest the entry ran in may say anything, and never the judge's own reason."""
    row = find(said)
    return row.code if row is not None and row.fault == "entry" else "entry-fault"


def explanation(code: str | None) -> str | None:
    """The row of `code` in one line, as a report gives it under a verdict; None for no reason."""
    said = find(code)
    return None if said is None else f"{said.code}: {said.means} {said.remedy}"


def link(code: str, base: str = "") -> str:
    """The address of `code`'s row on the portal whose address is `base` ("" on the portal itself)."""
    return f"{base}{PAGE}#{code}"
