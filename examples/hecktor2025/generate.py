#!/usr/bin/env python3
"""Writes the hecktor2025 example challenges' data from scratch: synthetic head and neck PET/CT
cases laid out as Grand Challenge gives them to an algorithm, HECKTOR 2025 Task 1's masks and
Task 2's recurrence-free survival.

    python generate.py [--out DIR]      (DIR defaults to this file's directory)

Deletes and recreates training/ and phases/ in DIR/task1 and DIR/task2 (their challenge.toml
stays). Everything is seeded (each patient from its own name), so running it again gives the same
voxels, and the same bytes with the same zlib. Standard library only.

A patient is a record: a directory laid out as the case's /input, `images/ct/<uuid>.mha` (CT in
HU, int16), `images/pet/<uuid>.mha` (PET in SUV, float32) and `ehr.json`, both images
20x20x12 voxels of 4x4x3 mm with the same origin, zlib-compressed MetaImage as Grand Challenge
stores them. Each has a primary tumour (label 1) and up to two lymph nodes (label 2). Task 1's
reference is the label map REFERENCE-RECORD.mha (uint8, CT's grid); Task 2's is survival.csv
(record,time,event: days to recurrence or to the last follow-up, 1 if recurrence was seen), the
time shorter the larger the lesions (and with a poor performance status or M1). Task 2's
records are the same patients with the same image files, its ehr.json has CenterID too, and some
records also have `images/ct-planning/<uuid>.mha` and `images/rt-dose/<uuid>.mha` (Gy, float32).
Each task: training/ (with its reference beside the records, as participants get it), and per
phase phases/NAME/test/ and phases/NAME/reference/.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import struct
import uuid
import zlib
from pathlib import Path

SEED = "hecktor2025"
DIMS = (20, 20, 12)  # x, y, z
SPACING = (4.0, 4.0, 3.0)  # mm
VOXEL_ML = SPACING[0] * SPACING[1] * SPACING[2] / 1000
DOSE_DIMS, DOSE_SPACING = (10, 10, 6), (8.0, 8.0, 6.0)
# Where each set goes in a task's directory, and its records (none in two sets).
SETS = {
    "training": [f"HN-00{i}" for i in (1, 2, 3)],
    "phases/sanity/test": [f"HN-10{i}" for i in (1, 2, 3)],
    "phases/validation/test": [f"HN-20{i}" for i in (1, 2, 3, 4)],
    "phases/test/test": [f"HN-30{i}" for i in (1, 2, 3, 4, 5)],
}
# Task 2's records that also have a planning CT and a dose map (in HECKTOR 2025 a subset had them).
PLANNING = frozenset({"HN-001", "HN-003", "HN-102", "HN-201", "HN-204", "HN-302", "HN-303"})
EHR_KEYS = ("Age", "Gender", "Tobacco Consumption", "Alcohol Consumption", "Performance Status", "Treatment",
            "M-stage")


def number(v: float) -> str:
    return f"{v:g}"


def mha(values: list[float], element: str, dims: tuple[int, ...], spacing: tuple[float, ...],
        origin: tuple[float, ...]) -> bytes:
    """A MetaImage file as SimpleITK writes one with compression (x varying fastest)."""
    code = {"MET_SHORT": "h", "MET_FLOAT": "f", "MET_UCHAR": "B"}[element]
    body = zlib.compress(struct.pack(f"<{len(values)}{code}", *values), 9)
    header = ["ObjectType = Image", "NDims = 3", "BinaryData = True", "BinaryDataByteOrderMSB = False",
              "CompressedData = True", f"CompressedDataSize = {len(body)}", "TransformMatrix = 1 0 0 0 1 0 0 0 1",
              f"Offset = {' '.join(map(number, origin))}", "CenterOfRotation = 0 0 0", "AnatomicalOrientation = RAI",
              f"ElementSpacing = {' '.join(map(number, spacing))}", f"DimSize = {' '.join(map(str, dims))}",
              f"ElementType = {element}", "ElementDataFile = LOCAL"]
    return ("\n".join(header) + "\n").encode() + body


def voxels(dims: tuple[int, ...]):
    for z in range(dims[2]):
        for y in range(dims[1]):
            for x in range(dims[0]):
                yield x, y, z


class Patient:
    """One synthetic patient, drawn from its own seed. Positions are in the CT's voxels (x to the
    left, y to the back, z up: LPS, as ITK's RAI orientation says); radii in mm."""

    def __init__(self, record: str):
        rng = random.Random(f"{SEED}/{record}")
        self.record = record
        self.names = {k: str(uuid.UUID(int=rng.getrandbits(128), version=4))
                      for k in ("ct", "pet", "ct-planning", "rt-dose")}
        self.origin = (round(rng.uniform(-45, -35), 2), round(rng.uniform(-60, -20), 2),
                       round(rng.uniform(-720, -600), 1))
        self.neck = (9.5 + rng.uniform(-0.5, 0.5), 9.5 + rng.uniform(-0.5, 0.5), rng.uniform(8.2, 9.0),
                     rng.uniform(7.0, 7.8))  # centre x, y and half-axes, in voxels
        cx, cy = self.neck[0], self.neck[1]
        primary = (cx + rng.choice((-1, 1)) * rng.uniform(0.5, 2.5), cy - rng.uniform(0.5, 2.5),
                   rng.uniform(4.0, 8.0), [rng.uniform(6, 14) * rng.uniform(0.8, 1.2) for _ in range(3)],
                   rng.uniform(6, 16))  # x, y, z, radii (mm), SUVmax
        self.lesions = [(1, primary)]
        for _ in range(rng.choice((0, 1, 1, 2))):
            for _attempt in range(20):
                node = (cx + rng.choice((-1, 1)) * rng.uniform(5.0, 6.3), cy + rng.uniform(-1.5, 2.0),
                        rng.uniform(3.0, 9.0), [rng.uniform(4, 8)] * 3, rng.uniform(3.5, 8))
                if all(self.apart(node, other) for _, other in self.lesions):
                    self.lesions.append((2, node))
                    break
        self.ehr = {"Age": rng.randint(38, 84), "Gender": int(rng.random() < 0.8),
                    "Tobacco Consumption": rng.choice((0, 1, 1, None)),
                    "Alcohol Consumption": rng.choice((0, 1, None)),
                    "Performance Status": rng.choice((0, 0, 0, 1, 1, 2, None)),
                    "Treatment": int(rng.random() < 0.65),
                    "M-stage": rng.choice(("M0",) * 16 + ("Mx", "Mx", "M1"))}
        self.center = rng.randint(1, 7)
        self.shift = tuple(round(rng.uniform(-6, 6), 1) for _ in range(3))  # planning CT's origin, mm
        self.noise = rng.getrandbits(64)
        self.survival_noise = rng.gauss(0, 0.35)
        self.follow_up = rng.uniform(700, 2600)

    @staticmethod
    def apart(a, b) -> bool:
        d = math.dist([p * s for p, s in zip(a[:3], SPACING, strict=True)],
                      [p * s for p, s in zip(b[:3], SPACING, strict=True)])
        return d > max(a[3]) + max(b[3]) + 4

    def label(self, p: tuple[float, float, float]) -> tuple[int, float, float]:
        """(label, its SUVmax, how far out of it: 1 at its edge, in the lesion's radii)."""
        best = (0, 0.0, math.inf)
        for lab, (x, y, z, radii, suv) in self.lesions:
            d = math.sqrt(sum(((q - c) * s / r) ** 2 for q, c, s, r in zip(p, (x, y, z), SPACING, radii,
                                                                                strict=True)))
            if d < best[2]:
                best = (lab, suv, d)
        return best

    def tissue(self, p: tuple[float, float, float]) -> str:
        cx, cy, ax, ay = self.neck
        x, y, _ = p
        if ((x - cx) / ax) ** 2 + ((y - cy) / ay) ** 2 > 1:
            return "air"
        if (x - cx) ** 2 + (y - cy - 4) ** 2 <= 4.2:
            return "spine"
        if (x - cx) ** 2 + (y - cy + 3.2) ** 2 <= 1.3:
            return "airway"
        return "soft"

    def ct(self, offset: tuple[float, ...] = (0, 0, 0), salt: int = 0) -> list[int]:
        """CT in HU on the CT's grid moved by `offset` voxels (the planning CT: another scan)."""
        rng = random.Random(self.noise + salt)
        out = []
        for v in voxels(DIMS):
            p = tuple(a + b for a, b in zip(v, offset, strict=True))
            kind = self.tissue(p)
            hu = {"air": -1000.0, "spine": 650 + rng.gauss(0, 25), "airway": -900 + rng.gauss(0, 15),
                  "soft": 35 + rng.gauss(0, 8)}[kind]
            if kind == "soft" and self.label(p)[2] <= 1:
                hu += 12
            out.append(round(hu))
        return out

    def pet_and_mask(self) -> tuple[list[float], list[int]]:
        rng = random.Random(self.noise + 1)
        pet, mask = [], []
        for v in voxels(DIMS):
            kind = self.tissue(v)
            label, suv, d = self.label(v)
            mask.append(label if d <= 1 else 0)
            value = {"air": 0.0, "spine": 1.6, "airway": 0.3, "soft": 1.1}[kind]
            if kind != "air":
                value += rng.gauss(0, 0.12)
            if d <= 1:
                value = suv * (1 + rng.gauss(0, 0.06))
            elif d <= 1.25 and kind != "air":
                value = max(value, suv * rng.uniform(0.2, 0.5))  # the scanner's blur at the rim
            pet.append(round(max(0.0, value) * 32) / 32)
        return pet, mask

    def dose(self) -> list[float]:
        """Gy on a coarse grid from the CT's origin: 70 around the tumour, 50 in the neck."""
        out = []
        for v in voxels(DOSE_DIMS):
            p = tuple(i * ds / s for i, ds, s in zip(v, DOSE_SPACING, SPACING, strict=True))
            _, _, d = self.label(p)
            gy = 0.0 if self.tissue(p) == "air" else 50.0
            gy = max(gy, 70.0 / (1 + math.exp(4 * (d - 1.8))))
            out.append(round(gy * 64) / 64)
        return out

    def lesion_ml(self, mask: list[int]) -> float:
        return sum(1 for m in mask if m) * VOXEL_ML

    def survival(self, mask: list[int]) -> tuple[int, int]:
        """(days, event): recurrence sooner with larger lesions, a poor performance status or M1."""
        risk = 1.1 * math.log(self.lesion_ml(mask) / 4) + 0.5 * ((self.ehr["Performance Status"] or 0) >= 2)
        risk += 0.8 * (self.ehr["M-stage"] == "M1") + self.survival_noise
        at = 1300 * math.exp(-risk)
        return (round(at), 1) if at <= self.follow_up else (round(self.follow_up), 0)


