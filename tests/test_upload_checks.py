"""Stage 1's host checks at upload (#58): each realistically broken archive a participant makes is refused
by `submit` and the portal alike (both call queue/admit.py's prepare), with a sentence saying how to mend
it, before it is stored: no entry, no pending place, nothing in the spool. Stage 1 refuses the same,
with the same words, for an entry accepted before the checks ran at upload."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from vmjudge.archive.components import check_components
from vmjudge.config import Site, load_challenge
from vmjudge.errors import EntryError
from vmjudge.queue.admit import admit
from vmjudge.queue.db import Queue
from vmjudge.stages.prep.unpacked import listed_tree

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GOOD = {"setup.sh": b"#!/bin/sh\ntrue\n", "next.sh": b"#!/bin/sh\necho \"$1,N\" >> answers.txt\n",
        "answers.txt": b"A1,N\n", "model/weights.bin": b"\0" * 100}


def tar(path: Path, files: dict[str, bytes], kinds: dict[str, bytes] | None = None, prefix: str = "") -> Path:
    """A tar.gz of `files` under `prefix`, and `kinds` members of a special type (name -> tar type)."""
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(prefix + name)
            info.size, info.mode = len(data), 0o755
            tf.addfile(info, io.BytesIO(data))
        for name, kind in (kinds or {}).items():
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            tf.addfile(info)
    return path


def zip_(path: Path, files: dict[str, bytes], prefix: str = "") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(prefix + name, data)
    return path


def without(name: str) -> dict[str, bytes]:
    return {k: v for k, v in GOOD.items() if k != name}


# name -> (archive maker, reason, words of the sentence)
BROKEN = {
    "no setup.sh": (lambda d: tar(d / "entry.tar.gz", without("setup.sh")), "missing-component",
                    "Missing component(s): setup.sh: put it at the top of the archive and submit again."),
    "no next.sh": (lambda d: tar(d / "entry.tar.gz", without("next.sh")), "missing-component",
                   "Missing component(s): next.sh: put it at the top of the archive"),
    "around its folder (tar)": (lambda d: tar(d / "entry.tar.gz", GOOD, prefix="sample/"), "missing-component",
                                "Your files are inside the folder sample/: make the archive from inside it (cd sample "
                                "&& tar czf ../entry.tar.gz .) and submit again."),
    "around its folder (zip)": (lambda d: zip_(d / "entry.zip", GOOD, prefix="sample/"), "missing-component",
                                "Your files are inside the folder sample/: make the archive from inside it (cd sample "
                                "&& zip -r ../entry.zip .) and submit again."),
    "an absolute path": (lambda d: tar(d / "entry.tar.gz", {**GOOD, "/etc/cron.d/x": b"x"}), "bad-archive",
                         "has an absolute path"),
    "..": (lambda d: tar(d / "entry.tar.gz", {**GOOD, "../x": b"x"}), "bad-archive", "climbs out of the entry"),
    "a symlink": (lambda d: tar(d / "entry.tar.gz", GOOD, {"data": tarfile.SYMTYPE}), "bad-archive",
                  "data is a link; entries may hold only regular files and directories"),
    "a hard link": (lambda d: tar(d / "entry.tar.gz", GOOD, {"data": tarfile.LNKTYPE}), "bad-archive", "is a link"),
    "a device": (lambda d: tar(d / "entry.tar.gz", GOOD, {"null": tarfile.CHRTYPE}), "bad-archive",
                 "null is a character device"),
    "a FIFO": (lambda d: tar(d / "entry.tar.gz", GOOD, {"pipe": tarfile.FIFOTYPE}), "bad-archive", "pipe is a FIFO"),
    "a name not in UTF-8": (lambda d: tar(d / "entry.tar.gz", {**GOOD, "mod\udce9l.bin": b"x"}), "bad-archive",
                            "is not valid UTF-8: rename the file"),
    "CRLF setup.sh": (lambda d: tar(d / "entry.tar.gz", {**GOOD, "setup.sh": b"#!/bin/sh\r\ntrue\r\n"}), "bad-script",
                      "setup.sh has Windows (CRLF) line endings, which the shell cannot run: convert with `dos2unix "
                      "setup.sh` and submit again."),
    "CRLF both": (lambda d: tar(d / "entry.tar.gz", {**GOOD, "setup.sh": b"a\r\n", "next.sh": b"b\r\n"}), "bad-script",
                  "setup.sh and next.sh have Windows (CRLF) line endings"),
    "answers.txt too large": (lambda d: tar(d / "entry.tar.gz", {**GOOD, "answers.txt": b"A1,N\n" * 20000}),
                              "answers-too-large", "answers.txt is 100000 bytes, more than the 65792 bytes"),
    "two of one name": (lambda d: tar(d / "entry.tar.gz", {**GOOD, "./setup.sh": b"x"}), "bad-archive",
                        "setup.sh appears more than once"),
    "a file under a file": (lambda d: tar(d / "entry.tar.gz", {**GOOD, "next.sh/x": b"x"}), "bad-archive",
                            "lies inside next.sh, which is a file"),
    "not an archive": (lambda d: (d / "entry.zip").write_bytes(b"just text\n") and d / "entry.zip", "bad-archive",
                       "entry.zip is not a readable zip archive, or is damaged: make it again"),
    "cut short": (lambda d: cut(tar(d / "entry.tar.gz", {**GOOD, "big": bytes(range(256)) * 4000})), "bad-archive",
                  "entry.tar.gz is not a readable tar.gz archive, or is damaged"),
    "too many files": (lambda d: tar(d / "entry.tar.gz", {**GOOD, **{f"f{i}": b"" for i in range(30)}}), "bad-archive",
                       "holds more than 20 members"),
    "too large unpacked": (lambda d: tar(d / "entry.tar.gz", {**GOOD, "zeros": b"\0" * (3 << 20)}), "bad-archive",
                           "unpacks to more than 2097152 bytes"),
    "an encrypted zip": (lambda d: encrypted(zip_(d / "entry.zip", GOOD)), "bad-archive", "is encrypted"),
    "another name": (lambda d: tar(d / "solution.tar.gz", GOOD), "bad-archive", "Improper name (solution.tar.gz)"),
}
LIBRARY_WORDS = ("File is not a zip file", "not a gzip file", "Bad CRC", "Error -3", "unexpected end of data",
                 "Compressed file ended")


def cut(path: Path) -> Path:
    path.write_bytes(path.read_bytes()[:-200])
    return path


def encrypted(path: Path) -> Path:
    """The zip with its members' "encrypted" flag set, as `zip -e` leaves it."""
    data = bytearray(path.read_bytes())
    for header in (b"PK\x03\x04", b"PK\x01\x02"):
        at = data.find(header)
        while at != -1:
            flag_at = at + (6 if header == b"PK\x03\x04" else 8)
            data[flag_at] |= 1
            at = data.find(header, at + 4)
    path.write_bytes(bytes(data))
    return path


