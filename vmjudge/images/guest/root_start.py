"""Starting a command in the entry's own root, as a container would run it, and as confined as a
command of the guest's (run_guard.py): the same memory cgroup, process cap, IPC namespace of its
own and no new privileges, as a user that is not root.

The agent forks a child (root) that takes a mount, PID and IPC namespace of its own, makes every
mount private to it, and mounts: the overlay of the image (lower: the entry-root disk; upper and
work: the command's layers, root_layers.py), a /dev of a few character devices (null, zero, full,
random, urandom, tty; no disk, no channel, no kernel memory or log) and a /dev/shm of half the memory,
the input read-only (the command's files from the CD, each bound on an empty file of a read-only
tmpfs, or a CD directory bound whole) and the output (the layers' output directory). It forks the
command's process, the new PID namespace's first, and exits: that process comes to the agent,
the subreaper, which waits for it and kills it as any command's. It mounts a /proc of its own
namespace (it sees and can signal only the command's processes; when it ends the kernel ends
them all), pivots into the root and drops the old one, leaves the guest's descriptors behind,
takes its user's ids and groups, and only then, as that user, changes to the working directory and runs
the command. No /sys. The net namespace is the VM's: a loopback and nothing else.

The entry controls every name in its root. Before the pivot the child resolves only mount points
the agent made (root_layers.py), each part opened without following links; after it, nothing is
resolved but by the command's own user. Nothing of the root is ever run by a process of root's:
the child runs no program, and loads no module that was not loaded before the fork (an import
after the pivot would read the image's Python), until it is the entry's user."""

import os
import select
import signal
import stat

import run_guard
from media import CDROM
from root_disk import ENTRY_ROOT
from system import JobError

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0))
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"))
# Half the memory, as Grand Challenge gives a job; what is written there is the command's memory, in its cgroup.
SHM_OPTIONS = "mode=1777,size=50%"
OVERLAY_OPTIONS = "redirect_dir=nofollow,metacopy=off,index=off"  # no xattr of the image's leads anywhere
START_SECONDS = 30.0  # the most the agent waits for the command's exec before it watches it anyway
PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class Started:
    """The command's process, as the run guard and command.watch see a Popen: its pid, its exit
    code once waited for (or once kept by stop_command from a kill sweep's reap)."""

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None

    def wait(self):
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                pass  # reaped by a kill sweep: stop_command kept what it read
        return self.returncode


def start_in_root(argv, spec, layers, account, out_fd, cgroup, gpu_devices=(), err_fd=None):
    """Start `argv` in the entry's root as `account` (root_disk.Account: its ids, supplementary
    groups and home), its output to `out_fd` and its errors there too, or to `err_fd`, in `cgroup`.
    OSError when the image is why it could not start (no such working directory or program: the
    command fails, as the entry's fault); JobError when the agent's own steps failed (a namespace,
    a mount, the pivot: the judge's fault, and the job's end)."""
    libc = run_guard._libc()  # loaded here, before the fork
    env = spec.environment(account.home)
    null = os.open("/dev/null", os.O_RDONLY)
    read_end, write_end = os.pipe()  # close-on-exec: end of file once the command runs
    first = os.fork()
    if first == 0:
        _child(lambda: _first(libc, argv, env, spec, layers, account, (out_fd, err_fd), null, cgroup, write_end,
                              gpu_devices), write_end)
    os.close(write_end)
    os.close(null)
    try:
        said = _read_until_exec(read_end)
    finally:
        os.close(read_end)
    pid = next((int(line[4:]) for line in said if line.startswith("pid ")), None)
    faults = [line[6:] for line in said if line.startswith("fault ")]
    errors = [line[6:] for line in said if line.startswith("error ")]
    if pid is None:  # it never got as far as the command's process: whatever holds it, it ends
        os.kill(first, signal.SIGKILL)
    os.waitpid(first, 0)
    if pid is not None and (errors or faults):
        Started(pid).wait()  # it has exited, and came to the agent when the first child did
    if faults or pid is None:
        raise JobError(f"could not start a command in the entry's root: {(faults or ['no reason given'])[0]}")
    if errors:
        raise OSError(0, errors[0])
    return Started(pid)


