"""What stage 1 checks of an entry's files before any VM, from a listing of them: the components the
challenge requires at the top, scripts the shell can run, a submitted answers.txt no larger than the
training set can need, a submission's main.py and the runtime's names left free, and room in the home
disk. `submit` and the portal run these on the archive's checked listing (unpack.listed: its headers,
and its scripts' first bytes), so that an entry stage 1 would refuse is refused at upload, before it
takes a pending place; stage 1 runs them again on the unpacked tree, for an entry accepted before.

Each refusal says what to do. The commonest mistake, an archive made around its folder, is named as
such: the files are all there, one folder down.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..config import Challenge
from ..config.submission import MAINS
from ..errors import EntryError
from .home_fit import check_need, home_capacity, members_need
from .members import quote

SCRIPTS = ("setup.sh", "next.sh")
HEAD = 1 << 16  # bytes of a script looked at for Windows line ends
# A submitted answers.txt may hold this much: far more than RECORD,LABEL lines need, far less than would cost the
# judge's memory (the quiz holds the submitted answers while it runs).
ANSWERS_FLOOR = 64 << 10
ANSWERS_PER_RECORD = 256


def answers_allowance(training_records: int) -> int:
    return ANSWERS_FLOOR + ANSWERS_PER_RECORD * training_records


@dataclass(frozen=True)
class Listed:
    """An entry's files as the checks see them: each file's size by its path, the folders (those its
    files' paths imply too), and how to read a file's first bytes."""

    files: dict[str, int]
    folders: set[str]
    head: Callable[[str], bytes]

    @classmethod
    def of(cls, entries: Sequence[tuple[str, bool, int]], head: Callable[[str], bytes]) -> Listed:
        """From (path, is a folder, size) of each entry, "" being the entry's top."""
        files = {path: size for path, is_dir, size in entries if not is_dir and path}
        folders = {path for path, is_dir, _ in entries if is_dir and path}
        for path in files:
            parts = path.split("/")
            folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
        return cls(files, folders, head)


def check_components(ch: Challenge, entry: Listed, archive_kind: str) -> None:
    """EntryError naming what stage 1 would refuse, and how to mend it; `archive_kind` ("zip" or
    "tar.gz") shapes the command that makes the archive again."""
    if ch.entry.kind == "submission":
        _submission(ch, entry, archive_kind)
    else:
        _scripts(ch, entry, archive_kind)
    skipped = ch.results.submitted if ch.results.style == "answer-lines" and ch.entry.kind == "archive" else None
    home = home_capacity(ch.vm.home_mib)
    check_need(members_need((s for p, s in entry.files.items() if p != skipped), len(entry.folders), home.block_size),
               ch.vm.home_mib)


def _scripts(ch: Challenge, entry: Listed, archive_kind: str) -> None:
    missing = [name for name in ch.entry.required
               if (name.rstrip("/") not in entry.folders if name.endswith("/") else name not in entry.files)]
    if missing:
        raise EntryError("missing-component", _folder_hint(entry, missing, archive_kind) or
                         f"Missing component(s): {', '.join(missing)}: put {'it' if len(missing) == 1 else 'them'} at "
                         "the top of the archive and submit again.")
    crlf = [name for name in SCRIPTS if name in entry.files and b"\r\n" in entry.head(name)]
    if crlf:
        raise EntryError("bad-script", f"{' and '.join(crlf)} {'has' if len(crlf) == 1 else 'have'} Windows (CRLF) "
                         f"line endings, which the shell cannot run: convert with `dos2unix {' '.join(crlf)}` and "
                         "submit again.")
    rule = ch.results
    if rule.style == "answer-lines" and ch.entry.kind == "archive":
        size, allowance = entry.files.get(rule.submitted, 0), answers_allowance(len(ch.training))
        if size > allowance:
            raise EntryError("answers-too-large", f"{rule.submitted} is {size} bytes, more than the {allowance} bytes "
                             f"that answers for the {len(ch.training)} training records can need (64 KiB plus 256 "
                             "bytes a record): keep one line per training record and submit again.")


def _submission(ch: Challenge, entry: Listed, archive_kind: str) -> None:
    rules = ch.submission
    assert rules is not None
    found = [m for m in MAINS if m in entry.files]
    if not found:
        raise EntryError("missing-component", _folder_hint(entry, ["main.py"], archive_kind, MAINS) or
                         "The submission holds no main.py or main.sh at its top, which the runtime runs: zip the files "
                         "themselves, not their folder (cd into it and run `zip -r ../submission.zip .`).")
    taken = [n for n in (rules.data, rules.output) if n in entry.files or n in entry.folders]
    if taken:
        them = "it" if len(taken) == 1 else "them"
        raise EntryError("bad-archive", f"The submission holds {' and '.join(taken)}, which the runtime makes in "
                         f"{rules.code_dir} (the data, and what main.py writes): leave {them} out of the zip.")
    if found == ["main.sh"] and rules.command is None and b"\r\n" in entry.head("main.sh"):
        raise EntryError("bad-script", "main.sh has Windows (CRLF) line endings, which the shell cannot run: convert "
                         "with `dos2unix main.sh` and submit again.")


def _folder_hint(entry: Listed, missing: list[str], archive_kind: str, any_of: Sequence[str] = ()) -> str | None:
    """The sentence for files that sit one folder down, all of them (or one of `any_of`) in the same one."""
    tops = sorted({f.split("/", 1)[0] for f in entry.folders if "/" not in f})
    for top in tops:
        inside = [name for name in (any_of or missing)
                  if (f"{top}/{name.rstrip('/')}" in entry.folders if name.endswith("/")
                      else f"{top}/{name}" in entry.files)]
        if inside and (any_of or len(inside) == len(missing)):
            make = ("zip -r ../submission.zip ." if any_of else "zip -r ../entry.zip .") if archive_kind == "zip" \
                else "tar czf ../entry.tar.gz ."
            return (f"Your files are inside the folder {quote(top)}/: make the archive from inside it (cd {quote(top)} "
                    f"&& {make}) and submit again.")
    return None
