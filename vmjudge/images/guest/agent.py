"""The vmjudge guest agent: reads job.json from the CD-ROM, runs it, reports over serial.

It runs as root inside the judge's VM (started by /opt/vmjudge/init, which powers the
machine off when the agent exits, whatever happened). Entry code runs as the unprivileged
user `entry` in its own session; the agent enforces each command's wall-time limit by
killing that session and then every process the entry user still has, so nothing an
entry starts outlives its command. The host enforces every limit again from outside.

On the replica ISO the same agent runs the same jobs with `--replica`: the frames go to
its standard output (a pipe read by `vmjudge-replica check`, which prepared the home
directory and the job's files at /media/cdrom), and the home is left mounted for the caller.

Only the standard library is used: this file must run on the guest's Python as is.
Modules needed only on some paths (ctypes, shutil, termios) are imported where used: every
import is paid at each boot, before the first frame, under emulation.
"""

import json
import os
import pwd
import select
import signal
import subprocess
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import frames  # noqa: E402

AGENT_VERSION = "1.0"
CDROM_DEV = "/dev/sr0"
CDROM = "/media/cdrom"
HOME_DEV = "/dev/vdb"
HOME = "/home/entry"
PORT_NAME = "org.vmjudge.data"
CHUNK = 64 * 1024
PR_SET_CHILD_SUBREAPER = 36
ENTRY_MAX_PROCESSES = 1024  # per entry user: enough for any real program, not for a fork bomb


class JobError(Exception):
    """The job cannot be carried out; the message is sent to the host."""


class Channel(object):
    """The writing end of the data channel: numbered frames, written whole."""

    def __init__(self, fd):
        self.fd = fd
        self.seq = 0

    def _write(self, data):
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    def send(self, kind, payload=b""):
        for start in range(0, max(len(payload), 1), frames.MAX_PAYLOAD):
            self._write(frames.encode(kind, self.seq, payload[start:start + frames.MAX_PAYLOAD]))
            self.seq += 1

    def send_json(self, kind, obj):
        self._write(frames.encode_json(kind, self.seq, obj))
        self.seq += 1

    def send_file_raw(self, path):
        """One frame whose payload is copied by `cat`: the benchmark's raw baseline.
        The log frame marks the start for the host, after the CRC pass has read the file."""
        size = os.path.getsize(path)
        crc = zlib.crc32(b"raw %d %d" % (self.seq + 1, size))
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                crc = zlib.crc32(block, crc)
        self.send("log", b"raw copy follows")
        self._write(frames.header("raw", self.seq, size, crc))
        self.seq += 1
        subprocess.run(["cat", path], stdout=self.fd, check=True)


def kernel_args():
    try:
        with open("/proc/cmdline") as f:
            words = f.read().split()
    except OSError:
        return {}
    return dict(w.split("=", 1) for w in words if w.startswith("vmjudge.") and "=" in w)


def wait_for(path_or_fn, seconds):
    deadline = time.monotonic() + seconds
    while True:
        found = path_or_fn() if callable(path_or_fn) else (path_or_fn if os.path.exists(path_or_fn) else None)
        if found:
            return found
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def open_channel(kind):
    if kind == "uart":
        path = "/dev/ttyS1"
    else:
        def find_port():
            ports = "/sys/class/virtio-ports"
            for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else []:
                with open(os.path.join(ports, port, "name")) as f:
                    if f.read().strip() == PORT_NAME:
                        return "/dev/" + port
            return None
        path = wait_for(find_port, 20)
        if path is None:
            raise SystemExit("vmjudge agent: no virtio port named %s" % PORT_NAME)
        wait_for(path, 5)
    os.chown(path, 0, 0)
    os.chmod(path, 0o600)  # the entry user must never reach the channel
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
    if os.isatty(fd):
        import termios
        import tty
        tty.setraw(fd)  # cooked mode would turn \n into \r\n
        attrs = termios.tcgetattr(fd)
        attrs[1] &= ~termios.OPOST
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
    return fd


def run_quiet(argv):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise JobError("%s failed: %s" % (" ".join(argv), proc.stdout.decode("utf-8", "replace").strip()))


def mount_cdrom():
    if os.path.ismount(CDROM):  # the init mounts it with busybox, which starts faster
        return
    os.makedirs(CDROM, exist_ok=True)
    if not wait_for(CDROM_DEV, 20):
        raise JobError("no CD-ROM device %s appeared" % CDROM_DEV)
    run_quiet(["mount", "-t", "iso9660", "-o", "ro,nosuid,nodev", CDROM_DEV, CDROM])


def read_job():
    path = os.path.join(CDROM, "job.json")
    try:
        with open(path, "rb") as f:
            job = json.loads(f.read().decode("utf-8"))
    except OSError as exc:
        raise JobError("cannot read job.json from the CD-ROM: %s" % exc)
    except ValueError as exc:
        raise JobError("job.json is not valid JSON: %s" % exc)
    return job