def write_image(top: Path, socket_dir: str, name: str, data: bytes) -> None:
    (top / socket_dir).mkdir(parents=True)
    (top / socket_dir / f"{name}.mha").write_bytes(data)


def write_task(out: Path, task: int, patients: dict[str, Patient]) -> None:
    root = out / f"task{task}"
    for set_dir, records in SETS.items():
        directory = root / set_dir
        reference = directory if set_dir == "training" else directory.parent / "reference"
        directory.mkdir(parents=True)
        reference.mkdir(parents=True, exist_ok=True)
        (directory / "RECORDS").write_text("".join(f"{r}\n" for r in records))
        rows = ["record,time,event"]
        for record in records:
            pt = patients[record]
            top = directory / record
            grid = (DIMS, SPACING, pt.origin)
            pet, mask = pt.pet_and_mask()
            write_image(top, "images/ct", pt.names["ct"], mha(pt.ct(), "MET_SHORT", *grid))
            write_image(top, "images/pet", pt.names["pet"], mha(pet, "MET_FLOAT", *grid))
            ehr = ({"CenterID": pt.center} if task == 2 else {}) | {k: pt.ehr[k] for k in EHR_KEYS}
            (top / "ehr.json").write_text(json.dumps(ehr, indent=4))
            if task == 1:
                (reference / f"REFERENCE-{record}.mha").write_bytes(mha(mask, "MET_UCHAR", *grid))
                continue
            if record in PLANNING:
                offset = tuple(s / sp for s, sp in zip(pt.shift, SPACING, strict=True))
                origin = tuple(round(o + s, 2) for o, s in zip(pt.origin, pt.shift, strict=True))
                write_image(top, "images/ct-planning", pt.names["ct-planning"],
                            mha(pt.ct(offset, salt=2), "MET_SHORT", DIMS, SPACING, origin))
                write_image(top, "images/rt-dose", pt.names["rt-dose"],
                            mha(pt.dose(), "MET_FLOAT", DOSE_DIMS, DOSE_SPACING, pt.origin))
            days, event = pt.survival(mask)
            rows.append(f"{record},{days},{event}")
        if task == 2:
            (reference / "survival.csv").write_text("\n".join(rows) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    out = parser.parse_args().out
    patients = {r: Patient(r) for records in SETS.values() for r in records}
    for task in (1, 2):
        for sub in ("training", "phases"):
            shutil.rmtree(out / f"task{task}" / sub, ignore_errors=True)
        write_task(out, task, patients)


if __name__ == "__main__":
    main()
