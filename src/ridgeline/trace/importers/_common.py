"""Helpers shared by the importers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.inputs import load_json, read_text


def read_json(path: Path, what: str) -> Any:
    """Parse a whole JSON file; errors name the file and the position."""
    return load_json(path, f"{what} file")


def json_objects(path: Path, what: str) -> list[Any]:
    """All JSON values in a file holding one or more, separated by whitespace/newlines
    (vLLM `--append-result` appends objects without making a JSON array)."""
    text = read_text(path, f"{what} file")
    dec = json.JSONDecoder()
    out: list[Any] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except RecursionError:
            raise RidgelineError(f"{path}: JSON nested too deeply (Python's parser stops near "
                                 "1,000 levels); allowed: ordinary JSON") from None
        except ValueError as exc:
            line = text.count("\n", 0, i) + 1
            raise RidgelineError(
                f"{path}: line {line}: not valid {what} JSON ({exc.args[0]})"
            ) from None
        out.append(obj)
    return out


def num(x: Any) -> float | None:
    """A finite float, or None (strings like "550" from LLMPerf's json default=str too)."""
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def int_or_none(x: Any) -> int | None:
    v = num(x)
    return round(v) if v is not None and v >= 0 else None


def pick(items: list[Any], select: int | None, what: str, notes: list[str]) -> Any:
    """Choose one run from several; note the choice."""
    if not items:
        raise RidgelineError(f"no {what} found in the file")
    idx = 0 if select is None else select
    if not -len(items) <= idx < len(items):
        raise RidgelineError(f"--select: got {idx}; allowed: 0..{len(items) - 1} "
                             f"({len(items)} {what}s in the file)")
    if len(items) > 1:
        notes.append(f"file holds {len(items)} {what}s; imported #{idx % len(items)} "
                     "(choose another with --select N)")
    return items[idx]


def _bad(path: Path, where: str, field: str, x: Any, allowed: str) -> RidgelineError:
    shown = repr(x) if len(repr(x)) <= 40 else repr(x)[:37] + "..."
    return RidgelineError(f"{path}: {where}: field '{field}': got {shown}; allowed: {allowed}")


def checked_num(x: Any, path: Path, where: str, field: str, *, minimum: float | None = 0.0,
                allowed: str = "a finite number >= 0") -> float | None:
    """A number from a peer's file, or None when absent (null). A value that is not a
    finite number (a string like "abc", a list, NaN) or is below `minimum` (a negative
    latency) is an error naming the file, the record and the field: importing it would
    give wrong metrics that look right."""
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, int | float | str):
        raise _bad(path, where, field, x, allowed)
    try:
        v = float(x)
    except ValueError:
        raise _bad(path, where, field, x, allowed) from None
    if not math.isfinite(v) or (minimum is not None and v < minimum):
        raise _bad(path, where, field, x, allowed)
    return v


def checked_count(x: Any, path: Path, where: str, field: str) -> int | None:
    """A token count (integer >= 0) or None when absent; anything else is an error."""
    v = checked_num(x, path, where, field, allowed="a whole number >= 0")
    if v is None:
        return None
    if v != round(v):
        raise _bad(path, where, field, x, "a whole number >= 0")
    return round(v)


def check_order(first: float | None, later: float | None, path: Path, where: str,
                first_name: str, later_name: str, slack_s: float = 1e-6) -> None:
    """`later` must not precede `first` (e.g. TTFT <= E2E): an inverted pair is an error."""
    if first is not None and later is not None and later < first - slack_s:
        raise RidgelineError(f"{path}: {where}: field '{later_name}' ({later:g} s) is "
                             f"before '{first_name}' ({first:g} s); allowed: "
                             f"{first_name} <= {later_name}")
