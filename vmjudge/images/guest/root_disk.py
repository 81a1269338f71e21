"""A container entry's root as the agent (root) sees it: the read-only disk the host gives the VM
(vm/domain_xml.py), mounted once per job, and the little the agent reads in it: the image's
/etc/passwd and /etc/group, to map the image's user to ids, never to root.

Everything in this file system is the entry's: its links, its device nodes, its setuid bits. It
is mounted nosuid and nodev, and the agent reads it only by walking each part of a path without
following links (a link could lead to job.json, or to a FIFO that would hang the agent), opening
non-blocking and reading at most a bounded size. Nothing in it is ever run by the agent."""

import os
import stat

from media import CDROM
from root_spec import RootError
from system import JobError, run_quiet, wait_for

ENTRY_ROOT = "/media/entry-root"
SERIAL = "vmjudge-entry-root"  # vm/domain_xml.py ENTRY_ROOT_SERIAL
# [container] tmp: a writable disk of its own (ext4, made by the host), each command's /tmp a new
# directory on it (root_layers.py); its size is the host's bound on what the cases write there.
TMP_DISK = "/media/case-tmp"
TMP_SERIAL = "vmjudge-tmp"  # vm/domain_xml.py TMP_SERIAL
DATA_READ_AHEAD_KIB = 4096  # measured by bench/data_scale.py
ACCOUNTS_MAX = 1 << 20  # bytes of the image's /etc/passwd or /etc/group that are read
UID_MAX = (1 << 32) - 2  # (uid_t)-1 means "no change" to setuid and chown
GROUPS_MAX = 64  # supplementary groups taken from the image's /etc/group


def find_disk(seconds=20, serial=SERIAL):
    """The entry root's device (or another of the host's disks), by its serial: a hot-plugged disk's
    name depends on when the guest saw it (vm/warm.py attaches it after the home disk, but the guest
    names what it finds)."""
    def look():
        for name in sorted(os.listdir("/sys/block")):
            try:
                with open(f"/sys/block/{name}/serial") as f:
                    if f.read().strip() == serial:
                        return "/dev/" + name
            except OSError:
                continue
        return None
    dev = wait_for(look, seconds)
    if dev is None or not wait_for(dev, 5):
        raise JobError(f"the host gave the VM no disk with serial {serial} (none appeared)")
    return dev


def mount_tmp_disk():
    """The cases' /tmp disk at TMP_DISK (nosuid, nodev: what the entry writes there is data)."""
    dev = find_disk(serial=TMP_SERIAL)
    os.makedirs(TMP_DISK, mode=0o700, exist_ok=True)
    run_quiet(["mount", "-t", "ext4", "-o", "nosuid,nodev", dev, TMP_DISK])
    os.chmod(TMP_DISK, 0o700)  # the directory the file system's root is: the agent's, each case's made in it


def mount_data_disks(disks):
    """Each record set's disk (vm/job.py Job.data) over its directory of the CD, which the CD holds
    empty: the entry finds its files where the CD held them. Read-only, and neither a device, a
    setuid bit nor a program on it counts (nodev, nosuid, noexec): it is data."""
    if not isinstance(disks, list) or len(disks) > 4:
        raise JobError("job.json's data disks are not a short list")
    for disk in disks:
        serial, name = (disk.get("serial"), disk.get("dir")) if isinstance(disk, dict) else (None, None)
        if not (isinstance(serial, str) and serial.startswith("vmjudge-data-") and isinstance(name, str)
                and name and "/" not in name and name not in (".", "..") and "\0" not in name):
            raise JobError(f"job.json names a data disk wrongly: {disk!r}")
        point = os.path.join(CDROM, name)
        if not os.path.isdir(point) or os.path.islink(point):
            raise JobError(f"the CD has no directory {name} to mount its data disk on")
        dev = find_disk(serial=serial)
        with open(dev, "rb") as f:
            f.seek(32769)
            if f.read(5) != b"CD001":
                raise JobError(f"the data disk {serial} ({dev}) holds no ISO 9660 file system")
        _read_ahead(dev)
        run_quiet(["mount", "-t", "iso9660", "-o", "ro,nosuid,nodev,noexec", dev, point])


def _read_ahead(dev, kib=DATA_READ_AHEAD_KIB):
    """A data disk is read through, file after file: a long read-ahead makes fewer, larger requests,
    each of which costs an exit to qemu (under TCG the copy too). Only a shortcut: left as it is if
    the kernel will not take it."""
    try:
        with open(f"/sys/block/{os.path.basename(dev)}/queue/read_ahead_kb", "w") as f:
            f.write(str(kib))
    except OSError:
        pass


