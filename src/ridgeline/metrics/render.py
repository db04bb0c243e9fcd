"""Show an `AnalysisResult`: rich tables for the terminal, markdown for CI logs and reports."""

from __future__ import annotations

import math
from typing import Any

from ridgeline.metrics.analysis import AnalysisResult
from ridgeline.metrics.distribution import Distribution
from ridgeline.theory.stats import MIN_TAIL_SAMPLES

SHOWN = ("ttft_ms", "tpot_ms", "itl_ms", "itl_per_token_ms", "e2e_ms", "queue_ms",
         "decode_rate_tok_s")


def fmt(x: float | None, digits: int = 3) -> str:
    """A number with `digits` significant figures, thousands separators; '—' for missing."""
    if x is None or not math.isfinite(x):
        return "—"
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - mag)
    return f"{x:,.{decimals}f}"


def _pct_cell(d: Distribution, key: str) -> str:
    p = d.percentiles.get(key)
    if p is None:
        return "—"
    mark = "" if p.supported else "*"
    return f"{fmt(p.value)}{mark} [{fmt(p.ci_low)}, {fmt(p.ci_high)}]"


# The percentiles the table shows (a warning about a thin tail names only these).
SHOWN_PERCENTILES = ("p50", "p90", "p95", "p99")


def same_distribution(a: Distribution, b: Distribution) -> bool:
    """Two rows that would print the same numbers (per-event and per-token ITL when every
    event carries one token)."""
    return (a.count == b.count and a.mean == b.mean and a.max == b.max
            and all(a.percentiles[k].value == b.percentiles[k].value
                    for k in SHOWN_PERCENTILES if k in a.percentiles and k in b.percentiles))


def _rows(result: AnalysisResult, model_errors: dict[str, str] | None = None
          ) -> list[list[str]]:
    rows = []
    for key in SHOWN:
        d = result.latency.get(key)
        if d is None:
            continue
        if key == "itl_per_token_ms":
            ev = result.latency.get("itl_ms")
            if ev is not None and not d.unavailable and not ev.unavailable \
                    and same_distribution(ev, d):
                continue  # one token per event: the per-event row says it all
        if d.unavailable:
            if key == "queue_ms":
                continue  # no scheduled times: nothing worth a row
            rows.append([f"{d.label} ({d.unit})", "—", f"unavailable: {d.unavailable}",
                         "", "", "", "", ""] + ([""] if model_errors is not None else []))
            continue
        if key == "queue_ms" and d.max == 0:
            continue  # every request sent when scheduled: a row of zeros says nothing
        label = d.label
        if key == "itl_ms" and _one_token_per_event(result):
            label = "ITL (pooled; one token per event)"
        rows.append([
            f"{label} ({d.unit})", f"{d.count:,}",
            f"{fmt(d.mean)} [{fmt(d.mean_ci[0])}, {fmt(d.mean_ci[1])}]",
            _pct_cell(d, "p50"), _pct_cell(d, "p90"), _pct_cell(d, "p95"),
            _pct_cell(d, "p99"), fmt(d.max),
        ] + ([model_errors.get(key, "")] if model_errors is not None else []))
    return rows


def _one_token_per_event(result: AnalysisResult) -> bool:
    a, b = result.latency.get("itl_ms"), result.latency.get("itl_per_token_ms")
    return (a is not None and b is not None and not a.unavailable and not b.unavailable
            and same_distribution(a, b))


HEADERS = ["metric", "n", "mean [95% sampling CI]", "P50 [sampling CI]", "P90 [sampling CI]",
           "P95 [sampling CI]", "P99 [sampling CI]", "max"]
MODEL_ERROR_HEADER = "model error (CV)"


def thin_tail_line(result: AnalysisResult) -> str | None:
    """One line about the shown percentiles with fewer than 10 samples beyond them."""
    groups: dict[tuple[str, int], list[str]] = {}
    for key in SHOWN:
        d = result.latency.get(key)
        if d is None or d.unavailable or (key == "queue_ms" and d.max == 0):
            continue
        if key == "itl_per_token_ms" and _one_token_per_event(result):
            continue  # its row is not shown (the per-event row says it all)
        ks = [k.upper() for k in SHOWN_PERCENTILES
              if k in d.percentiles and not d.percentiles[k].supported]
        name = d.label if key.startswith("itl") and not _one_token_per_event(result) \
            else d.label.split(" (")[0]
        if ks:
            groups.setdefault(("/".join(ks), d.count), []).append(name)
    if not groups:
        return None
    return (f"* fewer than {MIN_TAIL_SAMPLES} samples beyond " + "; ".join(
        f"{ks} of {', '.join(names)} (n={n:,})" for (ks, n), names in groups.items())
        + ": noise, read the CI")


