"""The entry's archive unpacked on the host, for stage 1 of an archive or a submission entry."""

from __future__ import annotations

import os
from pathlib import Path

from ... import private
from ...archive.components import HEAD, Listed
from ...archive.names import check_archive_name
from ...archive.unpack import UnpackLimits, unpack
from ..context import StageContext


def unpack_entry(ctx: StageContext) -> None:
    """The archive unpacked into results/ID/entry, afresh (a retried stage starts from the
    archive again), in a directory only the judge may enter: the code is its owner's."""
    kind = check_archive_name(ctx.entry.archive_name, ctx.challenge.entry.kind)
    private.fresh_dir(ctx.entry_dir)
    unpack(Path(ctx.entry.archive_path), kind, ctx.entry_dir,
           UnpackLimits(max_members=ctx.challenge.entry.max_members, max_unpacked=ctx.challenge.entry.max_unpacked))


def listed_tree(root: Path) -> Listed:
    """The unpacked entry as the component checks read an archive's listing (unpack refused links)."""
    entries: list[tuple[str, bool, int]] = []
    pending = [Path(root)]
    while pending:
        with os.scandir(pending.pop()) as found:
            for entry in found:
                rel = Path(entry.path).relative_to(root).as_posix()
                is_dir = entry.is_dir(follow_symlinks=False)
                entries.append((rel, is_dir, 0 if is_dir else entry.stat(follow_symlinks=False).st_size))
                if is_dir:
                    pending.append(Path(entry.path))
    return Listed.of(entries, lambda rel: _head(Path(root) / rel))


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(HEAD)
    except OSError:
        return b""
