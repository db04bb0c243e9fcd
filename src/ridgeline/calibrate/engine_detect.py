"""Which engine serves a base URL, and the scheduling settings it states about itself.

llama.cpp's server answers `GET /props` with its slots (`total_slots`) and per-slot
context. vLLM answers `GET /version` with `{"version": "0.x.y"}` and exports Prometheus
metrics named `vllm:...` on `GET /metrics`; its `vllm:cache_config_info` info gauge
carries the cache config as labels (`block_size`, `num_gpu_blocks`, ...) and, in some
versions, the scheduler's `max_num_seqs` / `max_num_batched_tokens`. What a vLLM server
does not state takes vLLM V1's defaults (256 sequences, 8192 batched tokens with chunked
prefill, 16-token blocks), and the result says which values were read and which defaulted.

>>> e = recognise({"version": "0.10.1"}, 'vllm:cache_config_info{block_size="32",'
...               'max_num_seqs="48",engine="0"} 1.0', {})
>>> e.engine, e.max_num_seqs, e.max_num_batched_tokens, e.block_size_tokens
('vllm', 48, 8192, 32)
>>> recognise({}, "", {"total_slots": 4}).engine
'llama.cpp'
"""

from __future__ import annotations

import json
import math
import re
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from ridgeline.sim.calibrated_profile import (
    MAX_BLOCK_SIZE_TOKENS,
    MAX_KV_CAPACITY_TOKENS,
    MAX_NUM_SEQS,
    MAX_STEP_TOKENS,
)