def _summary_lines(result: AnalysisResult) -> list[str]:
    c = result.counts
    first = f"requests {c['requests']:,}: " + ", ".join(
        f"{k} {v:,}" for k, v in c["by_status"].items() if v)
    w = result.window
    if w is not None:
        left = c.get("excluded_outside_window", 0)
        first += (f"; window {fmt(w.start_s)}–{fmt(w.end_s)} s ({fmt(w.duration_s)} s; "
                  f"{w.how}" + (f"; {left:,} requests sent outside it left out)" if left
                                else ")"))
    lines = [first]
    if c["errors_by_kind"]:
        lines.append("errors by kind: " + ", ".join(
            f"{k} {v:,}" for k, v in sorted(c["errors_by_kind"].items())))
    t = result.throughput
    if t.unavailable:
        lines.append(f"throughput: unavailable ({t.unavailable})")
    else:
        lines.append(
            f"throughput: {fmt(t.requests_s)} req/s, {fmt(t.output_tok_s)} output tok/s, "
            f"{fmt(t.total_tok_s)} total tok/s (tokens counted {t.token_counting})"
        )
    cc = result.concurrency
    conc = (f"concurrency: mean {fmt(cc.mean_in_flight)} in flight, max {cc.max_in_flight:,}; "
            if math.isfinite(cc.mean_in_flight) else "")
    lt = result.little
    if math.isfinite(lt.ratio):
        lines.append(
            f"{conc}Little's law: L = {fmt(lt.l_in_flight)} vs λ·W = {fmt(lt.lambda_req_s)} × "
            f"{fmt(lt.w_s)} s = {fmt(lt.lambda_req_s * lt.w_s)} over the arrival window "
            f"(ratio {lt.ratio:.3f}): {_little_status(lt)}; "
            f"offered {fmt(lt.lambda_req_s)} req/s, completed {fmt(lt.completed_req_s)} req/s"
        )
        if lt.status == "overloaded":
            lines.append(f"  {lt.note}")
    elif lt.note:
        lines.append(f"{conc}Little's law: {lt.note}")
    elif conc:
        lines.append(conc.rstrip("; "))
    g = result.goodput
    if g is not None:
        if g.unavailable:
            lines.append(f"goodput ({' & '.join(g.slos)}): unavailable ({g.unavailable})")
        else:
            lines.append(
                f"goodput ({' & '.join(g.slos)}): {fmt(g.requests_s)} req/s, "
                f"{fmt(g.output_tok_s)} output tok/s; SLO attainment "
                f"{g.attainment:.1%} [{g.attainment_ci[0]:.1%}, {g.attainment_ci[1]:.1%}] "
                f"({g.good_requests:,}/{g.judged_requests:,})"
            )
    return lines


def _little_status(lt: Any) -> str:
    if lt.ok or lt.status == "unavailable":
        return str(lt.status)
    if getattr(lt, "edge_effect", False):
        return (f"off by {abs(lt.ratio - 1):.0%}, which edge effects explain (the arrival "
                "window is shorter than 10 mean latencies)")
    return str(lt.status).upper()


def window_line(cut: AnalysisResult, whole: AnalysisResult) -> str | None:
    """One line: what the default window left out, and the whole run's TTFT/E2E means (what
    a peer tool, which keeps every request, prints)."""
    left = cut.counts.get("excluded_outside_window", 0)
    if not left:
        return None
    parts = []
    for key, name in (("ttft_ms", "TTFT"), ("e2e_ms", "E2E")):
        a, b = cut.latency.get(key), whole.latency.get(key)
        if a is not None and b is not None and not a.unavailable and not b.unavailable:
            parts.append(f"{name} mean {fmt(b.mean)} ms (here {fmt(a.mean)})")
    return (f"window: warm-up and cool-down cut ({left:,} requests left out); with --window "
            f"all (every request, as AIPerf and vLLM bench report): " + ", ".join(parts))


