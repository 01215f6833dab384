"""Every relative link of the documentation resolves: the file it names exists, and so does the heading
its `#anchor` names (GitHub's anchors, which the README, CONTRIBUTING and bench/README are read with;
`mkdocs build --strict`, run by `dev.py docs`, checks the site's own as well).

Fast and offline: links with a scheme (`https:`, `mailto:`) are not followed. Code spans and fenced
blocks are not links. A page that only includes another file (`--8<-- "CHANGELOG.md"`, the snippets
extension of mkdocs.yml) has that file's headings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_PAGES = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "bench/README.md")
PAGES = sorted([*(ROOT / name for name in TOP_PAGES), *(ROOT / "docs").rglob("*.md")])

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)
_SNIPPET = re.compile(r'^--8<--\s+"([^"]+)"\s*$', re.MULTILINE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _text(path: Path) -> str:
    """The page as it is rendered: a snippet line replaced by the file it includes (paths from the root)."""
    text = path.read_text(encoding="utf-8")
    return _SNIPPET.sub(lambda found: (ROOT / found.group(1)).read_text(encoding="utf-8"), text)


def _prose(text: str) -> str:
    """The text without fenced blocks and code spans, where brackets are code, not links."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text in lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a page, with GitHub's -1, -2 ... for repeated headings."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for match in _HEADING.finditer(_FENCE.sub("", text)):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with each relative link of `page`, one line each (empty when all resolve)."""
    prose = _prose(_text(page))  # an included file's links are read from the including page, as on the site
    targets = [m.group(1) for m in _LINK.finditer(prose)] + [m.group(1) for m in _REFERENCE.finditer(prose)]
    problems: list[str] = []
    for target in targets:
        if _SCHEME.match(target) or target.startswith("//"):
            continue
        where, _, anchor = target.partition("#")
        file = (page.parent / where).resolve() if where else page
        label = f"{page.relative_to(root)}: {target}"
        if root not in file.parents and file != root:
            problems.append(f"{label}: points outside the repository")
        elif not file.exists():
            problems.append(f"{label}: {where} does not exist")
        elif anchor and file.suffix == ".md" and anchor not in anchors(_text(file)):
            problems.append(f"{label}: {file.relative_to(root)} has no heading with the anchor #{anchor}")
        elif anchor and file.suffix != ".md":
            problems.append(f"{label}: an anchor into a file that is not markdown")
    return problems


def test_the_pages_checked_include_every_docs_page_and_the_readmes():
    names = {page.relative_to(ROOT).as_posix() for page in PAGES}
    assert {"README.md", "CONTRIBUTING.md", "bench/README.md", "docs/index.md", "docs/cli.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path):
    assert broken_links(page) == []


def test_the_readme_links_into_the_docs():
    linked = {m.group(1).partition("#")[0] for m in _LINK.finditer(_prose((ROOT / "README.md").read_text()))}
    assert {"docs/cli.md", "docs/configuration.md", "docs/clients/claude-code.md", "CONTRIBUTING.md"} <= linked


def test_a_missing_file_a_missing_heading_and_a_link_out_of_the_repository_are_found(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## The `[hub]` table\n\n## Repeated\n\n## Repeated\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#the-hub-table) [ok](other.md#repeated-1) [ok](#page) [web](https://example.com)\n"
        "`[not a link](nowhere.md)`\n\n```\n[not a link](nowhere.md)\n```\n\n"
        "[gone](missing.md) [no heading](other.md#nope) [out](../../outside.md) [self](#absent)\n"
    )
    assert broken_links(page, root=tmp_path) == [
        "docs/page.md: missing.md: missing.md does not exist",
        "docs/page.md: other.md#nope: docs/other.md has no heading with the anchor #nope",
        "docs/page.md: ../../outside.md: points outside the repository",
        "docs/page.md: #absent: docs/page.md has no heading with the anchor #absent",
    ]


def test_anchors_follow_githubs_rules():
    assert slug("Sampling, elicitation and roots") == "sampling-elicitation-and-roots"
    assert slug("`[servers.NAME]`") == "serversname"
    assert slug("Use with [Claude Code](x.md)") == "use-with-claude-code"
