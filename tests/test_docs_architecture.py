"""docs/architecture.md's "where is X" table names real paths: a newcomer who follows it finds
the file (a moved or renamed file must update the map)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def _where_is_paths(text: str) -> list[str]:
    """Every `code` span in the right-hand column of the "Where is X" table."""
    section = text.split("## Where is X", 1)[1].split("\n## ", 1)[0]
    paths = []
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("|---") and line.count("|") >= 3:
            where = line.rstrip().rstrip("|").rsplit("|", 1)[1]
            paths += re.findall(r"`([^`]+)`", where)
    return paths


def test_the_where_is_table_is_there_and_long() -> None:
    paths = _where_is_paths(DOC.read_text(encoding="utf-8"))
    assert len(paths) >= 40, paths


def test_every_path_in_the_where_is_table_exists() -> None:
    missing = [p for p in _where_is_paths(DOC.read_text(encoding="utf-8"))
               if not (ROOT / p).exists()]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_check_reads_the_right_column() -> None:
    text = "## Where is X\n\n| what | where |\n|---|---|\n| a `x.py` thing | `a/b.py`, `c/` |\n"
    assert _where_is_paths(text) == ["a/b.py", "c/"]


def test_the_map_does_not_point_outside_the_repository() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert "/work/" not in text and "shared/" not in text
