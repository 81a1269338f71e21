"""The hostile and malformed entries, each with the verdict vmjudge must give it.

Each case builds its archive at test time from the good entry (tests/hostile/good) plus
one hostile change. Where the hostile act should simply fail inside the VM, the rest of the
entry is good and the expected verdict is "scored" with the good entry's score: a score
that differs would show the act succeeded or disturbed the judge.
"""

from __future__ import annotations

import gzip
import io
import random
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..avx2_probe import AVX2_OK
from ..avx2_probe import SHELL as AVX2_SHELL

GOOD = Path(__file__).resolve().parent / "good"
REFUSED = "refused"  # `submit` refuses the archive: exit 1, nothing stored


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[Path], Path]  # given a scratch directory, returns the archive to submit
    expect: tuple[str | None, str | None, str | None] | str  # (outcome, failed_stage, reason) or REFUSED
    says: str = ""  # words the participant's report must hold
    challenge: str = "hostile"  # or "hostile-wide" (wide_challenge: many test records, 1 MiB of output each),
    # or "hostile-short-quiz" (short_quiz_challenge: 12 s for the whole quiz)

    @property
    def reaches_vm(self) -> bool:
        """Whether the entry gets past the host's checks into a VM."""
        return self.expect != REFUSED and self.expect[2] not in HOST_REASONS


HOST_REASONS = ("bad-archive", "missing-component", "bad-script", "entry-too-large", "answers-too-large")


def tar_of(files: dict[str, bytes | None], out: Path, extra: Callable[[tarfile.TarFile], None] | None = None) -> Path:
    """A tar.gz of the good entry's files (modes kept) with `files` replacing or removing some."""
    with tarfile.open(out, "w:gz") as tar:
        contents = {p.name: (p.read_bytes(), p.stat().st_mode & 0o777) for p in sorted(GOOD.iterdir())}
        for name, data in files.items():
            if data is None:
                contents.pop(name, None)
            else:
                mode = 0o755 if name.endswith(".sh") else 0o644
                contents[name] = (data, contents.get(name, (b"", mode))[1])
        for name, (data, mode) in contents.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        if extra is not None:
            extra(tar)
    return out


def entry(files: dict[str, bytes | None] | None = None, extra=None) -> Callable[[Path], Path]:
    return lambda d: tar_of(files or {}, d / "entry.tar.gz", extra)


def setup(script: str) -> Callable[[Path], Path]:
    return entry({"setup.sh": ("#!/bin/sh\n" + script + "\n").encode()})


def member(name: str, kind: bytes, linkname: str = "", devmajor: int = 0) -> Callable[[tarfile.TarFile], None]:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.devmajor = kind, linkname, devmajor
        tar.addfile(info)
    return add


def zip_of_zeros(size: int) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        out = d / "entry.zip"
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            for p in sorted(GOOD.iterdir()):
                info = zipfile.ZipInfo(p.name)
                info.external_attr = (stat.S_IFREG | (p.stat().st_mode & 0o777)) << 16
                z.writestr(info, p.read_bytes())
            with z.open("zeros.bin", "w", force_zip64=True) as f:
                block = b"\0" * (1 << 20)
                for _ in range(size >> 20):
                    f.write(block)
        return out
    return build


def many_files(count: int) -> Callable[[Path], Path]:
    def extra(tar: tarfile.TarFile) -> None:
        for i in range(count):
            info = tarfile.TarInfo(f"tiny/{i:06d}")
            tar.addfile(info, io.BytesIO(b""))
    return entry(extra=extra)


def copy_named(name: str, content: bytes | None = None) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        out = d / name
        if content is None:
            shutil.copy(tar_of({}, d / "entry.tar.gz"), out)
        else:
            out.write_bytes(content)
        return out
    return build


def tars_joined(d: Path) -> Path:
    """The good entry with a second tar (holding a decoy) joined after its end marker: tarfile
    alone would stop at the first end and judge the entry without a word about the rest."""
    first, second = tar_of({}, d / "first.tar.gz"), tar_of({"decoy": b"x"}, d / "second.tar.gz")
    out = d / "entry.tar.gz"
    out.write_bytes(gzip.compress(gzip.decompress(first.read_bytes()) + gzip.decompress(second.read_bytes())))
    return out


