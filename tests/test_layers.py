"""The library's structure, checked (docs/architecture.md#layers-what-may-import-what).

Floors import downward only, commands are a thin shell over the library, no module or package
imports itself in a circle, typer and rich stay in the commands and the renderers, and imports
hidden inside library functions do not grow in number. Every import of every module is read,
the ones inside functions too; imports under `if TYPE_CHECKING:` never run, so they are left out.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "ridgeline"
# The base floor: specs, formulas, workloads, the trace format and the shared helpers; it
# imports no model. trace/ (schema, writer, reader, importers of other tools' results) needs
# only errors and inputs: it is the record of a run, which a workload replays (`--arrival
# replay:` of a trace, `--workload` of a GuideLLM or AIPerf result) and metrics/ analyzes.
BASE = ("errors", "inputs", "jsonsafe", "sizes", "tokenizers", "specs", "theory", "trace",
        "workload")
MODEL = ("perf", "metrics", "sim")
# Model and data floors: they must not reach up to the tools built on them.
LOW = ("specs", "perf", "theory", "trace", "metrics", "workload", "sim")
HIGH = ("commands", "cli", "calibrate", "bench", "serve", "report", "plan", "advise", "ui")
# Modules outside commands/ and cli.py that may import rich: they render tables or live
# progress for the terminal. The report/ ones are the output-format layer (tables.py: the
# page each command prints to, in the format asked) and the text renderers of estimate,
# bench, calibrate and sweep results that print through it.
RICH_ALLOWED = frozenset({
    "bench/progress.py", "bench/rate_sweep.py", "bench/summary.py",
    "calibrate/real_loop.py",
    "metrics/compare.py", "metrics/render.py",
    "report/bench_text.py", "report/calibrate_text.py", "report/estimate_text.py",
    "report/progress.py", "report/sweep_table.py", "report/tables.py",
})
# Ridgeline imports inside library functions (outside commands/ and cli.py, where they keep
# start-up short and tests/commands/test_cli_startup.py measures it): none, except these, each
# kept off the default start-up path of simulate/serve/plan, which that test pins.
FUNCTION_LEVEL_IMPORTS_ALLOWED = {
    # the calibration profile's pydantic models load only when a profile is given
    "sim/step_model.py": "ridgeline.sim.calibrated_profile",
    # the replay readers (msgspec, other tools' result importers) load only for a replay file
    "workload/arrivals.py": "ridgeline.workload.timed_trace_reader",
}
# The longest a function may be, in lines from its `def` to its last line (decorators left
# out): past it, a function holds more than one idea.
MAX_FUNCTION_LINES = 150


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _walk_imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import node outside `if TYPE_CHECKING:` blocks, with whether it sits inside a
    function."""
    out: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub, in_function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append((child, in_function))
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda))
            visit(child, inner)

    visit(tree, False)
    return out


def _imported_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        if not node.module or node.level:
            return []
        return [f"{node.module}.{a.name}" for a in node.names] + [node.module]
    return [a.name for a in node.names]


