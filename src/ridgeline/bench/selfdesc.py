"""The engine's self-description, for the trace header's "must record" configuration.

Probed once before a run, in this order, each where the server has it:

    /v1/models       every model entry as the server gives it (vLLM adds max_model_len,
                     root, parent; llama.cpp adds meta with n_ctx_train, n_params, ...)
    /version         vLLM, SGLang: {"version": ...}
    /props           llama.cpp: default generation settings, total_slots, model path
    /get_server_info SGLang: the server arguments
    /info            TGI: model id, dtype, max batch tokens, version

An endpoint that answers 404 is remembered for the rest of the process and not probed
again (a sweep probes once per point; only the first point pays for what is missing).
Long strings (a chat template) are cut to keep the header small.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

PROBES = ("/version", "/props", "/get_server_info", "/info")
MAX_STRING_CHARS = 300
MISSING: set[str] = set()  # URLs that answered 404 in this process


def _trim(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return value if len(value) <= MAX_STRING_CHARS else value[:MAX_STRING_CHARS] + "…"
    if depth > 4:
        return None
    if isinstance(value, dict):
        return {str(k): _trim(v, depth + 1) for k, v in list(value.items())[:80]}
    if isinstance(value, list):
        return [_trim(v, depth + 1) for v in value[:40]]
    return value


def _engine_name(path: str, obj: dict[str, Any]) -> str | None:
    if path == "/props" and ("default_generation_settings" in obj or "total_slots" in obj):
        return "llama.cpp"
    if path == "/info" and "model_id" in obj:
        return "tgi"
    if path == "/get_server_info":
        return "sglang"
    return None


async def describe_server(session: aiohttp.ClientSession, cfg: Any, info: Any,
                          model_entries: list[dict[str, Any]],
                          timeout: aiohttp.ClientTimeout) -> None:
    """Fill `info.self_description`, `info.version` and (if recognised) `info.server`."""
    desc: dict[str, Any] = {}
    if model_entries:
        desc["models"] = _trim(model_entries[:5])
    headers = cfg.request_headers()
    for path in PROBES:
        url = cfg.root_url + path
        if url in MISSING:
            continue
        try:
            async with session.get(url, headers=headers, timeout=timeout) as resp:
                if resp.status == 404:
                    MISSING.add(url)
                    continue
                if resp.status != 200:
                    continue
                obj = await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError, ValueError):
            continue
        if not isinstance(obj, dict):
            continue
        desc[path.strip("/")] = _trim(obj)
        if path == "/version" and obj.get("version") and info.version is None:
            info.version = str(obj["version"])
        if path == "/info" and obj.get("version") and info.version is None:
            info.version = str(obj["version"])
        name = _engine_name(path, obj)
        if name is not None:
            info.server = name if not info.server else f"{name} ({info.server})"
    info.self_description = desc


__all__ = ["MISSING", "PROBES", "describe_server"]