def _read_until_exec(fd):
    said = b""
    while True:
        ready, _, _ = select.select([fd], [], [], START_SECONDS)
        if not ready:
            break
        data = os.read(fd, 4096)
        if not data:
            break
        said += data
    return said.decode("utf-8", "replace").splitlines()


def _child(body, report):
    """Run `body` in a forked child, which never returns to the agent's code: any failure is told
    on `report` ("fault": the agent's own step failed; "error": the image is why) and ends it."""
    try:
        body()
    except BaseException as exc:  # noqa: BLE001 - whatever it was, the agent is told, and this child ends
        message = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        kind = "error" if isinstance(exc, ImageStep) else "fault"
        try:
            os.write(report, (f"{kind} {getattr(exc, 'where', '')}{message}".replace("\n", " ")[:1000] + "\n").encode())
        finally:
            os._exit(127)
    os._exit(0)


class Step(OSError):
    """A step of the agent's that failed, with where."""

    def __init__(self, errno_, where):
        OSError.__init__(self, errno_, os.strerror(errno_))
        self.where = where


class ImageStep(Step):
    """A step the image decides (its working directory, its program), taken as the command's user."""


def _check(result, where):
    if result != 0:
        raise Step(run_guard.ctypes_errno(), where + ": ")
    return result


def _first(libc, argv, env, spec, layers, account, out_fd, null, cgroup, report, gpu_devices=()):
    """The first child, root in the agent's namespaces: new namespaces, the mounts, the command's
    process forked, its pid told. It never touches a name of the image's."""
    os.umask(0)
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | run_guard.CLONE_NEWIPC), "unshare")
    with open("/proc/sys/kernel/shm_rmid_forced", "w") as f:  # a setting of each IPC namespace
        f.write("1")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making the mounts private")
    layers.reopen()
    merged = layers.path("merged")
    options = f"lowerdir={ENTRY_ROOT},upperdir={layers.path('upper')},workdir={layers.path('work')}," \
              f"{OVERLAY_OPTIONS}"
    _mount(libc, b"overlay", merged, b"overlay", MS_NOSUID | MS_NODEV, options, "mounting the entry's root")
    _dev(libc, merged, gpu_devices)
    gpu_binds(libc, merged, layers.gpu_binds)
    _input(libc, merged, spec)
    for parts, cd_dir in spec.binds:  # read-only CD directories at paths of their own (an evaluation's ground truth)
        _bind(libc, f"{CDROM}/{cd_dir}", merged, parts, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              f"binding /{'/'.join(parts)}")
    _bind(libc, layers.path("output"), merged, spec.output, MS_NOSUID | MS_NODEV, "binding the output")
    if layers.tmp_path() is not None:  # [container] tmp: a directory of its own on the /tmp disk
        _bind(libc, layers.tmp_path(), merged, ["tmp"], MS_NOSUID | MS_NODEV, "binding /tmp")
    pid = os.fork()
    if pid == 0:
        _child(lambda: _second(libc, argv, env, spec, merged, account, out_fd, null, cgroup, report), report)
    os.write(report, b"pid %d\n" % pid)


def _second(libc, argv, env, spec, merged, account, out_fd, null, cgroup, report):
    """The command's process, the first of its PID namespace: its own /proc, the pivot, then the
    command's user, its working directory, its program."""
    out, err = out_fd
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out if err is None else err, 2)
    with open("/proc/self/oom_score_adj", "w") as f:  # killable by the OOM killer again (the agent is not)
        f.write("0")
    with open(cgroup + "/cgroup.procs", "w") as f:
        f.write("0")
    os.setsid()
    _mount(libc, b"proc", _at(merged, ["proc"]), b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, "mounting /proc")
    os.chdir(merged)
    _pivot(libc, SYS_PIVOT_ROOT[os.uname().machine])
    os.closerange(3, report)
    os.closerange(report + 1, 1 << 20)
    run_guard.confine(libc)
    os.setgroups(list(account.groups))
    os.setgid(account.gid)
    os.setuid(account.uid)
    os.umask(0o022)
    for ignored in (signal.SIGPIPE, signal.SIGXFSZ):  # Python's own choice, which a program must not inherit
        signal.signal(ignored, signal.SIG_DFL)
    try:
        os.chdir(spec.workdir)  # as the command's user, inside its root: the image's links are its own
    except OSError as exc:
        raise ImageStep(exc.errno, f"the working directory {spec.workdir}: ") from None
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        raise ImageStep(exc.errno, "") from None