def _resolve(name: str) -> str | None:
    """The ridgeline module a dotted name lives in (its longest module prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rsplit(".", 1)[0] if "." in name else ""
    return None


@functools.cache
def _module_imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, imported ridgeline module, inside a function) for each import in the file."""
    out = []
    for node, in_function in _walk_imports(ast.parse(path.read_text(encoding="utf-8"))):
        targets = {t for n in _imported_names(node) if n.startswith("ridgeline")
                   if (t := _resolve(n)) is not None}
        # `from ridgeline.x import y`: y is a submodule or a name in x; keep the most specific
        for t in sorted(targets):
            if not any(o != t and o.startswith(t + ".") for o in targets):
                out.append((node.lineno, t, in_function))
    return out


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level ridgeline package) of each ridgeline import in the file."""
    return [(line, mod.split(".")[1]) for line, mod, _ in _module_imports(path)
            if mod.count(".") >= 1]


def _graph() -> dict[str, set[str]]:
    return {m: {t for _, t, _ in _module_imports(p) if t != m and t != "ridgeline"}
            for m, p in MODULES.items()}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def _package(module: str) -> str:
    """The package floor a module belongs to; cli.py is part of the command shell."""
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else parts[0]
    return "commands" if name == "cli" else name


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


def test_the_base_floor_imports_no_model() -> None:
    wrong = [f"{m} imports {t}" for m, targets in _graph().items() for t in targets
             if _package(m) in BASE and _package(t) in MODEL]
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_itself_in_a_circle() -> None:
    cycles = _cycles(_graph())
    assert not cycles, ("import circles (move the shared piece to its own module):\n"
                        + "\n".join(" <-> ".join(c) for c in cycles))


def test_no_package_imports_itself_in_a_circle() -> None:
    pkg_edges: dict[str, set[str]] = {}
    for m, targets in _graph().items():
        for t in targets:
            if _package(m) != _package(t):
                pkg_edges.setdefault(_package(m), set()).add(_package(t))
    cycles = _cycles(pkg_edges)
    assert not cycles, "package circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _third_party_imports(path: Path, name: str) -> list[int]:
    lines = []
    for node, _ in _walk_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            continue
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
            [a.name for a in node.names]
        if any(n == name or n.startswith(name + ".") for n in names):
            lines.append(node.lineno)
    return lines


def test_typer_only_in_the_command_shell() -> None:
    wrong = [f"{p.relative_to(SRC)}:{line}" for p in sorted(SRC.rglob("*.py"))
             if p.relative_to(SRC).parts[0] not in ("commands", "cli.py")
             for line in _third_party_imports(p, "typer")]
    assert not wrong, "typer outside commands/ and cli.py:\n" + "\n".join(wrong)


def test_rich_only_in_the_shell_and_the_renderers() -> None:
    wrong = []
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC)
        if rel.parts[0] in ("commands", "cli.py") or rel.as_posix() in RICH_ALLOWED:
            continue
        wrong += [f"{rel}:{line}" for line in _third_party_imports(p, "rich")]
    assert not wrong, "rich outside the shell and the renderers:\n" + "\n".join(wrong)
    assert all((SRC / f).is_file() for f in RICH_ALLOWED), "RICH_ALLOWED names a missing file"


def test_no_function_level_imports_outside_the_commands() -> None:
    found = [(p.relative_to(SRC).as_posix(), line, target) for p in sorted(SRC.rglob("*.py"))
             if p.relative_to(SRC).parts[0] not in ("commands", "cli.py")
             for line, target, inside in _module_imports(p) if inside]
    wrong = [f"{path}:{line} imports {target}" for path, line, target in found
             if not target.startswith(FUNCTION_LEVEL_IMPORTS_ALLOWED.get(path, "\0"))]
    assert not wrong, ("ridgeline imports inside library functions (import at the top of the "
                       "module; lazy imports for start-up belong in commands/):\n"
                       + "\n".join(wrong))
    assert len(found) <= len(FUNCTION_LEVEL_IMPORTS_ALLOWED)


def test_the_check_sees_function_level_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from ridgeline.commands.estimate import x\n")
    assert _imports(f) == [(2, "commands")]
    assert _module_imports(f) == [(2, "ridgeline.commands.estimate", True)]


def test_the_check_skips_type_checking_blocks_and_finds_cycles(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                 "    from ridgeline.specs.model import ModelSpec\n"
                 "import ridgeline.perf.ops\n")
    assert _module_imports(f) == [(4, "ridgeline.perf.ops", False)]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _long_functions(path: Path, limit: int) -> list[tuple[str, int]]:
    """(name, lines) of every function or method in `path` longer than `limit` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > limit]


def test_no_function_is_longer_than_the_limit() -> None:
    long = [f"{p.relative_to(SRC)}::{name} ({lines} lines)" for p in MODULES.values()
            for name, lines in _long_functions(p, MAX_FUNCTION_LINES)]
    assert not long, (f"functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}; split "
                      "them (option aliases at module level, helpers for natural units)")


def test_the_length_check_counts_from_def_to_the_last_line(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    # a decorated method of 3 + 148 lines: 151 in all; its decorator does not count
    f.write_text("class C:\n    @staticmethod\n    def long(\n        x: int,\n    ) -> None:\n"
                 + "        x += 1\n" * 148 + "\n\ndef short() -> None:\n    pass\n")
    assert _long_functions(f, 150) == [("long", 151)]
    assert _long_functions(f, 151) == []
