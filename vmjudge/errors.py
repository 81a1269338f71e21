"""Errors a user can act on. Each message is one plain sentence saying what is wrong and
what to do; cli.py turns them into exit codes. Infrastructure errors carry a reason code
so the supervisor can retry them and never charge them to an entry."""

from __future__ import annotations


class VmjudgeError(Exception):
    """Base class: the message is meant for the person at the terminal."""


class ConfigError(VmjudgeError):
    """A challenge.toml or site.toml value is missing or invalid."""


class ImageError(VmjudgeError):
    """The guest image cannot be built or is missing or damaged."""


class MediaError(VmjudgeError):
    """An ISO image cannot be written from the given files."""


class InfrastructureError(VmjudgeError):
    """The judge's machinery failed, not the entry; such a run is retried, never charged.

    `reason` is a short stable code (for example "channel-broken") that reports and the
    queue record; the message says what happened in words.
    """

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class GpuFault(InfrastructureError):
    """A GPU slot's card could not be lent to the VM, or did not work inside it (before any of
    the entry's commands ran): the stage is the infrastructure's to run again, in another slot,
    and the card's slot is taken out of service until the organiser puts it back."""

    def __init__(self, reason: str, message: str, address: str):
        super().__init__(reason, message)
        self.address = address


class ChallengeError(InfrastructureError):
    """The challenge's own code failed (its evaluation container crashed, overran its cap, wrote
    no metrics.json or a malformed one): never the entry's fault, and a stage run again unchanged
    would fail again, so the entry is held (parked) at once, the organiser told, and `vmjudge
    rescore` scores it once the challenge is fixed."""


class ScoringError(VmjudgeError):
    """The reference answers cannot be read or do not match the test set."""


class AnswerError(ScoringError):
    """An answer the official scorer would refuse (challenge.toml [score] invalid_answers =
    "refuse"): the entry is at fault, not the reference, so it is failed rather than retried.
    The message is the participant's and names no test record and no answer (the exam is
    silent: an answer is whatever the entry chose to write, test data included); `detail`,
    which does, is the organisers'."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


class EntryError(VmjudgeError):
    """The entry itself is at fault (bad archive, missing component...).

    `reason` is the stable code the participant's report and `show --json` carry,
    e.g. "bad-archive" or "missing-component"."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[type[EntryError], tuple[str, str]]:
        # Pickled as it was made: the portal checks archives in a worker process, which sends it back.
        return type(self), (self.reason, str(self))


class Cancelled(Exception):
    """The daemon is stopping: a run was abandoned, neither failed nor charged to anyone."""


class ArchiveError(VmjudgeError):
    """Archived stage-3 results are missing or damaged (their bytes no longer match their hash)."""
