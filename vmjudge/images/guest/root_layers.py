"""One command's layers on the home disk, for a command that runs in the entry's root: the
overlay's upper and work directories (what the command writes goes there, bounded by the home
disk, and the image stays as it was), the output directory, and the directory the root is
mounted on; made fresh for each command and removed after it, so nothing one command writes is
seen by the next, but what it leaves in its output, which the agent sends back first.

The mount points the agent needs (/tmp, /dev, /proc, the input and the output, every directory
on their way) are made here, in the upper directory, as real directories of root's, before the
overlay is mounted: the image's own entries at those paths (a link to /etc, a file, a directory
with files) are hidden under them, so the agent's mounts can never be led elsewhere by the
image, and the image's directories on the way keep their owner and mode. The upper directory
is the agent's own until the command starts; each command has a new one.

Every directory here is under one of root's, mode 0700, on the home disk, reached through a
descriptor held open: the home's top directory is the entry user's."""

import errno
import os
import stat
import time

from media import HOME
from root_disk import ENTRY_ROOT, TMP_DISK
from system import JobError

SCRATCH = HOME + "/.vmjudge-root"
OPAQUE = "trusted.overlay.opaque"  # overlayfs: the lower layer's entries under this directory are hidden
# What is left of a command's layers after this long is left on the home disk (it is the entry's
# own writing that takes so long to remove, and it is the entry's home disk it fills).
REMOVE_SECONDS = 2.0
REMOVE_DEPTH = 200
REMOVE_BATCH = 1000  # names read from a directory at a time
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_scratch():
    """A descriptor of SCRATCH, made if missing; refused unless it is root's and private."""
    try:
        os.mkdir(SCRATCH, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise JobError(f"cannot make {SCRATCH} on the home disk: {exc}") from None
    try:
        fd = os.open(SCRATCH, DIRECTORY)
    except OSError as exc:
        raise JobError(f"{SCRATCH} is not a directory of the agent's: {exc}") from None
    st = os.fstat(fd)
    if st.st_uid != 0 or st.st_mode & 0o077:
        os.close(fd)
        raise JobError(f"{SCRATCH} is not root's alone")
    return fd


class Layers:
    def __init__(self, index, spec, uid, gid, gpu=None):
        self.scratch = open_scratch()
        self.name = f"command-{index}-{time.monotonic_ns()}"
        self.tmp = None  # the command's /tmp on the cases' /tmp disk, when the job has one
        self.gpu_binds = []  # [(parts in the root, the guest's file)]: a GPU stage's driver files (root_gpu.py)
        try:
            self._make(spec, uid, gid, gpu)
            if os.path.ismount(TMP_DISK):
                self.tmp = os.open(TMP_DISK, DIRECTORY)
                os.mkdir(self.name, 0o1777, dir_fd=self.tmp)  # empty, as Grand Challenge's /tmp is at a job's start
                os.chmod(self.name, 0o1777, dir_fd=self.tmp)  # the umask took the sticky and write bits
        except OSError as exc:
            self.remove()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise  # the entry's home disk is full of its own doing: the command fails
            raise JobError(f"cannot make a command's layers on the home disk: {exc}") from None

    def reopen(self):
        """In a child that took a mount namespace of its own: SCRATCH by its name again, checked to
        be the directory the agent holds. A descriptor opened before the unshare stands for the
        agent's mounts, on which the child may mount nothing (overlayfs refuses its layers too)."""
        fd = os.open(SCRATCH, DIRECTORY)
        now, held = os.fstat(fd), os.fstat(self.scratch)
        if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            raise OSError(errno.EXDEV, f"{SCRATCH} is not the directory the agent made")
        self.scratch = fd  # in this child alone
        if self.tmp is not None:  # the same, for the /tmp disk
            fd = os.open(TMP_DISK, DIRECTORY)
            now, held = os.fstat(fd), os.fstat(self.tmp)
            if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                raise OSError(errno.EXDEV, f"{TMP_DISK} is not the directory the agent made")
            self.tmp = fd

    def tmp_path(self):
        """The command's /tmp on the /tmp disk, through the descriptor; None without the disk."""
        return None if self.tmp is None else f"/proc/self/fd/{self.tmp}/{self.name}"

    def path(self, part):
        """A path to `part` of these layers that passes through the descriptor, never through a name
        in the home's top directory (valid in this process and in its children)."""
        return f"/proc/self/fd/{self.scratch}/{self.name}/{part}"

    def _make(self, spec, uid, gid, gpu):
        os.mkdir(self.name, 0o700, dir_fd=self.scratch)
        top = os.open(self.name, DIRECTORY, dir_fd=self.scratch)
        lower = os.open(ENTRY_ROOT, DIRECTORY)
        try:
            for part in ("upper", "work", "merged", "output"):
                os.mkdir(part, 0o755, dir_fd=top)
            upper = os.open("upper", DIRECTORY, dir_fd=top)
            try:
                root = os.fstat(lower)  # the root of the overlay is its upper directory: as the image's root
                os.fchown(upper, root.st_uid, root.st_gid)
                os.fchmod(upper, stat.S_IMODE(root.st_mode))
                for parts, mode in ((["tmp"], 0o1777), (["dev"], 0o755), (["proc"], 0o755),
                                    (spec.input, 0o755), (spec.output, 0o755), *((p, 0o755) for p, _ in spec.binds)):
                    mount_point(upper, lower, parts, mode)
                if gpu:
                    libdir = gpu.libdir(lower)
                    self.gpu_binds = gpu.binds(libdir)
                    for parts, _ in self.gpu_binds:
                        mount_point(upper, lower, parts, 0o644, last="file")
                    for parts, target in gpu.links(libdir):
                        mount_point(upper, lower, parts, 0o777, last=target)
            finally:
                os.close(upper)
            output = os.open("output", DIRECTORY, dir_fd=top)
            try:
                os.fchown(output, uid, gid)
            finally:
                os.close(output)
        finally:
            os.close(lower)
            os.close(top)

    def remove(self, seconds=REMOVE_SECONDS):
        """Remove these layers (the command's processes are gone), within `seconds`; True when all went."""
        deadline = time.monotonic() + seconds
        try:
            if self.tmp is not None:  # what is left after the deadline stays on the /tmp disk, bounded by its size
                try:
                    remove_tree(self.tmp, self.name, deadline)
                except OSError:
                    pass
                finally:
                    os.close(self.tmp)
                    self.tmp = None
            return remove_tree(self.scratch, self.name, deadline)
        except OSError:
            return False
        finally:
            os.close(self.scratch)


def mount_point(upper, lower, parts, mode, last="directory"):
    """Make each directory of `parts` in the upper directory `upper`. The last is the mount point:
    root's, `mode`, and opaque (the image's entries under it hidden). One on the way that is a
    directory in the image gets the image's owner and mode, so that the image's directory looks
    as it did; one that the image lacks, or has as something else, is root's, 0755. A directory
    already made (a shared part of two paths) is kept as it is. With `last` "file", the last is an
    empty file of root's (a file's mount point), and with any other string a link to that target:
    either hides what the image has at that path."""
    if last != "directory":
        *on_the_way, name = parts
        here = _directories(upper, lower, on_the_way) if on_the_way else os.dup(upper)
        try:
            if last == "file":
                os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                                 dir_fd=here))
            else:
                os.symlink(last, name, dir_fd=here)
        finally:
            os.close(here)
        return
    os.close(_directories(upper, lower, parts, mode))