SCORED = ("scored", None, None)
# A scored entry of the hostile challenge whose attack changed nothing: every test record done.
ALL_RECORDS_DONE = "Stage 3 (exam): 3 test records: 3 completed, 0 failed, 0 timed out."
BAD_ARCHIVE = ("failed", "prep", "bad-archive")
NEXT_SH = "#!/bin/sh\necho \"$1,$(cat \"$1.txt\")\" >> answers.txt\n"
SECRET = "SECRETLABEL-5c1e"

# Each pins half the VM's memory in System V shared memory and leaves it there: without an
# IPC namespace per command (and kernel.shm_rmid_forced), the second one would find no memory (two
# halves exceed the entry's cap, 128 MiB below the VM's). 60 % and python's own pages once passed
# a 384 MiB guest's cap (201.5 MiB under the `max` CPU): one pin must fit.
PIN_SHM = ("python3 -c 'import ctypes; libc = ctypes.CDLL(None); libc.shmat.restype = ctypes.c_void_p; "
           "libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]; "
           "size = int(open(\"/proc/meminfo\").read().split()[1]) * 1024 * 5 // 10; "
           "shmid = libc.shmget(0, ctypes.c_size_t(size), 0o1600); assert shmid >= 0, \"shmget\"; "
           "addr = libc.shmat(shmid, None, 0); assert addr not in (None, 2**64 - 1), \"shmat\"; "
           "ctypes.memset(addr, 1, size)'")
SNOOPS = ("#!/bin/sh\nif cat /media/cdrom/job.json >/dev/null 2>&1 || unshare -Ur true >/dev/null 2>&1 "
          "|| unshare -i true >/dev/null 2>&1; then echo \"$1,LEAKED\" >> answers.txt; exit 0; fi\n")
# A setsid child that outlives its next.sh and writes wrong answers once the next record's
# command has started (its record file appears): it must die with the command that made it.
LATE_WRITER = ("#!/bin/sh\nsetsid sh -c 'while :; do for f in *.txt; do case $f in answers.txt|\"$1.txt\") ;; *) "
               "[ -e \"$f\" ] && { echo r1,WRONG >> answers.txt; echo t1,WRONG >> answers.txt; exit; };; esac; "
               "done; sleep 0.05; done' sh \"$1\" </dev/null >/dev/null 2>&1 &\n")
WIDE_RECORDS = 200  # the wide exam (issue 11's acceptance): 200 MiB printed, over the stage log's 64 MiB cap
WIDE_NEXT = "#!/bin/sh\nhead -c 1048576 /dev/zero | tr '\\000' '\\377'\n" + NEXT_SH.split("\n", 1)[1]


def big_answers(d: Path) -> Path:
    """A 60 MiB answers.txt that packs into well under the archive limit without looking like
    a zip bomb (ratio under 200): each 64 KiB holds 2 KiB of fresh random bytes."""
    import random
    rnd = random.Random(11)
    body = b"".join(rnd.randbytes(2 << 10) + b"\n" * (62 << 10) for _ in range(60 * 16))
    return tar_of({"answers.txt": b"r1,1\nr2,2\n" + body}, d / "entry.tar.gz")


def short_quiz_challenge(dest: Path) -> Path:
    """The hostile challenge with 12 s for the whole quiz (two training records, 10 s each)."""
    shutil.copytree(Path(__file__).resolve().parent / "challenge", dest)
    toml = (dest / "challenge.toml").read_text()
    toml = toml.replace('name = "hostile"', 'name = "hostile-short-quiz"')
    toml = toml.replace("quiz_total = 120", "quiz_total = 12")
    (dest / "challenge.toml").write_text(toml)
    return dest


