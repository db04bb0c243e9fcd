"""Interactive charts for the HTML report: uPlot (vendored in report/static/, inlined), fed
with the numbers the PNG plots draw. Hover shows the values in the legend, a click on a
legend entry hides or shows its series, a drag zooms the x axis, a double click resets.

The report stays one offline file: the library, its stylesheet, the data (a JSON script
element) and the few lines that build the charts are all inside the page.

>>> spec = latency_chart_specs({"sim": []})
>>> [s["id"] for s in spec]
['load_ttft', 'load_tpot', 'load_throughput']
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from ridgeline.jsonsafe import finite_or_none
from ridgeline.report.style import color

PERCENTILE_GRID = [float(p) for p in range(1, 100)] + [99.5, 99.9]
CDF_KEYS = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("itl_ms", "ITL (ms)"),
            ("e2e_ms", "E2E (ms)"))


def _static(name: str) -> str:
    return resources.files("ridgeline.report").joinpath("static", name).read_text("utf-8")


def latency_chart_specs(sweeps: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Latency vs load: TTFT and TPOT (P50 solid, P99 dashed) and output throughput against
    the offered rate, one series per sweep (simulated, measured)."""
    rates = sorted({p.rate_req_s for pts in sweeps.values() for p in pts})

    def col(pts: list[Any], attr: str) -> list[float | None]:
        by_rate = {p.rate_req_s: getattr(p, attr) for p in pts}
        return [finite_or_none(by_rate[r]) if r in by_rate else None for r in rates]

    def chart(cid: str, title: str, y_label: str, attrs: list[tuple[str, str]]
              ) -> dict[str, Any]:
        series = []
        for i, (name, pts) in enumerate(sweeps.items()):
            for attr, tag in attrs:
                series.append({"label": f"{name} {tag}".strip(), "color": color(i),
                               "dash": tag == "P99", "y": col(pts, attr)})
        return {"id": cid, "title": title, "x_label": "offered rate (req/s)",
                "y_label": y_label, "x": rates, "series": series, "points": True}

    return [
        chart("load_ttft", "TTFT vs load", "TTFT (ms)",
              [("ttft_p50_ms", "P50"), ("ttft_p99_ms", "P99")]),
        chart("load_tpot", "TPOT vs load", "TPOT (ms)",
              [("tpot_p50_ms", "P50"), ("tpot_p99_ms", "P99")]),
        chart("load_throughput", "Throughput vs load", "output tok/s",
              [("output_tok_s", "")]),
    ]


def percentile_chart_specs(runs: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Per latency metric, its value at each percentile (1..99, 99.5, 99.9) per run: the
    empirical CDF turned on its side, so runs share the x axis."""
    import numpy as np

    out = []
    for key, label in CDF_KEYS:
        series = []
        for i, (name, a) in enumerate(runs):
            vals = a.samples.get(key)
            if vals is None:
                continue
            x = np.asarray(vals, dtype=np.float64)
            x = x[np.isfinite(x)]
            if x.size == 0:
                continue
            ys = np.percentile(x, PERCENTILE_GRID)  # numpy's linear method, as analyze
            series.append({"label": name, "color": color(i), "dash": False,
                           "y": [finite_or_none(float(v)) for v in ys]})
        if series:
            out.append({"id": f"pct_{key}", "title": f"{label.split(' ')[0]} by percentile",
                        "x_label": "percentile", "y_label": label, "x": PERCENTILE_GRID,
                        "series": series, "points": False})
    return out


BUILD_JS = """
(function () {
  var specs = JSON.parse(document.getElementById('ridgeline-charts').textContent);
  specs.forEach(function (s) {
    var el = document.querySelector('[data-chart="' + s.id + '"]');
    if (!el) { return; }
    var series = [{label: s.x_label}];
    s.series.forEach(function (d) {
      series.push({label: d.label, stroke: d.color, width: 1.5, spanGaps: true,
                   dash: d.dash ? [6, 4] : undefined, points: {show: s.points}});
    });
    var opts = {title: s.title, width: Math.max(320, Math.min(el.clientWidth || 900, 1100)),
                height: 300, scales: {x: {time: false}},
                axes: [{label: s.x_label}, {label: s.y_label}], series: series,
                cursor: {drag: {x: true, y: false}}};
    el.chart = new uPlot(opts, [s.x].concat(s.series.map(function (d) { return d.y; })), el);
  });
})();
"""


def chart_div(spec_id: str) -> str:
    return f'<div class="chart" data-chart="{spec_id}"></div>'


def head_css() -> str:
    """uPlot's stylesheet (for the page's <style>)."""
    return _static("uPlot.min.css") + ".chart{background:#fff;margin:.5em 0}"


def scripts(specs: list[dict[str, Any]]) -> str:
    """The data, the library and the builder, as script elements for the end of <body>."""
    if not specs:
        return ""
    data = json.dumps(specs, separators=(",", ":")).replace("</", "<\\/")
    return (f'<script type="application/json" id="ridgeline-charts">{data}</script>'
            f"<script>{_static('uPlot.iife.min.js')}</script><script>{BUILD_JS}</script>")


__all__ = ["chart_div", "head_css", "latency_chart_specs", "percentile_chart_specs",
           "scripts"]
