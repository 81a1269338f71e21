"""The organiser's description of a challenge, Markdown made into HTML that cannot carry a script.

markdown-it-py's CommonMark with its "html" option off writes any HTML in the text as text (escaped),
and its link check drops javascript:, vbscript:, file: and data: addresses (data: images excepted),
so what the page shows is only the HTML of Markdown's own constructs: a description copied from
anywhere cannot run in a participant's browser, or restyle the portal around a form.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markupsafe import Markup


def rendered(text: str) -> Markup:
    """The description's HTML, marked safe for the page's template (its own HTML escaped above)."""
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    return Markup(md.render(text))  # every character of the text itself escaped by markdown-it (above)
