"""Lay out a `ReportData` as one self-contained HTML file (PNG images inlined as base64,
inline CSS, interactive charts drawn by an inlined copy of uPlot (report/interactive.py), no
external request) or as markdown for a pull request (PNG files written beside it).

Metric cells carry `data-metric`, `data-stat` and `data-value` (the full-precision number of
`ridgeline analyze --json`) so a reader or a test can check them against the JSON.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ridgeline import __version__
from ridgeline.metrics.compare import comparison_markdown
from ridgeline.metrics.render import HEADERS, SHOWN, _summary_lines, analysis_markdown, fmt
from ridgeline.report import interactive as ia
from ridgeline.report.breakdown import plot_op_breakdown
from ridgeline.report.cdf import plot_cdfs
from ridgeline.report.data import ReportData, Run
from ridgeline.report.load import plot_latency_vs_concurrency, plot_latency_vs_load
from ridgeline.report.load_data import knee_rate
from ridgeline.report.roofline import plot_roofline
from ridgeline.report.style import close, png_data_uri, save_figure
from ridgeline.report.timeline import plot_engine_timeline, plot_run_series

GIB = 1024**3
STATS = ("p50", "p90", "p95", "p99")
ENV_KEYS = ("source", "tool", "tool_version", "engine", "engine_version", "clock",
            "environment", "host", "bench", "emulator_speed")
LOAD_KEYS = ("load", "dataset", "seed")
CONFIG_KEYS = ("model", "hardware", "precision", "parallelism", "engine_config")

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d1d1f;
background:#fafafa}
main{max-width:1200px;margin:0 auto;padding:18px 28px 60px}
h1{font-size:1.6em;margin:.4em 0 .1em}h2{border-bottom:2px solid #ddd;padding-bottom:4px;
margin-top:2em}h3{margin-top:1.4em}
table{border-collapse:collapse;margin:.6em 0;font-size:.88em;background:#fff}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:right;vertical-align:top}
th{background:#f0f0f3}td.l,th.l{text-align:left}
img{max-width:100%;background:#fff;border:1px solid #e3e3e3;margin:.5em 0}
.muted{color:#666;font-size:.88em}.kv td{text-align:left}.kv td:first-child{color:#555;
white-space:nowrap}code{background:#f0f0f3;padding:1px 4px;border-radius:3px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:.6em 0}.card{background:#fff;
border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:150px}
.card b{display:block;font-size:1.3em}.advice{background:#fff;border-left:4px solid #2b7;
padding:6px 16px}nav a{margin-right:14px}
"""


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num_attr(x: Any) -> str:
    return repr(float(x)) if isinstance(x, (int, float)) and math.isfinite(x) else ""


def _value_text(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={_value_text(x)}" for k, x in v.items() if x not in (None, {}))
    if isinstance(v, list):
        return ", ".join(_value_text(x) for x in v)
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


# ---- figures ------------------------------------------------------------------------------

_FILE_SUFFIXES = (".jsonl", ".gz", ".json", ".csv", ".txt")


def short_label(label: str) -> str:
    """A run's label for legends and plot titles: a path is shortened to its file name, but
    only a path of an existing file or a clearly file-like one (no spaces, a trace or data
    file suffix); any other label is kept whole ("simulate (rate 10 req/s)" has a slash but
    is not a path).

    >>> short_label("runs/today/a.rate8.jsonl"), short_label("simulate (rate 10 req/s)")
    ('a.rate8.jsonl', 'simulate (rate 10 req/s)')
    """
    p = Path(label)
    file_like = not any(c.isspace() for c in label) and p.suffix.lower() in _FILE_SUFFIXES
    try:
        exists = p.is_file()
    except OSError:  # a label too long or odd for the file system is not a file
        exists = False
    return p.name if (exists or file_like) and p.name else label


def figures(data: ReportData) -> Iterator[tuple[str, str, Any]]:
    """(file stem, caption, Figure) for every plot the data supports, in report order."""
    if data.estimate is not None:
        e = data.estimate
        cfg = e["config"]
        yield ("roofline", "Roofline with the operators of the estimate (prefill filled, "
               "decode hollow)" + ("; x: measured points" if data.measured else ""),
               plot_roofline(e["roofline"], data.measured,
                             title=f"Roofline: {cfg['model']} on {cfg['hardware']}"))
        yield ("operators", "Per-operator share of the prefill and decode step time",
               plot_op_breakdown(e["ops"]))
    if data.sweeps:
        yield ("latency_vs_load", "Latency vs load", plot_latency_vs_load(data.sweeps))
    if data.concurrency_sweeps:
        yield ("latency_vs_concurrency", "Latency vs concurrency",
               plot_latency_vs_concurrency(data.concurrency_sweeps))
    if data.runs:
        yield ("cdf", "Latency distributions", plot_cdfs([(short_label(r.label), r.analysis)
                                                          for r in data.runs]))
    for i, (label, tl) in enumerate(data.timelines):
        yield (f"timeline{i}", f"Engine timeline: {label}",
               plot_engine_timeline(tl, title=f"Engine timeline: {short_label(label)}"))
    for i, run in enumerate(data.runs):
        if run.telemetry:
            yield (f"telemetry{i}", f"Server telemetry: {run.label}",
                   plot_run_series(run.telemetry, run.latency_series,
                                   title=f"Telemetry: {short_label(run.label)}"))


# ---- HTML pieces --------------------------------------------------------------------------

def _kv_table(items: list[tuple[str, Any]]) -> str:
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(_value_text(v))}</td></tr>"
                   for k, v in items if v not in (None, "", {}, []))
    return f'<table class="kv">{rows}</table>' if rows else ""


