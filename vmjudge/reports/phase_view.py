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

A phase that carries from one seen at "none" is seen at "none" too, board hidden, until either
is published (queue/phase_rules.py shown_level says why: a carried entry's own stages would
tell its source's verdict). And a hidden board's order shows nowhere: while the places of the
owners promoted from it are hidden, they are listed by name, and a promotion says neither its
act nor its time per owner (an owner promoted by a later `--top N` would be the Nth), only the
phase's acts, each with how many it promoted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import Challenge, Phase, load_challenge
from ..config.phase import utc
from ..errors import VmjudgeError
from ..queue.db import Queue
from ..queue.phase_rules import shown_level
from ..queue.phases import Promotion, Publication
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

    def level(self, challenge: str, phase: str, at: float) -> str:
        """The level participants see the entries of `phase` at, at `at` (phase_rules.shown_level:
        "none" too while the phase it carries from is seen at "none")."""
        if self.published(challenge, phase, at):
            return participant.FULL
        ch, found = self.challenge(challenge), self.phase(challenge, phase)
        if ch is None or found is None:
            return participant.NONE
        published = {p for (c, p), publication in self.publications.items()
                     if c == challenge and at >= publication.seconds}
        return shown_level(ch, found, published)

    def feedback(self, entry: EntryRow, at: float) -> str:
        """The level participants see `entry` at, at `at`."""
        if entry.phase is None:
            return participant.FULL
        return self.level(entry.challenge, entry.phase, at)

    def board_shown(self, challenge: str, phase: str | None, at: float) -> bool:
        """Whether participants may see the board of `phase` (None: a challenge without phases)."""
        if phase is None or self.published(challenge, phase, at):
            return True
        found = self.phase(challenge, phase)
        return found is not None and not found.hidden and self.level(challenge, phase, at) == participant.FULL


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


def _promoted(promotions: list[Promotion], ranks_shown: bool) -> list[dict[str, Any]]:
    """A phase's promoted owners as participants may see them: by place, each with its place
    and act, once the board they came from is shown; until then by name (case folded, then as
    written), with no place, act or time of their own, since the order, or an owner's act
    (`--top 1`, then `--top 3`), would give the hidden board's order away."""
    if ranks_shown:
        ordered = sorted(promotions, key=lambda p: (p.at, p.place if p.place is not None else 1 << 30, p.owner))
        return [{"owner": p.owner, "place": p.place, "how": p.how, "at": p.at} for p in ordered]
    return [{"owner": p.owner, "place": None, "how": None, "at": None}
            for p in sorted(promotions, key=lambda p: (p.owner.casefold(), p.owner))]


def _acts(promotions: list[Promotion]) -> list[dict[str, Any]]:
    """Each act of promotion into a phase: how, when, and how many owners it promoted."""
    acts: dict[tuple[str, str], int] = {}
    for p in sorted(promotions, key=lambda p: (p.at, p.how)):
        acts[p.at, p.how] = acts.get((p.at, p.how), 0) + 1
    return [{"how": how, "at": when, "count": count} for (when, how), count in acts.items()]


def phases_document(views: PhaseViews, name: str, at: float) -> dict[str, Any]:
    """The challenge's phases as participants may know them at `at` (participant.PHASES): each
    phase's feedback and board as in force now (a phase carrying from one seen at "none" is
    seen at "none", its board hidden, until either is published)."""
    ch = views.challenge(name)
    promotions = views.queue.phases.promotions(name)
    phases = []
    for phase in ch.phases if ch is not None else ():
        before = ch.before(phase) if ch is not None else None
        ranks_shown = before is not None and views.board_shown(name, before.name, at)
        publication = views.publications.get((name, phase.name))
        level = views.level(name, phase.name, at)
        published = publication.at if publication is not None and at >= publication.seconds else None
        own = [p for p in promotions if p.phase == phase.name]
        phases.append({
            "name": phase.name, "opens": utc(phase.opens) if phase.opens is not None else None,
            "closes": utc(phase.closes) if phase.closes is not None else None, "state": _state(phase, at),
            "takes": "uploads" if phase.uploads else "carried entries", "carry": phase.carry,
            "entrants": phase.entrants,
            "feedback": phase.feedback if published else level,
            "board": "hidden" if not published and not views.board_shown(name, phase.name, at) else phase.board,
            "training": _training(ch, phase) if ch is not None else None,
            "published": published, "promoted": _promoted(own, ranks_shown), "promotions": _acts(own)})
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
            if promoted["how"] is None:  # its place on a hidden board: by name, and its act left out
                lines.append(f"  promoted: {promoted['owner']}")
                continue
            place = f" (place {promoted['place']})" if promoted["place"] else ""
            lines.append(f"  promoted: {promoted['owner']}{place}, {promoted['how']}, {promoted['at']}")
        if p["promoted"] and p["promoted"][0]["how"] is None:
            lines += [f"  promotion: {a['how']}, {a['at']}: {a['count']} owner{'' if a['count'] == 1 else 's'}"
                      for a in p["promotions"]]
    return "\n".join(lines) + ("\n" if lines else "")
