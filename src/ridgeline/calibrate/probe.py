"""The engine probe: a designed run through ridgeline's bench client, and the step times in it.

Design (`ProbeDesign`), each point a closed loop run by `ridgeline.bench.single_run.run_bench`, so
every probe is an ordinary ridgeline trace:

- decode: B streams in lockstep for B = 1..max_batch (closed loop at concurrency B, fixed
  prompt and output lengths, unique prompts), `rounds` x B requests each;
- context: B = 1 and B = max_batch with a long prompt (the attention term per query-key
  pair; the largest batch has max_batch times the pairs, so its slope is the sharp one);
- prefill: one request at a time with max_tokens = 1 at several prompt lengths (TTFT = one
  step of P tokens);
- open: one Poisson run, about half the slots in flight; its pure-decode steps,
  reconstructed from the pooled chunk times of all streams (`open_loop_steps`), give T(B)
  under the slot layouts real load produces and replace the lockstep T(B) (llama.cpp with
  a per-slot KV cache runs one graph per run of consecutive slot ids: lockstep probes see
  one layout, docs/calibration.md).

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
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.bench.load import LoadSpec
from ridgeline.bench.single_run import BenchConfig, run_bench
from ridgeline.calibrate.fit import StepSample, fit_profile
from ridgeline.calibrate.probe_trace import read_probe_trace
from ridgeline.calibrate.slot_state import pin_of
from ridgeline.errors import RidgelineError
from ridgeline.perf.step_time import BatchWork
from ridgeline.sim.calibrated_profile import TraceRef
from ridgeline.workload.arrivals import parse_arrival
from ridgeline.workload.lengths import parse_lengths

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
    # Batch sizes probed at the long context too (empty: 1 and the largest decode batch).
    # A decode step at B streams reads B x context pairs: the slope fitted from B = 1 alone
    # is a ~5 ms difference of two ~27 ms steps, and at B = 8 and load contexts it prices
    # ~20 ms of a ~60 ms step, so its noise is 8x amplified there (measured).
    context_batches: tuple[int, ...] = ()
    prefill_tokens: tuple[int, ...] = (16, 64, 128, 256, 512)
    prefill_repeats: int = 3
    batches: tuple[int, ...] = ()
    # The open-loop probe: Poisson arrivals with every slot layout and prompts
    # joining running decodes, as real load has. 0 requests: none.
    open_requests: int = 40
    open_prompt_tokens: int = 64
    open_output_tokens: int = 64
    open_rate_req_s: float | None = None   # None: aimed at half the slots in flight
    slots: int | None = None
    # llama.cpp with per-slot KV: the lockstep streams of a decode/context probe
    # are pinned to slots 0..B-1 (`id_slot`), so each step is one graph and T(B) is the
    # one-graph time the slot model (sim/slots.py) sums over a step's graphs; prefill probes
    # go to slot 0 (`slot_state.pin_of`).
    pin_slots: bool = False

    def batch_sizes(self) -> list[int]:
        return sorted(set(self.batches)) if self.batches else list(range(1, self.max_batch + 1))

    def context_batch_sizes(self) -> list[int]:
        if self.context_batches:
            return sorted(set(self.context_batches))
        return sorted({1, max(self.batch_sizes())})

    def describe(self) -> dict[str, Any]:
        return {"decode_batches": self.batch_sizes(),
                "decode_prompt_tokens": self.decode_prompt_tokens,
                "decode_output_tokens": self.decode_output_tokens, "rounds": self.rounds,
                "context_prompt_tokens": self.context_prompt_tokens,
                "context_batches": self.context_batch_sizes(),
                "prefill_tokens": list(self.prefill_tokens),
                "prefill_repeats": self.prefill_repeats,
                "open_requests": self.open_requests,
                "open_prompt_tokens": self.open_prompt_tokens,
                "open_output_tokens": self.open_output_tokens,
                "open_rate_req_s": self.open_rate_req_s,
                "pin_slots": self.pin_slots,
                "method": "closed-loop lockstep decode per batch size; single-stream "
                          "prefill with max_tokens=1; one open-loop Poisson run whose "
                          "steps (from chunk times) replace the lockstep decode steps; "
                          "client event times"}


@dataclass
class ProbePoint:
    label: str
    kind: str          # decode | context | prefill | open
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
        # B streams at once, `rounds` requests in all at B = 1 and one round above.
        pts += [ProbePoint(f"context-b{b}", "context", b, design.context_prompt_tokens,
                           design.decode_output_tokens, max(b, design.rounds))
                for b in design.context_batch_sizes()]
    pts += [ProbePoint(f"prefill-p{p}", "prefill", 1, p, 1, design.prefill_repeats)
            for p in design.prefill_tokens]
    if design.open_requests > 0:
        pts.append(ProbePoint("open-poisson", "open", design.slots or design.max_batch,
                              design.open_prompt_tokens, design.open_output_tokens,
                              design.open_requests))
    return pts


def open_rate_req_s(design: ProbeDesign, samples: list[StepSample]) -> float:
    """Poisson rate that keeps about half the slots in flight (Little's law on the
    lockstep/prefill probes: a request lasts T(P) + N * T(B) at B = slots/2)."""
    if design.open_rate_req_s:
        return design.open_rate_req_s

    prof = fit_profile(samples)
    b = max(1, (design.slots or design.max_batch) // 2)
    p = design.open_prompt_tokens
    life_s = float(prof.step_time_s(BatchWork(prefill_tokens=p + 1,
                                                prefill_attn_pairs=p * (p + 1) / 2))) + \
        design.open_output_tokens * float(prof.step_time_s(BatchWork(decode_seqs=b)))
    return b / max(life_s, 1e-6)


def run_probe(endpoint: Any, design: ProbeDesign, out_dir: str | Path, *,
              engine: str = "llama.cpp", seed: int = 0,
              log: Any = None) -> list[ProbePoint]:
    """Run every probe point against `endpoint` (an EndpointConfig); traces go to out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if engine == "llama.cpp":
        endpoint = type(endpoint)(**{**endpoint.__dict__, "extra_body": {
            **endpoint.extra_body, "cache_prompt": False}})

    points = plan_points(design)
    for i, pt in enumerate(points):
        pt.trace_path = str(out / f"probe-{pt.label}.jsonl")
        if pt.kind == "open":
            done = [p.trace_path for p in points[:i]]
            rate = open_rate_req_s(design, samples_from_traces(done)[0])
            load = LoadSpec(concurrency=None, arrival=parse_arrival("poisson", rate),
                            requests=pt.requests)
        else:
            load = LoadSpec(concurrency=pt.batch, arrival=None, requests=pt.requests,
                            warmup=1 if i == 0 else 0)
        pinned = endpoint
        if pin_of(design.pin_slots, pt.kind, pt.batch):
            pinned = type(endpoint)(**{**endpoint.__dict__, "pin_slots": pt.batch})
        cfg = BenchConfig(
            endpoint=pinned,
            load=load,
            trace_path=pt.trace_path,
            prompt=parse_lengths(f"fixed:{pt.prompt_tokens}", "--prompt"),
            output=parse_lengths(f"fixed:{pt.output_tokens}", "--output"),
            seed=seed + 1000 * (i + 1),
            header_extra={"calibration_probe": {"kind": pt.kind, "batch": pt.batch,
                                                "label": pt.label}})
        if log is not None:
            how = (f"Poisson {load.arrival.rate_req_s:.3g} req/s" if pt.kind == "open"
                   else f"concurrency {pt.batch}")
            log(f"probe {pt.label}: {pt.requests} requests at {how}")
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
    """(header, ok request records) of a probe trace, read and checked by its schema
    (`calibrate/probe_trace.py`)."""
    return read_probe_trace(path)


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
    load = header.get("load") or {}
    if not str(load.get("pattern", "closed")).startswith("closed") or (
            load.get("rate_req_s") and not load.get("concurrency")):
        return "open", 0, "open"
    conc = int(load.get("concurrency") or 1)
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
        # The median gap, not the mean (measured): the gaps are
        # right-skewed (mean/median 1.00-1.07), but over eight fresh starts the load steps
        # cost what the probes' medians said (priced -1.1% on average, |3.1%|) and the means
        # priced them +3.2% (|3.4%|): load's typical step ran cheaper than the probes' by
        # about the skew (docs/calibration.md, "Near saturation").
        return StepSample(label, batch, float(np.median(pairs)), decode_step_s(gaps),
                          len(gaps))
    return engine_decode_sample(recs, batch, label)


