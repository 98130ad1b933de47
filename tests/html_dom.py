"""A small DOM reader for the report tests (stdlib html.parser): elements with their attributes,
classes, text and the id of their nearest ancestor with an id."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parents: list[Element] = field(default_factory=list)
    text: str = ""

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def inside(self, element_id: str) -> bool:
        return any(p.attrs.get("id") == element_id for p in self.parents)


class Dom(HTMLParser):
    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self._stack: list[Element] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = Element(tag, {k: v or "" for k, v in attrs}, list(self._stack))
        self.elements.append(el)
        if tag not in VOID:
            self._stack.append(el)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(Element(tag, {k: v or "" for k, v in attrs}, list(self._stack)))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i].tag == tag:
                del self._stack[i:]
                return

    def handle_data(self, data: str) -> None:
        for el in self._stack:
            el.text += data

    # -- queries --------------------------------------------------------------------------------
    def by_id(self, element_id: str) -> Element | None:
        return next((e for e in self.elements if e.attrs.get("id") == element_id), None)

    def find(self, tag: str | None = None, cls: str | None = None, inside: str | None = None) -> list[Element]:
        return [e for e in self.elements if (tag is None or e.tag == tag) and (cls is None or cls in e.classes)
                and (inside is None or e.inside(inside))]

    def ids(self) -> set[str]:
        return {e.attrs["id"] for e in self.elements if "id" in e.attrs}
