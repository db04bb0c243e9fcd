"""`advise`: diagnose a trace and recommend techniques, in the metrics chapter's order
OOM -> TTFT -> TPOT/throughput -> tail (the earlier step changes the later one's
bounds).

Symptoms, each with its evidence (a finding is raised only when its symptom is present, so a
healthy trace gets none):

1. memory: preempted or KV-rejected requests (trace), KV usage near full (Prometheus
   metrics), or Little's-law KV demand L x mean context x KV bytes/token near the cache;
2. TTFT: P99 TTFT over its budget. Queueing-dominated when the median TTFT exceeds the
   model's prefill time alone (same prompt, idle replica) by more than half; prefill-dominated
   otherwise. Utilization rho = lambda x predicted service time / replicas.
3. TPOT: P99 TPOT over its budget. Memory-bound when the decode step's arithmetic intensity at
   the observed batch is below the hardware ridge; batch-limited when requests in flight
   reach max_num_seqs.
4. tail: ITL spikes (gaps > SPIKE_FACTOR x median ITL) aligned with another request's first
   token (a prefill entering the batch: interference), or TTFT rising through the run (load
   sensitivity: capacity planning must test at the target load).

Budgets: the `slos` given (ttft_ms/tpot_ms bounds), else DEFAULT_BUDGETS_MS (TTFT P99 <= 1 s,
TPOT P99 < 50 ms: the classic goodput example, "TTFT < 1 s 且 TPOT < 50 ms", strict as there;
a given bound keeps its own operator, so `ttft_ms<=1000` accepts exactly 1 s).

Recommendations follow the seed's symptom -> technique table, each with the perf model's
predicted effect where it has one (a what-if on the step-time model), combined with the
measured time by Amdahl's law: if the model explains a share f of the measured time and
speeds that share up by s, the measured time scales by (1 - f) + f / s. The share is the
model's decode step over the trace's median TPOT (capped at 1); the numbers behind each
predicted sentence are in `Recommendation.effect` (old_ms, new_ms, speedup, share,
time_factor, measured_tpot_ms, predicted_tpot_ms).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.jsonsafe import json_safe
from ridgeline.metrics.analysis import analyze
from ridgeline.metrics.per_request import event_gaps, request_metrics
from ridgeline.metrics.slo import parse_slos
from ridgeline.perf.estimate import decode_work, prefill_work
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.whatif import WhatIf, WhatIfStepTime
from ridgeline.specs.parallel import Parallelism
from ridgeline.specs.precision import resolve_precision
from ridgeline.theory.queueing import amdahl_speedup, little_kv_bytes
from ridgeline.trace.importers import load_trace
from ridgeline.trace.reader import open_trace_bytes
from ridgeline.trace.table import Trace

DEFAULT_BUDGETS_MS = {"ttft": 1000.0, "tpot": 50.0}
DEFAULT_BUDGET_OPS = {"ttft": "<", "tpot": "<"}     # TTFT < 1 s and TPOT < 50 ms
SPIKE_FACTOR = 3.0
QUEUE_SHARE = 0.5
KV_PRESSURE = 0.9
SPEC_K, SPEC_ALPHA = 4, 0.7
ORDER = ("memory", "ttft", "tpot", "tail")


@dataclass
class Recommendation:
    technique: str
    why: str
    predicted: str | None = None          # the model's predicted effect, when computable
    caveat: str | None = None
    effect: dict[str, float] | None = None  # the numbers behind `predicted`


@dataclass
class Finding:
    stage: str                            # memory | ttft | tpot | tail (ORDER)
    diagnosis: str                        # short id, e.g. "ttft_queueing"
    summary: str
    evidence: list[str] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)


@dataclass
class Advice:
    """Diagnosis of one trace. `findings` are in ORDER; empty when healthy."""

    source: str
    model: str | None
    hardware: str | None
    budgets_ms: dict[str, float]
    facts: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def diagnoses(self) -> list[str]:
        return [f.diagnosis for f in self.findings]

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def markdown(self) -> str:
        lines = [f"## Advice: {self.model or 'unknown model'} on "
                 f"{self.hardware or 'unknown hardware'}", ""]
        ops = self.facts.get("budget_ops", DEFAULT_BUDGET_OPS)
        budgets = ", ".join(f"{k.upper()} P99 {ops.get(k, '<=')} {v:g} ms"
                            for k, v in self.budgets_ms.items())
        lines.append(f"Judged against {budgets}. Order: OOM -> TTFT -> TPOT/throughput -> "
                     "tail.")
        lines.append("")
        if not self.findings:
            lines.append("No symptom found: memory, TTFT, TPOT and tails are within bounds.")
        for i, f in enumerate(self.findings, 1):
            lines.append(f"### {i}. [{f.stage}] {f.summary}")
            lines.append("")
            lines += [f"- evidence: {e}" for e in f.evidence]
            for r in f.recommendations:
                text = f"- **{r.technique}**: {r.why}"
                if r.predicted:
                    text += f" Predicted: {r.predicted}."
                if r.caveat:
                    text += f" Caveat: {r.caveat}."
                lines.append(text)
            lines.append("")
        if self.notes:
            lines += [f"_{n}_" for n in self.notes]
        return "\n".join(lines).rstrip() + "\n"


def amdahl_time_factor(share: float, speedup: float) -> float:
    """New time / old time when a share of it gets `speedup` (Amdahl)."""
    return 1.0 / amdahl_speedup(min(max(share, 0.0), 1.0), speedup)


# ---- Prometheus text --------------------------------------------------------------------


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum of each metric's samples over labels (max for *_perc gauges), by metric name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name_part, _, value_part = line.rpartition(" ")
        name = name_part.split("{", 1)[0].strip()
        try:
            v = float(value_part)
        except ValueError:
            continue
        if name.endswith("_perc"):
            out[name] = max(out.get(name, -math.inf), v)
        else:
            out[name] = out.get(name, 0.0) + v
    return out


# ---- the specs behind the trace ----------------------------------------------------------


@dataclass
class _Specs:
    step_model: Any
    max_num_seqs: int | None
    max_num_batched_tokens: int
    chunked_prefill: bool | None
    prefix_caching: bool | None
    kv_capacity_tokens: float
    replicas: int
    weights: str
    kv: str | None
    tp: int


def _specs(header: Any, model: str | None, hardware: str | None, weights: str | None,
           kv: str | None, tp: int | None) -> _Specs | None:
    model = model or header.model
    hardware = hardware or header.hardware
    if not model or not hardware:
        return None
    prec = header.precision or {}
    par = header.parallelism or {}
    ec = header.engine_config or {}
    weights = weights or prec.get("weights") or "bf16"
    kv = kv or prec.get("kv")
    tp = tp or int(par.get("tp", 1))
    mns = ec.get("max_num_seqs")
    mbt = int(ec.get("max_num_batched_tokens", 8192))
    try:
        sm = RooflineStepTime.from_names(
            model=model, hardware=hardware, weights=weights, kv=kv,
            activations=prec.get("activations", "bf16"), tp=tp, pp=int(par.get("pp", 1)),
            ep=int(par.get("ep", 1)), attn_dp=int(par.get("attn_dp", 1)),
            max_num_batched_tokens=mbt,
            max_num_seqs=int(mns or 256), check_fit=False,
            # a trace priced with the plain roofline says so (engine_config.kernel_model)
            kernel_model=bool(ec.get("kernel_model", True)))
    except RidgelineError:
        raise
    kv_cap = ec.get("kv_capacity_tokens") or sm.kv_capacity_tokens()
    replicas = int(ec.get("replicas") or (ec.get("prefill_instances", 0)
                                          + ec.get("decode_instances", 0)) or 1)
    return _Specs(sm, int(mns) if mns else None, mbt, ec.get("chunked_prefill"),
                  ec.get("enable_prefix_caching"), float(kv_cap), replicas, weights, kv, tp)


def _preemptions_from_file(path: str | None) -> tuple[int, int] | None:
    """(preempted requests, preemptions) from the trace's per-request `preemptions` fields,
    if it has them (ridgeline simulate and serve write them)."""
    if not path or not Path(path).is_file():
        return None
    import re

    pat = re.compile(rb'"preemptions"\s*:\s*(\d+)')
    reqs = total = 0
    seen = False
    # Through the trace reader's opener: a .gz trace is decompressed (under its caps), as
    # the metrics read it (opened as UTF-8 text it was an internal error).
    with open_trace_bytes(path) as fh:
        for line in fh:
            m = pat.search(line)
            if m is None:
                continue
            p = int(m.group(1))
            seen = True
            total += p
            reqs += p > 0
    return (reqs, total) if seen else None


# ---- the diagnosis ------------------------------------------------------------------------


@dataclass
class _Facts:
    """What the diagnosis reads: the trace, its analysis, the specs behind it and the
    figures derived once (means, Little's law, budgets). `facts` is `Advice.facts`."""

    trace: Any
    path: str | None
    analysis: Any
    rm: Any
    specs: _Specs | None
    prom: dict[str, float]
    budgets: dict[str, float]
    ops: dict[str, str]
    prompts: np.ndarray
    s_mean: float
    n_mean: float
    ctx: float
    lam: float
    replicas: int
    per_rep_inflight: float
    facts: dict[str, Any]

    def over(self, value_ms: float, metric: str) -> bool:
        """The P99 misses its budget: >= a strict bound, > an inclusive one."""
        if not math.isfinite(value_ms):
            return False
        b = self.budgets[metric]
        return value_ms >= b if self.ops[metric] == "<" else value_ms > b


def _budgets(slos: list[str] | tuple[str, ...] | None) -> tuple[dict[str, float],
                                                               dict[str, str]]:
    """The TTFT/TPOT budgets (ms) and their operators: the defaults, or the SLOs given."""
    budgets = dict(DEFAULT_BUDGETS_MS)
    ops = dict(DEFAULT_BUDGET_OPS)
    for s in parse_slos(list(slos or ())):
        if s.metric in budgets and s.op in ("<=", "<"):
            budgets[s.metric] = s.bound_base * 1e3
            ops[s.metric] = s.op
    return budgets, ops


def _gather_facts(trace: Any, path: str | None, a: Any, specs: _Specs | None,
                  prom: dict[str, float], budgets: dict[str, float], ops: dict[str, str],
                  f: dict[str, Any]) -> _Facts:
    """The trace's figures every stage of the diagnosis reads, recorded in `f` as well."""
    rm = request_metrics(trace)

    def pct(key: str, p: str) -> float:
        d = a.latency.get(key)
        if d is None or d.unavailable or p not in d.percentiles:
            return math.nan
        return float(d.percentiles[p].value)

    ok = rm.ok
    prompts = np.where(trace.prompt_tokens >= 0, trace.prompt_tokens, 0).astype(np.float64)
    outs = np.nan_to_num(rm.output_tokens).astype(np.float64)
    s_mean = float(prompts[ok].mean()) if ok.any() else 0.0
    n_mean = float(outs[ok].mean()) if ok.any() else 0.0
    ctx = s_mean + max(n_mean - 2.0, 0.0) / 2.0
    lam = a.little.lambda_req_s if math.isfinite(a.little.lambda_req_s) else \
        a.throughput.requests_s
    inflight = a.concurrency.mean_in_flight
    f.update(budget_ops=ops, requests=len(trace), ttft_p50_ms=pct("ttft_ms", "p50"),
             ttft_p99_ms=pct("ttft_ms", "p99"), tpot_p50_ms=pct("tpot_ms", "p50"),
             tpot_p99_ms=pct("tpot_ms", "p99"), itl_p50_ms=pct("itl_ms", "p50"),
             itl_p99_ms=pct("itl_ms", "p99"), arrival_rate_req_s=lam,
             mean_in_flight=inflight, mean_prompt_tokens=s_mean, mean_output_tokens=n_mean)
    replicas = specs.replicas if specs else 1
    per_rep_inflight = inflight / replicas if math.isfinite(inflight) else math.nan
    return _Facts(trace, path, a, rm, specs, prom, budgets, ops, prompts, s_mean, n_mean, ctx,
                  lam, replicas, per_rep_inflight, f)


def advise(trace: Any, *, model: str | None = None, hardware: str | None = None,
           weights: str | None = None, kv: str | None = None, tp: int | None = None,
           slos: list[str] | tuple[str, ...] | None = None, metrics_text: str | None = None,
           analysis: Any = None) -> Advice:
    """Diagnose `trace` (a `Trace` or a path). Specs default to the trace header's.

    First the facts (`_gather_facts`), then the diagnosis in the metrics chapter's order:
    memory, TTFT, TPOT, tails; each stage adds its finding when its symptom shows."""
    path = None
    if not isinstance(trace, Trace):
        path = str(trace)
        trace = load_trace(path)
    else:
        path = trace.path
    if not slos:  # the run's own SLOs, recorded by `bench --slo`, before the defaults
        slos = list(getattr(trace.header, "slos", None) or ())
    budgets, ops = _budgets(slos)
    a = analysis or analyze(trace)
    header = trace.header
    specs = _specs(header, model, hardware, weights, kv, tp)
    prom = parse_prometheus(metrics_text) if metrics_text else {}
    adv = Advice(source=header.source, model=model or header.model,
                 hardware=hardware or header.hardware, budgets_ms=budgets, facts={})
    if specs is None:
        adv.notes.append("model/hardware unknown (give --model/--hardware): predictions and "
                         "what-ifs are left out")
    fx = _gather_facts(trace, path, a, specs, prom, budgets, ops, adv.facts)
    for stage in (_diagnose_memory, _diagnose_ttft, _diagnose_tpot, _diagnose_tails):
        adv.findings += stage(fx)
    _diagnose_load_sensitivity(fx, adv)
    adv.findings.sort(key=lambda x: ORDER.index(x.stage))
    return adv


def _diagnose_memory(fx: _Facts) -> list[Finding]:
    """Preemptions, rejections, KV usage and Little's-law KV demand against the cache."""
    trace, specs, f, prom = fx.trace, fx.specs, fx.facts, fx.prom
    pre = _preemptions_from_file(fx.path)
    if pre is None and "vllm:num_preemptions_total" in prom:
        pre = (-1, int(prom["vllm:num_preemptions_total"]))
    rejected = sum(1 for k in trace.error_kind if k == "kv_capacity")
    kv_usage = prom.get("vllm:kv_cache_usage_perc", prom.get("vllm:gpu_cache_usage_perc"))
    ev: list[str] = []
    if pre is not None:
        f.update(preempted_requests=pre[0], preemptions=pre[1])
        if pre[1] > 0 and (pre[0] < 0 or pre[0] >= max(1, 0.01 * len(trace))):
            ev.append(f"{pre[1]:,} preemptions" + (f" hitting {pre[0]:,} of {len(trace):,} "
                                                   "requests" if pre[0] >= 0 else "")
                      + " (KV cache ran out; preempted requests recompute their prefill)")
    if rejected:
        ev.append(f"{rejected:,} requests rejected: prompt + output exceed the KV cache")
    if kv_usage is not None:
        f["kv_cache_usage_perc"] = kv_usage
        if kv_usage >= KV_PRESSURE:
            ev.append(f"KV cache usage {kv_usage:.0%} (Prometheus vllm:kv_cache_usage_perc)")
    if specs and math.isfinite(fx.per_rep_inflight):
        w_s = fx.analysis.little.w_s
        demand_tok = fx.per_rep_inflight * fx.ctx
        f.update(kv_capacity_tokens=specs.kv_capacity_tokens,
                 little_kv_demand_tokens=demand_tok)
        if ev or demand_tok > KV_PRESSURE * specs.kv_capacity_tokens:
            kv_b = little_kv_bytes(fx.lam / fx.replicas, w_s, fx.ctx,
                                   specs.step_model.kv_bytes_per_token) \
                if math.isfinite(w_s) else math.nan
            ev.append(f"Little's law: L = lambda x W = {fx.per_rep_inflight:.0f} requests per "
                      f"replica x {fx.ctx:.0f} tokens mean context = {demand_tok:,.0f} KV "
                      f"tokens ({kv_b / 1e9:.1f} GB) vs a cache of "
                      f"{specs.kv_capacity_tokens:,.0f}")
    if not ev:
        return []
    return [Finding("memory", "memory_pressure", "Memory pressure: the KV cache is the limit",
                    ev, _memory_recs(specs))]


def _diagnose_ttft(fx: _Facts) -> list[Finding]:
    """A TTFT P99 over budget: queueing (saturation) or the prefill itself."""
    f, specs, rm = fx.facts, fx.specs, fx.rm
    ttft99 = f["ttft_p99_ms"]
    if not fx.over(ttft99, "ttft"):
        return []
    ok = rm.ok
    ttft = rm.ttft_s[ok] * 1e3
    ev = [f"TTFT P99 {ttft99:.0f} ms misses {fx.ops['ttft']} {fx.budgets['ttft']:g} ms (P50 "
          f"{f['ttft_p50_ms']:.0f} ms)"]
    queue_share = math.nan
    if specs:
        pre_ms = _prefill_alone_ms(specs, fx.prompts[ok])
        queue_share = float(np.clip(np.median(ttft - pre_ms) / np.median(ttft), 0, 1))
        rho = _utilization(specs, fx.lam, fx.s_mean, fx.n_mean, fx.per_rep_inflight,
                           fx.replicas)
        f.update(predicted_prefill_p50_ms=float(np.median(pre_ms)),
                 ttft_queue_share=queue_share, utilization=rho)
        ev.append(f"predicted prefill alone {np.median(pre_ms):.0f} ms median: queueing "
                  f"is {queue_share:.0%} of the median TTFT")
        if math.isfinite(rho):
            ev.append(f"utilization rho ~ {rho:.0%} (lambda {fx.lam:.3g} req/s x predicted "
                      f"service time / {fx.replicas} replica(s))")
    trend = _ttft_trend(fx.trace, rm)
    if trend is not None:
        f["ttft_last_over_first_third"] = trend
    if not specs or queue_share > QUEUE_SHARE:
        if trend is not None and trend > 2:
            ev.append(f"TTFT grows through the run (last third / first third = "
                      f"{trend:.1f}x): arrivals outpace service (saturation)")
        return [Finding("ttft", "ttft_queueing", "TTFT dominated by queueing (saturation)", ev,
                        _queueing_recs(specs, fx.lam))]
    return [Finding("ttft", "ttft_prefill", "TTFT dominated by the prefill itself", ev,
                    _prefill_recs(specs, fx.trace.header, fx.s_mean))]


def _diagnose_tpot(fx: _Facts) -> list[Finding]:
    """A TPOT P99 over budget: memory-bound decode, or a batch held at max_num_seqs."""
    f, specs = fx.facts, fx.specs
    tpot99, tpot50 = f["tpot_p99_ms"], f["tpot_p50_ms"]
    if not fx.over(tpot99, "tpot"):
        return []
    ev = [f"TPOT P99 {tpot99:.1f} ms misses {fx.ops['tpot']} {fx.budgets['tpot']:g} ms (P50 "
          f"{tpot50:.1f} ms)"]
    diag, summary = "tpot_high", "TPOT over budget"
    recs: list[Recommendation] = []
    if specs:
        b = max(1.0, fx.per_rep_inflight if math.isfinite(fx.per_rep_inflight) else 1.0)
        if specs.max_num_seqs:
            b = min(b, float(specs.max_num_seqs))
        intensity, ridge, t_dec_ms = _decode_intensity(specs, b, fx.ctx)
        f.update(decode_batch=b, decode_intensity_flop_per_byte=intensity,
                 ridge_flop_per_byte=ridge, predicted_decode_step_ms=t_dec_ms)
        share = min(1.0, t_dec_ms / tpot50) if tpot50 > 0 else 1.0
        ev.append(f"decode at batch ~{b:.0f}: intensity {intensity:.0f} FLOP/B vs ridge "
                  f"{ridge:.0f} FLOP/B; predicted step {t_dec_ms:.1f} ms = {share:.0%} of "
                  "the measured median TPOT")
        limited = specs.max_num_seqs is not None and b >= 0.95 * specs.max_num_seqs
        if intensity < ridge:
            diag, summary = "tpot_memory_bound", "TPOT memory-bound (decode reads " \
                "weights and KV, below the ridge)"
        if limited:
            ev.append(f"requests in flight reach max_num_seqs={specs.max_num_seqs}: "
                      "batch-limited")
            if intensity >= ridge:
                diag, summary = "tpot_batch_limited", "Throughput batch-limited"
        recs = _tpot_recs(specs, b, fx.ctx, share, limited, tpot50)
    return [Finding("tpot", diag, summary, ev, recs)]


def _diagnose_tails(fx: _Facts) -> list[Finding]:
    """ITL spikes that line up with other requests' prefills (prefill/decode interference)."""
    f, trace = fx.facts, fx.trace
    gaps, _ = event_gaps(trace)
    if gaps.size < 20:
        return []
    med = float(np.median(gaps))
    spike = gaps > SPIKE_FACTOR * med
    frac_spike = float(spike.mean())
    f.update(itl_spike_fraction=frac_spike)
    if not (frac_spike >= 0.002 and math.isfinite(f["itl_p99_ms"])
            and f["itl_p99_ms"] > SPIKE_FACTOR * f["itl_p50_ms"]):
        return []
    aligned, base = _prefill_alignment(trace, gaps, spike)
    f.update(itl_spikes_aligned_with_prefill=aligned, itl_gaps_aligned_base=base)
    if not (aligned >= 0.5 and aligned > 2 * base):
        return []
    ev = [f"ITL P99 {f['itl_p99_ms']:.1f} ms vs P50 {f['itl_p50_ms']:.1f} ms; "
          f"{frac_spike:.1%} of gaps are spikes (> {SPIKE_FACTOR:g}x median)",
          f"{aligned:.0%} of spikes end with another request's first token (a "
          f"prefill in the batch) vs {base:.0%} of ordinary gaps"]
    return [Finding("tail", "tail_interference", "Tail latency from prefill/decode interference",
                    ev, _interference_recs(fx.specs, trace.header))]


def _diagnose_load_sensitivity(fx: _Facts, adv: Advice) -> None:
    """TTFT that keeps growing through the run, where queueing was not already named."""
    trend = fx.facts.get("ttft_last_over_first_third")
    if trend is not None and trend > 3 and "ttft_queueing" not in adv.diagnoses:
        adv.findings.append(Finding(
            "tail", "tail_load_sensitivity", "Tails sensitive to load", [
                f"TTFT in the last third of the run is {trend:.1f}x the first third"],
            [Recommendation("test at the target load", "continuous batching makes latency "
                            "load-sensitive: plan capacity from a run at the target "
                            "concurrency, never from an idle server")]))


# ---- model helpers -----------------------------------------------------------------------


def _prefill_alone_ms(specs: _Specs, prompts: np.ndarray) -> np.ndarray:
    return np.asarray(specs.step_model.step_time_s(prefill_work(1.0, np.maximum(prompts, 1))),
                      dtype=np.float64) * 1e3


def _utilization(specs: _Specs, lam: float, s_mean: float, n_mean: float, inflight: float,
                 replicas: int) -> float:
    """lambda x (busy seconds per request at the observed batch) / replicas."""
    if not math.isfinite(lam) or s_mean <= 0:
        return math.nan
    sm = specs.step_model
    b = max(1.0, min(inflight if math.isfinite(inflight) else 1.0,
                     float(specs.max_num_seqs or 256)))
    ctx = s_mean + max(n_mean - 2, 0) / 2
    chunk = max(1.0, min(float(specs.max_num_batched_tokens), s_mean))
    pre = float(sm.step_time_s(prefill_work(1.0, chunk))) / chunk * s_mean
    dec = max(n_mean - 1, 0) * float(sm.step_time_s(decode_work(b, ctx))) / b
    return lam * (pre + dec) / replicas


def _decode_intensity(specs: _Specs, b: float, ctx: float) -> tuple[float, float, float]:
    sm = specs.step_model
    w = decode_work(b, ctx)
    bd = sm.breakdown(w)
    intensity = float(bd.flops.sum() / bd.bytes.sum())
    ridge = sm.hardware.ridge_point(sm.precision.gemm_compute_dtype)
    return intensity, ridge, float(sm.step_time_s(w)) * 1e3


def _variant(specs: _Specs, **changes: Any) -> Any:
    """The step-time model with changed weights/kv/tp/max_num_seqs; None if it is invalid."""
    sm = specs.step_model
    pr = sm.precision
    weights = changes.get("weights", specs.weights)
    kv = changes.get("kv", pr.kv)        # a weights what-if keeps the KV dtype
    try:
        v = RooflineStepTime(sm.model, sm.hardware,
                             # a defaulted activation dtype follows the new weights
                             resolve_precision(weights, kv, None if pr.activations_default
                                               else pr.activations),
                             Parallelism(tp=changes.get("tp", specs.tp), pp=sm.parallel.pp,
                                         ep=sm.parallel.ep, attn_dp=sm.parallel.attn_dp),
                             specs.max_num_batched_tokens,
                             changes.get("max_num_seqs", specs.max_num_seqs or 256))
    except RidgelineError:
        return None
    return v


def _variant_decode_ms(specs: _Specs, b: float, ctx: float, **changes: Any) -> float | None:
    """Predicted decode step (ms) with changed weights/kv/tp; None if it does not fit."""
    v = _variant(specs, **changes)
    if v is None or not v.memory().fits:
        return None
    return float(v.step_time_s(decode_work(b, ctx))) * 1e3


def _effect_rec(technique: str, why: str, old_ms: float, new_ms: float | None, share: float,
                tpot_ms: float, what: str, caveat: str | None = None) -> Recommendation:
    """A recommendation whose effect is a change of the modelled decode time per token from
    `old_ms` to `new_ms`, applied to the measured TPOT by Amdahl's law."""
    if new_ms is None or old_ms <= 0 or new_ms <= 0:
        return Recommendation(technique, why, None, caveat)
    s = old_ms / new_ms                       # > 1: the change makes the modelled part faster
    factor = amdahl_time_factor(share, s)     # new measured time / old measured time
    text = (f"{what} {old_ms:.1f} -> {new_ms:.1f} ms ({s:.2f}x on the modelled "
            f"{share:.0%} of the measured time; Amdahl: measured TPOT x {factor:.2f}")
    if tpot_ms > 0:
        text += f", {tpot_ms:.1f} -> {tpot_ms * factor:.1f} ms"
    return Recommendation(technique, why, text + ")", caveat, {
        "old_ms": old_ms, "new_ms": new_ms, "speedup": s, "share": share,
        "time_factor": factor, "measured_tpot_ms": tpot_ms,
        "predicted_tpot_ms": tpot_ms * factor})


# ---- recommendations (the symptom -> technique table) --------------------------------------


def _memory_recs(specs: _Specs | None) -> list[Recommendation]:
    recs = []
    kv_note = None
    if specs:
        pr = specs.step_model.precision
        if pr.kv_bytes > 1:
            kv_note = f"KV bytes per token halve ({pr.kv} -> fp8): about 2x the KV capacity"
    recs.append(Recommendation("KV cache quantization (fp8 KV)", "more tokens fit in the same "
                               "memory", kv_note, "check accuracy on your task"))
    wq = wq_effect = None
    if specs:
        sm = specs.step_model
        mem = sm.memory()
        fp8 = _variant(specs, weights="fp8") if specs.weights in ("bf16", "fp16") else None
        if fp8 is not None:
            # The embedding and LM head stay 16-bit under fp8 weights (precision.py), so
            # less than half the weight memory is freed.
            freed = mem.weight_bytes - fp8.memory().weight_bytes
            extra_tok = freed / mem.kv_bytes_per_token_per_gpu
            wq = (f"fp8 weights free ~{freed / 1024**3:.1f} GiB per GPU for KV "
                  f"(+{extra_tok:,.0f} tokens)")
            wq_effect = {"freed_bytes_per_gpu": freed, "extra_kv_tokens": extra_tok}
    recs.append(Recommendation("weight quantization", "smaller weights leave room for KV", wq,
                               None, wq_effect))
    recs.append(Recommendation("tensor parallelism", "splits weights and KV over more GPUs",
                               "TP x2 roughly doubles the per-replica KV capacity"
                               if specs else None))
    recs.append(Recommendation("PagedAttention / fewer concurrent sequences",
                               "lower max_num_seqs to stop preemption storms (trades "
                               "throughput)"))
    return recs


def _queueing_recs(specs: _Specs | None, lam: float) -> list[Recommendation]:
    recs = [Recommendation("add capacity (replicas)", "arrivals exceed or approach the "
                           "service rate; queueing (1/(1-rho)) dominates TTFT; `ridgeline "
                           "plan` finds the replica count with headroom"),
            Recommendation("raise per-replica throughput", "larger batch caps, quantized "
                           "weights, prefix caching reduce the service time per request")]
    return recs


def _prefill_recs(specs: _Specs | None, header: Any, prompt_mean_tokens: float
                  ) -> list[Recommendation]:
    recs = [Recommendation("chunked prefill", "bounds each step so decodes keep running; "
                           "splits long prompts")]
    ds = header.dataset or {}
    ec = header.engine_config or {}
    if ds.get("prefix_tokens") and not ec.get("enable_prefix_caching", True):
        # The shared prefix's share of the mean prompt: what a hit skips of each prefill.
        share = min(1.0, ds["prefix_tokens"] / max(1.0, prompt_mean_tokens))
        recs.append(Recommendation("prefix caching", "shared prefixes are recomputed",
                                   f"a hit skips the shared part of each prefill (up to "
                                   f"{share:.0%} of its tokens)", None,
                                   {"prefix_share_of_prompt": share}))
    else:
        recs.append(Recommendation("prefix caching", "a cache hit removes prefill compute for "
                                   "the shared part of the prompt"))
    if specs:
        recs.append(Recommendation("tensor parallelism / faster GEMMs", "prefill is compute-"
                                   "bound: more FLOP/s shortens it",
                                   "TP x2 roughly halves the prefill compute time"))
    return recs


def _tpot_recs(specs: _Specs, b: float, ctx: float, share: float,
               limited: bool, tpot_ms: float) -> list[Recommendation]:
    old = _variant_decode_ms(specs, b, ctx) or 0.0
    recs = []
    if specs.weights in ("bf16", "fp16"):
        recs.append(_effect_rec("weight-only quantization (fp8)", "decode is bound by "
                                "reading weights", old,
                                _variant_decode_ms(specs, b, ctx, weights="fp8"), share,
                                tpot_ms, "decode step"))
        recs.append(_effect_rec("weight-only quantization (int4)", "a quarter of the bytes",
                                old, _variant_decode_ms(specs, b, ctx, weights="int4"),
                                share, tpot_ms, "decode step", "accuracy risk grows at 4 bits"))
    kvb = specs.step_model.precision.kv_bytes
    if kvb > 1:
        recs.append(_effect_rec("fp8 KV cache", "long contexts read much KV per step", old,
                                _variant_decode_ms(specs, b, ctx, kv="fp8"), share, tpot_ms,
                                "decode step"))
    recs.append(_effect_rec("tensor parallelism x2", "splits the bytes each GPU reads", old,
                            _variant_decode_ms(specs, b, ctx, tp=specs.tp * 2), share,
                            tpot_ms, "decode step"))
    if limited:
        new_b = 2 * b
        per_tok_old = old / b
        new = _variant_decode_ms(specs, new_b, ctx,
                                 max_num_seqs=int(2 * (specs.max_num_seqs or 256)))
        pred = effect = None
        if new is not None and old > 0:
            gain = (new_b / new) / (b / old)
            pred = (f"batch {b:.0f} -> {new_b:.0f}: throughput per replica x "
                    f"{gain:.2f}, step {old:.1f} -> {new:.1f} ms "
                    f"({per_tok_old:.2f} -> {new / new_b:.2f} ms per token)")
            effect = {"old_ms": old, "new_ms": new, "old_batch": b, "new_batch": new_b,
                      "throughput_factor": gain}
        recs.append(Recommendation("larger batch cap (max_num_seqs)", "the batch is at its "
                                   "cap while decode is below the ridge", pred,
                                   "needs KV room: check memory first", effect))
    spec = WhatIfStepTime(specs.step_model, WhatIf(spec_k=SPEC_K, spec_alpha=SPEC_ALPHA))

    t_spec = float(spec.step_time_s(decode_work(b, ctx))) * 1e3
    recs.append(_effect_rec(
        "speculative decoding", f"more tokens per weight read (k={SPEC_K}, assumed "
        f"acceptance {SPEC_ALPHA:g}, no draft cost)", old, t_spec, share, tpot_ms,
        "time per token",
        "with quantization it amplifies accuracy risk; under continuous batching sequences "
        "advance unevenly, and at large batches the verify pass turns compute-bound"))
    recs.append(Recommendation("CUDA graphs / FlashAttention-class backend", "cut per-kernel "
                               "launch overhead and attention bytes"))
    return recs


def _interference_recs(specs: _Specs | None, header: Any) -> list[Recommendation]:
    ec = header.engine_config or {}
    recs = []
    if ec.get("chunked_prefill") is False:
        recs.append(Recommendation("chunked prefill", "a whole long prompt runs in one step "
                                   "and stalls every decode in the batch",
                                   f"steps bounded by max_num_batched_tokens="
                                   f"{ec.get('max_num_batched_tokens', 8192)}"))
    else:
        recs.append(Recommendation("smaller max_num_batched_tokens", "smaller prefill chunks "
                                   "per step bound each decode stall (TTFT rises)"))
    recs.append(Recommendation("prefill/decode disaggregation", "separate instances for the "
                               "two phases remove the interference (KV moves over the link); "
                               "try `ridgeline simulate --pd P:D`"))
    recs.append(Recommendation("SLO-aware scheduling / limit batch size", "bound the work "
                               "mixed into a decode step"))
    return recs


def _prefill_alignment(trace: Any, gaps: np.ndarray, spike: np.ndarray) -> tuple[float, float]:
    """Fraction of spike gaps (and of ordinary gaps) inside which another request's first
    token appears, i.e. a prefill finished in that window."""
    counts = trace.event_counts
    offs = trace.event_offsets
    times = trace.event_times_s
    has = counts > 0
    firsts = np.sort(times[offs[:-1][has]])
    # Gap i of the pooled list: between events (start, end) of the same request.
    ends_idx = np.ones(times.size, dtype=bool)
    ends_idx[offs[:-1][has]] = False            # first events end no gap
    end_t = times[ends_idx]
    start_t = end_t - gaps
    inside = (np.searchsorted(firsts, end_t, side="right")
              - np.searchsorted(firsts, start_t, side="right")) > 0
    a = float(inside[spike].mean()) if spike.any() else 0.0
    b = float(inside[~spike].mean()) if (~spike).any() else 0.0
    return a, b


def _ttft_trend(trace: Any, rm: Any) -> float | None:
    ok = rm.ok & np.isfinite(rm.ttft_s)
    if ok.sum() < 30:
        return None
    order = np.argsort(trace.sent_s[ok], kind="stable")
    t = rm.ttft_s[ok][order]
    k = t.size // 3
    first, last = float(np.median(t[:k])), float(np.median(t[-k:]))
    return last / first if first > 0 else None


__all__ = ["Advice", "Finding", "Recommendation", "advise", "amdahl_time_factor",
           "parse_prometheus"]