def decode_step_s(gaps: list[float]) -> float:
    """T(B) of a lockstep decode probe from its clean step gaps: the median (see above).
    One function, so `benchmarks/real_engine/llamacpp_refit_statistic.py` can refit kept probes with
    another statistic."""
    return float(np.median(gaps))


# An open-loop step regime needs this many clean steps to replace the lockstep probe at B.
MIN_OPEN_STEPS = 12


def open_loop_steps(recs: list[dict[str, Any]]) -> list[tuple[float, int, int]]:
    """(duration_s, decoding streams, prompts that completed) of each engine step of an
    open-loop run, from the client's chunk times: each chunk ends one step (llama.cpp
    streams a token right after the `llama_decode` that made it), so the pooled chunk
    times of all streams, clustered within 30% of a step, are the step ends. A step counts
    only when some stream was already decoding before it (no idle time in it)."""
    ev = sorted((float(t), i, k) for i, r in enumerate(recs)
                for k, t in enumerate(r.get("event_times_s") or []))
    per = [np.diff(np.asarray(r["event_times_s"], dtype=np.float64)) for r in recs
           if len(r.get("event_times_s") or []) >= 3]
    if not ev or not per:
        return []
    gap = float(np.median(np.concatenate(per)))
    if gap < MIN_CLIENT_GAP_S:
        return []      # the client cannot resolve single steps
    tol = 0.3 * gap
    groups: list[list[tuple[float, int, int]]] = []
    for e in ev:
        if groups and e[0] - groups[-1][-1][0] < tol:
            groups[-1].append(e)
        else:
            groups.append([e])
    out = []
    for prev, cur in itertools.pairwise(groups):
        dec = sum(1 for _, _, k in cur if k > 0)
        if dec == 0:
            continue
        new = sum(1 for _, _, k in cur if k == 0)
        out.append((min(t for t, _, _ in cur) - max(t for t, _, _ in prev), dec, new))
    return out


