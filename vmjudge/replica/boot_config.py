"""The replica's two boot loader configurations, made from one kernel command line.

ISOLINUX (BIOS) and GRUB (UEFI) must start the same kernel and initramfs with the same
arguments, or the replica would differ by firmware; writing the arguments once keeps them so.
"""

from ..vm.domain_xml import GUEST_KERNEL_ARGS

KERNEL = "/vmjudge/vmlinuz"
INITRD = "/vmjudge/initrd.img"
KERNEL_ARGS = " ".join(("vmjudge.replica", "console=tty0", "console=ttyS0,115200", *GUEST_KERNEL_ARGS))

ISOLINUX_CFG = f"""SERIAL 0 115200
PROMPT 0
TIMEOUT 0
DEFAULT replica
LABEL replica
  KERNEL {KERNEL}
  APPEND initrd={INITRD} {KERNEL_ARGS}
"""

# Run by GRUB's rescue parser (efi.py builds it in): plain commands only, no comments.
GRUB_CFG = f"""search --no-floppy --file --set=root /vmjudge/replica.json
linux {KERNEL} {KERNEL_ARGS}
initrd {INITRD}
boot
echo "vmjudge replica: GRUB could not boot {KERNEL} from the replica ISO."
"""
