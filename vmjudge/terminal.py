"""Text on its way to a terminal, made harmless.

Entries choose what their setup.sh and next.sh print, and submitters choose owner and
archive names. Printed raw, a control sequence in any of them would act on the organiser's
terminal: clear it, retitle it, rewrite earlier lines, or reorder what is read (Unicode
bidi controls). Every character that acts rather than shows is written as a visible escape
instead (\\x1b, \\r, \\u202e); newlines and tabs stay, since reports are made of them.

Pure standard library: the replica ISO prints through here too, and has no click.
"""

from __future__ import annotations

import logging

# Unicode's Bidi_Control characters: the embeddings, overrides and isolates (U+202A-U+202E,
# U+2066-U+2069) reorder the rest of a line as displayed; the marks (U+061C, U+200E, U+200F)
# can move neighbouring text too.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_KEPT = frozenset("\n\t")


def _escape(char: str) -> str:
    code = ord(char)
    if char == "\r":
        return "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _acts(char: str) -> bool:
    """Whether a terminal would act on `char` rather than show it: C0 controls, DEL, C1
    controls (U+0080-U+009F; some terminals take U+009B as CSI), bidi controls, and lone
    surrogates (a file name that was not UTF-8), which cannot even be encoded for output."""
    code = ord(char)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return char not in _KEPT
    return char in _BIDI or 0xD800 <= code <= 0xDFFF


def printable(text: str) -> str:
    """`text` with every character a terminal would act on written as a visible escape."""
    if text.isprintable() and text.isascii():  # the common case, at C speed
        return text
    return "".join(_escape(c) if _acts(c) else c for c in text)


class PrintableFormatter(logging.Formatter):
    """Log lines quote entry ids, owners and failure messages: they reach the terminal as well."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))
