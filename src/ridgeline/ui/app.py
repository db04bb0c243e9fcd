"""The UI server: a Starlette app with a small JSON API over the perf model and the
simulator, and a plain HTML/JS page (no build step, nothing fetched from the network).

API (documented in docs/ui.md):

    GET  /api/catalog   models, hardware and dtypes the page offers
    POST /api/estimate  one configuration -> `estimate --json --ops` plus roofline data
    POST /api/simulate  a small rate sweep -> latency vs load points and the knee

Errors are 400 with {"error": "<one line>"} naming the field and what is allowed (the
CLI's contract, docs/cli.md), an unknown field among them; 413 for a body over 2 MB (read
and dropped first, up to 64 MiB, so the client reads the answer); 408 when the body does
not arrive within the body timeout; 429 (Retry-After: 1) when every worker is busy. Each request is
bounded: at most 16 rates x 5,000 requests and 20,000 simulated requests in all, rates up
to 10,000 req/s, JSON nested at most 32 levels.

>>> from starlette.testclient import TestClient
>>> r = TestClient(create_app()).post("/api/estimate", json={"batch": 8})
>>> r.status_code, round(r.json()["summary"]["tpot_ms"], 3) > 0
(200, True)
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ridgeline.errors import RidgelineError
from ridgeline.inputs import validate_document
from ridgeline.jsonsafe import json_safe
from ridgeline.report.estimate_view import estimate_view
from ridgeline.report.load_data import knee_rate, load_point
from ridgeline.sim.engine_costs import ENGINES
from ridgeline.sim.scenario import Scenario
from ridgeline.sim.scenario_run import rate_sweep
from ridgeline.specs import hardware_catalog, load_hardware, load_model, model_catalog
from ridgeline.specs.hardware import catalog_name
from ridgeline.specs.model import from_hf_config

GIB = 1024**3
DTYPES = {"weights": ["bf16", "fp16", "fp8", "int8", "int4", "fp4", "fp32"],
          "kv": ["", "bf16", "fp16", "fp8", "fp32"],
          # "": as vLLM runs the weights on the GPU (fp8 -> W8A8 where it has fp8 cores)
          "activations": ["", "bf16", "fp16", "fp8", "fp4", "fp32"]}
DEFAULTS = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "weights": "bf16", "kv": "",
            "activations": "", "tp": 1, "pp": 1, "ep": 1, "batch": 32, "prompt": 1024,
            "output": 256}
SIM_DEFAULTS = {"rates": [2, 4, 8, 16, 24, 32], "requests": 300,
                "prompt": "lognormal:mean=512,sigma=0.5,max=4096", "output": "fixed:128"}
STATIC = ("index.html", "app.js", "style.css")
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8"}
# The page may talk only to this server: no CDN, no external request.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'")


def _static(name: str) -> bytes:
    return resources.files("ridgeline.ui").joinpath("static", name).read_bytes()


# Per-request limits: one request cannot hold a worker for minutes.
MAX_BODY_BYTES = 2_000_000
# A refused body up to this size is still read (and dropped) so the client gets its 413.
MAX_DRAIN_BYTES = 64 << 20
MAX_JSON_DEPTH = 32
MAX_RATES = 16
MAX_REQUESTS = 5000
MAX_SIMULATED_REQUESTS = 20_000      # rates x requests in one call
MAX_RATE_REQ_S = 1e4
MAX_SPEC_CHARS = 200
MAX_SLOS = 8
MAX_PARALLEL = 1024                  # tp, pp, ep
# Computations at once; more get 429 at once rather than a queue that times out.
WORKERS = max(1, min(4, os.cpu_count() or 1))
BODY_TIMEOUT_S = 30.0                # as the emulator's header timeout


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _field(body: dict[str, Any], name: str, kind: type, default: Any, lo: float | None = None,
           hi: float | None = None) -> Any:
    """A number from the body: `kind` int or float, finite, within [lo, hi]; compared
    without converting first (a 300-digit integer is out of range, not an overflow)."""
    v = body.get(name, default)
    if v is None or v == "":
        return default
    what = "an integer" if kind is int else "a number"
    rng = "" if lo is None or hi is None else f" from {lo:g} to {hi:g}"
    bad = RidgelineError(f"{name}: got {_short(v)}; allowed: {what}{rng}")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad  # a JSON number: "8" is a text, not a count
    if isinstance(v, float) and not math.isfinite(v):
        raise bad
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise bad
    if kind is int:
        if isinstance(v, float) and not v.is_integer():
            raise bad
        return int(v)
    return float(v)


def _text(body: dict[str, Any], name: str, default: str) -> str:
    v = body.get(name) or default
    if not isinstance(v, str) or len(v) > MAX_SPEC_CHARS:
        raise RidgelineError(f"{name}: got {_short(v)}; allowed: a text of at most "
                             f"{MAX_SPEC_CHARS} characters")
    return v


def _depth(obj: Any) -> int:
    """Nesting depth of a parsed JSON value, without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        x, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_JSON_DEPTH:
            break
        if isinstance(x, dict):
            stack.extend((v, d + 1) for v in x.values())
        elif isinstance(x, list):
            stack.extend((v, d + 1) for v in x)
    return deepest


