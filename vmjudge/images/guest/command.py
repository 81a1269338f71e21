"""One command of the job, from its "start" frame to its "end" frame: its place readied (its
record files linked into the home, or its layers of the entry's own root: command_place.py), its
output relayed (the head as it comes, the tail at the end) while its deadline holds, the files it
was asked to leave sent back, and what it used (usage.py) in its end frame. run_guard confines
and ends it."""

import contextlib
import fcntl
import os
import pwd
import select
import subprocess
import time

import frames
from command_place import Home, PlaceError, Root
from media import CHUNK, read_listing, read_result
from run_guard import kill_user, reap, stop_command
from samples import Series, with_gpu
from usage import CommandCgroup

# After a command's process has ended and every process of the entry user was killed, the
# output pipe closes at once; a writer that is somehow still there gets this long.
DRAIN_SECONDS = 5.0


class Command:
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
        self.root = spec.get("root")  # runs in the entry's own root (root_spec.py), or None
        self.cwd = spec.get("cwd")  # a submission's code directory (code_dir.py); None: the home
        self.stderr_apart = bool(self.root and self.root.get("stderr_apart"))
        self.heartbeat = heartbeat


class OutputCap:
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


def run_command(channel, index, cmd, gpu=None, meter=None):
    """Run one command and frame what it did; `gpu`: a GPU stage's view for a command in the entry's
    root (root_gpu.py); `meter`: a GPU stage's card, whose memory in use its samples add
    (gpu_memory.py)."""
    channel.send_json("start", {"index": index, "name": cmd.name})
    entry = pwd.getpwnam("entry")
    as_entry = cmd.user == "entry"
    started = time.monotonic()
    try:
        place = Root(index, cmd, entry, gpu) if cmd.root is not None else Home(cmd, entry)
    except PlaceError as exc:
        return end_without_running(channel, index, str(exc))
    user = place.user  # whom the sweep ends: the entry user, or the user an entry's root runs as
    cgroup = CommandCgroup(index) if as_entry else None
    read_fd, write_fd = os.pipe()
    widen(read_fd)
    # Grand Challenge's runtime keeps stderr apart (its warnings): a second pipe, relayed as "err" frames.
    err_read, err_write = os.pipe() if cmd.stderr_apart else (None, None)
    try:
        proc = place.start(cmd, write_fd, cgroup, err_write)
    except (OSError, subprocess.SubprocessError) as exc:
        os.close(read_fd)
        os.close(write_fd)
        close_all(err_read, err_write)
        if cgroup is not None:
            place.ended(cgroup)
            cgroup.remove()
        place.undo()
        return end_without_running(channel, index,
                                   f"could not start {cmd.argv[0]}: {getattr(exc, 'strerror', None) or exc}")
    os.close(write_fd)
    close_all(err_write)
    output = OutputCap(cmd.output_limit, cmd.tail_limit)
    errors = OutputCap(cmd.output_limit, 0)
    pipes = {read_fd: ("out", output), **({err_read: ("err", errors)} if err_read is not None else {})}
    series = Series(with_gpu(cgroup.sample, meter)) if cgroup is not None else None
    try:
        status = watch(channel, cmd, proc, pipes, started, user, as_entry, series)
    finally:
        close_all(read_fd, err_read)
    seconds = time.monotonic() - started
    if as_entry:  # nothing the command started may outlive it (a setsid child appending later)
        place.ended(cgroup)
        kill_user(user.pw_uid)
    reap()
    usage = None
    if cgroup is not None and series is not None:  # read once nothing of the command is left: its peaks are final
        usage = cgroup.figures()
        cgroup.remove()
        usage["samples"] = series.rows()
    if status is None:
        status = "ok" if proc.returncode == 0 else "error"
    for start_at in range(0, len(output.ring), frames.MAX_PAYLOAD):
        channel.send("tail", bytes(output.ring[start_at:start_at + frames.MAX_PAYLOAD]))
    send_files(channel, cmd, place.files)
    place.undo()
    channel.send_json("end", {"index": index, "status": status, "exit_code": proc.returncode,
                              "seconds": round(seconds, 3), "output_bytes": output.total,
                              "tail_bytes": len(output.ring), "truncated": output.omitted > 0,
                              "usage": usage, **({"error_bytes": errors.total} if err_read is not None else {})})
    return status


