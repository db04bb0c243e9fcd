"""Comments, docstrings and messages in src/ give their reason in words (or link into docs/),
never a ticket number or a numbered rule: "issue 23" means nothing to a reader of the code.
Links into docs/architecture.md must name a heading that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ridgeline"
CITATION = re.compile(r"\bissues? #?[0-9]+|\bseeds? 0[0-9]{2}|\brules? [0-9]+|"
                      r"(?-i:docs/ARCHITECTURE)\b", re.IGNORECASE)
ANCHOR = re.compile(r"docs/architecture\.md#([a-z0-9-]+)")


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*") if p.suffix in (".py", ".c", ".html", ".js"))


def find_citations(text: str) -> list[str]:
    return [m.group(0) for m in CITATION.finditer(text)]


def test_no_ticket_or_rule_citations_in_src() -> None:
    found = []
    for path in _sources():
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{i}: {c}" for c in find_citations(line)]
    assert not found, "cite the reason, not the ticket:\n" + "\n".join(found)


def test_the_pattern_catches_the_forms_seen() -> None:
    text = ("(issue 23) Issue 9, seed 004's table, Seed 000 §4, rule 7, Rules 2-3, "
            "see docs/ARCHITECTURE")
    assert len(find_citations(text)) == 7
    assert not find_citations("Little's law; the seed 42 run; 2 rules; issue-free; SEED_003_M")


def _anchors(md: str) -> set[str]:
    out = set()
    for line in md.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^a-z0-9 -]", "", title).replace(" ", "-"))
    return out


def test_links_into_the_architecture_page_resolve() -> None:
    anchors = _anchors((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    broken = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        broken += [f"{path.relative_to(ROOT)}: #{a}" for a in ANCHOR.findall(text)
                   if a not in anchors]
    assert "one-step-time-function" in anchors
    assert not broken, "\n".join(broken)
