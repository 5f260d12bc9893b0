"""The README and the user guide in docs/ hold together: the README stays short, every page of
the guide can be reached from it, and every relative link (file and #anchor) leads somewhere.

Links are read the way GitHub renders them: `[text](target)` outside code, anchors as GitHub
derives them from headings. Pages that other work adds later may be linked before they exist;
they are listed in FUTURE_PAGES, and only they may be missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 300
# Pages linked from the README that land with other changes; a link to one of them is allowed
# to dangle only while the page does not exist (once it does, it is checked like any other).
FUTURE_PAGES = frozenset(
    {
        DOCS / "exit-codes.md",
        DOCS / "is-the-drop-real.md",
        DOCS / "traces.md",
    }
)

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def _prose(text: str) -> str:
    """`text` without fenced code blocks, so commented shell lines are not headings."""
    return _FENCE.sub("", text)


def links(path: Path) -> list[str]:
    """The link targets of a Markdown file, outside code (fenced or inline)."""
    return _LINK.findall(_INLINE_CODE.sub("", _prose(path.read_text(encoding="utf-8"))))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, links and formatting reduced to their
    text, punctuation dropped (letters, digits, '-', '_' and spaces kept), spaces as '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every #anchor a Markdown file offers (a repeated heading gets -1, -2, ... as on GitHub)."""
    text = path.read_text(encoding="utf-8")
    found: set[str] = set(_HTML_ANCHOR.findall(text))
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(_prose(text)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def relative_links(path: Path) -> Iterator[tuple[str, Path, str]]:
    """(link as written, the file it points to, its #anchor or "") for every link of `path`
    that stays in the repository (no scheme, no mail address)."""
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http:, https:, mailto: ...
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path.resolve()
        yield target, resolved, anchor


def test_readme_is_under_300_lines() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < MAX_README_LINES, f"README.md has {lines} lines: move detail into docs/"


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    reached: set[Path] = set()
    todo = [README.resolve()]
    while todo:
        page = todo.pop()
        for _, target, _ in relative_links(page):
            if target.suffix == ".md" and target.is_file() and target not in reached:
                reached.add(target)
                todo.append(target)
    unreached = [p.relative_to(REPO) for p in pages() if p.resolve() not in reached]
    assert not unreached, f"docs pages no link from README.md leads to: {unreached}"


def test_the_readme_links_the_pages_still_to_come() -> None:
    linked = {target for _, target, _ in relative_links(README)}
    assert {p.resolve() for p in FUTURE_PAGES} <= linked


@pytest.mark.parametrize("path", [README, *pages()], ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path: Path) -> None:
    future = {p.resolve() for p in FUTURE_PAGES}
    broken = []
    for written, target, anchor in relative_links(path):
        if not target.exists():
            if target not in future:
                broken.append(f"{written}: no such file")
            continue
        if anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{written}: no heading with anchor #{anchor} in {target.name}")
    assert not broken, f"{path.relative_to(REPO)}: " + "; ".join(broken)


def test_the_link_reader_finds_what_github_would() -> None:
    sample = (
        'See [a](docs/a.md#Part-One) and [`b`](b.md), [c\nd](c.md "title"), <https://x.org>,\n'
        "`[not](code.md)` and [web](https://example.org).\n\n```sh\n[no](fenced.md)\n# not a"
        " heading\n```\n\n## Part one: `make` + more!\n## Part one: `make` + more!\n"
    )
    text_links = _LINK.findall(_INLINE_CODE.sub("", _prose(sample)))
    assert text_links == ["docs/a.md#Part-One", "b.md", "c.md", "https://example.org"]
    assert slug("Part one: `make` + more!") == "part-one-make--more"
    assert slug("Batch mode at scale (fake Files + Batches API)") == (
        "batch-mode-at-scale-fake-files--batches-api"
    )
    headings = _HEADING.findall(_prose(sample))
    assert headings == ["Part one: `make` + more!", "Part one: `make` + more!"]


def test_anchors_number_repeated_headings(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text('# Top\n\n## Same\n\n## Same\n\n<a id="kept"></a>\n', encoding="utf-8")
    assert anchors(page) == {"top", "same", "same-1", "kept"}
