"""The README and docs stand on their own: every path they point to is inside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
OUTSIDE = re.compile(r"(?<![\w.])\.\./(?:shared|seeds)\b|/work/")


def test_no_document_points_outside_the_repository() -> None:
    problems = []
    for document in DOCUMENTS:
        text = document.read_text()
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                problems.append(f"{document.name}:{number}: {line.strip()}")
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            resolved = (document.parent / target).resolve()
            if (ROOT not in resolved.parents and resolved != ROOT) or not resolved.exists():
                problems.append(f"{document.name}: link {target} leaves the repository or is gone")
    assert not problems, "\n".join(problems)
