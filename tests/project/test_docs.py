"""The README and the docs/ pages hold together: every relative link (images included) reaches a file, every
anchor a heading, every page is reachable from the README or docs/index.md, the README stays short, and every
pointer of the code to a docs section (``(docs/measured.md, 'Memory')``) names a heading of that page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.project import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
INDEX = DOCS / "index.md"
README_MAX_LINES = 150

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
MARKDOWN_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=\"([^\"]+)\"", re.IGNORECASE)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
SECTION_POINTER = re.compile(r"docs/([\w.-]+\.md), '([^'\n]+)'")
SRC = REPO / "src" / "hwregress"


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(path: Path) -> str:
    """The page's text without fenced code blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))


def link_targets(path: Path) -> list[str]:
    """Every link target of a Markdown page: ``[text](target)``, ``![alt](target)``, ``<a href>``, ``<img src>``."""
    text = prose(path)
    return MARKDOWN_LINK.findall(text) + HTML_LINK.findall(text)


def relative_links(path: Path) -> list[tuple[str, Path, str]]:
    """(link as written, file it resolves to, anchor or "") of every link that is not a URL (http:, mailto:, ...)."""
    links = []
    for target in link_targets(path):
        if SCHEME.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path.resolve()
        links.append((target, resolved, anchor))
    return links


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens, repeats -1, -2."""
    anchors: set[str] = set()
    counts: dict[str, int] = {}
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).replace("`", "").lower()).replace(" ", "-")
        seen = counts.get(slug, 0)
        counts[slug] = seen + 1
        anchors.add(slug if seen == 0 else f"{slug}-{seen}")
    return anchors


def headings(path: Path) -> set[str]:
    """The text of every heading of a Markdown page (outside fenced code), backticks dropped."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {match.group(1).replace("`", "") for match in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.MULTILINE)}


def section_pointers(text: str) -> list[tuple[str, str]]:
    """(page, heading) of every ``docs/<page>.md, '<heading>'`` in ``text``, each written on one line."""
    return SECTION_POINTER.findall(text)


def name(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def test_readme_has_at_most_150_lines():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into a docs/ page and link it"


FIGURE = re.compile(r"\*\*([^*\n]*\d[^*\n]*)\*\*")  # a bold span with a digit: a figure the README quotes
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
DATA = DOCS / "data"


def figures_without_data(page: Path, data: Path = DATA) -> list[str]:
    """Each figure of ``page`` (a bold span with a digit) whose paragraph links no file under ``data``, or one of
    whose numbers no linked data file holds (a data number rounded to the figure's decimals counts: 0.559 is 0.56)."""
    problems = []
    for paragraph in re.split(r"\n\s*\n", FENCE.sub("", page.read_text(encoding="utf-8"))):
        figures = FIGURE.findall(paragraph)
        if not figures:
            continue
        files = [(page.parent / target.partition("#")[0]).resolve() for target in MARKDOWN_LINK.findall(paragraph)
                 if (page.parent / target.partition("#")[0]).resolve().parent == data.resolve()]
        if not files:
            problems += [f"{figure!r}: its paragraph links no file under docs/data/" for figure in figures]
            continue
        held = [value for path in files if path.is_file() for value in NUMBER.findall(path.read_text(encoding="utf-8"))]
        for figure in figures:
            for number in NUMBER.findall(figure):
                if not any(_rounds_to(value, number) for value in held):
                    problems.append(f"{figure!r}: {number} is in none of {[path.name for path in files]}")
    return problems


def _rounds_to(value: str, figure: str) -> bool:
    from decimal import ROUND_HALF_UP, Decimal

    value, figure = value.replace(",", ""), figure.replace(",", "")
    places = Decimal(1).scaleb(-len(figure.partition(".")[2]))
    return Decimal(value).quantize(places, rounding=ROUND_HALF_UP) == Decimal(figure)


def test_every_figure_the_readme_quotes_is_in_the_data_file_it_links():
    assert figures_without_data(README) == []


def test_a_figure_without_its_data_fails_the_check(tmp_path):
    (tmp_path / "docs" / "data").mkdir(parents=True)
    page = tmp_path / "README.md"
    page.write_text("Unchanged sessions gave **0 of 42**.\n\nA run ([data](docs/data/run.md)) gave **0.56x**.\n",
                    encoding="utf-8")
    (tmp_path / "docs" / "data" / "run.md").write_text("ratio 0.571\n", encoding="utf-8")
    data = tmp_path / "docs" / "data"
    assert figures_without_data(page, data) == ["'0 of 42': its paragraph links no file under docs/data/",
                                                "'0.56x': 0.56 is in none of ['run.md']"]
    (data / "run.md").write_text("ratio 0.559\n", encoding="utf-8")
    assert figures_without_data(page, data)[1:] == []


def test_the_link_finder_sees_links_and_images_but_not_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("See [a](a.md#x), ![b](img/b.png \"t\") and <img src=\"c.svg\">; [web](https://x.org).\n"
                    "`[not](code.md)`\n```\n[not](fenced.md)\n```\n", encoding="utf-8")
    assert link_targets(page) == ["a.md#x", "img/b.png", "https://x.org", "c.svg"]
    assert [(written, anchor) for written, _, anchor in relative_links(page)] == [("a.md#x", "x"), ("img/b.png", ""),
                                                                                  ("c.svg", "")]


def test_heading_anchors_follow_github():
    assert heading_anchors(DOCS / "measured.md") >= {"measured-figures", "measured-on-an-h100",
                                                     "measured-on-the-development-machine-cpu-only"}


def test_section_pointers_are_read_on_one_line():
    assert section_pointers("x (docs/measured.md, 'CPU ceilings'), docs/running.md, 'Tier\n# times'") == [
        ("measured.md", "CPU ceilings")]


@pytest.mark.parametrize("module", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_every_pointer_of_the_code_names_a_docs_heading(module):
    text = module.read_text(encoding="utf-8")
    broken = [f"docs/{page}, '{heading}'" for page, heading in section_pointers(text)
              if not (DOCS / page).is_file() or heading not in headings(DOCS / page)]
    wrapped = [line.strip() for line in text.splitlines() if re.search(r"docs/[\w.-]+\.md, '[^']*$", line)]
    assert broken == [] and wrapped == [], f"{name(module)}: pointers to no docs heading: {broken}, wrapped: {wrapped}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: name(p))
def test_every_relative_link_reaches_a_file(page):
    broken = [f"{written} -> {name(target)}" for written, target, _ in relative_links(page) if not target.exists()]
    assert not broken, f"{name(page)}: links to missing files: {broken}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: name(p))
def test_every_anchor_names_a_heading(page):
    broken = [written for written, target, anchor in relative_links(page)
              if anchor and target.suffix == ".md" and target.exists() and anchor not in heading_anchors(target)]
    assert not broken, f"{name(page)}: anchors that name no heading: {broken}"


def test_every_docs_page_is_linked_from_the_readme_or_the_index():
    linked = {target for page in (README, INDEX) for _, target, _ in relative_links(page)}
    unlinked = [name(page) for page in sorted(DOCS.glob("*.md")) if page.resolve() not in linked and page != INDEX]
    assert INDEX.resolve() in linked, "README.md does not link docs/index.md"
    assert not unlinked, f"docs pages linked from neither README.md nor docs/index.md: {unlinked}"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: name(p))
def test_every_docs_page_starts_with_a_title_and_a_sentence(page):
    lines = page.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# "), f"{name(page)}: the first line is not a '# Title'"
    assert len(lines) > 2 and not lines[1].strip() and lines[2].strip() and not lines[2].startswith("#"), \
        f"{name(page)}: the title is not followed by a sentence saying what the page covers"


def quick_start_commands() -> list[str]:
    """The lines of the fenced bash block under the README's "## Quick start" heading."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Quick start")
    opening = next(i for i in range(start, len(lines)) if lines[i].startswith("```bash"))
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].startswith("```"))
    return lines[opening + 1:closing]


def test_the_quick_start_is_the_main_job_then_the_self_tests_and_ci_runs_it_from_the_readme():
    install_and_run, self_tests = quick_start_commands()
    assert '-e ".[test,llm]"' in install_and_run and install_and_run.endswith("python -m pytest -m cpu")
    assert self_tests == "python -m pytest tests -n 2"
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "/^## Quick start/" in ci and "README.md" in ci, ".ci/run must take the quick start from README.md"
