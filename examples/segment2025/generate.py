#!/usr/bin/env python3
"""Writes the segment2025 example challenge from scratch: synthetic PET/CT volumes of the head and
neck region with one known lesion each, the lesions' reference masks, and the good entry's
submitted masks for the training records.

    python generate.py [--out DIR]      (DIR defaults to this file's directory)

Deletes and recreates DIR/training, DIR/test, DIR/reference and DIR/entries/good/submitted.
Everything is seeded, so running it again gives identical bytes. Standard library only.

Each record is two MetaImage volumes of 24x24x24 voxels (int16, x first): RECORD.ct.mha, CT in
Hounsfield units (air, an elliptic neck of soft tissue with noise, a spine), and RECORD.pt.mha, PET
uptake in SUV x 100 (a noisy background in the neck and a lesion: an ellipsoid of high uptake whose
rim, one voxel thick, is blurred as a PET scanner blurs it). The reference mask,
REFERENCE-RECORD.mha (uint8, 1 in the lesion), is in training/ for the training records (for the
replica's training score) and in reference/ for the test records, never given to an entry. The
good entry thresholds PET at 40 % of its maximum (a classic baseline); its masks for the training
records are made by running its inference.py on the host.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

SIZE = 24
TRAINING = ["case01", "case02"]
TEST = ["case11", "case12", "case13"]
SEED = 2025


def mha(values: list[int], element: str) -> bytes:
    fmt = {"MET_SHORT": "h", "MET_UCHAR": "B"}[element]
    header = (f"ObjectType = Image\nNDims = 3\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
              f"CompressedData = False\nElementSpacing = 2 2 2\nDimSize = {SIZE} {SIZE} {SIZE}\n"
              f"ElementType = {element}\nElementDataFile = LOCAL\n")
    return header.encode() + struct.pack(f"<{len(values)}{fmt}", *values)


def case(rng: random.Random) -> tuple[list[int], list[int], list[int]]:
    """CT, PET and the lesion's mask, each SIZE**3 values with x varying fastest."""
    c = SIZE / 2
    lesion = [rng.uniform(8, 16) for _ in range(3)]  # its centre, inside the neck
    radii = [rng.uniform(2.2, 4.2) for _ in range(3)]
    uptake = rng.randint(550, 900)
    ct, pet, mask = [], [], []
    for z in range(SIZE):
        for y in range(SIZE):
            for x in range(SIZE):
                neck = ((x - c) / 10.5) ** 2 + ((y - c) / 8.5) ** 2 <= 1
                spine = (x - c) ** 2 + (y - c - 5.5) ** 2 <= 4
                d = sum(((p - q) / r) ** 2 for p, q, r in zip((x, y, z), lesion, radii, strict=True)) ** 0.5
                inside, rim = d <= 1, 1 < d <= 1 + 1.2 / min(radii)
                mask.append(1 if inside else 0)
                hu = -1000 + rng.gauss(0, 8) if not neck else (700 if spine else 40) + rng.gauss(0, 15)
                ct.append(round(hu + (15 if inside else 0)))
                suv = 0.0 if not neck else 100 + rng.gauss(0, 25)
                if inside:
                    suv = uptake + rng.gauss(0, uptake * 0.08)
                elif rim:
                    suv = uptake * rng.uniform(0.25, 0.55)
                pet.append(max(0, round(suv)))
    return ct, pet, mask


def write_set(out: Path, subset: str, records: list[str], rng: random.Random, masks_to: Path) -> None:
    directory = out / subset
    directory.mkdir(parents=True)
    (directory / "RECORDS").write_text("".join(f"{r}\n" for r in records))
    for record in records:
        ct, pet, mask = case(rng)
        (directory / f"{record}.ct.mha").write_bytes(mha(ct, "MET_SHORT"))
        (directory / f"{record}.pt.mha").write_bytes(mha(pet, "MET_SHORT"))
        (masks_to / f"REFERENCE-{record}.mha").write_bytes(mha(mask, "MET_UCHAR"))


def run_good_entry(out: Path) -> None:
    """entries/good/submitted/RECORD.mha: the good entry's inference.py on each training record,
    run on the host as the judge runs it (the record's files alone in its input directory)."""
    submitted = out / "entries" / "good" / "submitted"
    submitted.mkdir(parents=True)
    for record in TRAINING:
        with tempfile.TemporaryDirectory() as tmp:
            given = Path(tmp) / "input"
            given.mkdir()
            for f in (out / "training").glob(f"{record}.*"):
                shutil.copyfile(f, given / f.name)
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "VMJUDGE_RECORD": record,
                   "SEGMENT_INPUT": str(given), "SEGMENT_OUTPUT": str(submitted)}
            subprocess.run([sys.executable, "-I", "-B", str(out / "entries" / "good" / "inference.py")], env=env,
                           check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    out = parser.parse_args().out
    for sub in ("training", "test", "reference", "entries/good/submitted"):
        shutil.rmtree(out / sub, ignore_errors=True)
    rng = random.Random(SEED)
    write_set(out, "training", TRAINING, rng, out / "training")
    (out / "reference").mkdir()
    write_set(out, "test", TEST, rng, out / "reference")
    run_good_entry(out)


if __name__ == "__main__":
    main()
