"""Running a stage's Job inside the booted replica: the judge's agent, locally.

The judge writes the job's files on a CD, boots a VM with a home disk and reads the agent's
frames from a virtio port. Here the same files are laid out at /media/cdrom (a tmpfs made
read-only, files 0444 or 0555 as on the judge's ISO), the home is a tmpfs at /home/entry of
the challenge's home size, and the very agent of the judge's root (/opt/vmjudge/agent.py)
runs with --replica, writing its frames to a pipe. The host side is the judge's own: the same
FrameStream and the same read loop with the same limits and stop rules (reading.Reading).

A home "disk" is a tar archive of the home directory: blank = empty, an overlay = a copy, so
stage 2 starts from the post-setup home as in the judge, and throwing it away is unlinking it.

A container entry's root, which the judge gives its VM as a read-only disk, is a read-only loop
device of the same squashfs here, named to the agent (--entry-root-device); its commands' layers
go on the home tmpfs as on the judge's home disk. Their input is bound from /media/cdrom into the
entry's root, where a link to the replica CD would lead nowhere: such a job's files are copied.
A submission's code directory (DrivenData's /code_execution) is unmounted after each job.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import select
import shutil
import subprocess
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from ..config import Site
from ..config.layout import EntryFiles
from ..errors import InfrastructureError
from ..images.guest.run_guard import kill_user
from ..vm.channel import ChannelClosed, FrameStream, Watch
from ..vm.job import JOB_FILE, CodeDir, Job
from ..vm.reading import POWEROFF_GRACE, JobRun, Limits, Reading, check_agent_error, host_timeouts

MEDIA = Path("/media/cdrom")
HOME = Path("/home/entry")
REPLICA_CD = Path("/media/replica")
ENTRY_ROOT = Path("/media/entry-root")  # where the agent mounts a container entry's root (guest/root_disk.py)
# Exactly how the judge's /opt/vmjudge/init starts the agent, plus --replica.
AGENT_ARGV = ("/usr/bin/python3", "-I", "-S", "-c",
              'import sys; sys.path.insert(0, "/opt/vmjudge"); import agent; agent.main()', "--replica")


class _Agent:
    """The agent process, seen the way the read loop sees a domain."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc

    def is_active(self) -> bool:
        return self.proc.poll() is None

    def wait_stopped(self, seconds: float) -> bool:
        try:
            self.proc.wait(timeout=seconds)
            return True
        except subprocess.TimeoutExpired:
            return False


class _PipeReader:
    def __init__(self, fd: int):
        self.fd = fd

    def read(self, timeout: float) -> bytes:
        ready, _, _ = select.select([self.fd], [], [], max(timeout, 0))
        if not ready:
            return b""
        data = os.read(self.fd, 1 << 20)
        if not data:
            raise ChannelClosed("end of stream")
        return data


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise InfrastructureError("replica", f"{' '.join(argv)} failed: {proc.stderr.strip()}")


