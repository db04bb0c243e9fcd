"""The library's floors import downward only (architecture rule 6: commands are a thin shell
over the library). Every import of every module is read, the ones inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "ridgeline"
# Model and data floors: they must not reach up to the tools built on them.
LOW = ("specs", "perf", "theory", "trace", "metrics", "workload", "sim")
HIGH = ("commands", "cli", "calibrate", "bench", "serve", "report", "plan", "advise", "ui")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level ridgeline package) of each ridgeline import in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                 [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        out += [(node.lineno, n.split(".")[1]) for n in names
                if n.startswith("ridgeline.") and n.count(".") >= 1]
    return out


def test_imports_run_down_the_floors() -> None:
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        floor = path.relative_to(SRC).parts[0].removesuffix(".py")
        for line, target in _imports(path):
            if target == "commands" and floor not in ("commands", "cli"):
                wrong.append(f"{path.relative_to(SRC)}:{line}: the library imports commands/")
            if floor in LOW and target in HIGH:
                wrong.append(f"{path.relative_to(SRC)}:{line}: {floor}/ imports {target}/")
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_function_level_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from ridgeline.commands.estimate import x\n")
    assert _imports(f) == [(2, "commands")]