def _header_html(run: Run) -> str:
    h = run.header
    env = [(k, h.get(k)) for k in ENV_KEYS]
    if isinstance(h.get("start_time_unix_s"), (int, float)):
        env.append(("start time (UTC)", time.strftime("%Y-%m-%d %H:%M:%S",
                                                      time.gmtime(h["start_time_unix_s"]))))
    out = ['<div class="cards">']
    for title, items in (("Environment", env), ("Load", [(k, h.get(k)) for k in LOAD_KEYS]),
                         ("Configuration", [(k, h.get(k)) for k in CONFIG_KEYS])):
        out.append(f'<div class="card"><b>{title}</b>{_kv_table(items)}</div>')
    out.append("</div>")
    return "".join(out)


def _cell(d: Any, stat: str, value: float, ci: tuple[float, float] | None) -> str:
    text = fmt(value) + (f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "")
    return (f'<td data-metric="{esc(d.name)}" data-stat="{stat}" '
            f'data-value="{_num_attr(value)}">{esc(text)}</td>')


def metrics_table_html(a: Any) -> str:
    """The analyze table (same rows and columns as `ridgeline analyze`)."""
    head = "".join(f'<th class="{"l" if h == "metric" else ""}">{esc(h)}</th>'
                   for h in HEADERS)
    rows = []
    for key in SHOWN:
        d = a.latency.get(key)
        if d is None or (d.unavailable and key == "queue_ms"):
            continue
        name = f'<td class="l">{esc(d.label)} ({esc(d.unit)})</td>'
        if d.unavailable:
            rows.append(f'<tr>{name}<td>—</td><td class="l" colspan="6">unavailable: '
                        f"{esc(d.unavailable)}</td></tr>")
            continue
        cells = [f'<td data-metric="{esc(key)}" data-stat="count" '
                 f'data-value="{d.count}">{d.count:,}</td>',
                 _cell(d, "mean", d.mean, d.mean_ci)]
        for s in STATS:
            p = d.percentiles.get(s)
            cells.append(_cell(d, s, p.value, (p.ci_low, p.ci_high)) if p else "<td>—</td>")
        cells.append(_cell(d, "max", d.max, None))
        rows.append(f"<tr>{name}{''.join(cells)}</tr>")
    t = a.throughput
    thr = ""
    if not t.unavailable:
        thr = ('<table><tr><th class="l">throughput</th><th>value</th></tr>'
               + "".join(f'<tr><td class="l">{lbl}</td><td data-metric="throughput" '
                         f'data-stat="{key}" data-value="{_num_attr(v)}">{fmt(v)}</td></tr>'
                         for lbl, key, v in (("requests/s", "requests_per_s", t.requests_s),
                                             ("output tok/s", "output_tok_s", t.output_tok_s),
                                             ("total tok/s", "total_tok_s", t.total_tok_s)))
               + "</table>")
    lines = "".join(f"<li>{esc(x)}</li>" for x in _summary_lines(a))
    warn = "".join(f"<li>{esc(w)}</li>" for w in a.warnings)
    return (f"<table><tr>{head}</tr>{''.join(rows)}</table>{thr}<ul>{lines}</ul>"
            + (f'<p class="muted">warnings:</p><ul class="muted">{warn}</ul>' if warn else ""))