def _pivot(libc, number):
    """The overlay (the working directory) becomes the root, and the guest's root is detached (gone
    from the command's mounts, not merely hidden under its root)."""
    _check(libc.syscall(number, b".", b"."), "pivoting into the entry's root")
    _check(libc.umount2(b".", MNT_DETACH), "detaching the guest's root")
    os.chdir("/")


def _at(top, parts):
    """A path to `parts` under `top` that follows no link: each part opened on its own, without
    following links; the path given to mount(2) is the descriptor's (valid in this process)."""
    fd = os.open(top, PATH | os.O_DIRECTORY)
    for part in parts:
        step = os.open(part, PATH, dir_fd=fd)
        os.close(fd)
        fd = step
    return f"/proc/self/fd/{fd}"  # left open: this child runs for moments, and execs or exits


def _mount(libc, source, target, fstype, flags, data, where):
    target = target.encode() if isinstance(target, str) else target
    data = data.encode() if isinstance(data, str) else data
    _check(libc.mount(source, target, fstype, flags, data), where)


def _bind(libc, source, merged, parts, flags, where):
    """Bind `source` on `parts` under `merged`, then give it `flags` (a bind takes them only when
    remounted: on the path walked again, which now ends on the bound mount, not under it)."""
    _mount(libc, source.encode(), _at(merged, parts), None, MS_BIND, None, where)
    _mount(libc, None, _at(merged, parts), None, MS_REMOUNT | MS_BIND | flags, None, where)


def _dev(libc, merged, gpu_devices=()):
    """The command's /dev: DEVICES, and on a GPU stage the GPU's nodes as the guest has them (root_gpu.py)."""
    _mount(libc, b"tmpfs", _at(merged, ["dev"]), b"tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64",
           "mounting /dev")
    dev = os.open(_at(merged, ["dev"]), os.O_RDONLY | os.O_DIRECTORY)
    for name, major, minor in (*DEVICES, *gpu_devices):
        os.mknod(name, stat.S_IFCHR | 0o666, os.makedev(major, minor), dir_fd=dev)
    for name, target in DEV_LINKS:
        os.symlink(target, name, dir_fd=dev)
    os.mkdir("shm", 0o1777, dir_fd=dev)
    os.close(dev)
    _mount(libc, b"shm", _at(merged, ["dev", "shm"]), b"tmpfs", MS_NOSUID | MS_NODEV, SHM_OPTIONS, "mounting /dev/shm")


def gpu_binds(libc, merged, binds):
    """A GPU stage's driver files (root_gpu.py), each bound read-only on the file the command's
    layers made for it (root_layers.py): never on a name of the image's."""
    for parts, source in binds:
        _bind(libc, source, merged, parts, MS_RDONLY | MS_NOSUID | MS_NODEV, f"binding the GPU's {parts[-1]}")


def _input(libc, merged, spec):
    """The command's input, read-only: a CD directory bound whole, or each CD file bound on an
    empty file of a small tmpfs made read-only after."""
    flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    if spec.input_dir is not None:
        _bind(libc, f"{CDROM}/{spec.input_dir}", merged, spec.input, flags, "binding the input directory")
        return
    _mount(libc, b"input", _at(merged, spec.input), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
           f"mode=0755,size=64k,nr_inodes={len(spec.input_files) + 16}", "mounting the input")
    where = os.open(_at(merged, spec.input), os.O_RDONLY | os.O_DIRECTORY)
    for rel in spec.input_files:
        name = rel.rsplit("/", 1)[-1]
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444, dir_fd=where))
        _bind(libc, f"{CDROM}/{rel}", merged, [*spec.input, name], flags, f"binding the input file {name}")
    os.close(where)
    _mount(libc, None, _at(merged, spec.input), None, MS_REMOUNT | flags, None, "making the input read-only")
