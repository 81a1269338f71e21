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

AGENT_VERSION = "1.2"
CDROM_DEV = "/dev/sr0"
CDROM = "/media/cdrom"
HOME_DEV = "/dev/vdb"
HOME = "/home/entry"
PORT_NAME = "org.vmjudge.data"
CHUNK = 64 * 1024
PR_SET_CHILD_SUBREAPER = 36
ENTRY_MAX_PROCESSES = 1024  # per entry user: enough for any real program, not for a fork bomb
CGROUPS = "/sys/fs/cgroup"
ENTRY_CGROUP = CGROUPS + "/entry"  # every entry command runs in it, capped below the VM's memory
ENTRY_MEMORY_RESERVE = 64 << 20  # kept for the agent and the kernel (or a tenth, if more)
# After a command's process has ended and every process of the entry user was killed, the
# output pipe closes at once; a writer that is somehow still there gets this long.
DRAIN_SECONDS = 5.0
CLONE_NEWIPC = 0x08000000
PR_SET_NO_NEW_PRIVS = 38


class JobError(Exception):
    """The job cannot be carried out; the message is sent to the host."""


class EntryFault(JobError):
    """The job cannot be carried out because of what the entry is or did (it does not fit
    the home disk, say): the host charges it to the entry, never to the infrastructure."""

    def __init__(self, reason, message):
        JobError.__init__(self, message)
        self.reason = reason


class Channel(object):
    """The writing end of the data channel: numbered frames, written whole."""

    def __init__(self, fd):
        self.fd = fd
        self.seq = 0
        self.last_sent = time.monotonic()
        import threading
        self.lock = threading.RLock()  # ticks may come from a second thread (ticking())

    def _write(self, data):
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.last_sent = time.monotonic()

    def send(self, kind, payload=b""):
        with self.lock:
            for start in range(0, max(len(payload), 1), frames.MAX_PAYLOAD):
                self._write(frames.encode(kind, self.seq, payload[start:start + frames.MAX_PAYLOAD]))
                self.seq += 1

    def send_json(self, kind, obj):
        with self.lock:
            self._write(frames.encode_json(kind, self.seq, obj))
            self.seq += 1


class ticking(object):
    """Ticks from a second thread while the agent does something long of its own (copying a
    large entry in, making a big home's filesystem, writing the home disk back): the host
    must not take a busy agent for a dead one and charge a retry to nobody."""

    def __init__(self, channel, heartbeat):
        import threading
        self.channel, self.heartbeat = channel, heartbeat
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._tick, daemon=True)

    def _tick(self):
        while not self.done.wait(self.heartbeat):
            self.channel.send("tick")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        return False

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
    # An empty lost+found is mkfs's, not the entry's: out of its way. Whatever the entry put in
    # its place in an earlier stage (a link, a file) is the entry's own and stays.
    lost = os.path.join(HOME, "lost+found")
    try:
        import stat
        if stat.S_ISDIR(os.lstat(lost).st_mode) and not os.listdir(lost):
            os.rmdir(lost)
    except OSError:
        pass


def install(source):
    """Copy a CD directory into the home directory, owned by the entry user."""
    src = os.path.join(CDROM, source)
    if not os.path.isdir(src):
        raise JobError("the CD-ROM has no directory %s to install" % source)
    import errno
    import shutil
    entry = pwd.getpwnam("entry")
    try:
        shutil.copytree(src, HOME, symlinks=True, dirs_exist_ok=True)
        # The CD holds everything read-only; in the home directory the owner may write.
        for root, dirs, files in os.walk(HOME):
            for name in dirs + files:
                path = os.path.join(root, name)
                os.lchown(path, entry.pw_uid, entry.pw_gid)
                if not os.path.islink(path):
                    os.chmod(path, os.lstat(path).st_mode & 0o7777 | 0o200)
            os.chmod(root, os.stat(root).st_mode | 0o700)
    except (OSError, shutil.Error) as exc:
        errors = [exc] if isinstance(exc, OSError) else [e for e in exc.args[0] if isinstance(e, OSError)]
        if any(getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT) for e in errors) or \
                "No space left" in str(exc):
            raise EntryFault("entry-too-large", "the entry does not fit in the home disk: make it smaller "
                                                "and submit again")
        raise