def _umount(path: Path, recursive: bool = False) -> None:
    """Unmount `path` (`recursive`: with what is mounted under it), lazily when it is busy."""
    flags = ["-R"] if recursive else []
    while os.path.ismount(path):
        if subprocess.run(["umount", *flags, str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", *flags, str(path)], capture_output=True)


class LocalRunner:
    """The replica's JobRunner (see stages.context.JobRunner)."""

    def __init__(self, site: Site, files: EntryFiles, attempt: int, home_mib: int):
        self.site = site
        self.files = files  # where each run's agent log is kept
        self.attempt = attempt
        self.home_mib = home_mib

    def new_home(self, path: Path, size_mib: int) -> None:
        with tarfile.open(path, "w"):
            pass

    def overlay(self, path: Path, backing: Path) -> None:
        shutil.copyfile(backing, path)

    def run(self, stage: str, job: Job, home: Path, limits: Limits, watch: Watch | None) -> JobRun:
        nonce = secrets.token_hex(16)
        log_path = self.files.agent_log(stage, self.attempt)
        boot_timeout, silence_timeout, budget = host_timeouts(self.site, limits, job)
        self._lay_out_media(job, nonce)
        device = None
        try:
            argv = list(AGENT_ARGV)
            if job.entry_root is not None:
                device = _attach(Path(job.entry_root))
                argv.append(f"--entry-root-device={device}")
            self._restore_home(home, self.home_mib)
            try:
                with open(log_path, "wb") as log:
                    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=log, start_new_session=True)
                assert proc.stdout is not None
                try:
                    started = time.monotonic()
                    stream = FrameStream(nonce, limits=job.host_limits(), allow_raw=job.raw_copy is not None,
                                         watch=watch)
                    reading = Reading(_Agent(proc), _PipeReader(proc.stdout.fileno()), stream, started, log_path,
                                      boot_timeout, silence_timeout, budget,
                                      limits.stage_cap, None)
                    ended = reading.until_bye()
                    if ended == "bye":
                        _Agent(proc).wait_stopped(POWEROFF_GRACE)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                    proc.stdout.close()
                    kill_user(pwd.getpwnam("entry").pw_uid)  # as the judge's agent does after each command
                transcript = stream.transcript
                check_agent_error(transcript)
                return JobRun(domain="replica", transcript=transcript, iso_sha256="", ended=ended,
                              boot_seconds=reading.boot_seconds, total_seconds=time.monotonic() - started)
            finally:
                if job.code is not None:
                    _unmount_code(job.code)
                    MEDIA.parent.chmod(0o755)  # the agent shut it for a stepped run; the replica's CD is in it
                self._save_home(home)
        finally:
            if device is not None:
                _umount(ENTRY_ROOT)
                subprocess.run(["losetup", "-d", device], capture_output=True)
            _umount(MEDIA)

    def _lay_out_media(self, job: Job, nonce: str) -> None:
        """The job's CD, as a read-only tmpfs at the judge's mount point. Files from the replica
        CD (training records) are linked, not copied; everything else is copied."""
        _umount(MEDIA)
        MEDIA.mkdir(parents=True, exist_ok=True)
        # A stepped submission's CD is root's alone (the agent makes /media so: guest/code_dir.py): its files are
        # copied, for a link into the replica CD would be followed with the entry's rights.
        hidden = job.code is not None and job.code.stepped
        _run(["mount", "-t", "tmpfs", "-o", "mode=0755,nosuid,nodev", "replica-job", str(MEDIA)])
        entries = dict(_expand(job.media))
        entries[PurePosixPath(JOB_FILE)] = job.job_json(nonce)
        for rel, source in sorted(entries.items()):
            target = MEDIA / rel
            for parent in reversed(target.relative_to(MEDIA).parents[:-1]):
                d = MEDIA / parent
                if not d.exists():
                    d.mkdir()
            if isinstance(source, bytes):
                target.write_bytes(source)
                os.chmod(target, 0o400 if str(rel) == JOB_FILE else 0o444)
            elif REPLICA_CD in source.resolve().parents and job.entry_root is None and not hidden:
                target.symlink_to(source.resolve())
            else:
                shutil.copyfile(source, target)
                os.chmod(target, 0o555 if os.access(source, os.X_OK) else 0o444)
        for root, dirs, _ in os.walk(MEDIA):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o555)
        _run(["mount", "-o", "remount,ro", str(MEDIA)])

    def _restore_home(self, home: Path, size_mib: int) -> None:
        _umount(HOME)
        HOME.mkdir(parents=True, exist_ok=True)
        _run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755,nosuid,nodev", "home", str(HOME)])
        _run(["tar", "-x", "-p", "--numeric-owner", "-f", str(home), "-C", str(HOME)])
        entry = pwd.getpwnam("entry")
        os.chown(HOME, entry.pw_uid, entry.pw_gid)

    def _save_home(self, home: Path) -> None:
        try:
            tmp = home.with_name(home.name + ".tmp")
            _run(["tar", "-c", "-p", "--numeric-owner", "-f", str(tmp), "-C", str(HOME), "."])
            os.replace(tmp, home)
        finally:
            _umount(HOME)


def _unmount_code(code: CodeDir) -> None:
    """A submission's code directory and its data (guest/code_dir.py), which the judge's VM loses with
    itself: unmounted, so that the home is saved without the data and the next stage makes it again."""
    _umount(Path(code.path), recursive=True)  # never left mounted: the home would be saved with the data in it
    _umount(HOME / code.data)
    with contextlib.suppress(OSError):
        (HOME / code.data).rmdir()


def _attach(squashfs: Path) -> str:
    """A read-only loop device of `squashfs`, whose name the agent is given."""
    proc = subprocess.run(["losetup", "--find", "--show", "--read-only", str(squashfs)], capture_output=True,
                          text=True)
    if proc.returncode != 0 or not proc.stdout.strip().startswith("/dev/loop"):
        raise InfrastructureError("replica", f"cannot attach the entry's root {squashfs} as a loop device: "
                                             f"{proc.stderr.strip()}")
    return proc.stdout.strip()


def _expand(media: Mapping[str, Path | bytes]) -> dict[PurePosixPath, Path | bytes]:
    """{path on the CD: file, directory or bytes} -> {path: file or bytes}, as the ISO writer does."""
    out: dict[PurePosixPath, Path | bytes] = {}
    for name, source in media.items():
        path = PurePosixPath(name)
        if isinstance(source, bytes) or not Path(source).is_dir():
            out[path] = source if isinstance(source, bytes) else Path(source)
            continue
        for root, dirs, names in os.walk(source):
            dirs.sort()
            for n in sorted(names):
                full = Path(root, n)
                if full.is_file() and not full.is_symlink():
                    out[path / PurePosixPath(*full.relative_to(source).parts)] = full
    return out