def _estimate_html(e: dict[str, Any]) -> str:
    r, c, cfg = e["result"], e["constants"], e["config"]
    pr, par = cfg["precision"], cfg["parallelism"]
    cards = [("TTFT (prefill)", f"{r['ttft_s'] * 1e3:.3g} ms"),
             ("TPOT (decode step)", f"{r['tpot_s'] * 1e3:.3g} ms"),
             ("decode tok/s (aggregate)", f"{r['decode_aggregate_tok_s']:,.0f}"),
             ("per-sequence tok/s", f"{r['per_sequence_tok_s']:,.1f}"),
             ("weights / GPU", f"{r['weights_per_gpu_bytes'] / GIB:.2f} GiB"),
             ("KV capacity", f"{r['kv_capacity_tokens']:,.0f} tokens"),
             ("ridge point", f"{c['ridge_point_flop_per_byte']:.0f} FLOP/byte"),
             ("decode bound", str(r["decode_bound"]))]
    head = (f"<p><b>{esc(cfg['model'])}</b> on <b>{esc(cfg['hardware'])}</b> · weights "
            f"{esc(pr['weights'])} · KV {esc(pr['kv'])} · activations {esc(pr['activations'])}"
            f" · tp={par['tp']} pp={par['pp']} ep={par['ep']} · B={r['batch_seqs']:g} "
            f"S={r['prompt_tokens']:g} N={r['output_tokens']:g}</p>")
    body = "".join(f'<div class="card" data-estimate="{esc(k)}">{esc(k)}<b>{esc(v)}</b></div>'
                   for k, v in cards)
    fits = "" if r["memory_fits"] else (
        f"<p><b>does not fit</b>: short by {r['memory_shortfall_bytes'] / GIB:.2f} GiB per GPU"
        "</p>")
    assum = "".join(f"<li>{esc(x)}</li>" for x in e["assumptions"])
    return (head + f'<div class="cards">{body}</div>{fits}<details><summary>assumptions'
            f'</summary><ul class="muted">{assum}</ul></details>')


def _sweep_rows(data: ReportData) -> list[list[str]]:
    rows = []
    for name, pts in data.sweeps.items():
        knee = knee_rate(pts)
        for p in sorted(pts, key=lambda q: q.rate_req_s):
            rows.append([name, f"{p.rate_req_s:g}" + (" (knee)" if p.rate_req_s == knee else ""),
                         *_point_cells(p)])
    return rows


def _point_cells(p: Any) -> list[str]:
    """A sweep point's latency percentiles with their CIs, then its throughputs."""
    return [f"{fmt(p.ttft_p50_ms)} [{fmt(p.ttft_p50_ci[0])}, {fmt(p.ttft_p50_ci[1])}]",
            f"{fmt(p.ttft_p99_ms)} [{fmt(p.ttft_p99_ci[0])}, {fmt(p.ttft_p99_ci[1])}]",
            f"{fmt(p.tpot_p50_ms)} [{fmt(p.tpot_p50_ci[0])}, {fmt(p.tpot_p50_ci[1])}]",
            f"{fmt(p.tpot_p99_ms)} [{fmt(p.tpot_p99_ci[0])}, {fmt(p.tpot_p99_ci[1])}]",
            fmt(p.throughput_req_s), fmt(p.output_tok_s), fmt(p.goodput_req_s)]


def _concurrency_rows(data: ReportData) -> list[list[str]]:
    rows = []
    for name, pts in data.concurrency_sweeps.items():
        for p in sorted(pts, key=lambda q: q.concurrency):
            rows.append([name, f"{p.concurrency:g}",
                         *_point_cells(p)])
    return rows


CONCURRENCY_HEADERS = ["series", "concurrency", "TTFT P50 ms [CI]", "TTFT P99 ms [CI]",
                       "TPOT P50 ms [CI]", "TPOT P99 ms [CI]", "req/s", "output tok/s",
                       "goodput req/s"]
SWEEP_HEADERS = ["series", "rate (req/s)", "TTFT P50 ms [CI]", "TTFT P99 ms [CI]",
                 "TPOT P50 ms [CI]", "TPOT P99 ms [CI]", "req/s", "output tok/s",
                 "goodput req/s"]


