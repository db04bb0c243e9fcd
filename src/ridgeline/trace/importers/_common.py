"""Helpers shared by the importers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ridgeline.errors import RidgelineError


def read_json(path: Path, what: str) -> Any:
    """Parse a whole JSON file; errors name the file and the position."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise RidgelineError(f"{path}: not a valid {what} JSON file ({exc})") from None


def json_objects(path: Path, what: str) -> list[Any]:
    """All JSON values in a file holding one or more, separated by whitespace/newlines
    (vLLM `--append-result` appends objects without making a JSON array)."""
    text = path.read_text(encoding="utf-8")
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
