"""Gather what a report shows: runs (trace + analysis), a rate sweep, an estimate, engine
timelines, comparisons, advice. The HTML and markdown writers (`ridgeline.report.html`)
only lay this out.

Every metric comes from `ridgeline.metrics.analysis.analyze` with the same defaults as
`ridgeline analyze` (window 'auto', seed 0), so the report's tables hold the numbers of
`ridgeline analyze --json`.
"""

from __future__ import annotations

import glob
import math
from pathlib import Path
from typing import Any, cast

from ridgeline.advise import advise
from ridgeline.errors import RidgelineError
from ridgeline.inputs import write_text_atomic
from ridgeline.metrics.analysis import analyze
from ridgeline.metrics.compare import DEFAULT_ROWS, compare
from ridgeline.metrics.per_request import request_metrics
from ridgeline.metrics.slo import parse_slos

# What a report holds (report/data.py), used here and re-exported.
from ridgeline.report.data import ReportData, Run
from ridgeline.report.estimate_view import estimate_view
from ridgeline.report.html import render_html, render_markdown
from ridgeline.report.load_data import concurrency_point, load_point, sweep_csv_rows
from ridgeline.report.roofline import load_measured_points
from ridgeline.report.timeline import is_timeline_csv, read_timeline_csv, telemetry_rows
from ridgeline.trace.importers import load_trace
from ridgeline.trace.table import STATUSES


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _series_name(header: dict[str, Any]) -> str:
    src = str(header.get("source") or "")
    if src == "simulate":
        return "simulated"
    if src in ("bench", "serve"):
        return "measured"
    return f"measured ({src})" if src else "measured"


def _check_reportable(label: str, trace: Any) -> None:
    """A trace with no request, or none that succeeded, has no latency to plot: one clear
    line instead of empty plots and NaN tables."""
    from collections import Counter

    n = len(trace)
    if n == 0:
        raise RidgelineError(f"trace: {label} holds no requests (a header only); nothing to "
                             "report")
    ok = int((trace.status == 0).sum())
    if ok == 0:
        counts = Counter(STATUSES[c] for c in trace.status.tolist()).most_common()
        what = ", ".join(f"{k} {v:,}" for k, v in counts)
        raise RidgelineError(f"trace: {label}: none of its {n:,} requests succeeded ({what}); "
                             "nothing to report (`ridgeline analyze` shows the errors)")


def run_from_trace(label: str, trace: Any, slos: list[str] | None = None,
                   window: str | None = None, seed: int = 0) -> Run:
    """Analyze a loaded trace exactly as `ridgeline analyze` does."""
    import numpy as np

    _check_reportable(label, trace)
    if not slos:  # the run's own SLOs, recorded by `bench --slo`
        slos = list(getattr(trace.header, "slos", None) or ()) or None
    a = analyze(trace, slos=parse_slos(slos), window=window, seed=seed)
    header = trace.header.model_dump(exclude_none=True)
    lat: dict[str, tuple[Any, Any]] = {}
    telemetry = telemetry_rows(trace)
    if telemetry:
        rm = request_metrics(trace)
        ok = np.isfinite(rm.ttft_s)
        lat["TTFT"] = (trace.sent_s[ok], rm.ttft_s[ok] * 1e3)
        ok = np.isfinite(rm.e2e_s)
        lat["E2E"] = (trace.sent_s[ok], rm.e2e_s[ok] * 1e3)
    return Run(label, header, a, telemetry, lat, trace)


def _expand(patterns: list[str], what: str) -> list[str]:
    out: list[str] = []
    for pat in patterns:
        if any(ch in pat for ch in "*?["):
            hits = sorted(glob.glob(pat))
            if not hits:
                raise RidgelineError(f"{what}: no file matches {pat!r}")
            out.extend(hits)
        else:
            out.append(pat)
    return out


def advice_markdown(runs: list[Run], slos: list[str] | None = None) -> str | None:
    """The advice of `ridgeline.advise` for the last run that has its trace; None when no run
    has one. A trace that advise cannot read (it says why) leaves the section out."""
    run = next((r for r in reversed(runs) if r.trace is not None), None)
    if run is None:
        return None
    try:
        return advise(run.trace, analysis=run.analysis, slos=slos).markdown()
    except RidgelineError:
        return None


