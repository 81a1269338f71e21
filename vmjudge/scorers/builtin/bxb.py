"""bxb's beat-by-beat comparison (WFDB 10.7.0, `bxb -f 0`), reimplemented from its published
rules so that beats2014 gives the counts the 2014 Challenge gave, without WFDB's C tools.

Only what moves a beat between TP, FN and FP is kept: the beat classes (N, S, V, F, Q) do not,
since the Challenge counted every beat the same, and neither does a shutdown (bxb's X
pseudo-beat is counted like its O). Each rule is stated where it is applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .wfdb_annotations import FLUTTER_WAVE, QRS_CODES, TIME_MAX, VF_OFF, VF_ON, Annotation

BEAT, NO_BEAT, NOT_COUNTED = "beat", "no-beat", "not-counted"  # bxb's N/S/V/F/Q, O and "*"


@dataclass(frozen=True)
class Counts:
    """One record's beat-by-beat tally."""

    tp: int  # reference beats matched by a test beat
    fn: int  # reference beats left unmatched
    fp: int  # test beats left unmatched


def window(frequency: float) -> int:
    """bxb's match window: strtim(".15"), 0.15 s in whole samples rounded half up, computed in
    double precision (38 samples at 250 Hz, 19 at 125 Hz, 54 at 360 Hz); inclusive."""
    return int(0.15 * frequency + 0.5)


def compare(reference: Sequence[Annotation], test: Sequence[Annotation], match_window: int, end: int) -> Counts:
    """bxb's tally of one record. `end` is the record's length in samples (the header's), or 0
    when unknown.

    Rules: both files are read in file order, keeping beat annotations only (WFDB's QRS codes;
    "!" flutter waves take part but count as no beat, bxb's class O). The beats of a VF episode
    ("[" to "]") are skipped, in either file, and a test beat left unmatched inside a reference
    VF episode (the current or the previous one read) is not counted. Comparison starts at
    sample 0 (-f 0) with bxb's start-up: both files begin with a placeholder at sample 0, so a
    test beat at sample 0 is paired with the reference placeholder and counted nowhere. Then
    the earlier of the current reference beat T and test beat t is paired with the other when
    they are at most the window apart and the other is nearer to it than to its own successor
    (T′ or t′), or the successors are nearer to each other than the other is to its successor;
    otherwise the earlier one is unmatched. The comparison goes on while T or t lies within the
    record's length (so beats after the end are not counted, unless matched by one within it);
    with no length, until the reference annotations end."""
    ref, tst = _Beats(reference), _Beats(test)
    tally = _Tally()
    ref.advance()
    tst.advance()
    while tst.next_time < 0:  # -f 0: test beats before sample 0 belong to the learning period
        tst.advance()
    if ref.time - tst.time < abs(ref.time - tst.next_time) and ref.time - tst.time <= match_window:
        tally.pair(ref.kind, tst.kind)
        ref.advance()
        tst.advance()
    else:
        tst.advance()
        if tst.time <= match_window and abs(ref.time - tst.next_time) < abs(ref.time - tst.time):
            tst.advance()

    def going_on() -> bool:
        if end > 0:
            return ref.time <= end or tst.time <= end
        return ref.time != TIME_MAX

    while going_on():
        big_t, big_t2, t, t2 = ref.time, ref.next_time, tst.time, tst.next_time
        if t < big_t:
            if big_t - t <= match_window and (big_t - t < abs(big_t - t2) or abs(big_t2 - t2) < abs(big_t - t2)):
                tally.pair(ref.kind, tst.kind)
                ref.advance()
                tst.advance()
            else:
                tally.pair(NOT_COUNTED if ref.in_vf(t) else NO_BEAT, tst.kind)
                tst.advance()
        elif t - big_t <= match_window and (t - big_t < abs(t - big_t2) or abs(t2 - big_t2) < abs(t - big_t2)):
            tally.pair(ref.kind, tst.kind)
            tst.advance()
            ref.advance()
        else:
            tally.pair(ref.kind, NO_BEAT)
            ref.advance()
    return Counts(tp=tally.tp, fn=tally.fn, fp=tally.fp)


@dataclass
class _Tally:
    tp: int = 0
    fn: int = 0
    fp: int = 0

    def pair(self, ref: str | None, test: str | None) -> None:
        """bxb's pair(): a beat with a beat is a match, a reference beat with no beat a miss, no
        beat with a test beat an extra; a placeholder (None) or a beat not counted adds nothing."""
        if ref == BEAT and test == BEAT:
            self.tp += 1
        elif ref == BEAT and test == NO_BEAT:
            self.fn += 1
        elif ref == NO_BEAT and test == BEAT:
            self.fp += 1


@dataclass
class _Beats:
    """One file's beats as bxb reads them: the current one (time, kind) and the next, with the
    VF episodes passed on the way (the latest two, as bxb keeps them)."""

    annotations: Sequence[Annotation]
    index: int = 0
    time: int = 0
    kind: str | None = None  # None: the start-up placeholder at sample 0
    next_time: int = 0
    next_kind: str | None = None
    vf: list[tuple[int, int]] = field(default_factory=lambda: [(-1, -1), (-1, -1)])  # current, previous

    def advance(self) -> None:
        self.time, self.kind = self.next_time, self.next_kind
        self.next_time, self.next_kind = self._read()

    def in_vf(self, t: int) -> bool:
        (on, off), (p_on, p_off) = self.vf
        return (on != -1 and on <= t and (t <= off or off == -1)) or (p_on != -1 and p_on <= t <= p_off)

    def _read(self) -> tuple[int, str]:
        while self.index < len(self.annotations):
            ann = self.annotations[self.index]
            self.index += 1
            if ann.code in QRS_CODES:
                return ann.time, NO_BEAT if ann.code == FLUTTER_WAVE else BEAT
            if ann.code == VF_ON:
                # A new episode: its end is the next "]"; an episode never ended keeps the
                # previous end, as bxb does, and hides every later beat.
                self.vf = [(ann.time, self.vf[0][1]), self.vf[0]]
                while True:
                    if self.index >= len(self.annotations):
                        return TIME_MAX, NOT_COUNTED
                    ann = self.annotations[self.index]
                    self.index += 1
                    if ann.code == VF_OFF:
                        self.vf[0] = (self.vf[0][0], ann.time)
                        break
        return TIME_MAX, NOT_COUNTED
