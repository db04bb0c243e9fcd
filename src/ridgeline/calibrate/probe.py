"""The engine probe: a designed run through ridgeline's bench client, and the step times in it.

Design (`ProbeDesign`), each point a closed loop run by `ridgeline.bench.run.run_bench`, so
every probe is an ordinary ridgeline trace:

- decode: B streams in lockstep for B = 1..max_batch (closed loop at concurrency B, fixed
  prompt and output lengths, unique prompts), `rounds` x B requests each;
- context: B = 1 with a long prompt (the attention term per query-key pair);
- prefill: one request at a time with max_tokens = 1 at several prompt lengths (TTFT = one
  step of P tokens).

Prompt caching is turned off where the engine allows (`cache_prompt: false` for llama.cpp).

Step times come from the client's event times (what `verify` later compares against): a
decode step is the gap between consecutive output events of a stream, kept only when exactly
B streams were decoding and no other request completed a prefill in the same step (a mixed
step). The engine's own `timings` (llama.cpp), when the trace has them, are compared with the
client's times in the fit notes. Where the client cannot resolve single steps (median gap
under 2 ms: chunks coalesce in one network read) or no clean step exists, the decode step
is the engine's own per-request decode time instead, predicted_ms / (predicted_n - 1)
(labelled "(engine timings)" in the residuals).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.calibrate.fit import StepSample
from ridgeline.errors import RidgelineError
from ridgeline.sim.calibrated_profile import TraceRef

# Below this median gap between output events the client's read timestamps no longer
# resolve single steps (chunks coalesce in one read): use the engine's own timings.
MIN_CLIENT_GAP_S = 0.002


@dataclass(frozen=True)
class ProbeDesign:
    """What to measure. Lengths are the bench's `--prompt`/`--output` token counts."""

    max_batch: int = 8
    decode_prompt_tokens: int = 32
    decode_output_tokens: int = 32
    rounds: int = 2
    context_prompt_tokens: int = 384
    prefill_tokens: tuple[int, ...] = (16, 64, 128, 256, 512)
    prefill_repeats: int = 3
    batches: tuple[int, ...] = ()

    def batch_sizes(self) -> list[int]:
        return sorted(set(self.batches)) if self.batches else list(range(1, self.max_batch + 1))

    def describe(self) -> dict[str, Any]:
        return {"decode_batches": self.batch_sizes(),
                "decode_prompt_tokens": self.decode_prompt_tokens,
                "decode_output_tokens": self.decode_output_tokens, "rounds": self.rounds,
                "context_prompt_tokens": self.context_prompt_tokens,
                "prefill_tokens": list(self.prefill_tokens),
                "prefill_repeats": self.prefill_repeats,
                "method": "closed-loop lockstep decode per batch size; single-stream "
                          "prefill with max_tokens=1; client event times"}


@dataclass
class ProbePoint:
    label: str
    kind: str          # decode | context | prefill
    batch: int
    prompt_tokens: int
    output_tokens: int
    requests: int
    trace_path: str = ""


def plan_points(design: ProbeDesign) -> list[ProbePoint]:
    pts = [ProbePoint(f"decode-b{b}", "decode", b, design.decode_prompt_tokens,
                      design.decode_output_tokens, b * design.rounds)
           for b in design.batch_sizes()]
    if design.context_prompt_tokens > design.decode_prompt_tokens:
        pts.append(ProbePoint("context-b1", "context", 1, design.context_prompt_tokens,
                              design.decode_output_tokens, design.rounds))
    pts += [ProbePoint(f"prefill-p{p}", "prefill", 1, p, 1, design.prefill_repeats)
            for p in design.prefill_tokens]
    return pts


