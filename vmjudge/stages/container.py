"""A container entry between its stages (#39): the root stage 1 made, and the job the quiz and
the exam run in it. Shared here so that no stage imports another.

Stage 1 keeps what it made in the entry's files (images/root_use.py). The quiz and the exam read
it back and find the squashfs as it was; a root that went missing is the judge's loss, never the
entry's.

What runs: `[container] command`, else the image's ENTRYPOINT followed by its CMD. With `run =
"per_case"` once per record, the record's files (RECORD.*) at `input`, its result left in
`output` under the challenge's pattern; with "whole_set" once, the whole subset's directory at
`input` (its RECORDS file included), one result per record left in `output`. Each run's
environment is the image's plus VMJUDGE_RECORD, the record's name (per case), or VMJUDGE_RECORDS,
the path of the subset's list in `input` (whole set), so an image can find its cases without
parsing file names.
"""

from __future__ import annotations

from ..archive.container_image import ImageConfig
from ..errors import InfrastructureError
from ..images.root_use import RootUse
from ..vm.job import Command, InRoot, Job
from .context import StageContext
from .records import RESULT_FILE_LIMIT, RecordRuns, record_set_media
from .sockets import socket_runs


def recorded_root(ctx: StageContext) -> RootUse:
    """The entry's root as stage 1 recorded it, checked to be there still. Its loss is the
    judge's (InfrastructureError): the entry runs again from stage 1 once the organiser looks."""
    path = ctx.files.entry_root
    try:
        record = RootUse.read(path)
        size = record.squashfs.stat().st_size
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InfrastructureError("entry-root-missing", f"entry {ctx.entry.id}'s root, recorded by its stage 1 in "
                                  f"{path}, cannot be found ({exc}): run the entry again from stage 1.") from exc
    if size != record.squashfs_bytes:
        raise InfrastructureError("entry-root-missing", f"entry {ctx.entry.id}'s root {record.squashfs} is "
                                  f"{size} bytes, not the {record.squashfs_bytes} stage 1 made.")
    return record


def command_argv(ctx: StageContext, config: ImageConfig) -> tuple[str, ...]:
    rules = ctx.challenge.container
    return rules.command if rules is not None and rules.command else config.command


def container_runs(ctx: StageContext, subset: str, records: tuple[str, ...], root: RootUse,
                   stage_limit: float) -> RecordRuns:
    """The image's command over `records` of `subset` (see the module's docstring)."""
    ch = ctx.challenge
    rules = ch.container
    if rules is None:
        raise RuntimeError(f"challenge {ch.name} takes no container entries")
    if ch.sockets is not None:
        return socket_runs(ctx, subset, records, root)
    cfg = root.config
    argv = command_argv(ctx, cfg)
    media = record_set_media(ch, subset, records)
    file_limit = max(RESULT_FILE_LIMIT, ch.limits.output)
    out, tail = ch.limits.output, ch.limits.output_tail
    commands = []
    if rules.run == "whole_set":
        limit = min(stage_limit, ch.limits.per_record * len(records))
        where = InRoot(user=cfg.user, env=(*cfg.env, f"VMJUDGE_RECORDS={rules.input}/RECORDS"),
                       workdir=cfg.workdir or "/", input=rules.input, output=rules.output, input_dir=subset)
        commands.append(Command("the image's command on the whole set", argv, limit, output_limit=out,
                                tail_limit=tail, collect=tuple(ch.results.output_name(r) for r in records),
                                file_limit=file_limit, root=where))
        return RecordRuns(Job(commands=tuple(commands), media=media, entry_root=root.squashfs, tmp_mib=rules.tmp,
                          data=(subset,)),
                          (records,), ("whole set",), limit)
    for record in records:
        files = ch.record_files(subset, record)
        where = InRoot(user=cfg.user, env=(*cfg.env, f"VMJUDGE_RECORD={record}"), workdir=cfg.workdir or "/",
                       input=rules.input, output=rules.output, input_files=tuple(f"{subset}/{f.name}" for f in files))
        commands.append(Command(f"the image's command on {record}", argv, ch.limits.per_record, output_limit=out,
                                tail_limit=tail, collect=(ch.results.output_name(record),), file_limit=file_limit,
                                root=where))
    return RecordRuns(Job(commands=tuple(commands), media=media, entry_root=root.squashfs, tmp_mib=rules.tmp,
                          data=(subset,)),
                      tuple((r,) for r in records), records, ch.limits.per_record)
