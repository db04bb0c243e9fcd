"""Plot functions: the expected artists, checked through matplotlib's objects.

Reference numbers come from the catalog JSON (peaks, bandwidth), from `ridgeline estimate
--json --ops` run as a separate process, or from hand-built inputs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from ridgeline.metrics.analysis import analyze
from ridgeline.report.breakdown import plot_op_breakdown
from ridgeline.report.cdf import plot_cdfs
from ridgeline.report.estimate_view import estimate_view
from ridgeline.report.load import plot_latency_vs_load
from ridgeline.report.load_data import LoadPoint
from ridgeline.report.roofline import load_measured_points, plot_roofline
from ridgeline.report.style import save_figure
from ridgeline.report.timeline import plot_engine_timeline, plot_run_series
from ridgeline.trace.table import Trace

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


def _lines_by_gid(ax, prefix: str) -> dict[str, object]:
    return {ln.get_gid(): ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith(prefix)}


@pytest.fixture(scope="module")
def est_json() -> dict:
    out = subprocess.run([RIDGELINE, "estimate", "--model", "llama-3.1-8b", "--hardware",
                          "h100-sxm", "--batch", "16", "--prompt", "512", "--output", "64",
                          "--ops", "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_roofline_has_labels_ridge_and_one_marker_per_operator(est_json):
    hw = json.loads(resources.files("ridgeline.specs").joinpath(
        "data", "hardware", "h100-sxm.json").read_text())
    peak, bw = hw["peak_flops"]["bf16"], hw["memory_bandwidth_bytes_s"]
    v = estimate_view("llama-3.1-8b", "h100-sxm", batch=16, prompt=512, output=64)
    fig = plot_roofline(v["roofline"])
    ax = fig.axes[0]
    assert ax.get_xlabel() == "arithmetic intensity (FLOP/byte)"
    assert ax.get_ylabel() == "attainable FLOP/s"
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    ridge = _lines_by_gid(ax, "ridge")["ridge"]
    assert ridge.get_xdata()[0] == pytest.approx(peak / bw)  # 295 FLOP/byte on an H100
    assert ridge.get_ydata()[0] == pytest.approx(peak)
    assert any("ridge point 295 FLOP/byte" in t.get_text() for t in ax.texts)
    roofs = _lines_by_gid(ax, "roof:")
    assert set(roofs) == {"roof:fp32", "roof:bf16", "roof:fp8"}
    assert roofs["roof:fp8"].get_ydata()[0] == pytest.approx(hw["peak_flops"]["fp8"])
    # One marker per operator that has FLOPs and bytes, at F/D and min(peak, I * bw).
    expected = {f"op:{phase}:{r['op']}": r for phase, rows in est_json["ops"].items()
                for r in rows if r.get("flops", 0) > 0 and r.get("bytes", 0) > 0}
    markers = _lines_by_gid(ax, "op:")
    assert set(markers) == set(expected)
    for gid, row in expected.items():
        x = row["flops"] / row["bytes"]
        pk = peak if row["kind"] in ("gemm", "attention") else hw["peak_flops"]["fp32"]
        assert markers[gid].get_xdata()[0] == pytest.approx(x)
        assert markers[gid].get_ydata()[0] == pytest.approx(min(pk, x * bw))
    # prefill and decode are told apart by the marker shape
    assert {m.get_marker() for g, m in markers.items() if g.startswith("op:prefill")} == {"o"}
    assert {m.get_marker() for g, m in markers.items() if g.startswith("op:decode")} == {"^"}


def test_roofline_overlays_measured_points_from_a_loose_json(tmp_path):
    cal = tmp_path / "profile.json"
    cal.write_text(json.dumps({"device": "x", "gemm": {"points": [
        {"name": "gemm 1x4096x4096", "flops": 2 * 4096 * 4096, "bytes": 2 * 4096 * 4098,
         "measured_s": 2e-5},
        {"kind": "bandwidth", "intensity_flop_per_byte": 0.5, "achieved_flops_per_s": 1e12}]}}))
    pts = load_measured_points(cal)
    assert len(pts) == 2
    v = estimate_view("llama-3.1-8b", "h100-sxm")
    ax = plot_roofline(v["roofline"], pts).axes[0]
    m = _lines_by_gid(ax, "measured")["measured"]
    assert m.get_xdata()[0] == pytest.approx(4096 / 4098)
    assert m.get_ydata()[0] == pytest.approx(2 * 4096 * 4096 / 2e-5)
    assert list(m.get_xdata())[1] == 0.5


def test_operator_breakdown_bars_sum_to_100_per_phase(est_json):
    v = estimate_view("llama-3.1-8b", "h100-sxm", batch=16, prompt=512, output=64)
    ax = plot_op_breakdown(v["ops"]).axes[0]
    names = {r["op"] for rows in est_json["ops"].values() for r in rows}
    assert {c.get_label() for c in ax.containers} == names
    widths = np.array([[p.get_width() for p in c.patches] for c in ax.containers])
    assert widths.sum(axis=0) == pytest.approx([100.0, 100.0])
    # the decode bar's gate_up_proj share is its time over the decode step (from the CLI)
    dec = est_json["ops"]["decode"]
    share = 100 * sum(r["time_s"] for r in dec if r["op"] == "gate_up_proj") / sum(
        r["time_s"] for r in dec)
    gate = next(c for c in ax.containers if c.get_label() == "gate_up_proj")
    assert gate.patches[1].get_width() == pytest.approx(share)
    assert ax.get_xlabel() == "share of the step time (%)"


def _pt(rate: float, ttft99: float) -> LoadPoint:
    return LoadPoint(rate, ttft99 / 2, (ttft99 / 2 - 1, ttft99 / 2 + 1), ttft99,
                     (ttft99 - 2, ttft99 + 2), 10.0, (9.0, 11.0), 12.0, (11.0, 13.0),
                     rate * 0.98, rate * 100, rate * 0.9)


def test_latency_vs_load_marks_the_knee_and_draws_both_series():
    # P99 TTFT at the lowest rate is 10 ms: the knee is the last rate with <= 30 ms (rate 4).
    sim = [_pt(1, 10), _pt(2, 12), _pt(4, 25), _pt(8, 400)]
    meas = [_pt(1, 11), _pt(2, 40)]
    fig = plot_latency_vs_load({"simulated": sim, "measured": meas})
    ax_ttft, ax_tpot, ax_thr = fig.axes
    assert ax_ttft.get_ylabel() == "TTFT (ms)" and ax_tpot.get_ylabel() == "TPOT (ms)"
    assert ax_ttft.get_xlabel() == "offered rate (req/s)"
    knees = _lines_by_gid(ax_ttft, "knee:")
    assert knees["knee:simulated"].get_xdata()[0] == 4
    assert knees["knee:measured"].get_xdata()[0] == 1  # 40 > 3 x 11
    p99 = _lines_by_gid(ax_ttft, "ttft:p99:simulated")["ttft:p99:simulated"]
    assert list(p99.get_ydata()) == [10, 12, 25, 400]
    assert len(ax_ttft.collections) == 4  # CI bands: P50 and P99 of two series
    assert "goodput:simulated" in _lines_by_gid(ax_thr, "goodput")


def _trace(ttfts: list[float], gap_s: float = 0.01, tokens: int = 5) -> Trace:
    recs = []
    for i, t in enumerate(ttfts):
        sent = i * 0.5
        ev = [sent + t + k * gap_s for k in range(tokens)]
        recs.append({"id": str(i), "sent_s": sent, "event_times_s": ev, "end_s": ev[-1],
                     "output_tokens": tokens})
    return Trace.from_records({"source": "test"}, recs)


def test_cdfs_one_line_per_run_from_the_analysis_samples():
    a_ttft = [0.1 + 0.001 * i for i in range(40)]
    a = analyze(_trace(a_ttft), window="all")
    b = analyze(_trace([0.2] * 40, gap_s=0.02), window="all")
    fig = plot_cdfs([("A", a), ("B", b)])
    labels = [ax.get_xlabel() for ax in fig.axes]
    assert labels == ["TTFT (ms)", "TPOT (ms)", "ITL (ms)", "E2E (ms)"]
    for ax in fig.axes:
        assert len(ax.get_lines()) == 2
    line = _lines_by_gid(fig.axes[0], "cdf:ttft_ms:A")["cdf:ttft_ms:A"]
    assert line.get_xdata() == pytest.approx([x * 1e3 for x in a_ttft])
    assert line.get_ydata()[-1] == 1.0 and line.get_ydata()[0] == pytest.approx(1 / 40)
    tpot_b = _lines_by_gid(fig.axes[1], "cdf:tpot_ms:B")["cdf:tpot_ms:B"]
    assert tpot_b.get_xdata() == pytest.approx([20.0] * 40)


def test_engine_timeline_panels_and_idle_gaps():
    tl = {"replica": np.zeros(3), "start_s": np.array([0.0, 1.0, 3.0]),
          "end_s": np.array([1.0, 2.0, 4.0]), "batch_size": np.array([2, 3, 1]),
          "prefill_tokens": np.array([100, 0, 50]), "decode_seqs": np.array([0, 3, 1]),
          "kv_blocks_used": np.array([10, 12, 5]), "num_waiting": np.array([1, 0, 0])}
    fig = plot_engine_timeline(tl)
    assert [ax.get_ylabel() for ax in fig.axes] == ["batch size (seqs)", "prefill tokens",
                                                   "KV blocks in use", "queue length"]
    batch = fig.axes[0].get_lines()[0]
    assert batch.get_gid() == "batch_size:0"
    # steps at 0 and 1, idle from 2 to 3 (batch 0), a step at 3, the end at 4
    assert list(batch.get_xdata()) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert list(batch.get_ydata()) == [2, 3, 0, 1, 1]
    kv = fig.axes[2].get_lines()[0]
    assert list(kv.get_ydata()) == [10, 12, 12, 5, 5]  # KV keeps its value while idle
    assert fig.axes[-1].get_xlabel() == "simulated time (s)"


def test_telemetry_series_one_panel_per_name_beside_latency():
    rows = [(0.0, "kv_usage", 0.1), (1.0, "kv_usage", 0.5), (0.5, "num_running", 3),
            (2.0, "kv_usage", 0.4)]
    fig = plot_run_series(rows, {"TTFT": ([0.1, 0.9], [50.0, 70.0])})
    assert len(fig.axes) == 3
    kv = _lines_by_gid(fig.axes[1], "telemetry:kv_usage")["telemetry:kv_usage"]
    assert list(kv.get_xdata()) == [0.0, 1.0, 2.0] and list(kv.get_ydata()) == [0.1, 0.5, 0.4]
    assert fig.axes[2].get_ylabel() == "num_running"


@pytest.mark.parametrize("suffix,magic", [("png", b"\x89PNG"), ("svg", b"<?xml")])
def test_save_figure_writes_png_and_svg(tmp_path, suffix, magic):
    import struct
    import xml.etree.ElementTree as ET

    from matplotlib.image import imread

    from ridgeline.report.style import DPI

    v = estimate_view("llama-3.1-8b", "h100-sxm")
    fig = plot_roofline(v["roofline"])
    w_in, h_in = fig.get_size_inches()
    p = save_figure(fig, tmp_path / f"r.{suffix}")
    data = p.read_bytes()
    assert data.startswith(magic)
    if suffix == "svg":
        root = ET.fromstring(data)  # well-formed, the whole file
        assert root.tag.endswith("svg")
        # matplotlib sizes SVGs in points (72 per inch), whatever the DPI.
        assert float(root.get("width").removesuffix("pt")) == pytest.approx(w_in * 72)
        assert "arithmetic intensity" in p.read_text()
    else:
        # IHDR: the canvas is the figure's size at the report's DPI, and something is drawn.
        width, height = struct.unpack(">II", data[16:24])
        assert (width, height) == (round(w_in * DPI), round(h_in * DPI))
        pixels = imread(p)
        assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 50


def test_run_labels_in_legends_and_titles_are_not_cut_at_slashes(tmp_path):
    """A label is shortened to its file name only when it is a file's path: the simulate
    label "simulate (rate 10 req/s)" reached the legends and titles as "s)"."""
    from ridgeline.report.build import ReportData, Run
    from ridgeline.report.html import figures

    existing = tmp_path / "my runs" / "b.jsonl"  # a real file, spaces in its folder
    existing.parent.mkdir()
    existing.write_text("")
    labels = ["simulate (rate 10 req/s)", "traces/today/a.rate8.jsonl", str(existing),
              "A/B test"]
    shown = ["simulate (rate 10 req/s)", "a.rate8.jsonl", "b.jsonl", "A/B test"]
    a = analyze(_trace([0.1, 0.2, 0.3]), window="all")
    tl = {"replica": np.zeros(2), "start_s": np.array([0.0, 1.0]),
          "end_s": np.array([1.0, 2.0]), "batch_size": np.array([2, 3]),
          "prefill_tokens": np.array([100, 0]), "decode_seqs": np.array([0, 3]),
          "kv_blocks_used": np.array([10, 12]), "num_waiting": np.array([1, 0])}
    data = ReportData(title="t", runs=[Run(x, {}, a) for x in labels],
                      timelines=[(labels[0], tl)])
    figs = {stem: fig for stem, _, fig in figures(data)}
    legend = figs["cdf"].axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == shown
    assert figs["timeline0"]._suptitle.get_text() == "Engine timeline: simulate (rate 10 req/s)"


def test_cdf_axis_goes_logarithmic_past_a_hundredfold_span_and_keeps_its_default_title():
    """The x axis turns logarithmic when the largest sample is more than 100x the smallest
    (seen across all runs of a panel); the figure is titled by default."""
    def ttft_axis(ttft_s: list[float], title: str | None = None):
        fig = plot_cdfs([("A", analyze(_trace(ttft_s), window="all"))], title=title)
        return fig, fig.axes[0]

    for lo_ms, hi_ms, scale in ((0.5, 60.0, "log"),       # 120x: log (0.5 x 60 = 30 is not)
                                (1.0, 100.5, "log"),      # just past 100x
                                (1.0, 99.0, "linear"), (10.0, 50.0, "linear")):
        fig, ax = ttft_axis([lo_ms / 1e3] * 20 + [hi_ms / 1e3] * 20)
        assert ax.get_xscale() == scale, (lo_ms, hi_ms)
    assert fig._suptitle.get_text() == "Latency distributions (empirical CDF)"
    assert ttft_axis([0.01] * 20, title="mine")[0]._suptitle.get_text() == "mine"


def test_engine_timeline_draws_at_most_32_replicas_and_says_so():
    n_rep = 40
    tl = {"replica": np.arange(n_rep, dtype=float), "start_s": np.zeros(n_rep),
          "end_s": np.ones(n_rep), "batch_size": np.ones(n_rep),
          "prefill_tokens": np.zeros(n_rep), "decode_seqs": np.ones(n_rep),
          "kv_blocks_used": np.ones(n_rep), "num_waiting": np.zeros(n_rep)}
    fig = plot_engine_timeline(tl)
    assert {len(ax.get_lines()) for ax in fig.axes} == {32}
    assert "(first 32 of 40 replicas)" in fig._suptitle.get_text()


def test_operator_colors_are_twenty_distinct_dark_then_light():
    import matplotlib

    from ridgeline.report.style import op_color

    cols = [op_color(i) for i in range(20)]
    assert len(set(cols)) == 20 and op_color(20) == cols[0]
    tab20 = [matplotlib.colors.to_hex(c) for c in matplotlib.colormaps["tab20"].colors]
    assert cols[:10] == tab20[0::2] and cols[10:] == tab20[1::2]


def test_series_names_and_short_labels():
    from ridgeline.report.build import _series_name
    from ridgeline.report.html import short_label

    assert [_series_name({"source": s}) for s in ("simulate", "bench", "serve", "aiperf", "")] \
        == ["simulated", "measured", "measured", "measured (aiperf)", "measured"]
    # A path is shortened only when it is a file or clearly file-like (a trace suffix and no
    # spaces); a label with a slash or a dot is not a path by itself.
    assert short_label("runs/today/a.rate8.jsonl") == "a.rate8.jsonl"
    assert short_label("runs/today/run-7") == "runs/today/run-7"
    assert short_label("runs/my run.jsonl") == "runs/my run.jsonl"


def test_timeline_csv_row_cap_counts_data_rows(tmp_path, monkeypatch):
    """The cap is on engine steps (data rows), the header not counted: at a cap of 3, three
    steps are read and a fourth is refused with the cap named."""
    import ridgeline.report.timeline as timeline
    from ridgeline.errors import RidgelineError
    from ridgeline.sim.event_loop import TIMELINE_COLUMNS

    monkeypatch.setattr(timeline, "MAX_TIMELINE_ROWS", 3)
    head = ",".join(TIMELINE_COLUMNS)

    def csv_of(n_steps: int):
        p = tmp_path / f"tl{n_steps}.csv"
        rows = [",".join(["0", str(i), str(i + 1)] + ["1"] * (len(TIMELINE_COLUMNS) - 3))
                for i in range(n_steps)]
        p.write_text("\n".join([head, *rows]) + "\n")
        return p

    assert list(timeline.read_timeline_csv(csv_of(3))["end_s"]) == [1.0, 2.0, 3.0]
    with pytest.raises(RidgelineError, match="more than 3 rows"):
        timeline.read_timeline_csv(csv_of(4))
