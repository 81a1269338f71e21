"""A fake sysfs tree and /dev, for GPU tests on hosts without a GPU (the preflight, the
daemon's GPU slots): shaped like Linux's, so the code under test reads it as it reads /sys."""

from __future__ import annotations

from pathlib import Path

from vmjudge.config import GpuSite

T4 = "0000:65:00.0"


class FakeHost:
    """A sysfs tree and a /dev shaped like Linux's, for a host without a GPU: each function is
    a directory under devices/pciDDDD:BB/ with its attribute files; bus/pci/devices/ADDR, its
    driver and iommu_group, and each group's devices/ADDR are relative symlinks as the kernel
    makes them, and every link resolves."""

    def __init__(self, root: Path, iommu: bool = True, vfio: bool = True):
        self.sys, self.dev = root / "sys", root / "dev"
        (self.sys / "bus" / "pci" / "devices").mkdir(parents=True)
        (self.sys / "kernel" / "iommu_groups").mkdir(parents=True)  # there, empty, when the IOMMU is off
        self.iommu = iommu
        if vfio:
            (self.dev / "vfio").mkdir(parents=True)
            (self.dev / "vfio" / "vfio").touch()

    def add(self, address: str, ids: str = "10de:1eb8", pci_class: str = "0x030200", driver: str | None = "vfio-pci",
            group: str = "14", reset: str | None = "bus") -> Path:
        root_complex = f"pci{address[:7]}"  # a function straight under its root complex, as a T4 in its own slot
        path = self.sys / "devices" / root_complex / address
        path.mkdir(parents=True)
        vendor, device = ids.split(":")
        (path / "vendor").write_text(f"0x{vendor}\n")
        (path / "device").write_text(f"0x{device}\n")
        (path / "class").write_text(f"{pci_class}\n")
        if reset is not None:
            (path / "reset_method").write_text(f"{reset}\n")
        self._link(self.sys / "bus" / "pci" / "devices" / address, f"../../../devices/{root_complex}/{address}")
        if driver is not None:
            (self.sys / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
            self._link(path / "driver", f"../../../bus/pci/drivers/{driver}")
        if self.iommu:
            members = self.sys / "kernel" / "iommu_groups" / group / "devices"
            members.mkdir(parents=True, exist_ok=True)
            self._link(path / "iommu_group", f"../../../kernel/iommu_groups/{group}")
            self._link(members / address, f"../../../../devices/{root_complex}/{address}")
        return path

    def gpu(self, *devices: str, ids: tuple[str, ...] = ("10de:1eb8",)) -> GpuSite:
        return GpuSite(devices=devices or (T4,), sysfs=self.sys, dev=self.dev, ids=ids)

    @staticmethod
    def _link(link: Path, target: str) -> None:
        link.symlink_to(target)
        assert link.resolve().exists(), f"{link} -> {target} leads nowhere"