def _model(body: dict[str, Any]) -> Any:
    """A catalog name, or an uploaded HF config.json (`config`: its parsed object)."""
    cfg = body.get("config")
    if cfg is not None:
        if not isinstance(cfg, dict):
            raise RidgelineError("config: allowed: the JSON object of a Hugging Face "
                                 "config.json")
        name = str(body.get("config_name") or cfg.get("_name_or_path") or "uploaded")[:100]
        try:
            return from_hf_config(cfg, name=name)
        except RidgelineError:
            raise
        except (TypeError, ValueError, KeyError, OverflowError, ZeroDivisionError,
                AttributeError) as exc:  # a field of the wrong type or size
            raise RidgelineError(f"config: not a usable Hugging Face config.json "
                                 f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
                                 ) from None
    name = _text(body, "model", str(DEFAULTS["model"]))
    if "/" in name or name.endswith(".json"):
        raise RidgelineError(f"model: got {name!r}; allowed: a catalog name (upload a "
                             "config.json as `config`)")
    return name


def _hardware(body: dict[str, Any]) -> str:
    name = _text(body, "hardware", str(DEFAULTS["hardware"]))
    if name not in hardware_catalog():
        return catalog_name(name)  # an alias (H100 -> h100-sxm), else a one-line refusal
    return name


def _common(body: dict[str, Any]) -> dict[str, Any]:
    kv = _text(body, "kv", "") or None
    return {"model": _model(body), "hardware": _hardware(body),
            "weights": _text(body, "weights", "bf16"), "kv": kv,
            "activations": _text(body, "activations", "") or None,
            "tp": _field(body, "tp", int, 1, 1, MAX_PARALLEL),
            "pp": _field(body, "pp", int, 1, 1, MAX_PARALLEL),
            "ep": _field(body, "ep", int, 1, 1, MAX_PARALLEL)}


# The schema of each request body: the fields each endpoint takes, so a misspelt one
# (`{"bacth": 8}`) is a 400 naming it rather than a default silently used. The values
# themselves are checked by `_field`/`_text` above (numbers compared before any conversion,
# ranges named in the message), so a field here admits any JSON value.
_BODY = ConfigDict(extra="forbid")


class _CommonBody(BaseModel):
    model_config = _BODY
    model: Any = None
    config: Any = None
    config_name: Any = None
    hardware: Any = None
    weights: Any = None
    kv: Any = None
    activations: Any = None
    tp: Any = None
    pp: Any = None
    ep: Any = None


class EstimateBody(_CommonBody):
    """POST /api/estimate."""

    batch: Any = None
    prompt: Any = None
    output: Any = None


class SimulateBody(_CommonBody):
    """POST /api/simulate."""

    rates: Any = None
    requests: Any = None
    prompt: Any = None
    output: Any = None
    seed: Any = None
    slos: Any = None
    engine: Any = None
    engine_costs: Any = None


def _checked(model: type[BaseModel], body: dict[str, Any]) -> None:
    validate_document(model, body, "request")


def estimate_api(body: dict[str, Any]) -> dict[str, Any]:
    """POST /api/estimate: `estimate_view` plus a `summary` of the headline numbers."""
    _checked(EstimateBody, body)
    args = _common(body)
    for name, default, hi in (("batch", 32, 65_536), ("prompt", 1024, 10_000_000),
                              ("output", 256, 10_000_000)):
        args[name] = float(_field(body, name, int, default, 1, hi))
    v = estimate_view(**args)
    r = v["result"]
    v["summary"] = {
        "tpot_ms": r["tpot_s"] * 1e3, "ttft_ms": r["ttft_s"] * 1e3,
        "decode_tok_s": r["decode_aggregate_tok_s"], "per_sequence_tok_s":
        r["per_sequence_tok_s"], "e2e_s": r["e2e_s"],
        "weights_gib": r["weights_per_gpu_bytes"] / GIB,
        "kv_capacity_tokens": r["kv_capacity_tokens"],
        "max_concurrent_seqs": r["max_concurrent_seqs"], "memory_fits": r["memory_fits"],
        "memory_shortfall_gib": r["memory_shortfall_bytes"] / GIB,
        "decode_bound": r["decode_bound"], "prefill_bound": r["prefill_bound"],
    }
    return v


