"""The README is a front door and docs/ holds the rest: the README stays short, every page in
docs/ is reachable from it, and no relative link in either points at nothing (a file that moved,
a heading that was renamed)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _prose(text: str) -> str:
    """The text outside code: a link written inside a code sample is not a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _links(page: Path) -> list[str]:
    return LINK.findall(_prose(page.read_text()))


def _anchors(page: Path) -> set[str]:
    """Heading anchors as GitHub makes them: lower case, punctuation dropped, spaces to
    hyphens, a repeated heading numbered -1, -2 ..."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_the_readme_is_a_front_door_under_250_lines():
    lines = len(README.read_text().splitlines())
    assert lines < MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_every_relative_link_in_the_readme_and_docs_points_at_something():
    broken = []
    for page in _pages():
        for target in _links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in _links(README)}
    missing = [page.name for page in sorted(DOCS.glob("*.md")) if page.resolve() not in linked]
    assert not missing, f"README.md links no page for {missing}"


def test_the_readme_shows_one_screenshot_that_is_small():
    images = [target for target in _links(README) if target.endswith(".png")]
    assert images == ["docs/img/dashboard.png"]
    assert (ROOT / images[0]).stat().st_size < 250_000


CITATION = re.compile(r"docs/design\.md rule (\d+)")
RULE = re.compile(r"^### Rule (\d+): ", re.MULTILINE)
CITING = ["portal", "instances", "billing", "audit", "demo", "tests", "templates", "static"]


def test_every_house_rule_the_code_cites_exists():
    rules = {int(number) for number in RULE.findall((DOCS / "design.md").read_text())}
    assert rules == set(range(1, len(rules) + 1)), "house rules are numbered 1, 2, 3 ..."
    cited = {}
    for folder in CITING:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".py", ".html", ".js", ".css"} and path.is_file():
                for number in CITATION.findall(path.read_text(errors="replace")):
                    cited.setdefault(int(number), path.relative_to(ROOT))
    unknown = {number: str(path) for number, path in cited.items() if number not in rules}
    assert not unknown, f"citations of rules docs/design.md does not have: {unknown}"


def test_the_link_checker_sees_what_it_should(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Rule 3: One `transition` function\n\n## Spot prices\n\n## Spot prices\n\n"
        "[a](other.md#x) ![b](img/x.png) `[not](a-link.md)`\n\n```\n[nor](this.md)\n```\n"
    )
    assert _links(page) == ["other.md#x", "img/x.png"]
    assert _anchors(page) == {"rule-3-one-transition-function", "spot-prices", "spot-prices-1"}
