"""Tool calls and JSON output from the installed `ridgeline serve`, checked with a small
JSON-schema validator written here (independent of the emulator's generator)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ridgeline.serve.launcher import EmulatorProcess
from tests.serve_emulator_helpers import emulator

_TYPES: dict[str, Any] = {
    "object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
    "integer": int, "number": (int, float)}


def problems(value: Any, schema: dict[str, Any], root: dict[str, Any], at: str = "$"
             ) -> list[str]:
    """Where `value` breaks `schema` (the keywords the tests use), as readable lines."""
    while "$ref" in schema:
        node: Any = root
        for part in schema["$ref"][2:].split("/"):
            node = node[part]
        schema = node
    out: list[str] = []
    if "const" in schema and value != schema["const"]:
        out.append(f"{at}: {value!r} != const {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{at}: {value!r} not in {schema['enum']}")
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        ok = any(isinstance(value, _TYPES[k]) and not (isinstance(value, bool)
                 and k in ("integer", "number")) for k in kinds)
        if not ok:
            return [*out, f"{at}: {value!r} is not {kind}"]
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                out.append(f"{at}: missing required {name!r}")
        props = schema.get("properties", {})
        for name, sub in value.items():
            if name in props:
                out += problems(sub, props[name], root, f"{at}.{name}")
            elif schema.get("additionalProperties") is False:
                out.append(f"{at}: unexpected property {name!r}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            out.append(f"{at}: fewer than minItems")
        if len(value) > schema.get("maxItems", len(value)):
            out.append(f"{at}: more than maxItems")
        for i, item in enumerate(value):
            out += problems(item, schema.get("items", {}), root, f"{at}[{i}]")
    if isinstance(value, str) and not (
            schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", 10**9)):
        out.append(f"{at}: length {len(value)} out of range")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < schema.get("minimum", -float("inf")):
            out.append(f"{at}: {value} < minimum")
        if value > schema.get("maximum", float("inf")):
            out.append(f"{at}: {value} > maximum")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            out.append(f"{at}: {value} <= exclusiveMinimum")
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            out.append(f"{at}: {value} >= exclusiveMaximum")
        if "multipleOf" in schema and value % schema["multipleOf"] != 0:
            out.append(f"{at}: {value} not a multiple of {schema['multipleOf']}")
    return out


WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 3},
        "detailed": {"type": "boolean"},
        "where": {"type": "object", "properties": {
            "lat": {"type": "number", "minimum": -90, "maximum": 90},
            "lon": {"type": "number", "exclusiveMinimum": 170, "exclusiveMaximum": 180}},
            "required": ["lat", "lon"], "additionalProperties": False},
        "hours": {"type": "array", "items": {"type": "integer", "multipleOf": 6},
                  "minItems": 2},
    },
    "required": ["city", "unit", "days", "where"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}},
    {"type": "function", "function": {"name": "get_weather", "description": "Forecast",
                                      "parameters": WEATHER}},
]
ORDER = {
    "$defs": {"item": {"type": "object", "properties": {
        "sku": {"type": "string", "maxLength": 3},
        "qty": {"type": "integer", "exclusiveMinimum": 0, "maximum": 9},
        "tags": {"type": "array", "items": {"enum": ["new", "sale"]}, "minItems": 1,
                 "maxItems": 1}}, "required": ["sku", "qty", "tags"]}},
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "status": {"const": "open"},
        "note": {"type": ["string", "null"]},
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 3},
        "total": {"type": "number", "minimum": 10.5, "maximum": 11.0},
        "paid": {"type": "boolean"},
    },
    "required": ["id", "status", "items", "total", "paid"],
    "additionalProperties": False,
}


def test_the_validator_catches_bad_values() -> None:
    """The hand validator must be able to fail, or the tests below prove nothing."""
    good = {"city": "Reykjavik-Center", "unit": "celsius", "days": 2,
            "where": {"lat": 1.0, "lon": 175.0}, "hours": [0, 6]}
    assert problems(good, WEATHER, WEATHER) == []
    for bad in ({**good, "unit": "kelvin"}, {**good, "days": 4}, {**good, "days": True},
                {k: v for k, v in good.items() if k != "where"}, {**good, "city": "Oslo"},
                {**good, "where": {"lat": 1.0, "lon": 180.0}}, {**good, "hours": [0, 5]},
                {**good, "where": {"lat": 1.0, "lon": 175.0, "alt": 3}}):
        assert problems(bad, WEATHER, WEATHER)


@pytest.fixture(scope="module")
def server() -> Iterator[EmulatorProcess]:
    with emulator("--time-to-first-token", "0", "--inter-token-latency", "0") as emu:
        yield emu


def _chat(server: EmulatorProcess, **extra: Any) -> dict[str, Any]:
    r = httpx.post(server.base_url + "/v1/chat/completions", timeout=30, json={
        "messages": [{"role": "user", "content": "weather?"}], "max_tokens": 1000, **extra})
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_named_tool_call_has_schema_valid_arguments(server: EmulatorProcess) -> None:
    for seed in range(5):
        body = _chat(server, tools=TOOLS, seed=seed, tool_choice={
            "type": "function", "function": {"name": "get_weather"}})
        choice = body["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        msg = choice["message"]
        assert msg["content"] is None and len(msg["tool_calls"]) == 1
        call = msg["tool_calls"][0]
        assert call["type"] == "function" and call["id"]
        assert call["function"]["name"] == "get_weather"
        args = json.loads(call["function"]["arguments"])   # a JSON string
        assert problems(args, WEATHER, WEATHER) == []
    # "auto" and "required" call a tool too (the first); "none" answers in text.
    for choice_kind in ("auto", "required"):
        call = _chat(server, tools=TOOLS, tool_choice=choice_kind)["choices"][0]["message"]
        assert call["tool_calls"][0]["function"]["name"] == "get_time"
    text = _chat(server, tools=TOOLS, tool_choice="none")["choices"][0]
    assert isinstance(text["message"]["content"], str) and "tool_calls" not in text["message"]


def test_streamed_tool_call_reassembles(server: EmulatorProcess) -> None:
    chunks = []
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", timeout=30, json={
            "messages": [{"role": "user", "content": "weather?"}], "max_tokens": 1000,
            "tools": TOOLS, "tool_choice": {"type": "function",
                                            "function": {"name": "get_weather"}},
            "stream": True}) as resp:
        lines = [ln for ln in resp.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(ln[6:]) for ln in lines[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["id"] and calls[0]["function"]["name"] == "get_weather"
    assert all("id" not in c for c in calls[1:]) and len(calls) > 1
    args = json.loads("".join(c["function"]["arguments"] for c in calls))
    assert problems(args, WEATHER, WEATHER) == []
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_json_schema_and_json_object_content(server: EmulatorProcess) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "order", "schema": ORDER}}
    for seed in range(5):
        choice = _chat(server, response_format=fmt, seed=seed)["choices"][0]
        value = json.loads(choice["message"]["content"])
        assert problems(value, ORDER, ORDER) == []
        assert choice["finish_reason"] == "stop"
    value = json.loads(_chat(server, response_format={"type": "json_object"})[
        "choices"][0]["message"]["content"])
    assert isinstance(value, dict)
    # max_tokens cuts the JSON as it would cut a real model's: finish_reason "length".
    cut = _chat(server, response_format=fmt, max_tokens=3)["choices"][0]
    assert cut["finish_reason"] == "length"
    with pytest.raises(ValueError):
        json.loads(cut["message"]["content"])


def test_malformed_schema_requests_are_400s(server: EmulatorProcess) -> None:
    for extra, param in (
            ({"tools": TOOLS, "tool_choice": {"type": "function",
                                              "function": {"name": "nope"}}}, "tools"),
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
             "response_format"),
            ({"response_format": {"type": "json_schema", "json_schema": {"schema": {
                "type": "integer", "minimum": 5, "maximum": 4}}}}, "response_format"),
            ({"response_format": {"type": "json_schema", "json_schema": {"schema": {
                "type": "array", "minItems": "two"}}}}, "response_format"),
            ({"response_format": {"type": "json_schema", "json_schema": {"schema": {
                "anyOf": [{"$ref": "#"}]}}}}, "response_format"),
            ({"response_format": {"type": "json_schema", "json_schema": {"schema": {
                "type": "array", "minItems": 10**9}}}}, "response_format"),
            ({"tools": TOOLS, "tool_choice": {"type": "function", "function": "x"}},
             "tools")):
        r = httpx.post(server.base_url + "/v1/chat/completions", timeout=30, json={
            "messages": [{"role": "user", "content": "x"}], "max_tokens": 5, **extra})
        assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_the_openai_client_reads_the_tool_call(server: EmulatorProcess) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="none")
    resp = client.chat.completions.create(
        model="llama-3.1-8b", messages=[{"role": "user", "content": "weather?"}],
        tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = resp.choices[0].message.tool_calls[0]
    assert resp.choices[0].finish_reason == "tool_calls"
    assert problems(json.loads(call.function.arguments), WEATHER, WEATHER) == []
    stream = client.chat.completions.create(
        model="llama-3.1-8b", messages=[{"role": "user", "content": "x"}], stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "o", "schema": ORDER}})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert problems(json.loads(text), ORDER, ORDER) == []
