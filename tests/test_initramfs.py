"""Module load order and the initramfs archive itself."""

from __future__ import annotations

import gzip
import stat

import pytest

from vmjudge.errors import ImageError
from vmjudge.images import initramfs


def modules_tree(tmp_path, deps, builtin=()):
    d = tmp_path / "lib" / "modules" / "6.1.0-test"
    d.mkdir(parents=True)
    (d / "modules.dep").write_text("".join(f"{m}: {' '.join(ds)}\n" for m, ds in deps.items()))
    (d / "modules.builtin").write_text("".join(f"{m}\n" for m in builtin))
    for m in deps:
        (d / m).parent.mkdir(parents=True, exist_ok=True)
        (d / m).write_bytes(b"\x7fELF" + m.encode())
    return d


DEPS = {
    "kernel/drivers/virtio/virtio_ring.ko": [],
    "kernel/drivers/virtio/virtio.ko": ["kernel/drivers/virtio/virtio_ring.ko"],
    "kernel/drivers/block/virtio_blk.ko": ["kernel/drivers/virtio/virtio.ko", "kernel/drivers/virtio/virtio_ring.ko"],
    "kernel/fs/isofs/isofs.ko": ["kernel/drivers/cdrom/cdrom.ko"],
    "kernel/drivers/cdrom/cdrom.ko": [],
}


def test_dependencies_load_first(tmp_path):
    d = modules_tree(tmp_path, DEPS, builtin=["kernel/fs/squashfs/squashfs.ko"])
    order = initramfs.module_load_order(d, ("virtio_blk", "isofs", "squashfs"))
    assert order == ["kernel/drivers/virtio/virtio_ring.ko", "kernel/drivers/virtio/virtio.ko",
                     "kernel/drivers/block/virtio_blk.ko", "kernel/drivers/cdrom/cdrom.ko",
                     "kernel/fs/isofs/isofs.ko"]


def test_missing_module_is_a_clear_error(tmp_path):
    d = modules_tree(tmp_path, DEPS)
    with pytest.raises(ImageError, match="no module overlay"):
        initramfs.module_load_order(d, ("overlay",))


def test_archive_holds_init_busybox_modules_and_console(tmp_path):
    modules_tree(tmp_path, {**DEPS, **{f"kernel/x/{m}.ko": [] for m in initramfs.MODULES + initramfs.REPLICA_MODULES}})
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "busybox").write_bytes(b"BUSYBOX")
    init = tmp_path / "init.sh"
    init.write_text("#!/bin/busybox sh\n")
    out = tmp_path / "initrd.img"
    order = initramfs.build_initramfs(tmp_path, "6.1.0-test", init, out)
    members = initramfs.read_newc(gzip.decompress(out.read_bytes()))
    assert members["init"].data == b"#!/bin/busybox sh\n" and members["init"].mode & 0o111
    assert members["bin/busybox"].data == b"BUSYBOX"
    assert stat.S_ISCHR(members["dev/console"].mode) and members["dev/console"].rdev == (5, 1)
    assert members["modules.list"].data.decode().split() == order
    for rel in order:
        assert members["lib/modules/" + rel].data.startswith(b"\x7fELF")
    out2 = tmp_path / "again.img"
    initramfs.build_initramfs(tmp_path, "6.1.0-test", init, out2)
    assert out2.read_bytes() == out.read_bytes()


def test_replica_modules_are_listed_apart_from_the_judges(tmp_path):
    """The judge's boot loads modules.list only; the replica's extra drivers stay out of it."""
    modules_tree(tmp_path, {**DEPS, **{f"kernel/x/{m}.ko": [] for m in initramfs.MODULES + initramfs.REPLICA_MODULES}})
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "busybox").write_bytes(b"BUSYBOX")
    init = tmp_path / "init.sh"
    init.write_text("#!/bin/busybox sh\n")
    out = tmp_path / "initrd.img"
    order = initramfs.build_initramfs(tmp_path, "6.1.0-test", init, out)
    members = initramfs.read_newc(gzip.decompress(out.read_bytes()))
    replica = members["modules-replica.list"].data.decode().split()
    assert replica == [f"kernel/x/{m}.ko" for m in initramfs.REPLICA_MODULES]
    assert not set(replica) & set(order)
    for rel in replica:
        assert members["lib/modules/" + rel].data.startswith(b"\x7fELF")
