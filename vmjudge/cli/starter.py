"""What `vmjudge challenge new` writes: a challenge small enough to read whole, that `challenge add`
accepts and whose sample entry scores 1.0, so that an author changes something that works rather
than starting from the reference.

Its records are made up and fixed (no randomness: two runs write the same files, so a test can
tell the sample's score in advance). With style answer-lines each record is a number in RECORD.txt,
labelled by whether it is at least 50, in the labels the chosen scorer takes; with style files each
record is a small MetaImage volume, RECORD.img.mha, whose mask (voxels of at least 128) the entry
writes as RECORD.mha for the built-in Dice scorer. The sample entry is plain sh (and python3 for
masks), both in the base guest, so its challenge needs no package of its own.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..scorers.mha import write_mha
from .starter_toml import challenge_toml

TRAINING = {"t01": 12, "t02": 87, "t03": 45, "t04": 63, "t05": 5, "t06": 91}
TEST = {"e01": 70, "e02": 22, "e03": 55, "e04": 8}
THRESHOLD = 50

# The labels (at least THRESHOLD, below it) each answer-lines scorer takes, and what its
# REFERENCE.csv line adds after the label (heart2016's signal quality: 1, clean).
LABELS = {"accuracy": ("high", "low"), "af2017": ("A", "N"), "heart2016": ("1", "-1"), "alarms2015": ("1", "0")}
REFERENCE_EXTRA = {"heart2016": ",1"}
SCORERS = {"answer-lines": tuple(LABELS), "files": ("dice",)}

SHAPE = (4, 4, 2)  # each volume's voxels, x first
MASK_AT = 128  # a voxel of at least this is foreground

_NEXT_LINES = """\
#!/bin/sh
# Runs once per record, in the entry's working directory: $1 is the record's name, and its
# files ($1.txt) are beside it. Appends the line "$1,LABEL" to answers.txt.
set -eu
value=$(cat "$1.txt")
if [ "$value" -ge {threshold} ]; then label={high}; else label={low}; fi
echo "$1,$label" >> answers.txt
"""

_NEXT_FILES = """\
#!/bin/sh
# Runs once per record, in the entry's working directory: $1 is the record's name, and its
# volume ($1.img.mha) is beside it. Leaves the mask as $1.mha.
set -eu
python3 segment.py "$1"
"""

_SEGMENT = """\
# The sample's model: every voxel of at least {mask_at} is the lesion. Writes RECORD.mha, a
# MetaImage mask of the volume's size (1 in the lesion, 0 elsewhere).
import sys

HEADER = {header!r}
END = b"ElementDataFile = LOCAL\\n"

record = sys.argv[1]
with open(record + ".img.mha", "rb") as f:
    data = f.read()
voxels = data[data.index(END) + len(END):]
with open(record + ".mha", "wb") as f:
    f.write(HEADER + bytes(1 if v >= {mask_at} else 0 for v in voxels))
"""

_SETUP = """\
#!/bin/sh
# Runs once in the VM, in the entry's home directory, before any record: build or check here.
echo "sample entry: nothing to build"
"""


@dataclass(frozen=True)
class Written:
    directory: Path
    name: str
    style: str
    scorer: str
    archive: Path  # the sample entry as `vmjudge submit` takes it


def _volume(record: str) -> bytes:
    """A record's voxels, fixed by its name; every test record has voxels on both sides of MASK_AT."""
    seed = sum(record.encode())
    count = SHAPE[0] * SHAPE[1] * SHAPE[2]
    return bytes((seed * 37 + i * 53) % 256 for i in range(count))


def _mask(record: str) -> bytes:
    return write_mha(SHAPE, "MET_UCHAR", bytes(1 if v >= MASK_AT else 0 for v in _volume(record)))


def _label(value: int, scorer: str) -> str:
    high, low = LABELS[scorer]
    return high if value >= THRESHOLD else low


def write_starter(directory: Path, name: str, style: str, scorer: str) -> Written:
    """Write the challenge under `directory` (absent or empty): records, reference, sample entry
    (as files under entries/sample and as entries/sample-entry.tar.gz), challenge.toml."""
    for subset, records in (("training", TRAINING), ("test", TEST)):
        where = directory / subset
        where.mkdir(parents=True)
        (where / "RECORDS").write_text("".join(f"{r}\n" for r in records))
        for record, value in records.items():
            if style == "answer-lines":
                (where / f"{record}.txt").write_text(f"{value}\n")
            else:
                (where / f"{record}.img.mha").write_bytes(write_mha(SHAPE, "MET_UCHAR", _volume(record)))
    reference = directory / "reference"
    reference.mkdir()
    entry: dict[str, bytes] = {"setup.sh": _SETUP.encode()}
    if style == "answer-lines":
        (reference / "REFERENCE.csv").write_text("".join(
            f"{r},{_label(v, scorer)}{REFERENCE_EXTRA.get(scorer, '')}\n" for r, v in TEST.items()))
        high, low = LABELS[scorer]
        entry["next.sh"] = _NEXT_LINES.format(threshold=THRESHOLD, high=high, low=low).encode()
        entry["answers.txt"] = "".join(f"{r},{_label(v, scorer)}\n" for r, v in TRAINING.items()).encode()
        required: tuple[str, ...] = ("setup.sh", "next.sh", "answers.txt")
    else:
        for record in TEST:
            (reference / f"REFERENCE-{record}.mha").write_bytes(_mask(record))
        entry["next.sh"] = _NEXT_FILES.encode()
        entry["segment.py"] = _SEGMENT.format(header=write_mha(SHAPE, "MET_UCHAR", b""), mask_at=MASK_AT).encode()
        entry.update({f"outputs/{r}.mha": _mask(r) for r in TRAINING})
        required = ("setup.sh", "next.sh", "segment.py", "outputs/")
    (directory / "challenge.toml").write_text(challenge_toml(name, style, scorer, required))
    sample = directory / "entries" / "sample"
    for path, data in entry.items():
        (sample / path).parent.mkdir(parents=True, exist_ok=True)
        (sample / path).write_bytes(data)
        (sample / path).chmod(0o755 if path.endswith(".sh") else 0o644)
    archive = directory / "entries" / "sample-entry.tar.gz"
    archive.write_bytes(_tar_gz(entry))
    return Written(directory, name, style, scorer, archive)


def _tar_gz(files: dict[str, bytes]) -> bytes:
    """The sample entry as an archive, its scripts executable, owned by no one in particular and
    dated 0, so that the same challenge always gives the same bytes."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as packed, \
            tarfile.open(fileobj=packed, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for directory in sorted({p.rsplit("/", 1)[0] for p in files if "/" in p}):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o755 if path.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
