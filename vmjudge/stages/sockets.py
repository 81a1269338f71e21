"""A container challenge with sockets (config/sockets.py) run as Grand Challenge runs an algorithm:
one container per case, the case's values at /input/{relative_path} beside /input/inputs.json, its
outputs taken from /output/{relative_path} and checked by socket. Shared by the quiz and the exam
(and the replica's quiz), so no stage imports another.

inputs.json is what Grand Challenge writes: a list of socket values, each with its `interface`
(the socket: title, description, slug, kind, pk, default_value, super_kind, relative_path,
overlay_segments, look_up_table), `value` (a value socket's JSON, else null), `file` (null: the
judge has no URL to give) and `image` (an image socket's {"pk", "name"}, else null), and `pk`.
Pks are made from the challenge, record and slug (uuid5), so a case's inputs.json is the same
every time it is run. No variable of the judge's is added to the image's environment: Grand
Challenge adds none.

An output socket's checks are the host's: an image socket's directory must hold exactly one
file, a .mha or .tif (read as far as its header: a TIFF held to the rules of Grand Challenge's
importer, scorers/tif.py; when the challenge says the socket is `like` an input, its size, spacing
and origin (a TIFF has none) those of the input, and then a .mha's voxels read too); a value socket's
file must be JSON of its kind within its `max_bytes`. What fails is the case's error, named by socket and case.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..config import Challenge
from ..config.sockets import IMAGE_SUFFIXES, Socket, Sockets, input_file, json_value
from ..errors import ChallengeError
from ..images.root_use import RootUse
from ..scorers import tif
from ..scorers.mha import MhaError, geometry
from ..scorers.tif import TifError
from ..vm.channel import CommandResult
from ..vm.job import Command, InRoot, Job
from .context import StageContext
from .records import RESULT_FILE_LIMIT, RecordRuns

NAMESPACE = uuid.UUID("6f1c1f4e-3d55-4f0c-9a8e-6b7e2c1d9a10")  # vmjudge's, for the pks of inputs.json
GEOMETRY_TOLERANCE = 1e-4  # relative, as ITK compares spacings and origins


def collected(sockets: Sockets) -> tuple[str, ...]:
    """What the agent sends back of a case's /output: each image socket's directory ("images/x/":
    its listing, then its one file) and each value socket's file."""
    return tuple(s.relative_path + "/" if s.is_image else s.relative_path for s in sockets.outputs)


def socket_runs(ctx: StageContext, subset: str, records: tuple[str, ...], root: RootUse) -> RecordRuns:
    """The image's command once per case, its input the case's directory of the CD."""
    ch = ctx.challenge
    sockets, rules = ch.sockets, ch.container
    if sockets is None or rules is None:
        raise RuntimeError(f"challenge {ch.name} has no sockets")
    cfg = root.config
    argv = rules.command if rules.command else cfg.command
    commands = []
    for record in records:
        where = InRoot(user=cfg.user, env=cfg.env, workdir=cfg.workdir or "/", input=rules.input,
                       output=rules.output, input_dir=f"{subset}/{record}", stderr_apart=True)
        commands.append(Command(f"the image on case {record}", argv, ch.limits.per_record,
                                output_limit=ch.limits.output, tail_limit=ch.limits.output_tail,
                                collect=collected(sockets), file_limit=max(RESULT_FILE_LIMIT, ch.limits.output),
                                root=where))
    return RecordRuns(Job(commands=tuple(commands), media=socket_set_media(ch, subset, records),
                          entry_root=root.squashfs, tmp_mib=rules.tmp, data=(subset,)),
                      tuple((r,) for r in records), records, ch.limits.per_record)


def socket_set_media(ch: Challenge, subset: str, records: tuple[str, ...]) -> dict[str, Path | bytes]:
    """What a stage's CD holds of a record set with sockets, all under `subset/` (its data disk,
    Job.data): RECORDS, and each case's directory: its declared input values (nothing else the
    organiser left in RECORD/) and its inputs.json."""
    assert ch.sockets is not None
    media: dict[str, Path | bytes] = {f"{subset}/RECORDS": ("\n".join(records) + "\n").encode()}
    for record in records:
        top = ch.set_dir(subset) / record
        for socket in ch.sockets.inputs:
            value = input_file(ch.set_dir(subset), record, socket)
            if value is not None:
                media[f"{subset}/{record}/{value.relative_to(top).as_posix()}"] = value
        media[f"{subset}/{record}/inputs.json"] = inputs_json(ch, subset, record)
    return media


def inputs_json(ch: Challenge, subset: str, record: str) -> bytes:
    """/input/inputs.json for one case (see the module's docstring)."""
    assert ch.sockets is not None
    values: list[dict[str, object]] = []
    for i, socket in enumerate(ch.sockets.inputs):
        path = input_file(ch.set_dir(subset), record, socket)
        if path is None:
            continue
        pk = str(uuid.uuid5(NAMESPACE, f"{ch.name}/{subset}/{record}/{socket.slug}"))
        value = None if socket.is_image else json_value(path)
        image = {"pk": pk, "name": path.name} if socket.is_image else None
        values.append({"interface": socket.interface(i + 1), "value": value, "file": None, "image": image,
                       "pk": len(values) + 1})
    return json.dumps(values, indent=2).encode()


@dataclass(frozen=True)
class CaseOutputs:
    """What one case left, by output socket: the bytes (None where the socket's value is missing
    or invalid), and what was wrong, one sentence per socket."""

    values: dict[str, bytes | None]
    problems: tuple[str, ...]
    shown: tuple[str, ...]  # each socket's value in a few words: what a participant sees of a training case


