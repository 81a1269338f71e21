"""Reasons an upload or a carry is refused before any entry exists."""

from __future__ import annotations

from .reason import Reason

REASONS: tuple[Reason, ...] = (
    Reason(
        code="bad-name", fault="refused", where="upload",
        means="The owner's name or the archive's file name is empty, too long, or holds control characters, newlines "
              "or invisible formatting.",
        remedy="Use at most 64 printable characters for an owner, or 255 bytes for an archive name, and submit again.",
    ),
    Reason(
        code="carried-twice", fault="refused", where="upload",
        means="The entry was already carried into this phase, as another entry.",
        remedy="Nothing to do: an entry is carried into a phase once, and the entry carried before stands.",
    ),
    Reason(
        code="entry-limit", fault="refused", where="upload",
        means="The owner has used all the scored entries the board allows, counting those still being judged.",
        remedy="Wait until an entry ends without a score, which gives its place back; a dry run (an entry holding "
               "DRYRUN) is always accepted.",
    ),
    Reason(
        code="no-entry", fault="refused", where="upload",
        means="The replica's check (`vmjudge-replica check`) was given a path that does not exist, or one that is not "
              "a file where a saved container image is needed.",
        remedy="Give the path of your entry archive (or its directory) or of your saved image; "
               "`vmjudge-replica media` lists those it finds.",
    ),
    Reason(
        code="no-phase", fault="refused", where="upload",
        means="The upload names a phase the challenge does not have, or the challenge has no phases at all.",
        remedy="Name one of the challenge's phases (or none, when it has none) and submit again.",
    ),
    Reason(
        code="not-carryable", fault="refused", where="upload",
        means="The entry to carry is not an official entry of the phase this one carries from: it is of another "
              "phase, a late entry, or does not exist.",
        remedy="Give the number of one of your official entries of that phase; `vmjudge entries CHALLENGE` lists "
               "them.",
    ),
    Reason(
        code="not-passed", fault="refused", where="upload",
        means="The entry to carry did not pass the phase it comes from, or is still being judged there.",
        remedy="Carry an entry that passed that phase, or wait until this one has passed.",
    ),
    Reason(
        code="not-promoted", fault="refused", where="upload",
        means="The phase is open only to the owners the organisers promoted from the phase before, and this owner was "
              "not promoted.",
        remedy="Ask the organisers if you think you should have been promoted.",
    ),
    Reason(
        code="pending-limit", fault="refused", where="upload",
        means="The owner already has as many entries waiting or running as the challenge takes at once ([limits] "
              "pending_per_owner).",
        remedy="Submit again once one of them has ended.",
    ),
    Reason(
        code="phase-carry", fault="refused", where="upload",
        means="The phase takes no uploads: its entries are carried from an earlier phase.",
        remedy="Carry a passed entry with `vmjudge carry CHALLENGE --phase PHASE ENTRY_ID`, or with 'Choose for "
               "phase' on the entry's page.",
    ),
    Reason(
        code="phase-choice", fault="refused", where="upload",
        means="Several phases take uploads now, and the upload did not say which one it is for.",
        remedy="Name the phase the entry is for and submit again.",
    ),
    Reason(
        code="phase-quota", fault="refused", where="upload",
        means="The owner has reached one of the phase's limits per owner: entries submitted or carried, or entries "
              "that passed (in a phase giving no feedback, every entry counts).",
        remedy="Nothing more can be sent to this phase: the entries already in it stand.",
    ),
    Reason(
        code="phase-uploads", fault="refused", where="upload",
        means="The phase takes uploads, not carried entries.",
        remedy="Submit the archive to the phase instead of carrying an entry into it.",
    ),
    Reason(
        code="phase-window", fault="refused", where="upload",
        means="No phase takes the entry now: the phase has not opened or has closed, or a late entry went to a phase "
              "that has not closed or never closes.",
        remedy="Submit while a phase is open, or as a late entry (--late) once it has closed.",
    ),
    Reason(
        code="rate-limit", fault="refused", where="upload",
        means="The owner has sent as many entries in the last hour as the challenge accepts ([limits] "
              "submissions_per_hour).",
        remedy="Submit again later.",
    ),
    Reason(
        code="smoke-limit", fault="refused", where="upload",
        means="The owner has sent as many smoke tests (dry runs) in the last 24 hours as the challenge runs in a day "
              "([limits] smoke_tests_per_day).",
        remedy="Send it again tomorrow, or as an entry to be scored.",
    ),
    Reason(
        code="spool-limit", fault="refused", where="upload",
        means="The owner's entries keep, or with this archive would keep, more bytes of archives than the challenge "
              "stores for one owner ([limits] spool_bytes_per_owner).",
        remedy="Make the entry smaller and submit again, or ask the organisers for more room.",
    ),
    Reason(
        code="team-changed", fault="refused", where="upload",
        means="The uploader joined or left a team of the challenge while the upload was on its way.",
        remedy="Upload the entry again.",
    ),
    Reason(
        code="vm-budget", fault="refused", where="upload",
        means="The owner has used all the VM time the board allows ([limits] vm_hours); time the judge's own failures "
              "took is never counted.",
        remedy="No further entry can be judged on this board: ask the organisers if you need more VM time.",
    ),
)