def check_job(job):
    """The host builds jobs, but a damaged CD must be refused, not half-run."""
    if not isinstance(job, dict):
        raise JobError("job.json must hold a JSON object")
    if job.get("protocol") != frames.PROTOCOL:
        raise JobError("job.json protocol %r is not %d" % (job.get("protocol"), frames.PROTOCOL))
    commands = job.get("commands")
    if not isinstance(commands, list):
        raise JobError("job.json has no list of commands")
    for i, cmd in enumerate(commands):
        if not isinstance(cmd, dict):
            raise JobError("command %d is not an object" % i)
        argv = cmd.get("argv")
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
            raise JobError("command %d has no argv list of strings" % i)
        for key in ("timeout", "output_limit"):
            if not isinstance(cmd.get(key), (int, float)) or cmd[key] <= 0:
                raise JobError("command %d needs a positive %s" % (i, key))
        if cmd.get("user", "entry") not in ("entry", "root"):
            raise JobError("command %d has unknown user %r" % (i, cmd.get("user")))


def has_filesystem(dev):
    with open(dev, "rb") as f:
        f.seek(1080)
        return f.read(2) == b"\x53\xef"  # ext2/3/4 superblock magic


def mount_home(channel):
    if not wait_for(HOME_DEV, 20):
        raise JobError("no home disk %s appeared" % HOME_DEV)
    if not has_filesystem(HOME_DEV):
        channel.send("log", b"home disk is blank: making an ext4 filesystem")
        run_quiet(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1",
                   HOME_DEV])
    os.makedirs(HOME, exist_ok=True)
    run_quiet(["mount", "-t", "ext4", "-o", "nosuid,nodev", HOME_DEV, HOME])
    entry = pwd.getpwnam("entry")
    os.chown(HOME, entry.pw_uid, entry.pw_gid)
    os.chmod(HOME, 0o755)
    lost = os.path.join(HOME, "lost+found")
    if os.path.isdir(lost) and not os.listdir(lost):
        os.rmdir(lost)


def install(source):
    """Copy a CD directory into the home directory, owned by the entry user."""
    src = os.path.join(CDROM, source)
    if not os.path.isdir(src):
        raise JobError("the CD-ROM has no directory %s to install" % source)
    import shutil
    entry = pwd.getpwnam("entry")
    shutil.copytree(src, HOME, symlinks=True, dirs_exist_ok=True)
    # The CD holds everything read-only; in the home directory the owner may write.
    for root, dirs, files in os.walk(HOME):
        for name in dirs + files:
            path = os.path.join(root, name)
            os.lchown(path, entry.pw_uid, entry.pw_gid)
            if not os.path.islink(path):
                os.chmod(path, os.lstat(path).st_mode & 0o7777 | 0o200)
        os.chmod(root, os.stat(root).st_mode | 0o700)


def kill_user(uid, passes=3):
    """SIGKILL every process of `uid`: kill(-1) from a child that has become that user.
    More than one pass, so that a process forked while the first pass ran is caught too."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            for _ in range(passes):
                os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def reap():
    """Collect orphans that were re-parented to the agent (it is their subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class Command(object):
    def __init__(self, spec, heartbeat):
        self.name = spec.get("name", spec["argv"][0])
        self.argv = spec["argv"]
        self.timeout = float(spec["timeout"])
        self.output_limit = int(spec["output_limit"])
        self.file_limit = int(spec.get("file_limit", self.output_limit))
        self.user = spec.get("user", "entry")
        self.links = spec.get("links", [])
        self.collect = spec.get("collect", [])
        self.heartbeat = heartbeat


def make_links(paths):
    made = []
    for rel in paths:
        target = os.path.join(CDROM, rel)
        link = os.path.join(HOME, os.path.basename(rel))
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(target, link)
        made.append(link)
    return made


def remove_links(links):
    for link in links:
        if os.path.islink(link):
            os.unlink(link)


def run_command(channel, index, cmd):
    channel.send_json("start", {"index": index, "name": cmd.name})
    entry = pwd.getpwnam("entry")
    as_entry = cmd.user == "entry"
    links = make_links(cmd.links)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": HOME,
           "USER": cmd.user, "LOGNAME": cmd.user, "SHELL": "/bin/sh", "TMPDIR": "/tmp"}
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd.argv, cwd=HOME, env=env, stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd,
            start_new_session=True, close_fds=True,
            preexec_fn=(lambda: become_entry(entry)) if as_entry else None)
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        remove_links(links)
        channel.send_json("end", {"index": index, "status": "error", "exit_code": None,
                                  "seconds": 0.0, "output_bytes": 0, "truncated": False,
                                  "message": "could not start %s: %s" % (cmd.argv[0], exc.strerror)})
        return "error"
    os.close(write_fd)
    deadline = started + cmd.timeout
    pidfd = os.pidfd_open(proc.pid)
    total = 0
    kept = 0
    status = None
    exited = False
    pipe_open = True
    try:
        while pipe_open:
            now = time.monotonic()
            if now >= deadline and status is None:
                status = "timeout"
                os.killpg(proc.pid, signal.SIGKILL)
                if as_entry:
                    kill_user(entry.pw_uid)
            wait = cmd.heartbeat if status is not None else min(cmd.heartbeat, max(deadline - now, 0))
            watch = [read_fd] if exited else [read_fd, pidfd]
            ready, _, _ = select.select(watch, [], [], wait)
            if not ready:
                channel.send("tick")
                continue
            if pidfd in ready:
                exited = True
                proc.wait()
                # Stragglers would hold the pipe open (and outlive the command): end them.
                if as_entry:
                    kill_user(entry.pw_uid)
                else:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            if read_fd in ready:
                data = os.read(read_fd, CHUNK)
                if not data:
                    pipe_open = False
                    continue
                total += len(data)
                if kept < cmd.output_limit:
                    part = data[:cmd.output_limit - kept]
                    kept += len(part)
                    channel.send("out", part)
    finally:
        os.close(read_fd)
        os.close(pidfd)
    proc.wait()
    seconds = time.monotonic() - started
    reap()
    remove_links(links)
    if status is None:
        status = "ok" if proc.returncode == 0 else "error"
    send_files(channel, cmd)
    channel.send_json("end", {"index": index, "status": status, "exit_code": proc.returncode,
                              "seconds": round(seconds, 3), "output_bytes": total,
                              "truncated": total > kept})
    return status