def wide_challenge(dest: Path, count: int = 200) -> Path:
    """The hostile challenge with `count` test records and the default 1 MiB of output kept per
    command: an exam whose output, kept whole, would cost the host `count` MiB."""
    src = Path(__file__).resolve().parent / "challenge"
    shutil.copytree(src, dest)
    toml = (dest / "challenge.toml").read_text()
    toml = toml.replace('name = "hostile"', 'name = "hostile-wide"').replace("output = 65536\n", "")
    toml = toml.replace("exam_total = 60", f"exam_total = {max(900, 2 * count)}")
    (dest / "challenge.toml").write_text(toml)
    for old in (dest / "test").iterdir():
        old.unlink()
    records = [f"w{i:04d}" for i in range(count)]
    (dest / "test" / "RECORDS").write_text("".join(r + "\n" for r in records))
    for i, r in enumerate(records):
        (dest / "test" / f"{r}.txt").write_text(f"{i % 7}\n")
    (dest / "reference" / "REFERENCE.csv").write_text("".join(f"{r},{i % 7}\n" for i, r in enumerate(records)))
    return dest


CASES = [
    # archives refused on the host, before any VM
    Case("zip-bomb-ratio", zip_of_zeros(24 << 20), REFUSED, "times its own size"),
    Case("zip-bomb-size", zip_of_zeros(200 << 20), REFUSED, "unpacks to more than"),
    Case("tar-dotdot", entry(extra=member("../escape.sh", tarfile.REGTYPE)), REFUSED, ".."),
    Case("tar-absolute", entry(extra=member("/etc/cron.d/x", tarfile.REGTYPE)), REFUSED, "absolute"),
    Case("tar-symlink-out", entry(extra=member("passwd", tarfile.SYMTYPE, "/etc/passwd")), REFUSED, "link"),
    Case("tar-hardlink-out", entry(extra=member("shadow", tarfile.LNKTYPE, "/etc/shadow")), REFUSED, "link"),
    Case("tar-device", entry(extra=member("kmem", tarfile.CHRTYPE, devmajor=1)), REFUSED, "kmem"),
    # submit lists members only up to the challenge's max_members, so it refuses this itself (issue 11)
    Case("many-tiny-files", many_files(100_000), REFUSED, "holds more than 10000 members"),
    Case("not-an-archive", copy_named("x-entry.zip", b"just text, not a zip\n" * 100), REFUSED,
         "is not a readable zip archive"),
    Case("wrong-name", copy_named("solution.tar.gz"), REFUSED, "Improper name (solution.tar.gz) for entry"),
    Case("tars-joined", tars_joined, REFUSED, "data after the end of its"),
    Case("missing-setup", entry({"setup.sh": None}), REFUSED, "setup.sh"),
    Case("missing-next", entry({"next.sh": None}), REFUSED, "next.sh"),
    Case("crlf-scripts", entry({"setup.sh": b"#!/bin/sh\r\necho set up\r\n"}), REFUSED,
         "dos2unix setup.sh"),
    # the rule: a script without an execute bit runs with bash
    Case("no-exec-bit", lambda d: _no_exec(d), SCORED, "setup.sh completed.\n--- setup.sh output ---\nset up"),
    # setup.sh that attacks the VM it runs in
    Case("fork-bomb", setup("bomb() { bomb | bomb & }; bomb; sleep 100"), ("failed", "prep", "setup-timeout"),
         "Cannot fork"),
    Case("eats-memory", setup("python3 -c 'l = []\nwhile True: l.append(bytearray(8 << 20))'"),
         ("failed", "prep", "setup-error"), "setup.sh failed (exit status 137)"),
    # Fills every last block (dd leaves a few KiB), so next.sh's append to answers.txt fails.
    Case("fills-home", setup("dd if=/dev/zero of=fill bs=1M 2>/dev/null; dd if=/dev/zero of=fill2 bs=1k "
                             "2>/dev/null; i=0; while echo x > f$i 2>/dev/null; do i=$((i + 1)); done; exit 0"),
         ("failed", "quiz", "quiz-error"), "next.sh r1: failed"),
    Case("fills-tmp", setup("for d in /tmp /var/tmp /dev/shm; do cat /dev/zero > $d/fill 2>/dev/null || "
                            "printf '%s full; ' $d; done; echo; exit 0"), SCORED,
         "/tmp full; /var/tmp full; /dev/shm full;"),
    Case("prints-100mb", setup("head -c 100000000 /dev/zero; exit 0"), SCORED, "bytes of output not shown"),
    # #41: an entry built for today's CPUs runs under the judge's default guest CPU (TCG's "max" has AVX2); under
    # qemu64 the same instruction is SIGILL, the entry's own (tests/test_guest_cpu_vm.py).
    Case("avx2-setup", setup(AVX2_SHELL), SCORED, AVX2_OK),
    Case("never-exits", setup("sleep 100000"), ("failed", "prep", "setup-timeout"), "did not finish within 20 s"),
    Case("powers-off", setup("python3 -c 'import ctypes; ctypes.CDLL(None).reboot(0x4321FEDC)'; "
                             "echo o > /proc/sysrq-trigger 2>/dev/null; busybox poweroff -f 2>/dev/null; exit 0"),
         SCORED, "cannot create /proc/sysrq-trigger: Permission denied"),
    Case("opens-socket", setup("python3 -c 'import socket\n"
                               "try: socket.create_connection((\"93.184.216.34\", 80), 3)\n"
                               "except OSError as e: print(\"no connection:\", e.strerror)\n"
                               "else: raise SystemExit(1)'"),
         SCORED, "no connection: Network is unreachable"),
    Case("writes-devices", setup("for d in /dev/vport* /dev/ttyS0 /dev/ttyS1 /dev/console /dev/vda /dev/vdb "
                                 "/dev/sr0 /dev/kmsg; do printf 'VMJ1 bye 99 0 00000000\\n' 2>/dev/null > $d "
                                 "&& exit 1; done; echo every device refused; exit 0"), SCORED, "every device refused"),
    Case("hunts-reference", entry({"next.sh": (
        "#!/bin/sh\nif grep -r -l -s " + SECRET + " /media /home /tmp /var /opt /srv /mnt /root /etc >/dev/null "
        "2>&1; then echo \"$1,LEAKED\" >> answers.txt; exit 0; fi\n" + NEXT_SH.split("\n", 1)[1]).encode()}), SCORED,
         ALL_RECORDS_DONE),
    Case("corrupts-answers", entry({"next.sh": (
        "#!/bin/sh\n[ \"$1\" = r2 ] && : > answers.txt\n" + NEXT_SH.split("\n", 1)[1]).encode()}),
         ("failed", "quiz", "quiz-mismatch"), "no longer holds the submitted line for r1"),
    # issue 11: limits that hold, and the entry's doing charged to the entry
    Case("closed-output-setup", setup("exec >&- 2>&-; sleep 100000"), ("failed", "prep", "setup-timeout"),
         "did not finish within 20 s"),
    Case("closed-output-next", entry({"next.sh": b"#!/bin/sh\nexec >&- 2>&-; sleep 100000\n"}),
         ("failed", "quiz", "quiz-timeout"), "next.sh r1: timed out after 10 s"),
    Case("lost-found-link", setup("rmdir lost+found 2>/dev/null; mkdir e; ln -s e lost+found"), SCORED,
         ALL_RECORDS_DONE),
    Case("record-file-dir", setup("mkdir r1.txt"), ("failed", "quiz", "quiz-error"),
         "could not link the record file r1.txt"),
    Case("fills-inodes", setup("i=0; while true 2>/dev/null > f$i; do i=$((i + 1)); done; exit 0"),
         ("failed", "quiz", "quiz-error"), "could not link the record file r1.txt"),
    Case("pins-shm", entry({"setup.sh": ("#!/bin/sh\n" + PIN_SHM + "\n").encode(),
                            "next.sh": ("#!/bin/sh\n" + PIN_SHM + "\n" + NEXT_SH.split("\n", 1)[1]).encode()}),
         SCORED, ALL_RECORDS_DONE),
    Case("snoops-job-and-userns", entry({"next.sh": (SNOOPS + NEXT_SH.split("\n", 1)[1]).encode()}), SCORED,
         ALL_RECORDS_DONE),
    Case("late-writer", entry({"next.sh": (LATE_WRITER + NEXT_SH.split("\n", 1)[1]).encode()}), SCORED,
         ALL_RECORDS_DONE),
    # limits of the whole quiz and of one exam record (#19)
    Case("quiz-over-total", entry({"next.sh": ("#!/bin/sh\nsleep 7\n" + NEXT_SH.split("\n", 1)[1]).encode()}),
         ("failed", "quiz", "quiz-timeout"), "The quiz did not finish within 12 s", challenge="hostile-short-quiz"),
    Case("exam-record-times-out", entry({"next.sh": ("#!/bin/sh\n[ \"$1\" = t2 ] && sleep 1000\n"
                                                     + NEXT_SH.split("\n", 1)[1]).encode()}),
         SCORED, "Stage 3 (exam): 3 test records: 2 completed, 0 failed, 1 timed out."),  # t2 was wrong anyway
    Case("answers-60mb", big_answers, REFUSED, "more than the"),
    Case("wide-ff-output", entry({"next.sh": WIDE_NEXT.encode()}), SCORED,
         f"Stage 3 (exam): {WIDE_RECORDS} test records: {WIDE_RECORDS} completed, 0 failed, 0 timed out.",
         challenge="hostile-wide"),

    # issue 11: archives
    Case("tar-name-not-utf8", entry(extra=member("bad\udcffname", tarfile.REGTYPE)), REFUSED,
         "The member name bad\\xffname is not valid UTF-8"),
    Case("name-40-emoji", entry(extra=member("\U0001F600" * 40, tarfile.REGTYPE)), REFUSED,
         "is 80 UTF-16 code units long, more than the 64"),
    Case("path-depth-1100", entry(extra=member("/".join(["d"] * 1099) + "/f", tarfile.REGTYPE)), REFUSED,
         "lies 1100 levels deep, more than the 32 allowed"),
    Case("zip-corrupt-lzma", lambda d: _zip_with_corrupt_lzma(d), BAD_ARCHIVE,
         "The entry archive is damaged at model.bin"),
    # 60 MiB unpacked (10 MiB of it random) from a 10 MiB archive: within max_size, max_unpacked and
    # the ratio limit, but the 64 MiB home disk holds about 56 MB.
    Case("bigger-than-home", lambda d: _bigger_than_home(d), REFUSED,
         "the home disk holds about 56 MB"),
]


