"""challenge.toml's [[input]] and [[output]]: a container challenge's sockets, Grand Challenge's way.

Grand Challenge gives an algorithm each case's values by socket ("component interface"): every socket
has a slug, a kind and a relative_path, and a job finds each input at /input/{relative_path} with
/input/inputs.json describing them all, and leaves each output at /output/{relative_path}. An image
socket's path is a directory holding one .mha or .tif (of any name); a value socket's is a JSON file.
A challenge that declares sockets is judged that way (stages/sockets.py); one without keeps the flat
[results] pattern of PhysioNet-like challenges.

A record of a socket challenge is a directory of its set (training/RECORD/, test/RECORD/) laid out as
the job's /input is: `images/ct/<any>.mha`, `ehr.json`, ... (Challenge.record_files reads it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .values import Section

# Our kind -> (Grand Challenge's kind as inputs.json says it, its super_kind).
IMAGE_KINDS = {"image": "Image", "segmentation": "Segmentation", "heat-map": "Heat Map"}
VALUE_KINDS = {"anything": "Anything", "float": "Float", "integer": "Integer", "boolean": "Bool", "string": "String"}
KINDS = {**{k: (v, "Image") for k, v in IMAGE_KINDS.items()}, **{k: (v, "Value") for k, v in VALUE_KINDS.items()}}
IMAGE_SUFFIXES = (".mha", ".tif", ".tiff")
SLUG_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
# Grand Challenge's rule for a relative_path: plain parts, images under images/, values ending .json.
PATH_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*$")
SOCKETS_MAX = 32
VALUE_MAX_BYTES = 1 << 20  # a value socket's JSON, in or out: Grand Challenge keeps such values in its database


@dataclass(frozen=True)
class Socket:
    slug: str
    kind: str  # a KINDS key
    relative_path: str
    title: str = ""
    description: str = ""
    required: bool = True  # an input every record must supply (an output every case must leave)
    # An image output's: the input socket whose size, spacing and origin it must have (None: not checked).
    like: str | None = None
    max_bytes: int = VALUE_MAX_BYTES  # a value output's JSON

    @property
    def is_image(self) -> bool:
        return self.kind in IMAGE_KINDS

    @property
    def gc_kind(self) -> str:
        return KINDS[self.kind][0]

    @property
    def super_kind(self) -> str:
        return KINDS[self.kind][1]

    def interface(self, pk: int) -> dict[str, Any]:
        """The socket as inputs.json describes it (Grand Challenge's ComponentInterface serializer)."""
        return {"title": self.title or self.slug, "description": self.description, "slug": self.slug,
                "kind": self.gc_kind, "pk": pk, "default_value": None, "super_kind": self.super_kind,
                "relative_path": self.relative_path, "overlay_segments": [], "look_up_table": None}


@dataclass(frozen=True)
class Sockets:
    inputs: tuple[Socket, ...]
    outputs: tuple[Socket, ...]

    def output(self, slug: str) -> Socket:
        return next(s for s in self.outputs if s.slug == slug)


def read_sockets(source: str, data: dict[str, Any], kind: str) -> Sockets | None:
    """[[input]] and [[output]] of `data`, checked; None when the challenge declares neither."""
    if "input" not in data and "output" not in data:
        return None
    if kind != "container":
        raise ConfigError(f"{source}: [[input]] and [[output]] sockets are for container entries: add kind = "
                          "\"container\" to [entry], or remove them.")
    inputs = _list(source, data, "input")
    outputs = _list(source, data, "output")
    if not outputs:
        raise ConfigError(f"{source}: sockets need at least one [[output]], what each case must leave in /output.")
    slugs = [s.slug for s in inputs + outputs]
    twice = sorted({s for s in slugs if slugs.count(s) > 1})
    if twice:
        raise ConfigError(f"{source}: socket {twice[0]!r} is declared twice: each slug names one socket.")
    for side in (inputs, outputs):
        paths = [s.relative_path for s in side]
        for s in side:
            clash = next((p for p in paths if p != s.relative_path and (p.startswith(s.relative_path + "/"))), None)
            if paths.count(s.relative_path) > 1 or clash:
                raise ConfigError(f"{source}: socket {s.slug}'s relative_path {s.relative_path!r} is also (or holds) "
                                  "another socket's: give each socket a path of its own.")
    if any(s.relative_path == "inputs.json" for s in inputs):
        raise ConfigError(f"{source}: /input/inputs.json is written by the judge: give the socket another "
                          "relative_path.")
    images = {s.slug for s in inputs if s.is_image}
    for s in outputs:
        if s.like is not None and (not s.is_image or s.like not in images):
            raise ConfigError(f"{source}: [[output]] {s.slug} like = {s.like!r} must name an image [[input]] "
                              f"({', '.join(sorted(images)) or 'there is none'}), and the output must be an image.")
    return Sockets(inputs, outputs)


def _list(source: str, data: dict[str, Any], table: str) -> tuple[Socket, ...]:
    raw = data.get(table, [])
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise ConfigError(f"{source}: {table} must be written as [[{table}]] tables, one per socket.")
    if len(raw) > SOCKETS_MAX:
        raise ConfigError(f"{source}: at most {SOCKETS_MAX} [[{table}]] sockets, not {len(raw)}.")
    return tuple(_socket(source, table, i, t) for i, t in enumerate(raw))


def _socket(source: str, table: str, index: int, raw: dict[str, Any]) -> Socket:
    sec = Section(source, table, raw)  # its values name it in an error: "[input] kind = 'img' is not allowed"
    slug = sec.get("slug", str, None, lambda v: bool(SLUG_RE.fullmatch(v)),
                   "a slug of lowercase letters, digits and '-', such as \"ct-image\"")
    kind = sec.get("kind", str, None, lambda v: v in KINDS, " or ".join(f'"{k}"' for k in KINDS))
    if slug is None or kind is None:
        raise ConfigError(f"{source}: [[{table}]] number {index + 1} needs slug and kind, such as slug = \"ct-image\" "
                          "and kind = \"image\".")
    image = kind in IMAGE_KINDS
    shape = "a directory under images/, such as \"images/ct\"" if image else "a JSON file, such as \"ehr.json\""
    relative_path = sec.get("relative_path", str, f"images/{slug}" if image else f"{slug}.json",
                            lambda v: bool(PATH_RE.fullmatch(v)) and len(v) <= 255 and
                            (v.startswith("images/") and not v.endswith(".json") if image else
                             v.endswith(".json") and not v.startswith("images/")),
                            f"{shape}: letters, digits, '.', '_' and '-' in each part")
    socket = Socket(
        slug=slug, kind=kind, relative_path=str(relative_path),
        title=sec.get("title", str, "", lambda v: len(v) <= 255, "at most 255 characters"),
        description=sec.get("description", str, "", lambda v: len(v) <= 4096, "at most 4096 characters"),
        required=sec.get("required", bool, True, lambda v: True, "true or false"),
        like=sec.get("like", str, None, lambda v: bool(SLUG_RE.fullmatch(v)), "an image input's slug")
        if table == "output" else None,
        max_bytes=sec.get("max_bytes", int, VALUE_MAX_BYTES, lambda v: 1 <= v <= 64 << 20,
                          "a number of bytes up to 67108864") if table == "output" and not image else VALUE_MAX_BYTES)
    sec.done()
    return socket


def input_file(set_dir: Path, record: str, socket: Socket) -> Path | None:
    """The case's value of an input socket: an image socket's one image file, a value socket's
    JSON file; None when the record does not supply it."""
    path = set_dir / record / socket.relative_path
    if not socket.is_image:
        return path if path.is_file() and not path.is_symlink() else None
    if not path.is_dir() or path.is_symlink():
        return None
    found = sorted(p for p in path.iterdir() if p.is_file() and not p.is_symlink())
    return found[0] if len(found) == 1 else None


def json_value(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not a JSON value ({exc}): correct it and add the challenge again.") from None


def check_record_inputs(sockets: Sockets, set_dir: Path, record: str, shown: str) -> None:
    """What `challenge add` insists on for one record of a socket challenge: every required input
    socket supplied (an image socket's directory holding exactly one .mha or .tif), every value a
    JSON file within Grand Challenge's size for a value."""
    for socket in sockets.inputs:
        where = f"{shown}/{record}/{socket.relative_path}"
        path = input_file(set_dir, record, socket)
        if path is None:
            if socket.required:
                what = "a directory holding exactly one .mha or .tif" if socket.is_image else "a JSON file"
                raise ConfigError(f"record {record} does not supply input socket {socket.slug}: put {what} at "
                                  f"{where}, or mark the socket required = false.")
            continue
        if socket.is_image and path.suffix.lower() not in IMAGE_SUFFIXES:
            raise ConfigError(f"{where}/{path.name} is not a .mha or .tif image: Grand Challenge's images are those.")
        if not socket.is_image:
            if path.stat().st_size > socket.max_bytes:
                raise ConfigError(f"{where} is over {socket.max_bytes} bytes: a value socket's JSON is small.")
            json_value(path)
