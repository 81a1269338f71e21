"""What participants may know of a contest's phases at a moment: each entry's feedback level,
whether a phase's board is shown, and the phases themselves (windows, rules, publication,
promotions), as participant.py's allow-lists let them through.

A phase that keeps its results back (feedback "errors" or "none", or a hidden board) shows
participants less until the organiser publishes it (`vmjudge publish CHALLENGE --phase P`);
from the publication on it shows everything, as a phase that keeps nothing back does. The
phase's rules are read from the challenge's directory and its publication from the queue, at
each document: a publication reaches every portal and command at once. An entry whose phase
cannot be read here (the challenge's copy missing, the phase gone from challenge.toml) is
shown at the strictest level until its phase is published: better a report withheld than a
hidden phase's results given away.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import Challenge, Phase, load_challenge
from ..config.phase import utc
from ..errors import VmjudgeError
from ..queue.db import Queue
from ..queue.phases import Publication
from ..queue.rows import EntryRow
from . import participant


@dataclass
class PhaseViews:
    """The phases' rules and publications for the documents of one answer (a page, a command)."""

    queue: Queue
    publications: dict[tuple[str, str], Publication]
    _challenges: dict[str, Challenge | None] = field(default_factory=dict)

    @classmethod
    def load(cls, queue: Queue) -> PhaseViews:
        return cls(queue, queue.phases.publications())

    def challenge(self, name: str) -> Challenge | None:
        if name not in self._challenges:
            try:
                self._challenges[name] = load_challenge(self.queue.challenge_dir(name))
            except VmjudgeError:
                self._challenges[name] = None
        return self._challenges[name]

    def phase(self, challenge: str, name: str) -> Phase | None:
        ch = self.challenge(challenge)
        try:
            return ch.phase_named(name) if ch is not None else None
        except VmjudgeError:
            return None

    def published(self, challenge: str, phase: str, at: float) -> bool:
        publication = self.publications.get((challenge, phase))
        return publication is not None and at >= publication.seconds

    def feedback(self, entry: EntryRow, at: float) -> str:
        """The level participants see `entry` at, at `at`."""
        if entry.phase is None or self.published(entry.challenge, entry.phase, at):
            return participant.FULL
        phase = self.phase(entry.challenge, entry.phase)
        return phase.feedback if phase is not None else participant.NONE

    def board_shown(self, challenge: str, phase: str | None, at: float) -> bool:
        """Whether participants may see the board of `phase` (None: a challenge without phases)."""
        if phase is None or self.published(challenge, phase, at):
            return True
        found = self.phase(challenge, phase)
        return found is not None and not found.hidden


def board_phase(ch: Challenge, phase: str | None, at: float) -> str | None:
    """The phase whose board is meant: the one named, else (a contest) the latest that has
    opened at `at`, or the first before any has; None for a challenge without phases."""
    if phase is not None:
        return ch.phase_named(phase).name
    if not ch.phases:
        return None
    opened = [p for p in ch.phases if p.has_opened(at)]
    return (opened or list(ch.phases))[-1 if opened else 0].name


def hidden_board(challenge: str, phase: str) -> str:
    """The sentence a participant reads where a hidden board would be."""
    return (f"The board of phase {phase} of {challenge} is hidden until the organisers publish the phase's "
            "results.")


def _state(phase: Phase, at: float) -> str:
    return "open" if phase.is_open(at) else "closed" if phase.has_closed(at) else "upcoming"


def _training(ch: Challenge, phase: Phase) -> str:
    """Which training set the phase's quiz runs on, as participants read it: the answers their
    archive holds must be for it."""
    count = f"{len(phase.training)} record{'' if len(phase.training) == 1 else 's'}"
    if phase.carry is not None:
        return f"phase {phase.carry}'s ({count}), whose answers a carried entry's archive holds"
    if phase.training_dir.resolve() != (ch.directory / "training").resolve():
        return f"its own ({count}): an entry holds its answers for these records"
    return f"the challenge's ({count})"


def phases_document(views: PhaseViews, name: str, at: float) -> dict[str, Any]:
    """The challenge's phases as participants may know them at `at` (participant.PHASES)."""
    ch = views.challenge(name)
    promotions = views.queue.phases.promotions(name)
    phases = []
    for phase in ch.phases if ch is not None else ():
        before = ch.before(phase) if ch is not None else None
        ranks_shown = before is not None and views.board_shown(name, before.name, at)
        publication = views.publications.get((name, phase.name))
        phases.append({
            "name": phase.name, "opens": utc(phase.opens) if phase.opens is not None else None,
            "closes": utc(phase.closes) if phase.closes is not None else None, "state": _state(phase, at),
            "takes": "uploads" if phase.uploads else "carried entries", "carry": phase.carry,
            "entrants": phase.entrants, "feedback": phase.feedback, "board": phase.board,
            "training": _training(ch, phase) if ch is not None else None,
            "published": publication.at if publication is not None and at >= publication.seconds else None,
            "promoted": [{"owner": p.owner, "place": p.place if ranks_shown else None, "how": p.how, "at": p.at}
                         for p in promotions if p.phase == phase.name]})
    return participant.allowed({"challenge": name, "phases": phases}, participant.PHASES)


def phases_text(doc: dict[str, Any]) -> str:
    """The phases document as lines (vmjudge phases, the portal's page)."""
    lines = []
    for p in doc["phases"]:
        takes = "uploads" if p["takes"] == "uploads" else f"entries carried from {p['carry']}"
        window = f"{p['opens'] or 'from the start'} to {p['closes'] or 'no closing time'}"
        entrants = ", promoted owners only" if p["entrants"] == "promoted" else ""
        published = f"published {p['published']}" if p["published"] else (
            "its results shown as they come" if p["feedback"] == "full" and p["board"] == "public"
            else f"feedback {p['feedback']} and board {p['board']} until published")
        lines.append(f"{p['name']}: {p['state']} ({window}); takes {takes}{entrants}; {published}; "
                     f"training set {p['training']}")
        for promoted in p["promoted"]:
            place = f" (place {promoted['place']})" if promoted["place"] else ""
            lines.append(f"  promoted: {promoted['owner']}{place}, {promoted['how']}, {promoted['at']}")
    return "\n".join(lines) + ("\n" if lines else "")