def _table_html(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _comparison_html(c: Any) -> str:
    rows = [[f"{r.metric} ({r.unit})", fmt(r.a), fmt(r.b),
             f"{fmt(r.diff)} [{fmt(r.diff_ci[0])}, {fmt(r.diff_ci[1])}]",
             f"{r.rel:+.1%}" if math.isfinite(r.rel) else "—", r.verdict] for r in c.rows]
    return (f"<p>A = <code>{esc(c.a_label)}</code>, B = <code>{esc(c.b_label)}</code></p>"
            + _table_html(["metric", "A", "B", "B − A [95% CI]", "change", "verdict"], rows))


def _markdown_to_html(md: str) -> str:
    """Enough markdown for advice text: headings, bullets, paragraphs, `code`, **bold**."""
    import re

    out, in_list = [], False
    for line in md.splitlines():
        s = esc(line.rstrip())
        s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
        s = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", s)
        bullet = re.match(r"^\s*[-*] (.*)", s)
        if bullet:
            if not in_list:
                out.append("<ul>")
                in_list = True
            out.append(f"<li>{bullet.group(1)}</li>")
            continue
        if in_list:
            out.append("</ul>")
            in_list = False
        head = re.match(r"^(#{1,4}) (.*)", s)
        if head:
            level = min(len(head.group(1)) + 2, 6)
            out.append(f"<h{level}>{head.group(2)}</h{level}>")
        elif s.strip():
            out.append(f"<p>{s}</p>")
    if in_list:
        out.append("</ul>")
    return "".join(out)


def render_html(data: ReportData) -> str:
    """The whole report as one HTML document."""
    figs: dict[str, tuple[str, str]] = {}
    for stem, caption, fig in figures(data):
        figs[stem] = (caption, png_data_uri(fig))
        close(fig)

    def img(stem: str) -> str:
        cap, uri = figs[stem]
        return f'<figure><img alt="{esc(cap)}" src="{uri}" data-plot="{esc(stem)}">' \
               f'<figcaption class="muted">{esc(cap)}</figcaption></figure>'

    load_specs = ia.latency_chart_specs(data.sweeps) if data.sweeps else []
    pct_specs = ia.percentile_chart_specs([(short_label(r.label), r.analysis)
                                           for r in data.runs]) if data.runs else []

    def charts(specs: list[dict[str, Any]], stem: str) -> str:
        """Interactive charts, the PNG of the same numbers folded below them."""
        if not specs:
            return img(stem)
        return ("".join(ia.chart_div(c["id"]) for c in specs)
                + '<p class="muted">hover: values in the legend; click a legend entry: hide '
                  "or show it; drag: zoom; double-click: reset.</p>"
                + f"<details><summary class=\"muted\">static image (PNG)</summary>{img(stem)}"
                  "</details>")

    sec: list[tuple[str, str, str]] = []  # (id, title, html)
    if data.advice_markdown:
        sec.append(("advice", "Advice", f'<div class="advice">'
                    f"{_markdown_to_html(data.advice_markdown)}</div>"))
    if data.estimate is not None:
        sec.append(("prediction", "Prediction (roofline model)",
                    _estimate_html(data.estimate) + img("roofline") + img("operators")))
    if data.sweeps:
        sec.append(("load", "Latency vs load", charts(load_specs, "latency_vs_load")
                    + _table_html(SWEEP_HEADERS, _sweep_rows(data))
                    + '<p class="muted">knee: highest rate whose P99 TTFT is at most 3x its '
                      "value at the lowest rate (as <code>ridgeline simulate</code>).</p>"))
    if data.concurrency_sweeps:
        sec.append(("concurrency", "Latency vs concurrency", img("latency_vs_concurrency")
                    + _table_html(CONCURRENCY_HEADERS, _concurrency_rows(data))))
    if data.runs:
        parts = []
        for i, run in enumerate(data.runs):
            parts.append(f'<section class="run" data-run="{i}"><h3>{esc(run.label)}</h3>'
                         f"{_header_html(run)}{metrics_table_html(run.analysis)}</section>")
        parts.append('<p class="muted">CIs: 95% percentile bootstrap (seed '
                     f"{data.runs[0].analysis.seed}); * fewer than 10 samples beyond the "
                     "percentile; numbers as <code>ridgeline analyze --json</code>.</p>")
        sec.append(("runs", "Runs and metrics", "".join(parts)))
        sec.append(("distributions", "Distributions", charts(pct_specs, "cdf")))
    if data.comparisons:
        sec.append(("comparison", "Comparison",
                    "".join(_comparison_html(c) for c in data.comparisons)))
    tl = [s for s in figs if s.startswith(("timeline", "telemetry"))]
    if tl:
        sec.append(("timeline", "Timelines", "".join(img(s) for s in tl)))
    nav = "".join(f'<a href="#{i}">{esc(t)}</a>' for i, t, _ in sec)
    inputs = "".join(f"<li><code>{esc(p)}</code></li>" for p in data.inputs)
    notes = "".join(f"<li>{esc(n)}</li>" for n in data.notes)
    body = "".join(f'<h2 id="{i}">{esc(t)}</h2>{h}' for i, t, h in sec)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
        f"<title>{esc(data.title)}</title><style>{CSS}{ia.head_css()}</style></head><body>"
        "<main>"
        f"<h1>{esc(data.title)}</h1><p class=\"muted\">ridgeline {esc(__version__)} · "
        f"{stamp}</p><nav>{nav}</nav>"
        + (f"<ul class=\"muted\">{inputs}</ul>" if inputs else "")
        + (f"<ul class=\"muted\">{notes}</ul>" if notes else "")
        + body + "</main>" + ia.scripts(load_specs + pct_specs) + "</body></html>\n")


