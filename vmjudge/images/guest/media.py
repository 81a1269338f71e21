"""The job's CD and the entry's home disk, as the agent (root) mounts, fills and reads them.

The home is the entry's: whatever the agent does there must not follow a link the entry
made, nor trip over what the entry left in the way. shutil is imported where used (only a
stage that installs the entry needs it): every import is paid at each boot, under emulation.
"""

import errno
import os
import pwd
import stat
import subprocess

from system import EntryFault, JobError, run_quiet, wait_for

CDROM_DEV = "/dev/sr0"
CDROM = "/media/cdrom"
HOME_DEV = "/dev/vdb"
HOME = "/home/entry"
CHUNK = 64 * 1024


def mount_cdrom(medium_wait=0):
    """`medium_wait`: seconds to wait for a medium the host puts in the drive just before
    the VM runs (a warm start, wake.py), which the guest may not have noticed yet."""
    if os.path.ismount(CDROM):
        return
    os.makedirs(CDROM, exist_ok=True)
    if not wait_for(CDROM_DEV, 20):
        raise JobError(f"no CD-ROM device {CDROM_DEV} appeared")
    # busybox's mount, static, starts in 0.04-0.06 s under TCG where util-linux's takes 0.10 (measured):
    # this one is paid before the hello.
    argv = ["busybox", "mount", "-t", "iso9660", "-o", "ro,nosuid,nodev", CDROM_DEV, CDROM]
    if wait_for(lambda: subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0,
                medium_wait):
        return
    run_quiet(argv)


def has_filesystem(dev):
    with open(dev, "rb") as f:
        f.seek(1080)
        return f.read(2) == b"\x53\xef"  # ext2/3/4 superblock magic


def mount_home(channel):
    if not wait_for(HOME_DEV, 20):
        raise JobError(f"no home disk {HOME_DEV} appeared")
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
        if stat.S_ISDIR(os.lstat(lost).st_mode) and not os.listdir(lost):
            os.rmdir(lost)
    except OSError:
        pass


def install(source):
    """Copy a CD directory into the home directory, owned by the entry user."""
    src = os.path.join(CDROM, source)
    if not os.path.isdir(src):
        raise JobError(f"the CD-ROM has no directory {source} to install")
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
                                                "and submit again") from exc
        raise


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
            raise LinkError(f"could not link the record file {name} into the home directory: {exc.strerror or exc} "
                            "(the entry left something in its way)") from exc
        made.append(link)


def remove_links(links):
    for link in links:
        try:
            if os.path.islink(link):
                os.unlink(link)
        except OSError:
            pass


def read_result(rel, limit, base=HOME):
    """(size, first `limit` bytes) of the regular file at `rel` under `base` (the home, or the
    output of a command of the entry's root), or (None, b"").

    The agent is root and the home is the entry's: every path component is opened without
    following links (a linked directory could lead to job.json or any root-only file), the
    file is opened non-blocking (a FIFO must not hang the agent), and its size is taken from
    the very descriptor that is read, once."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    parts = [p for p in rel.split("/") if p]
    if not parts or ".." in parts:
        return None, b""
    fds = []
    try:
        fds.append(os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
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


LISTED = 16  # names a directory's listing sends back; the rest are counted
COUNTED = 4097  # entries counted at most: the host needs to know whether there is exactly one


def read_listing(rel, base):
    """A collected directory (an image socket's, "images/NAME/"): (count of its entries, the first
    LISTED names sorted, the one entry's name when it is the only one and a regular file, else
    None), or (None, [], None) when `rel` under `base` is not a directory. Opened as read_result
    opens, no link followed; nothing in it is read but the names."""
    parts = [p for p in rel.split("/") if p]
    if not parts or ".." in parts:
        return None, [], None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
    fds = []
    try:
        fds.append(os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for part in parts:
            fds.append(os.open(part, flags, dir_fd=fds[-1]))
        count, only = 0, None
        names: list[str] = []
        with os.scandir(fds[-1]) as entries:
            for entry in entries:
                if count >= COUNTED:
                    break
                count += 1
                if len(names) < LISTED:
                    names.append(entry.name)
                if count == 1 and entry.is_file(follow_symlinks=False) and _plain(entry.name):
                    only = entry.name
        return count, sorted(names), (only if count == 1 else None)
    except OSError:
        return None, [], None
    finally:
        for fd in fds:
            os.close(fd)


def _plain(name):
    """A name the host can be told as it is: UTF-8, on one line (any other is not sent, and the
    socket's check says the directory holds no image it can read)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\n" not in name
