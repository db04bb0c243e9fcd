"""Where the measured data outside the checkout is, for the tests that compare against it.

`shared_data_dir()`: the environment variable `RIDGELINE_SHARED_DATA` if set, else
`<repository root>/../shared/data`. A test whose data is missing is skipped on a developer's
machine and fails under CI (`CI=true`), where a silent skip would hide that nothing ran.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

ENV_SHARED_DATA = "RIDGELINE_SHARED_DATA"
REPO_ROOT = Path(__file__).resolve().parents[1]
F = TypeVar("F", bound=Callable[..., Any])


def shared_data_dir() -> Path:
    """`$RIDGELINE_SHARED_DATA`, else the `shared/data` folder beside the repository."""
    env = os.environ.get(ENV_SHARED_DATA)
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing_reason(path: Path) -> str:
    return f"measured data not found: {path} (set ${ENV_SHARED_DATA} to the data folder)"


def needs_shared_data(*parts: str) -> Callable[[F], F]:
    """Decorate a test that reads `shared_data_dir() / parts`: it runs when the path exists,
    is skipped when it does not, and fails instead under CI."""
    path = shared_data_dir().joinpath(*parts)

    def wrap(fn: F) -> F:
        if path.exists():
            return fn
        if in_ci():
            @functools.wraps(fn)
            def failing(*args: Any, **kwargs: Any) -> None:
                pytest.fail(missing_reason(path))
            return failing  # type: ignore[return-value]
        return pytest.mark.skip(reason=missing_reason(path))(fn)

    return wrap
