"""Module load order and the initramfs archive itself."""

from __future__ import annotations

import gzip
import re
import stat
from pathlib import Path

import pytest

from vmjudge.errors import ImageError
from vmjudge.images import initramfs

GUEST = Path(initramfs.__file__).parent / "guest"


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


def paths(load_list: bytes) -> list[str]:
    """The modules of the init's list, each line a path and its parameters."""
    return [line.split()[0] for line in load_list.decode().splitlines()]


def guest_root(tmp_path):
    """A guest root with every module the initramfs lists and a busybox; returns a small init."""
    modules_tree(tmp_path, {**DEPS, **{f"kernel/x/{m}.ko": [] for m in initramfs.MODULES + initramfs.REPLICA_MODULES}})
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "busybox").write_bytes(b"BUSYBOX")
    init = tmp_path / "init.sh"
    init.write_text("#!/bin/busybox sh\n")
    return init


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
    init = guest_root(tmp_path)
    out = tmp_path / "initrd.img"
    order = initramfs.build_initramfs(tmp_path, "6.1.0-test", init, out)
    members = initramfs.read_newc(gzip.decompress(out.read_bytes()))
    assert members["init"].data == b"#!/bin/busybox sh\n" and members["init"].mode & 0o111
    assert members["bin/busybox"].data == b"BUSYBOX"
    assert stat.S_ISCHR(members["dev/console"].mode) and members["dev/console"].rdev == (5, 1)
    assert paths(members["modules.list"].data) == order
    for rel in order:
        assert members["lib/modules/" + rel].data.startswith(b"\x7fELF")
    out2 = tmp_path / "again.img"
    initramfs.build_initramfs(tmp_path, "6.1.0-test", init, out2)
    assert out2.read_bytes() == out.read_bytes()


def test_replica_modules_are_listed_apart_from_the_judges(tmp_path):
    """The judge's boot loads modules.list only; the replica's extra drivers stay out of it."""
    init = guest_root(tmp_path)
    out = tmp_path / "initrd.img"
    order = initramfs.build_initramfs(tmp_path, "6.1.0-test", init, out)
    members = initramfs.read_newc(gzip.decompress(out.read_bytes()))
    replica = paths(members["modules-replica.list"].data)
    assert replica == [f"kernel/x/{m}.ko" for m in initramfs.REPLICA_MODULES]
    assert not set(replica) & set(order)
    for rel in replica:
        assert members["lib/modules/" + rel].data.startswith(b"\x7fELF")


def test_the_cdrom_controller_and_what_follows_probe_in_the_background(tmp_path):
    """ata_piix (ahci in a GPU or the replica's list) and every module after it load with
    async_probe, so the init goes on while libata resets the port; loading one without it would
    wait for that probe. The modules before it probe as they load: the root disk is needed at once."""
    init = guest_root(tmp_path)
    for gpu, listed in ((False, "modules.list"), (True, "modules.list"), (False, "modules-replica.list")):
        initramfs.build_initramfs(tmp_path, "6.1.0-test", init, tmp_path / "initrd.img", gpu=gpu)
        lines = initramfs.read_newc(gzip.decompress((tmp_path / "initrd.img").read_bytes()))[listed].data.decode()
        params = [line.split()[1:] for line in lines.splitlines()]
        first = next(i for i, line in enumerate(lines.splitlines())
                     if Path(line.split()[0]).stem in ("ata_piix", "ahci"))
        assert all(p == [] for p in params[:first]) and all(p == ["async_probe=1"] for p in params[first:]), lines
        assert first > 0 or listed == "modules-replica.list"


SHELL_WORDS = {"if", "fi", "for", "done", "while", "case", "esac", "break", "continue", "export", "echo", "read"}


def test_every_command_of_the_init_is_a_linked_applet(tmp_path):
    """The init runs with PATH=/bin and no `busybox --install`: a command it names that is not a
    shell word needs its link, or that line fails at boot (a failure path only when it is hit)."""
    script = (GUEST / "initramfs-init").read_text()
    code = "\n".join(line.split("#", 1)[0] for line in script.splitlines()[1:])
    code = re.sub(r"\b(?:then|do|else|exec)\b", ";", code)  # each starts a command
    words = set(re.findall(r"(?:^|[;|&{]|\$\()\s*([a-z_]+)\b(?!=)", code, re.M))  # not an assignment
    functions = set(re.findall(r"^\s*([a-z_]+)\(\) \{", code, re.M))  # fail, mark: the script's own
    assert {"fail", "mark"} <= functions
    shell = SHELL_WORDS | functions
    assert words - shell <= set(initramfs.APPLETS), words - shell - set(initramfs.APPLETS)
    assert {"insmod", "switch_root", "poweroff", "mount"} <= words
    guest_root(tmp_path)
    initramfs.build_initramfs(tmp_path, "6.1.0-test", GUEST / "initramfs-init", tmp_path / "initrd.img")
    members = initramfs.read_newc(gzip.decompress((tmp_path / "initrd.img").read_bytes()))
    for applet in initramfs.APPLETS:
        link = members[f"bin/{applet}"]
        assert stat.S_ISLNK(link.mode) and link.data == b"busybox", applet
