"""A challenge scorer for the container pipeline test (style "files"): the share of test records
whose result file, stripped of surrounding whitespace, is exactly the reference label."""

from __future__ import annotations

from pathlib import Path


def labels(reference: Path) -> dict[str, str]:
    rows = (line.split(",", 1) for line in (reference / "REFERENCE.csv").read_text().splitlines() if line.strip())
    return {record.strip(): label.strip() for record, label in rows}


def score(results, reference):
    expected = labels(Path(reference))
    files = results.files or {}
    correct = sum(1 for record in results.records
                  if files.get(record) is not None
                  and files[record].decode("utf-8", "replace").strip() == expected.get(record))
    return {"correct": float(correct), "records": float(len(results.records)),
            "score": correct / len(results.records) if results.records else 0.0}
