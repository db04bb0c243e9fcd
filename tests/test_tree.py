"""tests/ mirrors src/ridgeline/: the test of a module is found by its path.

A test of `ridgeline.<package>` lives in `tests/<package>/` (`tests/commands/` holds the
tests of the installed command as a user runs it). The top level keeps only the checks that
cut across packages (listed below by what they check) and the tests of ridgeline's top-level
modules (`tests/test_advise.py` for `src/ridgeline/advise.py`). A new test file at the top
fails here: put it in the folder of the package it exercises.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src" / "ridgeline"

# Checks that read the whole tree or every package at once, and the test of the tests' own helper.
CROSS_CUTTING = frozenset({
    "test_layers.py",            # import floors, circles, typer/rich, function sizes
    "test_tree.py",              # this file: where tests live
    "test_no_citations.py",      # no ticket or rule-number citations in src/
    "test_package_api.py",       # every package's __all__
    "test_docs_architecture.py",  # docs/architecture.md names real paths
    "test_doctests.py",          # every module's doctests
    "test_readers_hypothesis.py",  # hostile inputs against every reader at once
    "test_pinned_internals.py",  # the aiohttp/uvicorn internals bench and serve rely on
    "test_shared_data.py",       # tests/shared_data.py, and no test hard-codes the data path
})
# Folders beside the package folders that hold no tests.
NOT_PACKAGES = frozenset({"data", "__pycache__"})


def _packages() -> set[str]:
    return {p.parent.name for p in SRC.glob("*/__init__.py")}


def _top_level_modules() -> set[str]:
    return {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}


def test_every_test_file_lives_in_its_package_folder() -> None:
    packages = _packages()
    allowed_top = CROSS_CUTTING | {f"test_{m}.py" for m in _top_level_modules()}
    wrong = []
    for path in sorted(TESTS.rglob("test_*.py")):
        rel = path.relative_to(TESTS)
        if rel.parts[0] in NOT_PACKAGES:
            continue
        if len(rel.parts) == 1:
            if rel.name not in allowed_top:
                wrong.append(f"{rel}: a top-level test; move it to tests/<package>/ of the "
                             f"package it exercises (or list it in CROSS_CUTTING with why)")
        elif len(rel.parts) != 2 or rel.parts[0] not in packages:
            wrong.append(f"{rel}: tests/{rel.parts[0]}/ is not a package of src/ridgeline "
                         f"({', '.join(sorted(packages))})")
    assert not wrong, "\n".join(wrong)


def test_every_test_folder_is_a_package_so_basenames_may_repeat() -> None:
    # Without __init__.py pytest's default import mode imports each test file by its base name
    # alone, and two folders holding a `test_replay.py` would collide.
    missing = [d.name for d in TESTS.iterdir()
               if d.is_dir() and d.name not in NOT_PACKAGES and not (d / "__init__.py").exists()]
    assert (TESTS / "__init__.py").exists()
    assert not missing, missing


def test_the_cross_cutting_set_names_real_files() -> None:
    absent = sorted(n for n in CROSS_CUTTING if not (TESTS / n).exists())
    assert not absent, absent