class Home:
    def __init__(self, tmp_path: Path, max_unpacked: int = 2 << 20):
        self.path = tmp_path / "home"
        self.path.mkdir()
        challenge = tmp_path / "up"
        (challenge / "training").mkdir(parents=True)
        (challenge / "training" / "RECORDS").write_text("A1\n")
        toml = (f'name = "up"\n[entry]\nmax_members = 20\nmax_unpacked = {max_unpacked}\n'
                f'max_size = {max(max_unpacked, 1 << 20)}\n[limits]\npending_per_owner = 1\n[vm]\nhome = 64\n')
        (challenge / "challenge.toml").write_text(toml)
        self.challenge = load_challenge(challenge)
        self.site = Site(home=self.path)
        self.queue = Queue(self.path / "queue.db")
        self.queue.add_challenge("up", challenge, "key")

    def admit(self, archive: Path, owner: str = "alice"):
        return admit(self.site, self.queue, "up", self.challenge, archive, owner, False, rate_limited=True)


@pytest.mark.parametrize("case", BROKEN)
def test_each_broken_archive_is_refused_at_upload_with_its_sentence_and_nothing_kept(tmp_path, case):
    home = Home(tmp_path)
    scratch = tmp_path / "made"
    scratch.mkdir()
    make, reason, words = BROKEN[case]
    with pytest.raises(EntryError) as caught:
        home.admit(make(scratch))
    assert caught.value.reason == reason and words in str(caught.value), str(caught.value)
    assert not any(w in str(caught.value) for w in LIBRARY_WORDS)
    assert home.queue.entries() == [] and sorted(home.path.glob("spool/*/*")) == []
    # The refusal took no pending place (pending_per_owner = 1): the good archive is admitted right after.
    assert home.admit(tar(scratch / "good-entry.tar.gz", GOOD)).entry_id == 1


def test_an_entry_that_cannot_fit_its_home_is_refused_at_upload(tmp_path):
    home = Home(tmp_path, max_unpacked=1 << 30)  # a 64 MiB home: about 56 MB for files
    big = zip_(tmp_path / "big-entry.zip", GOOD)
    with zipfile.ZipFile(big, "a", zipfile.ZIP_STORED) as zf:
        for i in range(3):
            zf.writestr(f"w{i}.bin", bytes(range(256)) * 80_000)  # 20 MB each, stored: 61 MB in all
    with pytest.raises(EntryError) as caught:
        home.admit(big)
    assert caught.value.reason == "entry-too-large" and "but the home disk holds about 56 MB" in str(caught.value)
    assert home.queue.entries() == []


def test_stage_1_refuses_what_upload_does_in_the_same_words(tmp_path):
    """For an entry accepted before the checks ran at upload (or carried from another phase), stage 1's check
    of the unpacked tree says what `submit` says of the archive."""
    home = Home(tmp_path)
    tree = tmp_path / "tree" / "sample"
    tree.mkdir(parents=True)
    for name, data in GOOD.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    with pytest.raises(EntryError) as at_stage_1:
        check_components(home.challenge, listed_tree(tmp_path / "tree"), "tar.gz")
    with pytest.raises(EntryError) as at_upload:
        home.admit(tar(tmp_path / "entry.tar.gz", GOOD, prefix="sample/"))
    assert str(at_stage_1.value) == str(at_upload.value)
    (tree / "setup.sh").write_bytes(b"#!/bin/sh\r\n")
    with pytest.raises(EntryError, match="setup.sh has Windows") as crlf:
        check_components(home.challenge, listed_tree(tree), "tar.gz")
    assert crlf.value.reason == "bad-script"


def test_a_good_archive_and_dryrun_pass_and_only_the_scripts_first_bytes_are_read(tmp_path):
    home = Home(tmp_path)
    admitted = home.admit(tar(tmp_path / "entry.tar.gz", {**GOOD, "DRYRUN": b""}))
    assert admitted.dry_run
    # A CRLF past the first 64 KiB of a script is not looked for (stage 1 reads as much): the shell meets it later.
    late = GOOD["setup.sh"] + b"#" * (64 << 10) + b"\r\n"
    assert home.admit(tar(tmp_path / "b-entry.tar.gz", {**GOOD, "setup.sh": late}), owner="bob").entry_id == 2
