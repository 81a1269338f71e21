"""The record sets a challenge's stages read, as their data disks hold them (images/data_disk.py):
so that `challenge add` makes the disks before any entry needs one, and `vmjudge gc` knows which
disks a challenge still uses. The quiz and the exam build the same media through the same functions
(records.py, sockets.py); a test holds them equal."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from ..config import Challenge
from ..images.data_disk import DataDisk, DataDisks
from ..vm.job import under
from .records import record_set_media
from .sockets import socket_set_media
from .submission import submission_set_media


def set_media(ch: Challenge, subset: str, records: tuple[str, ...]) -> dict[str, Path | bytes]:
    """The CD's media of a record set (all under `subset/`), as the stage that reads it builds them."""
    if ch.submission is not None:
        return submission_set_media(ch, subset)
    return (socket_set_media if ch.sockets is not None else record_set_media)(ch, subset, records)


def challenge_sets(ch: Challenge) -> Iterator[tuple[str, dict[str, Path | bytes]]]:
    """Each record set a stage of the challenge reads, by the data disk's directory and its files
    (relative to it): every phase's training set (the quiz) and test set (the exam), each once."""
    seen: set[tuple] = set()
    for view in [ch.in_phase(p.name) for p in ch.phases] or [ch]:
        for subset, records in (("training", view.training), ("test", view.test)):
            if not records:
                continue
            files = under(set_media(view, subset, records), subset)
            key = (subset, tuple(sorted((k, str(v)) for k, v in files.items())))
            if key not in seen:
                seen.add(key)
                yield subset, files


def make_disks(disks: DataDisks, ch: Challenge) -> list[tuple[DataDisk, int]]:
    """Every record set's disk made now (`challenge add`), with its number of files."""
    made = []
    for subset, files in challenge_sets(ch):
        with disks.held(subset, files) as disk:
            made.append((disk, len(files)))
    return made


def used_keys(disks: DataDisks, challenges: Iterable[Challenge]) -> set[str]:
    """The disks the challenges' record sets are now (those made; none of their files read)."""
    return {key for ch in challenges for _, files in challenge_sets(ch)
            if (key := disks.known_key(files)) is not None}
