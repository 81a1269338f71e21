"""A page as a tree, from the standard library's HTMLParser: enough to ask a portal page for its
elements by tag, id, class or attribute and read their text, so tests check the structure a
reader (or a screen reader) meets rather than strings in the markup."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str | None]
    children: list[Node | str] = field(default_factory=list)

    def walk(self) -> Iterator[Node]:
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.walk()

    def all(self, tag: str | None = None, cls: str | None = None, **attrs: str | None) -> list[Node]:
        """Every element below (and including) this one with the tag, the class and the attributes
        given (an attribute given as None: present, whatever its value)."""
        return [n for n in self.walk()
                if (tag is None or n.tag == tag) and (cls is None or cls in (n.attrs.get("class") or "").split())
                and all(k.rstrip("_").replace("_", "-") in n.attrs
                        and (v is None or n.attrs[k.rstrip("_").replace("_", "-")] == v) for k, v in attrs.items())]

    def one(self, tag: str | None = None, cls: str | None = None, **attrs: str | None) -> Node:
        found = self.all(tag, cls, **attrs)
        assert len(found) == 1, f"{len(found)} elements {tag} .{cls} {attrs}"
        return found[0]

    @property
    def text(self) -> str:
        return " ".join("".join(c if isinstance(c, str) else c.text for c in self.children).split())


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs))
        self.open[-1].children.append(node)
        if tag not in VOID:
            self.open.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.open[-1].children.append(Node(tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.open) - 1, 0, -1):
            if self.open[i].tag == tag:
                del self.open[i:]
                return

    def handle_data(self, data: str) -> None:
        self.open[-1].children.append(data)


def parse(page: str) -> Node:
    builder = _Builder()
    builder.feed(page)
    builder.close()
    return builder.root
