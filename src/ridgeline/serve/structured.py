"""Structured output: synthetic tool calls (`tools`, `tool_choice`) and JSON content
(`response_format` json_object / json_schema), valid for the schema they were asked for.

A value is built from a JSON schema deterministically (seeded by the request): objects
carry every declared property (so every required one), arrays `minItems` items (at least
one), strings meet `minLength`/`maxLength` (or are an `enum`/`const` member), numbers and
integers lie within `minimum`/`maximum` (exclusive bounds and `multipleOf` honoured for
integers), booleans, nulls; `anyOf`/`oneOf` take their first branch, `allOf` its merged
object branches, and local `$ref`s (`#/$defs/...`, `#/definitions/...`) are followed.

The text is streamed in pieces of up to 4 characters, one piece per output token; when
max_tokens cuts it, the JSON is cut too (finish_reason "length"), as a real model's would be.

>>> synth_value({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3,
...              "maximum": 3}, "on": {"const": True}}, "required": ["n"]}, 0)
{'n': 3, 'on': True}
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

_PIECE = re.compile(r".{1,4}", re.S)
MAX_DEPTH = 12   # a recursive schema ($ref to itself) stops here with an empty value
MAX_ITEMS = 1000        # largest minItems / minLength a schema may ask for


class SchemaError(ValueError):
    """A schema (or tool definition) the emulator cannot produce a value for."""


def json_pieces(text: str) -> tuple[str, ...]:
    return tuple(_PIECE.findall(text)) or ("",)


def _resolve(schema: Any, root: dict[str, Any]) -> Any:
    seen = 0
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        ref = schema["$ref"]
        if not ref.startswith("#/") or seen > 32:
            raise SchemaError(f"$ref {ref!r}: only local references are supported")
        node: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise SchemaError(f"$ref {ref!r}: not found in the schema")
            node = node[part]
        schema = node
        seen += 1
    return schema


def synth_value(schema: Any, seed: int, root: dict[str, Any] | None = None,
                depth: int = 0) -> Any:
    """A value valid for `schema` (see the module docstring for what is honoured)."""
    if root is None:
        root = schema if isinstance(schema, dict) else {}
    if depth > 4 * MAX_DEPTH:
        raise SchemaError("the schema nests too deep (a reference cycle?)")
    schema = _resolve(schema, root)
    if schema is True or schema is None or schema == {}:
        return "value"
    if not isinstance(schema, dict):
        raise SchemaError("a schema must be an object")
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][seed % len(schema["enum"])]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return synth_value(schema[key][0], seed, root, depth + 1)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        merged: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
        for part in schema["allOf"]:
            part = _resolve(part, root)
            if isinstance(part, dict):
                merged["properties"].update(part.get("properties") or {})
                merged["required"] += list(part.get("required") or [])
        return synth_value(merged, seed, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else (
            "string")
    rng = np.random.default_rng([seed, depth])
    if kind == "object":
        if depth >= MAX_DEPTH:
            return {}
        props = schema.get("properties") or {}
        out = {name: synth_value(sub, seed + i, root, depth + 1)
               for i, (name, sub) in enumerate(props.items())}
        for name in schema.get("required") or []:
            out.setdefault(name, "value")
        return out
    if kind == "array":
        if depth >= MAX_DEPTH:
            return []
        n = max(1, int(schema.get("minItems", 1)))
        if n > MAX_ITEMS:
            raise SchemaError(f"minItems: at most {MAX_ITEMS} supported")
        if "maxItems" in schema:
            n = min(n, int(schema["maxItems"]))
        items = schema.get("items", {})
        if isinstance(schema.get("prefixItems"), list):
            pre = schema["prefixItems"]
            return [synth_value(s, seed + i, root, depth + 1) for i, s in enumerate(pre)]
        return [synth_value(items, seed + i, root, depth + 1) for i in range(n)]
    if kind == "string":
        words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")
        text = words[int(rng.integers(len(words)))]
        lo = int(schema.get("minLength", 0))
        if lo > MAX_ITEMS:
            raise SchemaError(f"minLength: at most {MAX_ITEMS} supported")
        hi = int(schema.get("maxLength", max(lo, len(text))))
        text = (text * (lo // max(len(text), 1) + 1))[: max(lo, min(len(text), hi))]
        return text
    if kind == "integer":
        return _integer(schema, int(rng.integers(0, 100)))
    if kind == "number":
        low_raw = schema.get("minimum", schema.get("exclusiveMinimum"))
        low = float(low_raw) if low_raw is not None else 0.0
        high_raw = schema.get("maximum", schema.get("exclusiveMaximum"))
        high = float(high_raw) if high_raw is not None else low + 100.0
        if high < low:
            raise SchemaError(f"number: maximum {high} < minimum {low}")
        return low + (high - low) * (0.25 + 0.5 * float(rng.random()))
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "null":
        return None
    raise SchemaError(f"type {kind!r} is not a JSON schema type")


def _integer(schema: dict[str, Any], draw: int) -> int:
    lo = schema.get("minimum")
    if "exclusiveMinimum" in schema:
        lo = int(np.floor(float(schema["exclusiveMinimum"]))) + 1
    hi = schema.get("maximum")
    if "exclusiveMaximum" in schema:
        hi = int(np.ceil(float(schema["exclusiveMaximum"]))) - 1
    lo = int(np.ceil(float(lo))) if lo is not None else 0
    hi = int(np.floor(float(hi))) if hi is not None else lo + 100
    step = int(schema.get("multipleOf", 1)) or 1
    first = -(-lo // step) * step
    if first > hi:
        raise SchemaError(f"integer: no multiple of {step} in [{lo}, {hi}]")
    return first + step * (draw % ((hi - first) // step + 1))


@dataclass(frozen=True)
class ToolCall:
    """One synthetic call: OpenAI's tool_calls entry."""

    call_id: str
    name: str
    arguments: str

    def entry(self, arguments: str | None = None) -> dict[str, Any]:
        return {"id": self.call_id, "type": "function", "function": {
            "name": self.name, "arguments": self.arguments if arguments is None
            else arguments}}