def mount_entry_root(device=None):
    """The root mounted at ENTRY_ROOT: from the disk with its serial (the judge's VM), or from
    `device`, a read-only loop device of its squashfs that the replica's runner made."""
    dev = device or find_disk()
    with open(dev, "rb") as f:
        if f.read(4) != b"hsqs":
            raise JobError(f"the entry root's disk {dev} holds no squashfs file system")
    os.makedirs(ENTRY_ROOT, mode=0o700, exist_ok=True)
    run_quiet(["mount", "-t", "squashfs", "-o", "ro,nosuid,nodev", dev, ENTRY_ROOT])


def read_image_file(rel, limit=ACCOUNTS_MAX):
    """The first `limit` bytes of the regular file at `rel` in the image, or None (missing, a link
    on the way, not a regular file)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fds = []
    try:
        fds.append(os.open(ENTRY_ROOT, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        parts = rel.strip("/").split("/")
        for part in parts[:-1]:
            fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
        fds.append(os.open(parts[-1], flags, dir_fd=fds[-1]))
        if not stat.S_ISREG(os.fstat(fds[-1]).st_mode):
            return None
        return os.read(fds[-1], limit)
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _lines(rel):
    """The colon-separated fields of each line of an /etc/passwd or /etc/group style file of the image."""
    data = read_image_file(rel)
    return [line.split(":") for line in (data or b"").decode("utf-8", "replace").splitlines()]


def _accounts(rel):
    """name → (id, primary gid or None) from an /etc/passwd or /etc/group style file of the image."""
    found = {}
    for fields in _lines(rel):
        if len(fields) >= 3 and fields[0] and fields[0] not in found and fields[2].isdigit():
            gid = fields[3] if len(fields) >= 4 and fields[3].isdigit() else None
            found[fields[0]] = (int(fields[2]), None if gid is None else int(gid))
    return found


def _passwd_entry(uid):
    """(name, home) of the image's first /etc/passwd line for `uid`, or None."""
    for fields in _lines("etc/passwd"):
        if len(fields) >= 6 and fields[0] and fields[2] == str(uid):
            return fields[0], fields[5]
    return None


def _member_of(name):
    """The gids of the image's /etc/group entries that list `name` as a member, root's excepted."""
    gids = []
    for fields in _lines("etc/group"):
        if len(fields) >= 4 and fields[2].isdigit() and name in fields[3].split(","):
            gid = int(fields[2])
            if 0 < gid <= UID_MAX and gid not in gids:
                gids.append(gid)
    return gids[:GROUPS_MAX]


class Account:
    """Whom a command of the image runs as: ids, supplementary groups and home, as Docker and
    Grand Challenge's runner take them from the image's /etc/passwd and /etc/group."""

    def __init__(self, uid, gid, groups=(), home="/"):
        self.uid, self.gid, self.groups, self.home = uid, gid, tuple(groups), home


def image_account(user, entry):
    """image_ids's ids, with the user's supplementary groups (the image's /etc/group entries that
    name it, never group 0, and none when `user` names a group, as runc does) and home (its
    /etc/passwd entry's, "/" when it has none, as Docker gives). An image's root runs as the
    guest's entry user, with no groups of the image's and "/" for its home."""
    uid, gid = image_ids(user, entry)
    if uid == entry.pw_uid and user.partition(":")[0] in ("", "root", "0"):
        return Account(uid, gid, (), "/")
    found = _passwd_entry(uid)
    if found is None:
        return Account(uid, gid, (), "/")
    name, home = found
    groups = [] if user.partition(":")[2] else [g for g in _member_of(name) if g != gid]
    return Account(uid, gid, groups, home if home.startswith("/") and "\0" not in home else "/")


def image_ids(user, entry):
    """(uid, gid) a command of the image's `user` runs as: never root. `user` is "uid[:gid]" or
    "name[:group]", names looked up in the image's own files, as Docker does. Root (by name or by
    id, or an empty user) runs as the guest's entry user; a group of 0 (or none named, for a uid
    the image's /etc/passwd lacks) is the entry's group. The image decides only which unprivileged
    ids its files meet, which it could give itself anyway. RootError for a name the image lacks."""
    name, _, group = user.partition(":")
    if name in ("", "root", "0"):
        return entry.pw_uid, entry.pw_gid
    gid: int | None
    if name.isdigit():
        uid = int(name)
        primary = next((g for u, g in _accounts("etc/passwd").values() if u == uid), None)
    else:
        uid, primary = _accounts("etc/passwd").get(name, (None, None))
        if uid is None:
            raise RootError(f"the image's user {name!r} is not in its /etc/passwd")
    if group.isdigit():
        gid = int(group)
    elif group:
        gid = _accounts("etc/group").get(group, (None, None))[0]
        if gid is None:
            raise RootError(f"the image's group {group!r} is not in its /etc/group")
    else:
        gid = primary  # None when the image's /etc/passwd lacks the uid
    if uid == 0:
        return entry.pw_uid, entry.pw_gid
    if uid > UID_MAX or (gid is not None and gid > UID_MAX):
        raise RootError(f"the image's user {user!r} has an id out of range")
    return uid, gid or entry.pw_gid