def _directories(upper, lower, parts, mode=None):
    """mount_point's directories (the last a mount point when `mode` is given, else a directory on
    the way like the others); a descriptor of the last, which the caller closes."""
    here = os.dup(upper)
    image = os.dup(lower)  # the same place in the image while it has directories there, else -1
    try:
        for i, part in enumerate(parts):
            last = mode is not None and i == len(parts) - 1
            in_image = None
            if image >= 0:
                try:
                    in_image = os.stat(part, dir_fd=image, follow_symlinks=False)
                except OSError:
                    in_image = None
                following = os.open(part, DIRECTORY, dir_fd=image) if in_image is not None and \
                    stat.S_ISDIR(in_image.st_mode) and not last else -1
                os.close(image)
                image = following
            try:
                os.mkdir(part, 0o700, dir_fd=here)
                made = True
            except FileExistsError:
                made = False
            step = os.open(part, DIRECTORY, dir_fd=here)  # never a link: the upper directory is the agent's
            os.close(here)
            here = step
            if not made:
                continue
            if last:
                os.setxattr(here, OPAQUE, b"y")
                os.fchmod(here, mode)
            elif in_image is not None and stat.S_ISDIR(in_image.st_mode):
                os.fchown(here, in_image.st_uid, in_image.st_gid)
                os.fchmod(here, stat.S_IMODE(in_image.st_mode))
            else:
                os.fchmod(here, 0o755)
        made_here, here = here, -1
        return made_here
    finally:
        if here >= 0:
            os.close(here)
        if image >= 0:
            os.close(image)


def remove_tree(parent, name, deadline):
    """Remove `name` in the directory `parent` and everything under it, following no link; False
    when the deadline passed, or the tree went deeper than REMOVE_DEPTH, before all was gone."""
    stack = [[parent, name, None, []]]  # directory, name in it, its descriptor once opened, names still to remove
    try:
        while stack:
            if time.monotonic() > deadline or len(stack) > REMOVE_DEPTH:
                return False
            top = stack[-1]
            where, entry, fd, pending = top
            if fd is None:
                try:
                    top[2] = fd = os.open(entry, DIRECTORY, dir_fd=where)
                except FileNotFoundError:
                    stack.pop()
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                    os.unlink(entry, dir_fd=where)  # a file, a link, a FIFO, an overlay whiteout
                    stack.pop()
                    continue
            if not pending:
                with os.scandir(fd) as entries:
                    pending.extend(e.name for _, e in zip(range(REMOVE_BATCH), entries, strict=False))
                if not pending:
                    os.close(fd)
                    stack.pop()
                    os.rmdir(entry, dir_fd=where)
                    continue
            stack.append([fd, pending.pop(), None, []])
        return True
    finally:
        for _, _, fd, _ in stack:
            if fd is not None:
                os.close(fd)