def case_outputs(ch: Challenge, subset: str, record: str, cmd: CommandResult) -> CaseOutputs:
    assert ch.sockets is not None
    values: dict[str, bytes | None] = {}
    problems, shown = [], []
    for socket in ch.sockets.outputs:
        try:
            data, problem = (_image_output if socket.is_image else _value_output)(ch, subset, record, socket, cmd)
        except (ValueError, ArithmeticError, RecursionError, MemoryError) as exc:  # what its bytes made a reader do
            data, problem = None, f"its value cannot be read ({type(exc).__name__})"
        values[socket.slug] = data if problem is None else None
        left = cmd.files.get(socket.relative_path + "/" if socket.is_image else socket.relative_path)
        if not socket.required and (left is None or left.size is None):
            continue  # an optional output the case did not leave
        if problem is not None:
            problems.append(f"case {record}, output socket {socket.slug}: {problem}")
            shown.append(f"{socket.slug}: invalid")
        elif data is not None:
            shown.append(f"{socket.slug}: " + (f"an image of {len(data)} bytes" if socket.is_image else
                                               data.decode("utf-8", "replace")[:80].strip()))
    return CaseOutputs(values, tuple(problems), tuple(shown))


def _image_output(ch: Challenge, subset: str, record: str, socket: Socket,
                  cmd: CommandResult) -> tuple[bytes | None, str | None]:
    folder = f"{ch.container.output if ch.container else '/output'}/{socket.relative_path}"
    listing = cmd.files.get(socket.relative_path + "/")
    if listing is None or listing.size is None:
        return None, f"{folder} is not a directory the image wrote (no image left)"
    names = [n for n in listing.data.decode("utf-8", "replace").split("\n") if n]
    if listing.size != 1:
        shown = ", ".join(names[:4]) + (f" and {listing.size - 4} more" if listing.size > 4 else "")
        return None, (f"{folder} holds {listing.size} files ({shown}), not exactly one image" if listing.size
                      else f"{folder} is empty: write exactly one .mha or .tif there")
    name = names[0] if names else ""
    got = cmd.files.get(f"{socket.relative_path}/{name}")
    if got is None or got.size is None:
        return None, f"{folder} holds {name!r}, which is not a regular file with a plain name"
    if PurePosixPath(name).suffix.lower() not in IMAGE_SUFFIXES:
        return None, f"{folder}/{name} is not a .mha or .tif image"
    if got.truncated:
        return None, f"{folder}/{name} is {got.size} bytes, over the {len(got.data)} the judge keeps of a result"
    try:
        made = _geometry(name, got.data)
    except (MhaError, TifError) as exc:
        return None, f"{folder}/{name} is not {_kind(name)} the judge can read: {exc}"
    like = next((s for s in ch.sockets.inputs if s.slug == socket.like), None) if ch.sockets else None
    source = input_file(ch.set_dir(subset), record, like) if like is not None else None
    if like is not None and source is not None:
        try:
            wanted = _geometry(source.name, source.read_bytes())
        except (MhaError, TifError) as exc:  # the organiser's input, not the entry's output
            raise ChallengeError("input-image", f"input socket {like.slug}'s {source} cannot be read for its "
                                 f"grid: {exc}") from None
        wrong = _unlike(made, wanted)
        if wrong:
            return None, f"{folder}/{name} has {wrong} where input socket {like.slug} has " \
                         f"{_unlike(wanted, made)}: write the mask on the input's grid"
        try:  # its voxels too, now that its size is known to be the input's
            _geometry(name, got.data, full=True)
        except (MhaError, TifError) as exc:
            return None, f"{folder}/{name} is not {_kind(name)} the judge can read: {exc}"
    return got.data, None


Geometry = tuple[tuple[float, ...], ...]


def _kind(name: str) -> str:
    return "a MetaImage" if name.lower().endswith(".mha") else "a TIFF"


def _geometry(name: str, data: bytes, full: bool = False) -> Geometry:
    """(size, spacing[, origin]) of a .mha (mha.py) or a .tif (tif.py, which has no origin)."""
    return geometry(data, full) if name.lower().endswith(".mha") else tif.geometry(data, full)


def _unlike(a: Geometry, b: Geometry) -> str:
    """The first of size, spacing and origin (as both have them) in which `a` differs from `b`, as
    `a` has it; "" if none."""
    for label, x, y in zip(("size", "spacing", "origin"), a, b, strict=False):
        if len(x) != len(y) or any(not math.isclose(p, q, rel_tol=GEOMETRY_TOLERANCE, abs_tol=GEOMETRY_TOLERANCE)
                                   for p, q in zip(x, y, strict=False)):
            return f"{label} {' '.join(f'{v:g}' for v in x)}"
    return ""


KIND_TYPES: dict[str, tuple[type, ...]] = {"float": (int, float), "integer": (int,), "boolean": (bool,),
                                           "string": (str,)}


def _value_output(ch: Challenge, subset: str, record: str, socket: Socket,
                  cmd: CommandResult) -> tuple[bytes | None, str | None]:
    path = f"{ch.container.output if ch.container else '/output'}/{socket.relative_path}"
    got = cmd.files.get(socket.relative_path)
    if got is None or got.size is None:
        return None, f"no file {path}"
    if got.truncated or got.size > socket.max_bytes:
        return None, f"{path} is {got.size} bytes, over the socket's {socket.max_bytes}"
    try:
        value = json.loads(got.data)
    except (ValueError, RecursionError) as exc:
        return None, f"{path} is not JSON ({str(exc)[:120]})"
    kinds = KIND_TYPES.get(socket.kind)
    if kinds is not None and (not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool))
                              or (isinstance(value, float) and not math.isfinite(value))):
        return None, f"{path} holds {json.dumps(value)[:60]}, not a {socket.gc_kind} value"
    return got.data, None
