"""The HTML report in headless Chromium: it opens with no console error and no request
leaves the file, and its metric cells hold the numbers of `ridgeline analyze --json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ridgeline.metrics.render import fmt
from tests.browser import chromium, console_errors

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
ARTIFACTS = Path(os.environ.get("RIDGELINE_TEST_ARTIFACTS", "out/test-artifacts"))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([RIDGELINE, *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def expected_cells(analysis: dict) -> dict[tuple[str, str], float]:
    """(metric, stat) -> value, read from `analyze --json`."""
    out: dict[tuple[str, str], float] = {}
    for key, d in analysis["latency"].items():
        if not d.get("available"):
            continue
        out[(key, "count")] = d["count"]
        out[(key, "mean")] = d["mean"]
        out[(key, "max")] = d["max"]
        for p, v in d["percentiles"].items():
            out[(key, p)] = v["value"]
    for k in ("requests_per_s", "output_tok_s", "total_tok_s"):
        out[("throughput", k)] = analysis["throughput"][k]
    return out


def test_report_opens_offline_and_its_tables_match_analyze_json(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    run("simulate", "--rate", "6", "--requests", "150", "--trace", str(a), "--timeline",
        str(tmp_path / "tl.csv"))
    run("simulate", "--rate", "12", "--requests", "150", "--seed", "3", "--trace", str(b))
    report = tmp_path / "report.html"
    run("report", str(a), str(b), "--timeline", str(tmp_path / "tl.csv"), "--estimate-model",
        "llama-3.1-8b", "--out", str(report))
    truth = [expected_cells(json.loads(run("analyze", str(p), "--json").stdout))
             for p in (a, b)]
    driver = chromium(tmp_path)
    try:
        driver.get(report.as_uri())
        assert driver.title == "ridgeline report"
        # Every resource the page loaded is inline (data: URIs): nothing went to a network.
        urls = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)")
        assert [u for u in urls if not u.startswith("data:")] == []
        imgs = driver.execute_script(
            "return [...document.images].map(i => [i.complete, i.naturalWidth])")
        assert len(imgs) == 4 and all(ok and w > 100 for ok, w in imgs)
        for i, want in enumerate(truth):
            cells = driver.execute_script(
                "return [...document.querySelectorAll(`section.run[data-run='" + str(i)
                + "'] td[data-metric]`)].map(td => [td.dataset.metric, td.dataset.stat, "
                "td.dataset.value, td.textContent])")
            seen = set()
            for metric, stat, value, text in cells:
                exp = want[(metric, stat)]
                assert float(value) == exp, (metric, stat)
                shown = f"{exp:,}" if stat == "count" else fmt(exp)
                assert text.startswith(shown), (metric, stat, text, shown)
                seen.add((metric, stat))
            # the table shows every percentile analyze reports for TTFT/TPOT/ITL/E2E
            for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
                for stat in ("count", "mean", "p50", "p90", "p95", "p99", "max"):
                    assert (key, stat) in seen
            assert ("throughput", "output_tok_s") in seen
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "report-top.png"))
        assert console_errors(driver) == []
    finally:
        driver.quit()


def test_report_charts_are_interactive_offline(tmp_path):
    """The latency-vs-load and percentile charts: drawn by the inlined uPlot (no request),
    hover puts values in the legend, a legend click hides a series, a drag zooms."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    a = tmp_path / "a.jsonl"
    run("simulate", "--rate", "6", "--requests", "150", "--trace", str(a))
    run("simulate", "--rate", "2,6,12", "--requests", "150", "--trace", str(tmp_path / "s.jsonl"))
    report = tmp_path / "report.html"
    run("report", str(a), "--sweep", str(tmp_path / "s.rate*.jsonl"), "--out", str(report))
    driver = chromium(tmp_path)
    try:
        driver.get(report.as_uri())
        urls = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)")
        assert [u for u in urls if not u.startswith("data:")] == []
        ids = driver.execute_script(
            "return [...document.querySelectorAll('[data-chart]')].filter(e => e.chart)"
            ".map(e => e.dataset.chart)")
        assert ids[:3] == ["load_ttft", "load_tpot", "load_throughput"]
        assert "pct_ttft_ms" in ids
        # The chart holds the sweep's rates on x and its P50 TTFT on the first series.
        xs = driver.execute_script(
            "return document.querySelector('[data-chart=load_ttft]').chart.data[0]")
        assert xs == [2, 6, 12]
        over = driver.find_element(By.CSS_SELECTOR, "[data-chart=load_ttft] .u-over")
        ActionChains(driver).move_to_element(over).perform()
        shown = driver.execute_script(
            "return [...document.querySelectorAll('[data-chart=load_ttft] .u-legend .u-value')]"
            ".map(e => e.textContent)")
        assert any(v not in ("", "--") for v in shown[1:]), shown
        entry = driver.find_elements(By.CSS_SELECTOR,
                                     "[data-chart=load_ttft] .u-legend .u-series")[1]
        entry.click()
        assert driver.execute_script(
            "return document.querySelector('[data-chart=load_ttft]').chart.series[1].show") \
            is False
        before = driver.execute_script(
            "const c = document.querySelector('[data-chart=load_ttft]').chart;"
            "return [c.scales.x.min, c.scales.x.max]")
        (ActionChains(driver).move_to_element_with_offset(over, -100, 0).click_and_hold()
         .move_by_offset(120, 0).release().perform())
        after = driver.execute_script(
            "const c = document.querySelector('[data-chart=load_ttft]').chart;"
            "return [c.scales.x.min, c.scales.x.max]")
        assert after[1] - after[0] < before[1] - before[0]
        assert console_errors(driver) == []
    finally:
        driver.quit()