def simulate_api(body: dict[str, Any]) -> dict[str, Any]:
    """POST /api/simulate: a small simulated rate sweep (at most 16 rates x 5,000 requests)."""
    _checked(SimulateBody, body)
    c = _common(body)
    rates = body.get("rates", SIM_DEFAULTS["rates"])
    if not isinstance(rates, list) or not 1 <= len(rates) <= MAX_RATES or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool)
            and 0 < x <= MAX_RATE_REQ_S for x in rates):
        raise RidgelineError(f"rates: got {_short(rates)}; allowed: a list of 1 to "
                             f"{MAX_RATES} rates, each > 0 and at most {MAX_RATE_REQ_S:g} "
                             "req/s")
    requests = _field(body, "requests", int, SIM_DEFAULTS["requests"], 1, MAX_REQUESTS)
    if requests * len(rates) > MAX_SIMULATED_REQUESTS:
        raise RidgelineError(f"requests: {requests:,} x {len(rates)} rates; allowed: at most "
                             f"{MAX_SIMULATED_REQUESTS:,} simulated requests per call")
    prompt = _text(body, "prompt", str(SIM_DEFAULTS["prompt"]))
    output = _text(body, "output", str(SIM_DEFAULTS["output"]))
    for name, spec in (("prompt", prompt), ("output", output)):
        if spec.strip().lower().startswith("empirical"):
            raise RidgelineError(f"{name}: empirical lengths read a file on the server; "
                                 "allowed: fixed, uniform, normal, lognormal, exponential")
    seed = _field(body, "seed", int, 0, 0, 2**32 - 1)
    slos = body.get("slos") or []
    if not isinstance(slos, list) or len(slos) > MAX_SLOS or not all(
            isinstance(x, str) and len(x) <= 100 for x in slos):
        raise RidgelineError(f"slos: got {_short(slos)}; allowed: a list of at most "
                             f"{MAX_SLOS} SLO texts such as 'ttft_ms:500'")
    engine_costs = body.get("engine_costs", True)
    if not isinstance(engine_costs, bool):
        raise RidgelineError(f"engine_costs: got {_short(engine_costs)}; allowed: true (the "
                             "engine's fitted CPU costs, as `ridgeline simulate`) or false "
                             "(GPU work only, as --no-engine-costs)")
    engine = _text(body, "engine", "vllm")
    if engine not in ENGINES:   # no costs file: the server would read a path it is sent
        raise RidgelineError(f"engine: got {_short(engine)}; allowed: {', '.join(ENGINES)}")
    # The scenario `ridgeline simulate --rate a,b,c` runs for the same flags (its vLLM
    # engine preset and costs, prefix caching and KV pool), through the same library call,
    # so the two give the same numbers; an uploaded config.json stands in for the name.
    model = c["model"]
    sc = Scenario(model=model if isinstance(model, str) else model.name,
                  model_spec=None if isinstance(model, str) else model,
                  hardware=c["hardware"], weights=c["weights"], kv=c["kv"],
                  activations=c["activations"], tp=c["tp"], pp=c["pp"], ep=c["ep"],
                  engine=engine, engine_costs=engine_costs, requests=requests,
                  prompt=prompt, output=output, seed=seed, slos=tuple(slos)).validate()
    sweep = rate_sweep(sc, sorted(float(x) for x in rates))
    pts = [load_point(run.rate_req_s, run.analysis) for run in sweep.runs]
    return {"points": [p.to_dict() for p in pts], "knee_rate_req_s": knee_rate(pts),
            "knee_rule": "highest rate whose P99 TTFT is at most 3x its value at the lowest "
                         "rate", "requests": requests}


def catalog_api() -> dict[str, Any]:
    models = []
    for name in model_catalog():
        try:
            s = load_model(name)
        except RidgelineError:
            continue
        models.append({"name": name, "total_params": s.total_params,
                       "active_params": s.active_params, "num_layers": s.num_layers,
                       "is_moe": s.is_moe})
    hardware = []
    for name in hardware_catalog():
        h = load_hardware(name)
        hardware.append({"name": name, "display_name": h.display_name,
                         "peak_flops_per_s": h.peak_flops,
                         "memory_bandwidth_bytes_per_s": h.memory_bandwidth_bytes_s,
                         "memory_bytes": h.memory_bytes})
    return {"models": models, "hardware": hardware, "dtypes": DTYPES, "defaults": DEFAULTS,
            "simulate_defaults": SIM_DEFAULTS}