def tool_call(tools: Any, tool_choice: Any, seed: int) -> ToolCall | None:
    """The call a request with `tools` gets, or None (tool_choice "none", or no tools).
    "auto" and "required" call the first tool; {"type": "function", "function": {"name"}}
    calls that one. Raises SchemaError for malformed tools or an unknown named tool."""
    if not tools or tool_choice == "none":
        return None
    if not isinstance(tools, list):
        raise SchemaError("tools: must be a list")
    functions = []
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise SchemaError("tools: each tool needs function.name")
        functions.append(fn)
    chosen = functions[0]
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        match = [f for f in functions if f["name"] == name]
        if not match:
            raise SchemaError(f"tool_choice: no tool named {name!r}")
        chosen = match[0]
    elif tool_choice not in (None, "auto", "required"):
        raise SchemaError(f"tool_choice: got {tool_choice!r}; allowed: none, auto, "
                          "required or a named function")
    params = chosen.get("parameters") or {"type": "object", "properties": {}}
    args = synth_value(params, seed)
    return ToolCall("chatcmpl-tool-" + uuid.uuid4().hex[:24], chosen["name"],
                    json.dumps(args))


def json_content(response_format: Any, seed: int) -> str | None:
    """The JSON text for a response_format, or None for text / no format."""
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return json.dumps({"result": synth_value({"type": "string"}, seed)})
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise SchemaError("response_format.json_schema.schema: a JSON schema object is "
                              "required")
        return json.dumps(synth_value(schema, seed))
    raise SchemaError(f"response_format.type: got {kind!r}; allowed: text, json_object, "
                      "json_schema")


__all__ = ["SchemaError", "ToolCall", "json_content", "json_pieces", "synth_value",
           "tool_call"]