# ---- markdown -----------------------------------------------------------------------------

def render_markdown(data: ReportData, out_path: Path) -> str:
    """Markdown for a pull request; PNGs go to `<stem>_files/` beside `out_path`."""
    img_dir = out_path.parent / f"{out_path.stem}_files"
    imgs: dict[str, str] = {}
    for stem, caption, fig in figures(data):
        save_figure(fig, img_dir / f"{stem}.png")
        close(fig)
        imgs[stem] = f"![{caption}]({img_dir.name}/{stem}.png)"
    out = [f"# {data.title}", ""]
    if data.inputs:
        out += [f"- `{p}`" for p in data.inputs] + [""]
    if data.advice_markdown:
        out += ["## Advice", "", data.advice_markdown.strip(), ""]
    if data.estimate is not None:
        e = data.estimate
        r, cfg = e["result"], e["config"]
        out += ["## Prediction (roofline model)", "",
                f"{cfg['model']} on {cfg['hardware']}: B={r['batch_seqs']:g} "
                f"S={r['prompt_tokens']:g} N={r['output_tokens']:g}", "",
                "| TTFT | TPOT | decode tok/s | weights/GPU | KV capacity |",
                "|---|---|---|---|---|",
                f"| {r['ttft_s'] * 1e3:.3g} ms | {r['tpot_s'] * 1e3:.3g} ms | "
                f"{r['decode_aggregate_tok_s']:,.0f} | {r['weights_per_gpu_bytes'] / GIB:.2f} GiB"
                f" | {r['kv_capacity_tokens']:,.0f} tokens |", "",
                imgs["roofline"], "", imgs["operators"], ""]
    if data.sweeps:
        out += ["## Latency vs load", "", imgs["latency_vs_load"], "",
                "| " + " | ".join(SWEEP_HEADERS) + " |", "|" + "---|" * len(SWEEP_HEADERS)]
        out += ["| " + " | ".join(r) + " |" for r in _sweep_rows(data)] + [""]
    if data.concurrency_sweeps:
        out += ["## Latency vs concurrency", "", imgs["latency_vs_concurrency"], "",
                "| " + " | ".join(CONCURRENCY_HEADERS) + " |",
                "|" + "---|" * len(CONCURRENCY_HEADERS)]
        out += ["| " + " | ".join(r) + " |" for r in _concurrency_rows(data)] + [""]
    for run in data.runs:
        out += [analysis_markdown(run.analysis).replace("## ridgeline analyze:", "## Run:")]
    if data.runs:
        out += ["## Distributions", "", imgs["cdf"], ""]
    for c in data.comparisons:
        out += [comparison_markdown(c)]
    for stem, line in imgs.items():
        if stem.startswith(("timeline", "telemetry")):
            out += [line, ""]
    out += [f"_ridgeline {__version__}_", ""]
    return "\n".join(out)

