"""The entry's archive unpacked on the host, for stage 1 of an archive or a submission entry."""

from __future__ import annotations

from pathlib import Path

from ... import private
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