def print_analysis(result: AnalysisResult, console: Any = None,
                   model_errors: dict[str, str] | None = None,
                   what: str = "ridgeline analyze", whole: AnalysisResult | None = None,
                   model_error_header: str = MODEL_ERROR_HEADER) -> None:
    """Print the analysis (to `console`: a report.tables.Out or a rich Console; default a
    rich Console on stdout: the commands pass their page, in the format the user asked).
    `model_errors`: per metric key, the model's cross-validated error, shown as a column
    beside a simulated (predicted) metric.
    `whole`: the same trace analyzed over the whole run (`--window all`), for one line on
    what the default window cut."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = console if console is not None else Console()
    if getattr(con, "fmt", None) == "csv":
        con.print(numeric_table(result, model_errors))  # numbers, one per cell
        return
    src = result.source
    name = src.get("path") or src.get("source")
    title = what if name and name in what else f"{what} — {name}"
    table = Table(title=title, title_justify="left")
    heads = HEADERS + ([model_error_header] if model_errors is not None else [])
    for h in heads:
        table.add_column(escape(h), justify="left" if h == "metric" else "right")
    for row in _rows(result, model_errors):
        table.add_row(*row)
    con.print(table)
    thin = thin_tail_line(result)
    if thin:
        con.print(thin, markup=False, highlight=False)
    con.print(f"CIs: 95% bootstrap of whole requests in blocks of consecutive requests "
              f"({_blocks(result)}): sampling only"
              + (", not the model's error" if model_errors is not None else "")
              + ". TTFT is measured from the client send time.", style="dim", markup=False,
              highlight=False)
    for line in _summary_lines(result):
        con.print(line, highlight=False, markup=False)
    wline = window_line(result, whole) if whole is not None else None
    if wline:
        con.print(wline, highlight=False, markup=False)
    warnings = shown_warnings(result, window_said=bool(wline))
    if warnings:
        con.print("warnings:", style="yellow")
        for w in warnings:
            con.print(f"  - {w}", highlight=False, markup=False)


def numeric_table(result: AnalysisResult, model_errors: dict[str, str] | None = None) -> Any:
    """The metrics as numbers, one per column (value, CI low, CI high): for CSV."""
    from rich.table import Table

    def num(x: float | None) -> str:
        return "" if x is None or not math.isfinite(x) else repr(float(x))

    cols = ["metric", "unit", "n", "mean", "mean_ci_low", "mean_ci_high"]
    for k in SHOWN_PERCENTILES:
        cols += [k, f"{k}_ci_low", f"{k}_ci_high", f"{k}_thin_tail"]
    cols += ["max"] + (["model_error"] if model_errors is not None else [])
    t = Table(title="ridgeline analyze")
    for c in cols:
        t.add_column(c)
    for key in SHOWN:
        d = result.latency.get(key)
        if d is None or d.unavailable:
            continue
        row = [key, d.unit, str(d.count), num(d.mean), num(d.mean_ci[0]), num(d.mean_ci[1])]
        for k in SHOWN_PERCENTILES:
            p = d.percentiles.get(k)
            row += ([num(p.value), num(p.ci_low), num(p.ci_high),
                     "" if p.supported else "yes"] if p is not None else ["", "", "", ""])
        row += [num(d.max)] + ([model_errors.get(key, "")] if model_errors is not None else [])
        t.add_row(*row)
    return t


def shown_warnings(result: AnalysisResult, window_said: bool = False) -> list[str]:
    """The analysis's warnings less the thin-tail ones (`thin_tail_line` says it once, about
    the percentiles the table shows) and, once `window_line` said it, the window's."""
    # (The window's left-out requests are on the summary's first line, Little's law's
    # verdict and note on its own line.)
    return [w for w in result.warnings if "samples beyond them" not in w
            and "outside the measurement window" not in w
            and not w.startswith("Little's law:")]


def _blocks(result: AnalysisResult) -> str:
    """Block lengths the CIs used, e.g. 'block 1-340 requests'."""
    b = [d.block_requests for d in result.latency.values() if d.block_requests]
    if not b:
        return "no blocks"
    lo, hi = min(b), max(b)
    return f"block {lo:.0f} requests" if round(lo) == round(hi) else \
        f"block {lo:.0f}-{hi:.0f} requests"


def analysis_markdown(result: AnalysisResult) -> str:
    """The analysis as a markdown document (tables and bullet lists)."""
    src = result.source
    out = [f"## ridgeline analyze: {src.get('path') or src.get('source')}", ""]
    out.append("| " + " | ".join(HEADERS) + " |")
    out.append("|" + "---|" * len(HEADERS))
    for row in _rows(result):
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    out.append("")
    thin = thin_tail_line(result)
    if thin:
        out.append(thin.replace("* ", "`*` ", 1))
        out.append("")
    out.append("CIs are 95% sampling CIs: bootstrap of whole requests in blocks of consecutive "
               f"requests ({_blocks(result)}); percentiles use numpy's linear method; TTFT is "
               "measured from the client send time.")
    out.append("")
    out.extend(f"- {line}" for line in _summary_lines(result))
    warnings = shown_warnings(result)
    if warnings:
        out.append("")
        out.append("**Warnings**")
        out.append("")
        out.extend(f"- {w}" for w in warnings)
    return "\n".join(out) + "\n"
