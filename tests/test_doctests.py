"""Every module's docstring examples run, and pass: a docstring that shows a call shows what
the call really returns. (ELLIPSIS and NORMALIZE_WHITESPACE are on, as for a reader.)"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import ridgeline

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
# The examples found when this test was written: fewer means examples were lost (or a module
# stopped importing), not that the docs got better.
MIN_EXAMPLES = 240


def _modules() -> list[str]:
    return ["ridgeline"] + [m.name for m in pkgutil.walk_packages(ridgeline.__path__,
                                                                   "ridgeline.")]


def _tests(name: str) -> list[doctest.DocTest]:
    mod = importlib.import_module(name)
    return [t for t in doctest.DocTestFinder().find(mod, name) if t.examples]


MODULES_WITH_EXAMPLES = [n for n in _modules() if _tests(n)]


@pytest.mark.parametrize("name", MODULES_WITH_EXAMPLES)
def test_docstring_examples_pass(name: str) -> None:
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out: list[str] = []
    for t in _tests(name):
        runner.run(t, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(out)


def test_the_examples_are_all_found() -> None:
    found = sum(len(t.examples) for n in MODULES_WITH_EXAMPLES for t in _tests(n))
    assert found >= MIN_EXAMPLES, f"{found} docstring examples, fewer than {MIN_EXAMPLES}"
    assert len(MODULES_WITH_EXAMPLES) >= 80
