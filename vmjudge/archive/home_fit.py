"""Whether an unpacked entry can fit in the challenge's home disk at all, decided on the host.

The agent makes the home disk's file system in the guest with `mkfs.ext4 -q -F -m 0 -E
lazy_itable_init=1,lazy_journal_init=1` (Debian 12's e2fsprogs 1.47.0 and /etc/mke2fs.conf,
the same on the host and in the guest image), mounts it, removes the empty lost+found and copies
the entry in as root. An entry that cannot fit would only fail there, after a VM was booted, as
a confusing setup error; so prep refuses it first, and only what cannot fit at all: the
capacity below is what that file system really offers, and the need counts the least the
entry's files and folders can take (a data block per started block of each file, one block per
folder; the extent blocks of fragmented files and the further blocks of large folders come on
top).

mke2fs's defaults, as they apply here: below 512 MiB the "small" type (1 KiB blocks, an inode
per 4 KiB), from 512 MiB 4 KiB blocks and an inode per 16 KiB, from 4 TiB ("big") an inode per
32 KiB; 256-byte inodes; groups of 8 x block-size blocks; inodes per group rounded to fill
whole inode-table blocks, then down to a multiple of 8; a last group too small for its own
bookkeeping dropped; features including resize_inode (reserved GDT blocks to grow 1024-fold,
at most a block's worth of addresses), 64bit (64-byte group descriptors) and sparse_super
(superblock and GDT copies in groups 0, 1 and powers of 3, 5, 7); a journal whose size in
blocks goes by the block count (1024 blocks below 32768, 4096 below 256 Ki, 8192 below 512 Ki,
then doubling up to 262144, plus an extent index block past 131072). Once mounted, the root
directory and the resize inode hold a block each, and ext4 keeps min(2 %, 4096) blocks in
reserve that even root cannot write to (s_resv_clusters), whatever `-m 0` says.

Measured with this mkfs on sparse files, mounted on a loop device, lost+found removed, `df -B1`
and `df -i` (available bytes / available inodes), against this estimate: 64 MiB: 56,038,400 /
16,374; 100 MiB: 90,401,792 / 25,574; 256 MiB: 236,884,992 / 65,526; 511 MiB: 487,276,544 /
130,550; 512 MiB: 500,129,792 / 32,758; 1024 MiB: 1,003,917,312 / 65,526; 2048 MiB:
2,023,587,840 / 131,062; 4096 MiB: 4,126,892,032 / 262,134; and 40 more sizes from 65 MiB to
4 TiB (the largest home allowed), chosen around each rule's thresholds -- every one equal to the
estimate, to the byte and the inode (tests/test_home_fit.py measures some again where it runs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import EntryError

MIB = 1 << 20
INODE_SIZE = 256
DESCRIPTOR_SIZE = 64
RESERVED_INODES = 10  # inodes 1-10; 11, lost+found, is freed when the agent removes it
MKFS = ("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1")


@dataclass(frozen=True)
class HomeCapacity:
    """What the entry can use of a fresh home disk: its block size, and the bytes and inodes
    free once it is mounted and lost+found is gone."""

    block_size: int
    bytes: int
    inodes: int


def _journal_blocks(blocks: int) -> int:
    """The journal's blocks, and its extent index block once it needs more than the four
    extents (of at most 32768 blocks) an inode holds."""
    size = _journal_size(blocks)
    return size + (1 if size > 4 * 32768 else 0)


def _journal_size(blocks: int) -> int:
    for below, size in ((32768, 1024), (256 << 10, 4096), (512 << 10, 8192), (4096 << 10, 16384),
                        (8192 << 10, 32768), (16384 << 10, 65536), (32768 << 10, 131072)):
        if blocks < below:
            return size
    return 262144


def _has_backup(group: int) -> bool:
    if group <= 1:
        return True
    for base in (3, 5, 7):
        g = group
        while g % base == 0:
            g //= base
        if g == 1:
            return True
    return False


def home_capacity(size_mib: int) -> HomeCapacity:
    """The capacity of a `size_mib` MiB home disk as the guest formats it (see the module's
    docstring for the rules and the measurements)."""
    size = size_mib * MIB
    block, ratio = (1024, 4096) if size < 512 * MIB else (4096, 16384) if size < 4 << 40 else (4096, 32768)
    blocks = size // block
    first = 1 if block == 1024 else 0
    per_group = 8 * block
    wanted_inodes = size // ratio
    while True:
        groups = math.ceil((blocks - first) / per_group)
        desc_blocks = math.ceil(groups / (block // DESCRIPTOR_SIZE))
        ipg = math.ceil(math.ceil(wanted_inodes / groups) * INODE_SIZE / block) * block // INODE_SIZE
        ipg = min(ipg, per_group) & ~7
        table = ipg * INODE_SIZE // block
        grow_to = blocks * 1024 if blocks < 0xFFFFFFFF // 1024 else 0xFFFFFFFF
        reserved_gdt = min(math.ceil(math.ceil((grow_to - first) / per_group) / (block // DESCRIPTOR_SIZE))
                           - desc_blocks, block // 4)
        last = (blocks - first) % per_group
        last_overhead = 2 + table + (1 + desc_blocks + reserved_gdt if _has_backup(groups - 1) else 0)
        if last and last < last_overhead + 50:
            blocks -= last  # mke2fs drops a last group too small for its bookkeeping, and tries again
            continue
        break
    backups = sum(1 for g in range(groups) if _has_backup(g))
    overhead = (first + _journal_blocks(blocks) + groups * (2 + table)
                + backups * (1 + desc_blocks + reserved_gdt) + 2)  # + root directory, resize inode
    reserve = min(blocks // 50, 4096)
    return HomeCapacity(block, (blocks - overhead - reserve) * block, ipg * groups - RESERVED_INODES)


@dataclass(frozen=True)
class EntryNeed:
    bytes: int
    inodes: int


def members_need(sizes: Iterable[int], folders: int, block_size: int) -> EntryNeed:
    """The least an entry takes once copied into the home (its top is the home, already there): every
    started block of each file and one block per folder, and an inode each; from its listing (an
    archive's before it is unpacked, or the unpacked tree's), the folders its paths imply among them."""
    files = blocks = 0
    for size in sizes:
        files += 1
        blocks += -(-size // block_size)
    return EntryNeed((blocks + folders) * block_size, files + folders)


def check_need(need: EntryNeed, home_mib: int) -> None:
    """Refuse, with the reason entry-too-large, an entry whose need the home disk cannot meet."""
    home = home_capacity(home_mib)
    if need.bytes > home.bytes:
        raise EntryError("entry-too-large", f"The unpacked entry needs {math.ceil(need.bytes / 1e6)} MB but the home "
                         f"disk holds about {math.floor(home.bytes / 1e6)} MB: make the entry smaller and submit "
                         "again.")
    if need.inodes > home.inodes:
        raise EntryError("entry-too-large", f"The unpacked entry holds {need.inodes} files and folders but the home "
                         f"disk has room for {home.inodes}: pack many small files into one and submit again.")