def _error(msg: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": msg}, status_code=status)


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _too_large(size: str | int) -> _HttpError:
    return _HttpError(413, f"request: body of {size} bytes; allowed: at most "
                      f"{MAX_BODY_BYTES:,} bytes")


async def _read_body(request: Request, seen: dict[str, int]) -> bytes:
    """The body, at most MAX_BODY_BYTES. A larger one is read on and dropped (up to
    MAX_DRAIN_BYTES) before the 413: a server that closes with the client's bytes unread
    makes the kernel reset the connection, and the client never reads the answer."""
    size = request.headers.get("content-length")
    if size is not None and (not size.isdigit() or int(size) > MAX_DRAIN_BYTES):
        raise _too_large(size)  # not worth reading: refused at once
    parts: list[bytes] = []
    async for chunk in request.stream():
        seen["bytes"] += len(chunk)
        if seen["bytes"] > MAX_DRAIN_BYTES:
            break
        if seen["bytes"] <= MAX_BODY_BYTES:
            parts.append(chunk)
    if seen["bytes"] > MAX_BODY_BYTES:
        raise _too_large(f"{seen['bytes']:,}" if seen["bytes"] <= MAX_DRAIN_BYTES
                         else f"over {MAX_DRAIN_BYTES:,}")
    return b"".join(parts)


async def _body(request: Request, body_timeout_s: float) -> dict[str, Any]:
    seen = {"bytes": 0}
    try:
        raw = await asyncio.wait_for(_read_body(request, seen), body_timeout_s)
    except asyncio.TimeoutError:
        if seen["bytes"] > MAX_BODY_BYTES:  # too large, and still coming
            raise _too_large(f"over {seen['bytes']:,}") from None
        raise _HttpError(408, f"request: the body did not arrive within {body_timeout_s:g} s"
                         ) from None
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise RidgelineError("request: the body is not JSON") from None
    except RecursionError:
        raise RidgelineError(f"request: JSON nested too deeply; allowed: at most "
                             f"{MAX_JSON_DEPTH} levels") from None
    if not isinstance(body, dict):
        raise RidgelineError("request: allowed: a JSON object")
    if _depth(body) > MAX_JSON_DEPTH:
        raise RidgelineError(f"request: JSON nested more than {MAX_JSON_DEPTH} levels; "
                             "allowed: at most that")
    return body


def _endpoint(fn: Any, workers: asyncio.Semaphore | None = None,
              body_timeout_s: float = BODY_TIMEOUT_S) -> Any:
    async def handler(request: Request) -> Response:
        pool = workers if workers is not None else request.app.state.workers
        try:
            body = await _body(request, body_timeout_s)
            if pool.locked():  # every worker busy: say so now rather than queue
                return JSONResponse({"error": f"busy: {WORKERS} computations in progress; "
                                     "retry shortly"}, status_code=429,
                                    headers={"Retry-After": "1"})
            async with pool:
                out = await run_in_threadpool(fn, body)
        except _HttpError as exc:  # the rest of the body may never come: close after
            return JSONResponse({"error": str(exc)}, status_code=exc.status,
                                headers={"Connection": "close"})
        except RidgelineError as exc:
            return _error(str(exc))
        return JSONResponse(json_safe(out))
    return handler


async def catalog(request: Request) -> Response:
    return JSONResponse(await run_in_threadpool(catalog_api))


async def static(request: Request) -> Response:
    name = request.path_params.get("name", "index.html")
    if name not in STATIC:
        return Response("not found", status_code=404)
    ext = name[name.rfind("."):]
    return Response(_static(name), media_type=CONTENT_TYPES[ext],
                    headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store"})


async def favicon(request: Request) -> Response:
    return Response(status_code=204)  # no icon; avoids a 404 in the browser console


def create_app(workers: int = WORKERS, body_timeout_s: float = BODY_TIMEOUT_S) -> Starlette:
    """The app; `workers`: computations at once (more get 429)."""
    app = Starlette(routes=[
        Route("/", static),
        Route("/static/{name}", static),
        Route("/favicon.ico", favicon),
        Route("/api/catalog", catalog),
        Route("/api/estimate", _endpoint(estimate_api, body_timeout_s=body_timeout_s),
              methods=["POST"]),
        Route("/api/simulate", _endpoint(simulate_api, body_timeout_s=body_timeout_s),
              methods=["POST"]),
    ])
    app.state.workers = asyncio.Semaphore(workers)
    return app
