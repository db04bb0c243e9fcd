"""The UI server: a Starlette app with a small JSON API over the perf model and the
simulator, and a plain HTML/JS page (no build step, nothing fetched from the network).

API (documented in docs/ui.md):

    GET  /api/catalog   models, hardware and dtypes the page offers
    POST /api/estimate  one configuration -> `estimate --json --ops` plus roofline data
    POST /api/simulate  a small rate sweep -> latency vs load points and the knee

Errors are 400 with {"error": "<one line>"} (the CLI's RidgelineError text).

>>> from starlette.testclient import TestClient
>>> r = TestClient(create_app()).post("/api/estimate", json={"batch": 8})
>>> r.status_code, round(r.json()["summary"]["tpot_ms"], 3) > 0
(200, True)
"""

from __future__ import annotations

import json
import math
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ridgeline.errors import RidgelineError

GIB = 1024**3
DTYPES = {"weights": ["bf16", "fp16", "fp8", "int8", "int4", "fp4", "fp32"],
          "kv": ["", "bf16", "fp16", "fp8", "fp32"],
          "activations": ["bf16", "fp16", "fp8", "fp32"]}
DEFAULTS = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "weights": "bf16", "kv": "",
            "activations": "bf16", "tp": 1, "pp": 1, "ep": 1, "batch": 32, "prompt": 1024,
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


def _field(body: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    v = body.get(name, default)
    if v is None or v == "":
        return default
    try:
        out = kind(v)
    except (TypeError, ValueError):
        raise RidgelineError(f"{name}: got {v!r}; allowed: a {kind.__name__}") from None
    if isinstance(out, float) and not math.isfinite(out):
        raise RidgelineError(f"{name}: got {v!r}; allowed: a finite number")
    return out


def _model(body: dict[str, Any]) -> Any:
    """A catalog name, or an uploaded HF config.json (`config`: its parsed object)."""
    cfg = body.get("config")
    if cfg is not None:
        from ridgeline.specs.model import from_hf_config

        if not isinstance(cfg, dict):
            raise RidgelineError("config: allowed: the JSON object of a Hugging Face "
                                 "config.json")
        name = str(body.get("config_name") or cfg.get("_name_or_path") or "uploaded")
        return from_hf_config(cfg, name=name)
    name = str(body.get("model") or DEFAULTS["model"])
    if "/" in name or name.endswith(".json"):
        raise RidgelineError(f"model: got {name!r}; allowed: a catalog name (upload a "
                             "config.json as `config`)")
    return name


def _hardware(body: dict[str, Any]) -> str:
    from ridgeline.specs import hardware_catalog

    name = str(body.get("hardware") or DEFAULTS["hardware"])
    if name not in hardware_catalog():
        raise RidgelineError(f"hardware: got {name!r}; allowed: "
                             f"{', '.join(hardware_catalog())}")
    return name


def _common(body: dict[str, Any]) -> dict[str, Any]:
    kv = body.get("kv") or None
    return {"model": _model(body), "hardware": _hardware(body),
            "weights": str(body.get("weights") or "bf16"), "kv": kv,
            "activations": str(body.get("activations") or "bf16"),
            "tp": _field(body, "tp", int, 1), "pp": _field(body, "pp", int, 1),
            "ep": _field(body, "ep", int, 1)}


def estimate_api(body: dict[str, Any]) -> dict[str, Any]:
    """POST /api/estimate: `estimate_view` plus a `summary` of the headline numbers."""
    from ridgeline.report.estimate_view import estimate_view

    args = _common(body)
    for name, default in (("batch", 32), ("prompt", 1024), ("output", 256)):
        args[name] = _field(body, name, float, default)
        if args[name] < 1 or args[name] != int(args[name]):
            raise RidgelineError(f"{name}: got {body.get(name)!r}; allowed: an integer >= 1")
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
    from ridgeline.perf.serving_model import RooflineStepTime
    from ridgeline.report.load import knee_rate, load_point
    from ridgeline.report.sweep import simulate_sweep
    from ridgeline.specs import Parallelism, load_hardware, load_model, resolve_precision

    c = _common(body)
    rates = body.get("rates", SIM_DEFAULTS["rates"])
    if not isinstance(rates, list) or not all(isinstance(x, (int, float)) for x in rates):
        raise RidgelineError(f"rates: got {rates!r}; allowed: a list of rates in req/s")
    requests = _field(body, "requests", int, SIM_DEFAULTS["requests"])
    if not 1 <= requests <= 5000:
        raise RidgelineError(f"requests: got {requests}; allowed: 1 to 5000")
    spec = c["model"] if not isinstance(c["model"], str) else load_model(c["model"])
    m = RooflineStepTime(spec, load_hardware(c["hardware"]),
                         resolve_precision(c["weights"], c["kv"], c["activations"]),
                         Parallelism(tp=c["tp"], pp=c["pp"], ep=c["ep"]))
    if not m.memory().fits:
        raise RidgelineError(m.no_fit_message())
    slos = body.get("slos") or []
    runs = simulate_sweep(m, [float(x) for x in rates], requests=requests,
                          prompt=str(body.get("prompt") or SIM_DEFAULTS["prompt"]),
                          output=str(body.get("output") or SIM_DEFAULTS["output"]),
                          seed=_field(body, "seed", int, 0), slos=[str(s) for s in slos])
    pts = [load_point(rate, a) for rate, a, _ in runs]
    return {"points": [p.to_dict() for p in pts], "knee_rate_req_s": knee_rate(pts),
            "knee_rule": "highest rate whose P99 TTFT is at most 3x its value at the lowest "
                         "rate", "requests": requests}


def catalog_api() -> dict[str, Any]:
    from ridgeline.specs import hardware_catalog, load_hardware, model_catalog

    models = []
    for name in model_catalog():
        try:
            from ridgeline.specs import load_model

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


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > 2_000_000:
        raise RidgelineError("request: body over 2 MB")
    try:
        body = json.loads(raw or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RidgelineError("request: the body is not JSON") from None
    if not isinstance(body, dict):
        raise RidgelineError("request: allowed: a JSON object")
    return body


def _endpoint(fn: Any) -> Any:
    async def handler(request: Request) -> Response:
        try:
            body = await _body(request)
            out = await run_in_threadpool(fn, body)
        except RidgelineError as exc:
            return _error(str(exc))
        from ridgeline.report.estimate_view import _clean

        return JSONResponse(_clean(out))
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


def create_app() -> Starlette:
    return Starlette(routes=[
        Route("/", static),
        Route("/static/{name}", static),
        Route("/favicon.ico", favicon),
        Route("/api/catalog", catalog),
        Route("/api/estimate", _endpoint(estimate_api), methods=["POST"]),
        Route("/api/simulate", _endpoint(simulate_api), methods=["POST"]),
    ])
