"""A container image archive read once, front to back, at a bounded cost: every member's header
as Go reads it (image_tar.py), each document kept, each layer checked as it goes by
(image_layers.py), and at the end the image resolved from the documents and matched with the
layers read.

Once, because docker save writes its manifest after the layers, and a second reading of a
gzipped archive decompresses all of it again, members no manifest names included (a 4 MB gzip
of 4 GiB of zeros cost 19 s of CPU per reading). Reading once costs one pass over whatever the
archive holds, and what it may hold is bounded before its data is read:

- every member must be one a saved image holds (image_layout.role): anything else is refused at
  its header, its data unread;
- the members together declare no more than max_unpacked and a header's worth per member, with
  the documents (image_layout.outer_bound);
- every layer-like member is checked as a layer whether or not the image names it, each against
  the one budget of members and bytes for the whole image, so that reading an unnamed one costs
  no more than the image may, and one that is not a layer (4 GiB of zeros) is refused within
  a few MiB (a tar's end, then no more zeros than its padding);
- a member the image does not name, other than a document, is then refused: nothing but the
  image is carried into the spool and the root.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .image_layers import Budget, LayerFacts, Readable, check_layer, match_layer
from .image_layout import (
    BLOBS,
    DOC_MAX,
    LAYERS,
    REBUILD,
    Catalogue,
    ImageLayout,
    member_name,
    outer_bound,
    refused,
    resolve,
    role,
    sniff,
)
from .image_tar import TarReader, TarRefused

GZIP_MAGIC = b"\x1f\x8b"
TAR_MAGIC_END = 262  # a tar header's "ustar" ends there


@dataclass(frozen=True)
class ImageRead:
    """What one reading found: the image resolved, and its layers' facts in the image's order."""

    layout: ImageLayout
    layers: tuple[LayerFacts, ...]


@contextmanager
def _opened(path: Path, gzipped: bool) -> Iterator[Readable]:
    with open(path, "rb") as raw, (gzip.open(raw, "rb") if gzipped else raw) as f:
        yield f


def _canonical(raw: str, is_dir: bool) -> str:
    """The member's name, which must be written as image tools write it (no "./", no "//")."""
    name = member_name(raw)
    if raw != name and not (is_dir and raw == name + "/"):
        raise refused(f"The image archive holds a member named {raw[:160]!r}, where image tools write "
                      f"{name[:160]!r}: {REBUILD}.")
    return name


class _Reading:
    """The pass over the archive: the catalogue, and each layer-like member's facts."""

    def __init__(self, max_members: int, max_unpacked: int):
        self.cat = Catalogue()
        self.layers: dict[str, LayerFacts] = {}
        self.budget = Budget(max_members, max_unpacked)
        self.bound = outer_bound(max_members, max_unpacked)
        self.declared = 0

    def member(self, reader: TarReader) -> bool:
        m = reader.next()
        if m is None:
            return False
        name = _canonical(m.name, m.isdir())
        kind = role(name, m)
        self.cat.add(name, m)
        self.budget.spend(1, 0)
        self.declared += m.size + reader.extended_bytes
        if self.declared > self.bound:
            raise refused(f"The image archive's members declare more than {self.bound:,} bytes, more than the image "
                          f"this challenge takes would need: make it smaller and submit again.")
        if kind == "document":
            self.cat.keep(name, b"".join(reader.data()))
        elif kind in ("layer", "blob"):
            self._layer_or_document(reader, name, m.size, kind)
        return True

    def _layer_or_document(self, reader: TarReader, name: str, size: int, kind: str) -> None:
        """A blob is a JSON document (a config, a manifest, an index) or a layer: a layer starts
        as a gzip stream or a tar header does, a document with "{". A document's bytes are kept."""
        data = reader.data()
        head = next(data, b"")
        while len(head) < TAR_MAGIC_END and (more := next(data, b"")):
            head += more
        layer = head.startswith(GZIP_MAGIC) or head[257:262] == b"ustar"
        if kind == "blob" and not layer and head.lstrip()[:1] == b"{":
            if size > DOC_MAX:
                raise refused(f"The image archive's {name[:80]} is a JSON document of {size:,} bytes, more than the "
                              f"{DOC_MAX >> 20} MiB vmjudge reads of a JSON document: {REBUILD}.")
            self.cat.keep(name, head + b"".join(data))
            return
        self.layers[name] = check_layer(_Chunks(head, data), name, self.budget)


class _Chunks:
    """A member's data as a stream, from the reader's chunks."""

    def __init__(self, head: bytes, rest: Iterator[bytes]):
        self.buffer, self.rest = head, rest

    def read(self, n: int, /) -> bytes:
        while not self.buffer:
            chunk = next(self.rest, None)
            if chunk is None:
                return b""
            self.buffer = chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out


def _named_layers(reading: _Reading, layout: ImageLayout) -> tuple[LayerFacts, ...]:
    """Each layer the image names, matched with what was read; a layer named twice counts twice."""
    found: list[LayerFacts] = []
    for n, ref in enumerate(layout.layers, 1):
        facts = reading.layers.get(ref.member)
        if facts is None and ref.member in reading.cat.docs:  # a tar whose first name starts with "{"
            facts = reading.layers[ref.member] = check_layer(io.BytesIO(reading.cat.docs[ref.member]), ref.member,
                                                             reading.budget)
        if facts is None:
            raise refused(f"Layer {n} of the image ({ref.member[:80]}) is not a layer tar: {REBUILD}.")
        match_layer(facts, ref, n)
        if ref.member in (r.member for r in layout.layers[:n - 1]):
            reading.budget.spend(facts.members, facts.unpacked)
        found.append(facts)
    named = {ref.member for ref in layout.layers}
    for name in reading.layers:
        if name not in named:
            raise refused(f"The image archive holds {name[:80]}, a layer the image does not name: save only the image "
                          "to run, with `docker save` or `podman save`, and submit again.")
    for name, m in reading.cat.headers.items():
        if m.isreg() and (BLOBS.fullmatch(name) or LAYERS.fullmatch(name)) and name not in reading.layers \
                and name not in reading.cat.docs:
            raise refused(f"The image archive holds {name[:80]}, which is neither a document nor a layer: {REBUILD}.")
    return tuple(found)


def read_image(path: Path, max_members: int, max_unpacked: int) -> ImageRead:
    """The image archive at `path` read once (see the module's docstring). A tar this reader will
    not read raises TarRefused; the host's read errors propagate."""
    compression = sniff(path)
    reading = _Reading(max_members, max_unpacked)
    with _opened(path, compression == "gzip") as f:
        reader = TarReader(f)
        while reading.member(reader):
            pass
    layout = resolve(reading.cat, compression == "gzip")
    return ImageRead(layout, _named_layers(reading, layout))


__all__ = ["ImageRead", "TarRefused", "read_image"]
