r"""The YAML subset inference-perf's configs and reports are written in (block mappings,
lists of mappings, scalars), read without PyYAML (used when installed). Shared by the
inference-perf report reader (calibrate) and the load-test config reader (workload).

>>> mini_yaml("load:\n  type: constant\n  stages:\n    - rate: 2\n      duration: 30\n")
{'load': {'type': 'constant', 'stages': [{'rate': 2, 'duration': 30}]}}
"""

from __future__ import annotations

from typing import Any


def _scalar(text: str) -> Any:
    t = text.strip()
    if t in ("null", "~", ""):
        return None
    if t in ("true", "false"):
        return t == "true"
    if t in ("[]", "{}"):
        return [] if t == "[]" else {}
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    return t.strip("'\"")


def mini_yaml(text: str) -> Any:
    """The YAML subset inference-perf and these configs write (block mappings, lists of
    mappings, scalars). PyYAML is used when installed; this keeps it optional."""
    try:
        import yaml

        return yaml.safe_load(text)
    except ImportError:
        pass
    lines = [(len(ln) - len(ln.lstrip(" ")), ln.strip()) for ln in text.splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    pos = 0

    def block(indent: int) -> Any:
        nonlocal pos
        if pos < len(lines) and lines[pos][1].startswith("- "):
            items: list[Any] = []
            while pos < len(lines) and lines[pos][0] == indent and lines[pos][1].startswith("- "):
                ind, body = lines[pos]
                lines[pos] = (ind + 2, body[2:])
                items.append(block(ind + 2))
            return items
        out: dict[str, Any] = {}
        while pos < len(lines) and lines[pos][0] == indent and not lines[pos][1].startswith("- "):
            key, _, rest = lines[pos][1].partition(":")
            pos += 1
            if rest.strip():
                out[key.strip()] = _scalar(rest)
            elif pos < len(lines) and (lines[pos][0] > indent or lines[pos][1].startswith("- ")):
                out[key.strip()] = block(lines[pos][0])
            else:
                out[key.strip()] = None
        return out

    return block(lines[0][0]) if lines else {}