def close_all(*fds):
    for fd in fds:
        if fd is not None:
            os.close(fd)


def end_without_running(channel, index, message):
    channel.send_json("end", {"index": index, "status": "error", "exit_code": None, "seconds": 0.0,
                              "output_bytes": 0, "truncated": False, "message": message})
    return "error"


def widen(fd):
    """A pipe of a frame's size, not the default 64 KiB: a command that prints fast is relayed in
    a few large frames instead of many small ones, each a pass of the agent's loop under emulation."""
    with contextlib.suppress(OSError):  # the kernel's limit (pipe-max-size) is lower: the default serves
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, frames.MAX_PAYLOAD)


def watch(channel, cmd, proc, pipes, started, entry, as_entry, series=None):
    """Relay the command's output until it has ended and its pipes are closed, holding the
    deadline all the while: a command that closes its stdout and stderr is still timed and
    killed, and ticks keep telling the host the agent is alive. `pipes`: each read end -> (the
    frame its head goes in, its OutputCap); `series`: its cgroup sampled over time (samples.py),
    on its grid and once more as it ends. Returns "timeout" or None."""
    deadline = started + cmd.timeout
    pidfd = os.pidfd_open(proc.pid)
    status = None
    exited = False
    open_fds = set(pipes)
    drain_until = None
    last_kill = 0.0
    buffer = bytearray(frames.MAX_PAYLOAD)  # read into again and again: no MiB allocated for each MiB read
    try:
        while open_fds or not exited:
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
            if series is not None:
                series.tick(now - started)
            wait = max(cmd.heartbeat - (now - channel.last_sent), 0)
            if series is not None:
                wait = min(wait, series.wait(now - started))
            if status is None:
                wait = min(wait, max(deadline - now, 0))
            if drain_until is not None:
                wait = min(wait, max(drain_until - now, 0))
            watched = sorted(open_fds) + ([] if exited else [pidfd])
            ready, _, _ = select.select(watched, [], [], wait)
            if not ready:
                continue
            if pidfd in ready:
                exited = True
                if series is not None:  # before the sweep: what the command held as it ended
                    series.end(time.monotonic() - started)
                proc.wait()
                # Stragglers would hold the pipe open (and outlive the command): end them.
                stop_command(proc, entry, as_entry)
                drain_until = time.monotonic() + DRAIN_SECONDS
            for fd in open_fds.intersection(ready):
                n = os.readv(fd, [buffer])
                if not n:
                    open_fds.discard(fd)
                    continue
                kind, cap = pipes[fd]
                part = cap.add(memoryview(buffer)[:n])
                if part:
                    channel.send(kind, part)
    finally:
        os.close(pidfd)
    if not exited:
        stop_command(proc, entry, as_entry)
        proc.wait()
    return status


def send_files(channel, cmd, base):
    """Send back the files a command was asked to leave (e.g. RECORD.qrs) under `base`, capped. A
    name ending in "/" is a directory (an image socket's): its listing is sent, as a file of names
    whose size is the count of its entries, and then its one entry when it holds exactly one file."""
    for pattern in cmd.collect:
        if pattern.endswith("/"):
            count, names, only = read_listing(pattern, base)
            listing = "\n".join(names).encode("utf-8", "surrogateescape")
            channel.send_json("file", {"name": pattern, "size": count, "kept": len(listing)})
            send_data(channel, listing)
            if only is not None:
                size, data = read_result(pattern + only, cmd.file_limit, base)
                channel.send_json("file", {"name": pattern + only, "size": size, "kept": len(data)})
                send_data(channel, data)
            continue
        size, data = read_result(pattern, cmd.file_limit, base)
        channel.send_json("file", {"name": pattern, "size": size, "kept": len(data)})
        send_data(channel, data)


def send_data(channel, data):
    for start in range(0, len(data), CHUNK):
        channel.send("fdata", data[start:start + CHUNK])