def _no_exec(d: Path) -> Path:
    out = d / "entry.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for p in sorted(GOOD.iterdir()):
            info = tarfile.TarInfo(p.name)
            data = p.read_bytes()
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out


def _zip_with_corrupt_lzma(d: Path) -> Path:
    """The good entry as a zip, plus an LZMA member whose compressed stream is damaged after its
    9-byte header (zip's LZMA version, properties size and properties)."""
    out = d / "entry.zip"
    data = random.Random(11).randbytes(60_000) * 3
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(GOOD.iterdir()):
            info = zipfile.ZipInfo(p.name)
            info.external_attr = (stat.S_IFREG | (p.stat().st_mode & 0o777)) << 16
            z.writestr(info, p.read_bytes())
        z.writestr(zipfile.ZipInfo("model.bin"), data, compress_type=zipfile.ZIP_LZMA)
    return damage_lzma_member(out, "model.bin")


def damage_lzma_member(out: Path, member: str) -> Path:
    """The zip with `member`'s LZMA stream damaged past its 9-byte header: no header shows it, only
    decompressing does (so `submit` takes it, and stage 1 refuses it on the host)."""
    raw = bytearray(out.read_bytes())
    with zipfile.ZipFile(out) as z:
        offset = z.getinfo(member).header_offset
    start = offset + 30 + int.from_bytes(raw[offset + 26:offset + 28], "little") + \
        int.from_bytes(raw[offset + 28:offset + 30], "little")
    for i in range(start + 9, start + 41):
        raw[i] ^= 0x5A
    out.write_bytes(bytes(raw))
    return out


def _bigger_than_home(d: Path) -> Path:
    rnd = random.Random(11)
    files: dict[str, bytes | None] = {"data/random.bin": rnd.randbytes(10 << 20)}
    files.update({f"data/zeros{i}.bin": bytes(10 << 20) for i in range(5)})
    return tar_of(files, d / "entry.tar.gz")
