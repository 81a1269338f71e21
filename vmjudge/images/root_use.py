"""Which root a container entry uses: the record stage 1 leaves in the entry's files
(HOME/results/ID/entry-root.json, EntryFiles.entry_root, the judge's own 0600 file): the squashfs
under HOME/entry-roots, its size, and the image's run settings (ENTRYPOINT, CMD, environment,
working directory, user), read from the image by admission's checks.

Written and read here only: the quiz and the exam read it to find the root their commands run in,
and `vmjudge gc` (root_store.py) reads the records of every entry not yet done, so as never to
remove a root one of them still needs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import private
from ..archive.container_image import ImageConfig


@dataclass(frozen=True)
class RootUse:
    """The root stage 1 made or found for the entry, and how its image runs."""

    squashfs: Path
    digest: str
    squashfs_bytes: int
    config: ImageConfig

    def save(self, path: Path) -> None:
        private.write_text(path, json.dumps({"squashfs": str(self.squashfs), "digest": self.digest,
                                             "squashfs_bytes": self.squashfs_bytes,
                                             "config": self.config.as_dict()}, indent=1))

    @classmethod
    def read(cls, path: Path) -> RootUse:
        """The record at `path`: OSError when it cannot be read, ValueError (or KeyError,
        TypeError) when it is not such a record."""
        doc: dict[str, Any] = json.loads(path.read_text())
        c = doc["config"]
        return cls(Path(doc["squashfs"]), str(doc["digest"]), int(doc["squashfs_bytes"]),
                   ImageConfig(tuple(c["entrypoint"]), tuple(c["cmd"]), tuple(c["env"]), str(c["workdir"]),
                               str(c["user"])))
