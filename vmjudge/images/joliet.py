"""Joliet's rule for names on the judge's CDs, apart from iso.py: prep checks entry names by it
on the replica ISO too, whose Python has no pycdlib."""

JOLIET_MAX = 64  # UTF-16 code units per name part


def joliet_length(name: str) -> int:
    """A name's length as Joliet counts it: UTF-16 code units, so a character beyond the Basic
    Multilingual Plane (an emoji) counts as two, and 40 emoji are 80, over the limit of 64."""
    return len(name.encode("utf-16-le")) // 2