def send_files(channel, cmd):
    """Send back the files a command was asked to leave (e.g. RECORD.qrs), capped."""
    for pattern in cmd.collect:
        path = os.path.join(HOME, pattern)
        if os.path.islink(path) or not os.path.isfile(path):
            channel.send_json("file", {"name": pattern, "size": None, "kept": 0})
            continue
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            data = f.read(cmd.file_limit)
        channel.send_json("file", {"name": pattern, "size": size, "kept": len(data)})
        for start in range(0, len(data), CHUNK):
            channel.send("fdata", data[start:start + CHUNK])


def run_job(channel, job, home_ready=False):
    heartbeat = float(job.get("heartbeat", 2))
    if not home_ready:
        mount_home(channel)
    if job.get("install"):
        install(job["install"])
    if job.get("raw_copy"):
        channel.send_file_raw(os.path.join(CDROM, job["raw_copy"]))
    done = 0
    for index, spec in enumerate(job["commands"]):
        status = run_command(channel, index, Command(spec, heartbeat))
        done += 1
        if status != "ok" and job.get("stop_on_failure", False):
            break
    return done


def become_entry(entry):
    """In the child, before exec: killable by the OOM killer again (the agent is not), a cap on
    processes against fork bombs, then the entry user's identity. The OOM setting comes first:
    once the uid changes, /proc/self belongs to root until exec."""
    import resource
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("0")
    resource.setrlimit(resource.RLIMIT_NPROC, (ENTRY_MAX_PROCESSES, ENTRY_MAX_PROCESSES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)


def protect_from_oom():
    """An entry that eats all memory must lose its own processes, never the agent."""
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("-1000")


def become_subreaper():
    """Orphans of entry processes come to the agent (not PID 1), which reaps them."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def main():
    replica = "--replica" in sys.argv[1:]
    if replica:
        channel = Channel(sys.stdout.fileno())
    else:
        channel = Channel(open_channel(kernel_args().get("vmjudge.channel", "virtio")))
    job = None
    try:
        mount_cdrom()
        job = read_job()
        check_job(job)
    except JobError as exc:
        nonce = job.get("nonce") if isinstance(job, dict) else None
        channel.send_json("hello", {"nonce": nonce, "agent": AGENT_VERSION, "protocol": frames.PROTOCOL})
        channel.send_json("error", {"message": str(exc)})
        channel.send_json("bye", {"commands": 0})
        return
    channel.send_json("hello", {"nonce": job.get("nonce"), "agent": AGENT_VERSION,
                                "protocol": frames.PROTOCOL})
    done = 0
    try:
        become_subreaper()
        protect_from_oom()
        done = run_job(channel, job, home_ready=replica)
    except JobError as exc:
        channel.send_json("error", {"message": str(exc)})
    except Exception as exc:  # report, then let init power off
        channel.send_json("error", {"message": "agent failure: %s: %s" % (type(exc).__name__, exc)})
    finally:
        if os.path.ismount(HOME) and not replica:
            os.sync()
            subprocess.run(["umount", HOME])
    channel.send_json("bye", {"commands": done})


if __name__ == "__main__":
    main()