def kill_user(uid, passes=50):
    """SIGKILL every process of `uid`, from root: nothing the entry does can stop it (a killer
    that took the entry's uid could itself be stopped by the entry, and wait for ever). Passes
    repeat until one finds no live process, so a process forked meanwhile is caught too."""
    wanted = str(uid)
    for _ in range(passes):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/status" % name) as f:
                    status = f.read()
            except OSError:
                continue
            state, uids = None, ()
            for line in status.splitlines():
                if line.startswith("State:"):
                    state = line.split()[1:2]
                elif line.startswith("Uid:"):
                    uids = line.split()[1:]
                    break
            if wanted not in uids or state in (["Z"], ["X"]):
                continue
            try:
                os.kill(int(name), signal.SIGKILL)
                found = True
            except OSError:
                pass
        if not found:
            return
        reap()


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
        self.tail_limit = int(spec.get("tail_limit", 0))
        self.file_limit = int(spec.get("file_limit", self.output_limit))
        self.user = spec.get("user", "entry")
        self.links = spec.get("links", [])
        self.collect = spec.get("collect", [])
        self.heartbeat = heartbeat


class LinkError(Exception):
    """A record file could not be linked into the home directory: what the entry left there
    (a directory of that name, a full inode table) is in the way. The command fails, as the
    entry's fault."""


def make_links(paths, made):
    """Link each CD path into the home directory, appending each link to `made` as it is
    made (so the caller removes exactly those, whatever happens)."""
    for rel in paths:
        target = os.path.join(CDROM, rel)
        name = os.path.basename(rel)
        link = os.path.join(HOME, name)
        try:
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(target, link)
        except OSError as exc:
            raise LinkError("could not link the record file %s into the home directory: %s (the entry left "
                            "something in its way)" % (name, exc.strerror or exc))
        made.append(link)


def remove_links(links):
    for link in links:
        try:
            if os.path.islink(link):
                os.unlink(link)
        except OSError:
            pass


class OutputCap(object):
    """What is kept of a command's output: the first `head` bytes, sent as they arrive, and
    the last `tail` bytes after them, sent when the command ends; the middle is counted."""

    def __init__(self, head, tail):
        self.head, self.tail = head, tail
        self.total = 0
        self.kept = 0
        self.ring = bytearray()

    def add(self, data):
        """Count `data`; return the part of it that belongs to the head."""
        self.total += len(data)
        part = b""
        if self.kept < self.head:
            part = data[:self.head - self.kept]
            self.kept += len(part)
            data = data[len(part):]
        if data and self.tail > 0:
            self.ring += data[-self.tail:]
            if len(self.ring) > self.tail:
                del self.ring[:len(self.ring) - self.tail]
        return part

    @property
    def omitted(self):
        return self.total - self.kept - len(self.ring)