def collect(inputs: list[str], *, sweep: list[str] | None = None,
            timeline: list[str] | None = None, estimate: dict[str, Any] | None = None,
            calibration: str | None = None, slos: list[str] | None = None,
            window: str | None = None, seed: int = 0, fmt: str = "auto",
            title: str | None = None) -> ReportData:
    """Read and analyze every input. `inputs`: traces or peer result files (any format
    `ridgeline analyze` reads) and timeline CSVs; `sweep`: traces (or glob patterns) of a
    rate sweep; `estimate`: keyword arguments of `estimate_view`."""
    data = ReportData(title=title or "ridgeline report")
    for path in _expand(list(inputs), "input"):
        data.inputs.append(path)
        if is_timeline_csv(path):
            data.timelines.append((path, read_timeline_csv(path)))
            continue
        data.runs.append(run_from_trace(path, load_trace(path, fmt=fmt), slos, window, seed))
    for path in _expand(list(timeline or []), "--timeline"):
        data.timelines.append((path, read_timeline_csv(path)))
    for path in _expand(list(sweep or []), "--sweep"):
        run = run_from_trace(path, load_trace(path, fmt=fmt), slos, window, seed)
        load = run.header.get("load") or {}
        rate, conc = load.get("rate_req_s"), load.get("concurrency")
        if _positive(rate):
            data.sweeps.setdefault(_series_name(run.header), []).append(
                load_point(cast(float, rate), run.analysis))
        elif _positive(conc) and load.get("pattern", "closed") == "closed":
            data.concurrency_sweeps.setdefault(_series_name(run.header), []).append(
                concurrency_point(cast(float, conc), run.analysis))
        else:
            raise RidgelineError(f"--sweep: {path} records neither an arrival rate nor a "
                                 "closed-loop concurrency (header load.rate_req_s, "
                                 "load.concurrency); allowed: traces of a rate or "
                                 "concurrency sweep")
        data.inputs.append(path)
    if estimate is not None:
        data.estimate = estimate_view(**estimate)
    if calibration:
        data.measured = load_measured_points(calibration)
    if len(data.runs) > 1:
        a = data.runs[0]
        data.comparisons = [compare(a.analysis, b.analysis, DEFAULT_ROWS) for b in data.runs[1:]]
        for c, b in zip(data.comparisons, data.runs[1:], strict=True):
            c.a_label, c.b_label = a.label, b.label
    if not (data.runs or data.sweeps or data.concurrency_sweeps or data.timelines
            or data.estimate):
        raise RidgelineError("report: nothing to report; give a trace, --sweep traces, a "
                             "--timeline CSV or --estimate-model")
    data.advice_markdown = advice_markdown(data.runs, slos)
    return data


def simulation_report_data(runs: list[dict[str, Any]], step_model: Any,
                           title: str | None = None) -> ReportData:
    """A report of `ridgeline simulate`'s in-memory runs (one run, or a rate sweep): the
    metrics, the latency-vs-load sweep, the engine timeline, and the estimate of the same
    configuration at the run's mean batch, prompt and output."""
    import numpy as np

    desc = step_model.describe()
    data = ReportData(title=title or f"ridgeline simulate: {desc['model']} on "
                      f"{desc['hardware']}")
    base = {k: desc[k] for k in ("model", "hardware", "precision", "parallelism")}
    if len(runs) > 1:
        data.sweeps["simulated"] = [load_point(r["rate"], r["analysis"]) for r in runs]
    for r in runs if len(runs) == 1 else runs[-1:]:
        label = f"simulate (rate {r['rate']:g} req/s)" if r["rate"] else "simulate"
        header = base | {"source": "simulate", "engine": "ridgeline-sim", "load": r["load"]}
        data.runs.append(Run(label, header, r["analysis"], trace=r.get("trace")))
        tl = r["result"].timeline
        if tl["end_s"].size:
            data.timelines.append((label, tl))
    res = runs[0]["result"]
    tl = res.timeline
    ok = [s == "ok" for s in res.status]
    if tl["end_s"].size and any(ok):
        batch = max(1.0, round(float(np.mean(tl["batch_size"]))))
        a = runs[0]["analysis"]
        pr = a.latency.get("prompt_tokens")
        out = a.latency.get("output_tokens")
        prompt = max(1.0, round(pr.mean)) if pr is not None and not pr.unavailable else 512.0
        output = max(2.0, round(out.mean)) if out is not None and not out.unavailable else 128.0
        par = step_model.parallel
        pre = step_model.precision
        data.estimate = estimate_view(step_model.model, step_model.hardware,
                                      weights=pre.weights, kv=pre.kv,
                                      activations=pre.activations, tp=par.tp, pp=par.pp,
                                      ep=par.ep, batch=batch, prompt=prompt, output=output)
        data.notes.append(f"estimate at the simulated run's mean batch {batch:g}, mean prompt "
                          f"{prompt:g} and mean output {output:g} tokens")
    data.advice_markdown = advice_markdown(data.runs)
    return data


def write(data: ReportData, out: str | Path, markdown: bool = False) -> Path:
    """Write the report (HTML, or markdown with PNGs beside it) and return its path."""
    p = Path(out)
    if p.exists() and p.is_dir():
        raise RidgelineError(f"--out: {p} is a directory; give a file name")
    p.parent.mkdir(parents=True, exist_ok=True)
    if markdown:
        write_text_atomic(p, render_markdown(data, p))
    else:
        write_text_atomic(p, render_html(data))
    if data.sweeps or data.concurrency_sweeps:  # the sweep's summary, one row per point
        import csv
        import io

        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(
            sweep_csv_rows({**data.sweeps, **{f"{k} (closed loop)": v for k, v in
                                              data.concurrency_sweeps.items()}}))
        write_text_atomic(sweep_csv_path(p), buf.getvalue())
    return p


def sweep_csv_path(report: str | Path) -> Path:
    """`report.html` -> `report.sweep.csv`: the sweep's summary beside the report."""
    p = Path(report)
    return p.with_name(p.stem + ".sweep.csv")
