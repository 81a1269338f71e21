"""Joliet's rule for names on the judge's CDs. The entry goes into the VM on a CD, so unpacking
refuses a name the CD could not carry (members.py), and images/iso.py writes names by the same
rule; it lives here, below both, in pure Python: prep checks entry names by it on the replica
ISO too, whose Python has no pycdlib."""

JOLIET_MAX = 64  # UTF-16 code units per name part


def joliet_length(name: str) -> int:
    """A name's length as Joliet counts it: UTF-16 code units, so a character beyond the Basic
    Multilingual Plane (an emoji) counts as two, and 40 emoji are 80, over the limit of 64."""
    return len(name.encode("utf-16-le")) // 2