def run_probe(endpoint: Any, design: ProbeDesign, out_dir: str | Path, *,
              engine: str = "llama.cpp", seed: int = 0,
              log: Any = None) -> list[ProbePoint]:
    """Run every probe point against `endpoint` (an EndpointConfig); traces go to out_dir."""
    from ridgeline.bench.load import LoadSpec
    from ridgeline.bench.run import BenchConfig, run_bench
    from ridgeline.workload.lengths import parse_lengths

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if engine == "llama.cpp":
        endpoint = type(endpoint)(**{**endpoint.__dict__, "extra_body": {
            **endpoint.extra_body, "cache_prompt": False}})
    points = plan_points(design)
    for i, pt in enumerate(points):
        pt.trace_path = str(out / f"probe-{pt.label}.jsonl")
        cfg = BenchConfig(
            endpoint=endpoint,
            load=LoadSpec(concurrency=pt.batch, arrival=None, requests=pt.requests,
                          warmup=1 if i == 0 else 0),
            trace_path=pt.trace_path,
            prompt=parse_lengths(f"fixed:{pt.prompt_tokens}", "--prompt"),
            output=parse_lengths(f"fixed:{pt.output_tokens}", "--output"),
            seed=seed + 1000 * (i + 1),
            header_extra={"calibration_probe": {"kind": pt.kind, "batch": pt.batch,
                                                "label": pt.label}})
        if log is not None:
            log(f"probe {pt.label}: {pt.requests} requests at concurrency {pt.batch}")
        outcome = run_bench(cfg, warn=log or (lambda m: None))
        term_as_interrupt()
        if outcome.interrupted:
            raise KeyboardInterrupt
        if outcome.failed:
            why = outcome.aborted or "no request succeeded"
            raise RidgelineError(f"calibrate: probe point {pt.label} failed ({why}); see "
                                 f"{pt.trace_path}")
    return points


def term_as_interrupt() -> None:
    """SIGTERM raises KeyboardInterrupt in the main thread, so `with` blocks that own a
    server stop it. (The bench's event loop handles SIGTERM itself while it runs and resets
    it to the default when done: call this again after every bench run.)"""
    import signal
    import threading

    def _raise(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)


# ---- reading probe traces -----------------------------------------------------------------

def read_jsonl(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, ok request records) of a ridgeline trace."""
    from ridgeline.inputs import decode_errors, loads_json, open_text

    header: dict[str, Any] = {}
    recs: list[dict[str, Any]] = []
    try:
        with open_text(path, "TRACES") as fh, decode_errors("TRACES", path):
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                obj = loads_json(line, f"TRACES: {str(path)!r} line {lineno}")
                if not isinstance(obj, dict):
                    raise ValueError
                if obj.get("type") == "header":
                    header = obj
                elif obj.get("type") == "request" and obj.get("status") == "ok":
                    recs.append(obj)
    except OSError as exc:
        raise RidgelineError(f"TRACES: cannot read {path} ({exc.strerror})") from None
    except ValueError:
        raise RidgelineError(f"TRACES: {path} is not a ridgeline JSONL trace") from None
    if not header:
        raise RidgelineError(f"TRACES: {path} has no header line (not a ridgeline trace)")
    return header, recs


def trace_ref(path: str | Path, point: str, requests: int) -> TraceRef:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    return TraceRef(path=str(path), sha256=digest, requests=requests, point=point)


def classify(header: dict[str, Any], recs: list[dict[str, Any]]) -> tuple[str, int, str]:
    """(kind, batch, label) of a probe trace: from its header, else from its shape."""
    meta = header.get("calibration_probe")
    if isinstance(meta, dict) and meta.get("kind"):
        return str(meta["kind"]), int(meta.get("batch", 1)), str(meta.get("label", ""))
    conc = int((header.get("load") or {}).get("concurrency") or 1)
    if recs and all(int(r.get("output_tokens") or 0) == 1 for r in recs):
        return "prefill", conc, f"prefill-c{conc}"
    return "decode", conc, f"decode-b{conc}"


def decode_sample(recs: list[dict[str, Any]], batch: int, label: str) -> StepSample | None:
    """The clean decode steps of a lockstep run at `batch` streams (module docstring)."""
    ev = [np.asarray(r["event_times_s"], dtype=np.float64) for r in recs
          if len(r.get("event_times_s") or []) >= 3]
    if not ev:
        return None
    prompts = [float(r.get("prompt_tokens") or 0) for r in recs
               if len(r.get("event_times_s") or []) >= 3]
    firsts = np.array([e[0] for e in ev])
    lasts = np.array([e[-1] for e in ev])
    gap = float(np.median(np.concatenate([np.diff(e) for e in ev])))
    half = 0.5 * gap
    gaps: list[float] = []
    pairs: list[float] = []
    for e, p in zip(ev, prompts, strict=True):
        for k in range(1, e.size):
            end = e[k]
            if np.any(np.abs(firsts - end) < half):
                continue          # a prefill completed in this step: mixed, not pure decode
            active = int(np.count_nonzero((firsts < end - half) & (lasts >= end - half)))
            if active != batch:
                continue
            gaps.append(float(end - e[k - 1]))
            pairs.append(batch * (p + k))
    if len(gaps) >= 3 and float(np.median(gaps)) >= MIN_CLIENT_GAP_S:
        return StepSample(label, batch, float(np.median(pairs)), float(np.median(gaps)),
                          len(gaps))
    return engine_decode_sample(recs, batch, label)


def engine_decode_sample(recs: list[dict[str, Any]], batch: int, label: str
                         ) -> StepSample | None:
    """Steps too short for the client to resolve (or no clean ones): the engine's own
    per-request decode time, predicted_ms / (predicted_n - 1), median over requests."""
    per, pairs = [], []
    for r in recs:
        t = r.get("engine_timings") or {}
        n = t.get("predicted_n") or 0
        if n >= 3 and t.get("predicted_ms"):
            per.append(float(t["predicted_ms"]) / 1e3 / (n - 1))
            pairs.append(batch * (float(r.get("prompt_tokens") or 0) + n / 2))
    if len(per) < 2:
        return None
    return StepSample(label + " (engine timings)", batch, float(np.median(pairs)),
                      float(np.median(per)), len(per))


def prefill_sample(recs: list[dict[str, Any]], label: str) -> StepSample | None:
    """One request at a time: TTFT is one step of the prompt's tokens."""
    ttft = [r["event_times_s"][0] - r["sent_s"] for r in recs if r.get("event_times_s")]
    toks = [int(r.get("prompt_tokens") or 0) for r in recs if r.get("event_times_s")]
    if not ttft or not all(toks):
        return None
    n = round(float(np.median(toks)))
    return StepSample(label, n, n * (n + 1) / 2.0, float(np.median(ttft)), len(ttft))


