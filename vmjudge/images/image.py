"""A built guest image: root.sqfs, vmlinuz, initrd.img and the manifest that pins them."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ImageError, InfrastructureError
from ..files import sha256_file, stat_signature

FILES = ("root.sqfs", "vmlinuz", "initrd.img")


@dataclass(frozen=True)
class GuestImage:
    directory: Path
    manifest: dict[str, Any]

    @property
    def root(self) -> Path:
        return self.directory / "root.sqfs"

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.directory / "initrd.img"

    @property
    def key(self) -> str:
        return self.manifest["key"]

    @classmethod
    def load(cls, directory: Path) -> GuestImage:
        path = Path(directory) / "manifest.json"
        try:
            manifest = json.loads(path.read_text())
        except FileNotFoundError:
            raise ImageError(f"no guest image at {directory}: build it with "
                             "`vmjudge image build CHALLENGE_DIR`.") from None
        except ValueError as exc:
            raise ImageError(f"{path} is damaged: delete {directory} and build the image again.") from exc
        for name in FILES:
            if not (Path(directory) / name).is_file():
                raise ImageError(f"the guest image at {directory} lacks {name}: delete the directory and build again.")
        return cls(Path(directory), manifest)

    def _signature(self) -> dict[str, list[int]]:
        return {name: stat_signature(self.directory / name) for name in FILES}

    def check(self) -> None:
        """Before each stage: the files must be those of the manifest. Hashing 150 MB per boot
        would be wasteful, so the sha256 check runs again only when a file's inode, size,
        mtime or ctime differs from when it last passed (ctime cannot be set back by hand)."""
        stamp = self.directory / "verified.json"
        try:
            signature = self._signature()
        except FileNotFoundError as exc:
            raise InfrastructureError("image-missing", f"a file of the guest image is missing ({exc.filename}): "
                                      f"build the image again with `vmjudge image build`.") from None
        try:
            if json.loads(stamp.read_text()) == signature:
                return
        except (OSError, ValueError):
            pass
        try:
            self.verify()
        except ImageError as exc:
            raise InfrastructureError("image-altered", str(exc)) from None
        # Two slots may check at once: each writes its own temporary file, and the last wins.
        tmp = stamp.with_name(f"{stamp.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(signature))
        tmp.replace(stamp)

    def verify(self) -> None:
        """Compare every file with its sha256 in the manifest (slow for a large root: not per boot)."""
        for name in FILES:
            want = self.manifest["sha256"][name]
            got = sha256_file(self.directory / name)
            if got != want:
                raise ImageError(f"{self.directory / name} differs from its manifest (sha256 {got[:12]}…, "
                                 f"expected {want[:12]}…): delete {self.directory} and build the image again.")
