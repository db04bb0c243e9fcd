"""The helper that finds the measured data outside the checkout: the environment variable
wins, else the folder beside the repository; a missing folder skips locally and fails in CI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import shared_data


def test_the_environment_variable_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RIDGELINE_SHARED_DATA", str(tmp_path))
    assert shared_data.shared_data_dir() == tmp_path


def test_default_is_beside_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RIDGELINE_SHARED_DATA", raising=False)
    root = Path(__file__).resolve().parents[1]
    assert shared_data.shared_data_dir() == root.parent / "shared" / "data"


def _run(fn: object) -> None:
    assert callable(fn)
    fn()


def test_missing_data_skips_locally_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.setenv("RIDGELINE_SHARED_DATA", str(tmp_path))
    ran = []

    def probe() -> None:
        ran.append(1)

    monkeypatch.delenv("CI", raising=False)
    local = shared_data.needs_shared_data("absent")(probe)
    assert [m.name for m in getattr(local, "pytestmark", [])] == ["skip"]
    monkeypatch.setenv("CI", "true")
    in_ci = shared_data.needs_shared_data("absent")(probe)
    with pytest.raises(pytest.fail.Exception, match="measured data not found"):
        _run(in_ci)
    (tmp_path / "present").mkdir()
    present = shared_data.needs_shared_data("present")(probe)
    _run(present)
    assert ran == [1]


def test_no_test_hard_codes_the_data_path_or_imports_a_benchmark() -> None:
    wrong = []
    tests = Path(__file__).parent
    for p in sorted(tests.rglob("*.py")):
        if p.name == Path(__file__).name or p.relative_to(tests).parts[0] == "data":
            continue
        text = p.read_text(encoding="utf-8")
        if "/work/shared" in text:
            wrong.append(f"{p.name}: hard-codes /work/shared")
        lines = text.splitlines()
        if any("sys.path" in ln and "benchmarks" in ln for ln in lines) or (
                "spec_from_file_location" in text and "benchmarks" in text):
            wrong.append(f"{p.name}: imports a benchmark script (run it as a subprocess)")
    assert not wrong, wrong