def stop_command(proc, entry, as_entry):
    """SIGKILL the command's process group and, for entry commands, every process the entry
    user has; either may already be gone (the race at a deadline)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if as_entry:
        kill_user(entry.pw_uid)


def run_command(channel, index, cmd):
    channel.send_json("start", {"index": index, "name": cmd.name})
    entry = pwd.getpwnam("entry")
    as_entry = cmd.user == "entry"
    links = []
    started = time.monotonic()
    try:
        make_links(cmd.links, links)
    except LinkError as exc:
        remove_links(links)
        return end_without_running(channel, index, str(exc))
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": HOME,
           "USER": cmd.user, "LOGNAME": cmd.user, "SHELL": "/bin/sh", "TMPDIR": "/tmp"}
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            cmd.argv, cwd=HOME, env=env, stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd,
            start_new_session=True, close_fds=True,
            preexec_fn=(lambda: become_entry(entry)) if as_entry else None)
    except (OSError, subprocess.SubprocessError) as exc:
        os.close(read_fd)
        os.close(write_fd)
        remove_links(links)
        return end_without_running(channel, index, "could not start %s: %s"
                                   % (cmd.argv[0], getattr(exc, "strerror", None) or exc))
    os.close(write_fd)
    output = OutputCap(cmd.output_limit, cmd.tail_limit)
    try:
        status = watch(channel, cmd, proc, read_fd, output, started, entry, as_entry)
    finally:
        os.close(read_fd)
    seconds = time.monotonic() - started
    if as_entry:  # nothing the command started may outlive it (a setsid child appending later)
        kill_user(entry.pw_uid)
    reap()
    remove_links(links)
    if status is None:
        status = "ok" if proc.returncode == 0 else "error"
    for start_at in range(0, len(output.ring), frames.MAX_PAYLOAD):
        channel.send("tail", bytes(output.ring[start_at:start_at + frames.MAX_PAYLOAD]))
    send_files(channel, cmd)
    channel.send_json("end", {"index": index, "status": status, "exit_code": proc.returncode,
                              "seconds": round(seconds, 3), "output_bytes": output.total,
                              "tail_bytes": len(output.ring), "truncated": output.omitted > 0})
    return status


def end_without_running(channel, index, message):
    channel.send_json("end", {"index": index, "status": "error", "exit_code": None, "seconds": 0.0,
                              "output_bytes": 0, "truncated": False, "message": message})
    return "error"


def watch(channel, cmd, proc, read_fd, output, started, entry, as_entry):
    """Relay the command's output until it has ended and its pipe is closed, holding the
    deadline all the while: a command that closes its stdout and stderr is still timed and
    killed, and ticks keep telling the host the agent is alive. Returns "timeout" or None."""
    deadline = started + cmd.timeout
    pidfd = os.pidfd_open(proc.pid)
    status = None
    exited = False
    pipe_open = True
    drain_until = None
    last_kill = 0.0
    try:
        while pipe_open or not exited:
            now = time.monotonic()
            # A tick whenever nothing was sent for a heartbeat: output past the head is not sent,
            # and a command printing a byte a second must not look like a dead agent.
            if now - channel.last_sent >= cmd.heartbeat:
                channel.send("tick")
            if status is None and now >= deadline:
                status = "timeout"
            if status == "timeout" and not exited and now - last_kill >= 1.0:
                stop_command(proc, entry, as_entry)  # again each second, until the process is gone
                last_kill = now
            if drain_until is not None and now >= drain_until:
                break
            wait = max(cmd.heartbeat - (now - channel.last_sent), 0)
            if status is None:
                wait = min(wait, max(deadline - now, 0))
            if drain_until is not None:
                wait = min(wait, max(drain_until - now, 0))
            watched = ([read_fd] if pipe_open else []) + ([] if exited else [pidfd])
            ready, _, _ = select.select(watched, [], [], wait)
            if not ready:
                continue
            if pidfd in ready:
                exited = True
                proc.wait()
                # Stragglers would hold the pipe open (and outlive the command): end them.
                stop_command(proc, entry, as_entry)
                drain_until = time.monotonic() + DRAIN_SECONDS
            if read_fd in ready:
                data = os.read(read_fd, CHUNK)
                if not data:
                    pipe_open = False
                    continue
                part = output.add(data)
                if part:
                    channel.send("out", part)
    finally:
        os.close(pidfd)
    if not exited:
        stop_command(proc, entry, as_entry)
        proc.wait()
    return status


def send_files(channel, cmd):
    """Send back the files a command was asked to leave (e.g. RECORD.qrs), capped."""
    for pattern in cmd.collect:
        size, data = read_result(pattern, cmd.file_limit)
        channel.send_json("file", {"name": pattern, "size": size, "kept": len(data)})
        for start in range(0, len(data), CHUNK):
            channel.send("fdata", data[start:start + CHUNK])


def read_result(rel, limit):
    """(size, first `limit` bytes) of the regular file at `rel` under the home, or (None, b"").

    The agent is root and the home is the entry's: every path component is opened without
    following links (a linked directory could lead to job.json or any root-only file), the
    file is opened non-blocking (a FIFO must not hang the agent), and its size is taken from
    the very descriptor that is read, once."""
    import stat
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    parts = [p for p in rel.split("/") if p]
    if not parts or ".." in parts:
        return None, b""
    fds = []
    try:
        fds.append(os.open(HOME, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for part in parts[:-1]:
            fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
        fds.append(os.open(parts[-1], flags, dir_fd=fds[-1]))
        st = os.fstat(fds[-1])
        if not stat.S_ISREG(st.st_mode):
            return None, b""
        chunks = []
        left = limit
        while left > 0:
            chunk = os.read(fds[-1], min(left, CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return st.st_size, b"".join(chunks)
    except OSError:
        return None, b""
    finally:
        for fd in fds:
            os.close(fd)


# Defence in depth for the kernel the entry shares with the agent (the channel's only guard
# is guest root). Set once the home is mounted (ext4 and its checksum module are loaded by
# then) and before any entry command: no user namespaces (an entry's "root" in one reaches
# kernel code no unprivileged user should), no more module loading, System V shared memory
# removed with its last user, the kernel's link protections (busybox init applies no
# sysctl.d), and the kernel log and addresses kept from unprivileged eyes.
HARDENING = (
    ("user/max_user_namespaces", "0", True),
    ("kernel/unprivileged_userns_clone", "0", False),  # Debian's kernels only
    ("kernel/shm_rmid_forced", "1", True),
    ("fs/protected_hardlinks", "1", True),
    ("fs/protected_symlinks", "1", True),
    ("fs/protected_fifos", "2", False),
    ("fs/protected_regular", "2", False),
    ("kernel/dmesg_restrict", "1", False),
    ("kernel/kptr_restrict", "2", False),
    ("kernel/perf_event_paranoid", "3", False),
    # Little dirty data, so the home disk is written back within moments of the last command.
    ("vm/dirty_bytes", str(32 << 20), False),
    ("vm/dirty_background_bytes", str(8 << 20), False),
    ("kernel/modules_disabled", "1", True),  # last: it cannot be undone
)


def harden():
    for key, value, required in HARDENING:
        try:
            with open("/proc/sys/" + key, "w") as f:
                f.write(value)
        except OSError as exc:
            if required:
                raise JobError("cannot set %s=%s in the guest: %s" % (key.replace("/", "."), value, exc))


def entry_memory_limit():
    with open("/proc/meminfo") as f:
        total = int(f.readline().split()[1]) * 1024  # MemTotal, in KiB
    return total - max(ENTRY_MEMORY_RESERVE, total // 10)


def make_entry_cgroup():
    """The cgroup of the entry's commands, with a memory cap below the VM's: what they use is
    reclaimed, and the largest of them OOM-killed, inside it, while the agent's memory is left
    alone. Without it, a command that ate all memory stalled the whole guest for over a minute
    on the way to the OOM killer; the agent's ticks stopped, and the host took the entry's own
    doing for a silent channel, an infrastructure failure retried at no cost to the entry.
    Files it writes to /tmp and /dev/shm are charged to it too."""
    try:
        if not os.path.ismount(CGROUPS):
            run_quiet(["mount", "-t", "cgroup2", "-o", "nosuid,nodev,noexec", "cgroup2", CGROUPS])
        with open(CGROUPS + "/cgroup.subtree_control", "w") as f:
            f.write("+memory +pids")
        os.makedirs(ENTRY_CGROUP, exist_ok=True)
        with open(ENTRY_CGROUP + "/memory.max", "w") as f:
            f.write(str(entry_memory_limit()))
    except OSError as exc:
        raise JobError("cannot make the entry's memory cgroup: %s" % exc)


def run_job(channel, job, home_ready=False):
    heartbeat = float(job.get("heartbeat", 2))
    with ticking(channel, heartbeat):
        if not home_ready:
            mount_home(channel)
            harden()
        make_entry_cgroup()
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
    """In the child, before exec: killable by the OOM killer again (the agent is not), in the
    entry's memory cgroup, a cap on processes against fork bombs, a System V IPC namespace of
    its own (its shared memory dies with the command instead of pinning the VM's memory for
    the next one), no gaining privileges through setuid programs, then the entry user's
    identity. The OOM setting comes first: once the uid changes, /proc/self belongs to root
    until exec."""
    import resource
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("0")
    with open(ENTRY_CGROUP + "/cgroup.procs", "w") as f:  # root's file: before the uid changes
        f.write("0")
    resource.setrlimit(resource.RLIMIT_NPROC, (ENTRY_MAX_PROCESSES, ENTRY_MAX_PROCESSES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    libc = _libc()
    if libc.unshare(CLONE_NEWIPC) != 0:
        raise OSError(ctypes_errno(), "cannot make an IPC namespace for the command")
    with open("/proc/sys/kernel/shm_rmid_forced", "w") as f:  # a setting of each IPC namespace
        f.write("1")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes_errno(), "cannot set no_new_privs for the command")
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)


_LIBC = []


def _libc():
    """libc through ctypes, loaded once (before any fork: a child must not import)."""
    if not _LIBC:
        import ctypes
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def ctypes_errno():
    import ctypes
    return ctypes.get_errno()


def protect_from_oom():
    """An entry that eats all memory must lose its own processes, never the agent."""
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("-1000")


def become_subreaper():
    """Orphans of entry processes come to the agent (not PID 1), which reaps them."""
    _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


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
    except EntryFault as exc:
        channel.send_json("error", {"message": str(exc), "fault": "entry", "reason": exc.reason})
    except JobError as exc:
        channel.send_json("error", {"message": str(exc)})
    except Exception as exc:  # report, then let init power off
        channel.send_json("error", {"message": "agent failure: %s: %s" % (type(exc).__name__, exc)})
    finally:
        if os.path.ismount(HOME) and not replica:
            with ticking(channel, float(job.get("heartbeat", 2))):
                os.sync()
                subprocess.run(["umount", HOME])
    channel.send_json("bye", {"commands": done})


if __name__ == "__main__":
    main()
