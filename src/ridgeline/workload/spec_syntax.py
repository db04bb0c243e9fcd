"""The compact `kind:key=value,key=value` syntax shared by length and arrival specs."""

from __future__ import annotations

from ridgeline.errors import RidgelineError


def split_spec(spec: str, field: str) -> tuple[str, dict[str, str]]:
    """Split `kind:k=v,k=v` into (kind, {k: v}). A bare number is `fixed:<number>`."""
    text = spec.strip()
    if not text:
        raise RidgelineError(f"{field}: empty; expected e.g. 'fixed:256' or 'poisson:rate=8'")
    kind, _, rest = text.partition(":")
    params: dict[str, str] = {}
    if rest:
        for i, part in enumerate(rest.split(",")):
            key, eq, value = part.partition("=")
            if not eq and i == 0 and part.strip():
                # `fixed:256` and `empirical:lengths.txt` carry one positional value.
                params["value"] = part.strip()
                continue
            if not eq or not key.strip() or not value.strip():
                raise RidgelineError(f"{field}: {part!r} in {spec!r} is not key=value")
            if key.strip() in params:  # which one was meant? not a guess to make
                raise RidgelineError(f"{field}: {key.strip()!r} given twice in {spec!r}; "
                                     "allowed: each key once")
            params[key.strip()] = value.strip()
    return kind.strip().lower(), params


def take_float(params: dict[str, str], key: str, field: str, *, default: float | None = None,
               positive: bool = False, nonnegative: bool = False, lo: float | None = None,
               hi: float | None = None) -> float:
    """Pop a float parameter, with a one-line error naming field and key; `lo`/`hi`: the
    sensible range (inclusive)."""
    if key not in params:
        if default is None:
            raise RidgelineError(f"{field}: missing '{key}=' (a number)")
        return default
    raw = params.pop(key)
    try:
        value = float(raw)
    except ValueError:
        raise RidgelineError(f"{field}: {key}={raw!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise RidgelineError(f"{field}: {key}={raw!r} must be finite")
    if positive and value <= 0:
        raise RidgelineError(f"{field}: {key}={raw} must be > 0")
    if nonnegative and value < 0:
        raise RidgelineError(f"{field}: {key}={raw} must be >= 0")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        low = f"{lo:g}" if lo is not None else ("> 0" if positive else ">= 0" if nonnegative
                                                else None)
        if hi is None:
            allowed = f"at least {low}"
        elif low is None:
            allowed = f"at most {hi:g}"
        else:
            allowed = f"{low} to {hi:g}" if lo is not None else f"{low} and at most {hi:g}"
        raise RidgelineError(f"{field}: {key}={raw}; allowed: {allowed}")
    return value


def reject_unknown(params: dict[str, str], field: str, kind: str, allowed: str) -> None:
    """Raise if keys remain that the kind does not take."""
    if params:
        keys = ", ".join(sorted(params))
        raise RidgelineError(f"{field}: {kind} does not take {keys}; allowed: {allowed}")


def check_keys(kind: str, params: dict[str, str], schema: dict[str, tuple[str, ...]],
               field: str, what: str, exclusive: tuple[tuple[str, str], ...] = ()) -> None:
    """The spec's schema, enforced before any value is read: `schema` maps each kind to the
    keys it takes (`value`: the positional one), so a key the kind does not take
    (`diurnal:peak=5,trough=1,rate=3`) is refused, never silently ignored; `exclusive`:
    pairs of keys of which at most one may be given (one would be ignored)."""
    if kind not in schema:
        raise RidgelineError(f"{field}: unknown {what} {kind!r}; allowed: "
                             f"{', '.join(schema)}")
    allowed = schema[kind]
    extra = [k for k in params if k not in allowed]
    if extra:
        raise RidgelineError(f"{field}: {kind} does not take {', '.join(map(_key, extra))}; "
                             f"allowed: {', '.join(map(_key, allowed))}")
    for a, b in exclusive:
        if a in params and b in params:
            raise RidgelineError(f"{field}: {kind} takes {_key(a)} or {_key(b)}, not both "
                                 "(one would be ignored)")


def _key(name: str) -> str:
    return "a positional value" if name == "value" else f"{name}="