def open_loop_samples(recs: list[dict[str, Any]], label: str) -> list[StepSample]:
    """The pure-decode steps of an open-loop run, mean per decode batch B (with at
    least MIN_OPEN_STEPS steps): T(B) as real load sees it, every slot layout and context
    mix included (docs/calibration.md: llama.cpp runs one ubatch per run of consecutive
    slot ids, which lockstep probes sample only one layout of)."""
    by_b: dict[int, list[float]] = {}
    for dt, b, new in open_loop_steps(recs):
        if new == 0:
            by_b.setdefault(b, []).append(dt)
    ctx = float(np.median([(r.get("prompt_tokens") or 0) + 0.5 * (r.get("output_tokens") or 0)
                           for r in recs])) if recs else 0.0
    # The mean, not the median: a request's TPOT is the mean of the steps it lived through,
    # and the slot layouts make the distribution skewed (a 3-run step costs ~4x a 1-run one).
    return [StepSample(f"{label}-b{b}", b, b * ctx, float(np.mean(v)), len(v))
            for b, v in sorted(by_b.items()) if len(v) >= MIN_OPEN_STEPS]


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
        if kind == "open":
            got = open_loop_samples(recs, label)
            if not got:
                notes.append(f"{label}: no resolvable open-loop steps in {path} (steps "
                             f"under {MIN_CLIENT_GAP_S * 1e3:g} ms or under "
                             f"{MIN_OPEN_STEPS} per batch size); point skipped")
            else:
                notes.append(f"{label}: open-loop decode steps at B = "
                             f"{', '.join(str(x.tokens) for x in got)} replace the lockstep "
                             "probes there (" + ", ".join(
                                 f"{x.samples} steps at B={x.tokens}" for x in got) + ")")
            samples.extend(got)
            continue
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
           "engine_facts", "open_loop_samples", "open_loop_steps",
           "open_rate_req_s", "plan_points", "prefill_sample", "read_jsonl", "run_probe",
           "samples_from_traces", "timing_note", "trace_ref"]
