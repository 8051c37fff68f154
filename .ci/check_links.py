"""Every link of README.md and docs/ resolves inside the repository.

A relative link must name a file or folder that exists (its #anchor, when it has one, must be a
heading of the target page); a link that leaves the repository (http:, https:, mailto:, or a
path above the checkout) is refused, because a clone must read whole without the network.
Exit code 1 lists every broken link, file:line first.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|^\s*\[[^\]]+\]:\s*(\S+)", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (GitHub's rule: lower case, drop
    punctuation, spaces to hyphens)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(h) for h in HEADING.findall(text)}


def problems(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    masked = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found = []
    for m in LINK.finditer(masked):
        target = m.group(1) or m.group(2)
        line = masked.count("\n", 0, m.start()) + 1
        where = f"{page.relative_to(ROOT)}:{line}"
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
            found.append(f"{where}: {target} leaves the repository")
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if ROOT not in dest.parents and dest != ROOT:
            found.append(f"{where}: {target} points outside the checkout")
        elif not dest.exists():
            found.append(f"{where}: {target} does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            found.append(f"{where}: {target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return found


def main() -> int:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = [p for page in pages for p in problems(page)]
    links = sum(len(LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8")))) for page in pages)
    for line in broken:
        print(line)
    print(f"links: {links} in {len(pages)} pages, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
