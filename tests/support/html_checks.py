"""Reading the report's HTML in self-tests: the cells of its tables, a section, its SVG charts, and whether every
element is closed in order."""

from __future__ import annotations

import re
from html.parser import HTMLParser


class _TableCells(HTMLParser):
    """The text of each cell of each row of the tables whose ``attribute`` is ``value``."""

    def __init__(self, attribute: str, value: str) -> None:
        super().__init__()
        self.attribute, self.value = attribute, value
        self.rows: list[list[str]] = []
        self.inside = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.inside = dict(attrs).get(self.attribute) == self.value
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag == "td":
            self.rows[-1].append("")

    def handle_endtag(self, tag):
        self.inside = self.inside and tag != "table"

    def handle_data(self, data):
        if self.inside and self.rows and self.rows[-1]:
            self.rows[-1][-1] += data


def table_cells(html: str, attribute: str, value: str) -> list[list[str]]:
    """The cell texts, as written, of every data row of the report tables with ``attribute="value"``
    (``id="results"``, ``class="scaling"``)."""
    parser = _TableCells(attribute, value)
    parser.feed(html)
    return [row for row in parser.rows if row]


def report_section(html: str, section_id: str) -> str:
    """The inside of the report's ``<section id="section_id">``; fails the test when the page has none."""
    match = re.search(rf'<section id="{section_id}">(.*?)</section>', html, re.S)
    assert match, f"no {section_id} section"
    return match.group(1)


def table_rows(html: str, css_class: str) -> list[list[str]]:
    """:func:`table_cells` of the tables of class ``css_class``, each cell's whitespace collapsed."""
    return [[" ".join(cell.split()) for cell in row] for row in table_cells(html, "class", css_class)]


def svg_charts(html: str) -> list[str]:
    """Every inline SVG chart of ``html``."""
    return re.findall(r"<svg.*?</svg>", html, re.S)


def svg_tooltips(svg: str) -> list[str]:
    """The tooltip of each point (circle) or bar (rect) of a chart, in drawing order."""
    return re.findall(r"<(?:circle|rect)[^>]*><title>([^<]*)</title>", svg)


def svg_legend(svg: str) -> list[str]:
    """The legend entries of a chart, in order."""
    return re.findall(r'class="legend"><title>([^<]*)</title>', svg)


VOID_ELEMENTS = {"meta", "br", "input", "img", "hr", "link", "col", "wbr"}


class _Balance(HTMLParser):
    """Every element closed in order (void elements and self-closed SVG shapes aside)."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.mismatched: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID_ELEMENTS:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if self.open and self.open[-1] == tag:
            self.open.pop()
        else:
            self.mismatched.append(tag)


def well_formed(html: str) -> bool:
    """Whether every element of ``html`` is closed, in order (void elements and self-closed SVG shapes aside)."""
    parser = _Balance()
    parser.feed(html)
    parser.close()
    return not parser.open and not parser.mismatched