def timing_note(kind: str, recs: list[dict[str, Any]]) -> str | None:
    """Client times against the engine's `timings` (llama.cpp), when the trace has them."""
    rows = [r for r in recs if isinstance(r.get("engine_timings"), dict)
            and r.get("event_times_s")]
    if not rows:
        return None
    if kind == "prefill":
        d = [(r["event_times_s"][0] - r["sent_s"]) * 1e3 - r["engine_timings"].get(
            "prompt_ms", np.nan) for r in rows]
        return (f"client TTFT - engine prompt_ms: median {np.nanmedian(d):.2f} ms over "
                f"{len(d)} requests (HTTP, tokenization and sampling)")
    d = []
    for r in rows:
        t, e = r["engine_timings"], r["event_times_s"]
        if len(e) >= 2 and t.get("predicted_ms") is not None:
            d.append((e[-1] - e[0]) * 1e3 - float(t["predicted_ms"]))
    if not d:
        return None
    return (f"client decode span - engine predicted_ms: median {np.median(d):.2f} ms over "
            f"{len(d)} requests")


def samples_from_traces(paths: list[str | Path]) -> tuple[list[StepSample], list[TraceRef],
                                                          list[str]]:
    """Step samples, trace references and notes from probe traces."""
    samples: list[StepSample] = []
    refs: list[TraceRef] = []
    notes: list[str] = []
    for path in paths:
        header, recs = read_jsonl(path)
        kind, batch, label = classify(header, recs)
        label = label or Path(path).stem
        refs.append(trace_ref(path, label, len(recs)))
        s = prefill_sample(recs, label) if kind == "prefill" else decode_sample(recs, batch,
                                                                                 label)
        if s is None:
            notes.append(f"{label}: no clean {kind} steps in {path}; point skipped")
            continue
        samples.append(s)
        note = timing_note(kind, recs)
        if note:
            notes.append(f"{label}: {note}")
    return samples, refs, notes


@dataclass
class EngineFacts:
    """What the endpoint says about itself (header fields of the probe traces)."""

    engine: str = "unknown"
    engine_version: str | None = None
    base_url: str | None = None
    model: str = "unknown"
    extra: dict[str, Any] = field(default_factory=dict)


def engine_facts(paths: list[str | Path]) -> EngineFacts:
    header, _ = read_jsonl(paths[0])
    cfg = header.get("engine_config") or {}
    return EngineFacts(engine=str(header.get("engine") or "unknown"),
                       engine_version=header.get("engine_version"),
                       base_url=cfg.get("base_url"), model=str(header.get("model") or "unknown"))


__all__ = ["EngineFacts", "ProbeDesign", "ProbePoint", "classify", "decode_sample",
           "engine_facts", "plan_points", "prefill_sample", "read_jsonl", "run_probe",
           "samples_from_traces", "timing_note", "trace_ref"]