VLLM_DEFAULT_MAX_NUM_SEQS = 256
VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192   # V1 with chunked prefill
VLLM_DEFAULT_BLOCK_SIZE_TOKENS = 16

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s")
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass
class DetectedEngine:
    """The engine behind a base URL (`vllm`, `llama.cpp` or `unknown`), from what evidence,
    and the settings it states; `read` names the settings taken from the server, `defaulted`
    those that took the engine's defaults."""

    engine: str = "unknown"
    version: str | None = None
    evidence: str = "no /props, no vllm: metrics"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size_tokens: int | None = None
    num_gpu_blocks: int | None = None
    read: list[str] = field(default_factory=list)
    defaulted: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line: the engine recognised, and from what."""
        if self.engine == "unknown":
            return f"engine: not recognised ({self.evidence})"
        name = "vLLM" if self.engine == "vllm" else self.engine
        ver = f" {self.version}" if self.version else ""
        return f"engine: {name}{ver}, recognised from {self.evidence}"

    def settings_line(self) -> str | None:
        """What was read from the server and what was defaulted (vLLM only)."""
        if self.engine != "vllm":
            return None
        read = ", ".join(self.read) or "nothing"
        dflt = ", ".join(self.defaulted) or "nothing"
        return f"vLLM settings read from /metrics: {read}; vLLM defaults used: {dflt}"

    @property
    def kv_capacity_tokens(self) -> int | None:
        """KV cache size in tokens (blocks x block size) when the server states its blocks."""
        if self.num_gpu_blocks and self.block_size_tokens:
            return self.num_gpu_blocks * self.block_size_tokens
        return None

    def facts(self) -> dict[str, Any]:
        return {"engine": self.engine, "version": self.version, "evidence": self.evidence,
                "max_num_seqs": self.max_num_seqs,
                "max_num_batched_tokens": self.max_num_batched_tokens,
                "block_size_tokens": self.block_size_tokens,
                "num_gpu_blocks": self.num_gpu_blocks, "read_from_server": self.read,
                "defaulted": self.defaulted}


def metric_samples(text: str) -> list[tuple[str, dict[str, str]]]:
    """(name, labels) of every sample line of a Prometheus text exposition."""
    out: list[tuple[str, dict[str, str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = {lm["key"]: lm["value"] for lm in _LABEL.finditer(m["labels"] or "")}
        out.append((m["name"], labels))
    return out


def _positive_int(text: str | None, most: int) -> int | None:
    """The label as an integer in 1..most; None (the default is used) for anything else,
    so a server's odd label can never reach the profile's checks."""
    try:
        v = float(text) if text not in (None, "", "None") else None
    except (TypeError, ValueError):
        return None
    if v is None or not math.isfinite(v) or v != int(v) or not 1 <= v <= most:
        return None
    return int(v)


def recognise(version_obj: Any, metrics_text: str, props: dict[str, Any]) -> DetectedEngine:
    """Pure recognition from the answers of /version (parsed JSON or None), /metrics (text)
    and /props (engine_props' dict). llama.cpp when /props states its slots; vLLM when
    /metrics has vllm: names (its /version gives the version); else unknown."""
    if props.get("total_slots"):
        return DetectedEngine(engine="llama.cpp", version=props.get("build_info"),
                              evidence=f"/props (total_slots {props['total_slots']})")
    samples = metric_samples(metrics_text or "")
    vllm_names = sorted({n for n, _ in samples if n.startswith("vllm:")})
    if not vllm_names:
        return DetectedEngine()
    version = None
    if isinstance(version_obj, dict) and isinstance(version_obj.get("version"), str):
        version = version_obj["version"]
    evidence = f"/metrics ({len(vllm_names)} vllm: metric names)"
    if version:
        evidence = f"/version ({version}) and " + evidence
    info: dict[str, str] = {}
    for name, labels in samples:
        if name == "vllm:cache_config_info":
            info.update(labels)
    eng = DetectedEngine(engine="vllm", version=version, evidence=evidence)
    # The upper limits are the profile's own.
    wanted = (("max_num_seqs", "max_num_seqs", VLLM_DEFAULT_MAX_NUM_SEQS, MAX_NUM_SEQS),
              ("max_num_batched_tokens", "max_num_batched_tokens",
               VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS, MAX_STEP_TOKENS),
              ("block_size", "block_size_tokens", VLLM_DEFAULT_BLOCK_SIZE_TOKENS,
               MAX_BLOCK_SIZE_TOKENS))
    for label, attr, default, most in wanted:
        got = _positive_int(info.get(label), most)
        if got is None:
            eng.defaulted.append(f"{label} {default}")
        else:
            eng.read.append(f"{label} {got}")
        setattr(eng, attr, got if got is not None else default)
    block = eng.block_size_tokens or VLLM_DEFAULT_BLOCK_SIZE_TOKENS
    eng.num_gpu_blocks = _positive_int(info.get("num_gpu_blocks"),
                                       MAX_KV_CAPACITY_TOKENS // block)
    if eng.num_gpu_blocks is not None:
        eng.read.append(f"num_gpu_blocks {eng.num_gpu_blocks}")
    return eng


def _get(url: str, timeout_s: float) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return str(resp.read(4_000_000).decode("utf-8", errors="replace"))
    except (OSError, ValueError):
        return None


def engine_props(base_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """llama.cpp's GET /props (slots, per-slot context, build); {} when the engine has none."""
    import json
    import urllib.request

    url = base_url.rstrip("/").removesuffix("/v1") + "/props"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            obj = json.loads(resp.read().decode("utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    if not isinstance(obj, dict):
        return {}
    gen = obj.get("default_generation_settings") or {}
    out = {k: obj[k] for k in ("total_slots", "build_info", "model_path", "model_ftype")
           if k in obj}
    if isinstance(gen, dict) and isinstance(gen.get("n_ctx"), int):
        out["slot_n_ctx"] = gen["n_ctx"]
    return out


def detect_engine(base_url: str, props: dict[str, Any] | None = None,
                  timeout_s: float = 5.0) -> DetectedEngine:
    """Ask the server (`props`: llama.cpp's /props already read, see engine_props)."""
    if props is None:
        props = engine_props(base_url, timeout_s)
    if props.get("total_slots"):
        return recognise(None, "", props)
    root = base_url.rstrip("/").removesuffix("/v1")
    version_text = _get(root + "/version", timeout_s)
    try:
        version_obj = json.loads(version_text) if version_text else None
    except ValueError:
        version_obj = None
    return recognise(version_obj, _get(root + "/metrics", timeout_s) or "", props)


__all__ = ["VLLM_DEFAULT_BLOCK_SIZE_TOKENS", "VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS",
           "VLLM_DEFAULT_MAX_NUM_SEQS", "DetectedEngine", "detect_engine", "metric_samples",
           "recognise"]
