"""The replica's UEFI boot image: a small FAT file system holding EFI/BOOT/BOOTX64.EFI.

UEFI firmware boots a CD from the FAT image its El Torito EFI entry points at, and a disk from
the FAT partition of type 0xEF that the isohybrid MBR points at (the same image on the ISO).
BOOTX64.EFI is GRUB made by grub-mkimage with its configuration built in (boot_config.py): it
finds the ISO file system by a file only the replica carries and boots the very vmlinuz and
initrd.img that ISOLINUX boots, with the same kernel command line, so both firmwares start
the same replica. GRUB reads them from the ISO file system, which keeps the FAT image at a
few hundred kilobytes instead of a second copy of the kernel and initramfs.

The same inputs give the same bytes: grub-mkimage stamps a fixed date into its PE header,
mkfs.vfat takes a fixed serial number and --invariant, and mtools dates the directories and
file from SOURCE_DATE_EPOCH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import MediaError
from ..images.iso import PINNED_EPOCH
from .boot_config import GRUB_CFG

# Debian's grub-efi-amd64-bin package: the x86_64-efi modules grub-mkimage links in.
GRUB_EFI_MODULES = Path("/usr/lib/grub/x86_64-efi")
# What the built-in configuration uses, and nothing more: no `normal` module, no menu, no
# grub.cfg read from the media. GRUB runs the built-in configuration with its rescue parser,
# which knows plain commands only (not even comments). efi_gop hands the firmware's screen to
# the kernel (console=tty0). GRUB writes to the firmware's console only: firmware that mirrors
# it on a serial port (OVMF does) shows GRUB's few words there once, where a GRUB serial
# terminal as well would print each character twice.
MODULES = ("iso9660", "fat", "part_msdos", "part_gpt", "search", "linux", "efi_gop", "echo")
# The FAT volume's serial number ("vmje"), fixed so that the same inputs give the same bytes.
FAT_SERIAL = "766d6a65"
FAT_LABEL = "VMJ_EFI"
# Free room left on the FAT file system beyond BOOTX64.EFI, in KiB.
FAT_SLACK_KIB = 64

TOOLS = {"grub-mkimage": "grub-common", "mkfs.vfat": "dosfstools", "mmd": "mtools", "mcopy": "mtools"}


def _find(tool: str) -> str | None:
    """The tool's path; mkfs.vfat lives in /usr/sbin, which a user's PATH may lack."""
    for path in (shutil.which(tool), f"/usr/sbin/{tool}", f"/sbin/{tool}"):
        if path and Path(path).is_file():
            return path
    return None


def check_tools() -> dict[str, str]:
    """The path of each tool the FAT image needs, or a MediaError naming the package to install."""
    if not GRUB_EFI_MODULES.is_dir():
        raise MediaError(f"{GRUB_EFI_MODULES} is missing, so the replica cannot boot with UEFI: run `make setup` "
                         "or `apt-get install grub-efi-amd64-bin`.")
    paths = {}
    for tool, package in TOOLS.items():
        path = _find(tool)
        if path is None:
            raise MediaError(f"{tool} is missing, so the replica cannot boot with UEFI: run `make setup` or "
                             f"`apt-get install {package}`.")
        paths[tool] = path
    return paths


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise MediaError(f"{Path(argv[0]).name} failed while making the replica's UEFI boot image "
                         f"({detail[-1] if detail else f'exit status {proc.returncode}'}); check the "
                         "grub-efi-amd64-bin, dosfstools and mtools packages are installed and intact.")


def build_efi_image(workdir: Path, config: str = GRUB_CFG) -> Path:
    """Write efiboot.img (FAT with EFI/BOOT/BOOTX64.EFI) in `workdir` and return its path."""
    tools = check_tools()
    workdir = Path(workdir)
    grub = workdir / "BOOTX64.EFI"
    (workdir / "grub.cfg").write_text(config)
    _run([tools["grub-mkimage"], "-O", "x86_64-efi", "-d", str(GRUB_EFI_MODULES), "-p", "/EFI/BOOT",
          "-c", str(workdir / "grub.cfg"), "-o", str(grub), *MODULES])
    os.utime(grub, (PINNED_EPOCH, PINNED_EPOCH))
    image = workdir / "efiboot.img"
    image.unlink(missing_ok=True)
    kib = -(-grub.stat().st_size // 1024) + FAT_SLACK_KIB
    _run([tools["mkfs.vfat"], "-C", "--invariant", "-i", FAT_SERIAL, "-n", FAT_LABEL, str(image), str(kib)])
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(int(PINNED_EPOCH)), MTOOLS_SKIP_CHECK="1")
    _run([tools["mmd"], "-i", str(image), "::/EFI", "::/EFI/BOOT"], env=env)
    _run([tools["mcopy"], "-m", "-i", str(image), str(grub), "::/EFI/BOOT/BOOTX64.EFI"], env=env)
    return image


def efi_image_bytes(config: str = GRUB_CFG) -> bytes:
    """The FAT image's bytes (a few hundred kilobytes), made in a directory that is then removed."""
    with tempfile.TemporaryDirectory(prefix="vmjudge-efi-") as tmp:
        return build_efi_image(Path(tmp), config).read_bytes()
