"""What `ridgeline estimate` prints for people: one point's phases with the model's error,
memory, the key assumptions; or a sweep's table. Written to an `Out` (report.tables), so the
same page reads as rich tables, plain text, markdown, CSV or JSON."""

from __future__ import annotations

from typing import Any

from ridgeline.perf.model_error import model_error, pm
from ridgeline.perf.vllm_kv_log import vllm_kv_log_for
from ridgeline.report.assumptions import print_assumptions

GIB = 1024**3


def _fmt(x: float, digits: int = 3) -> str:
    """A compact human number: 1.23e+12 -> 1.23 T."""
    ax = abs(x)
    for div, suffix in ((1e15, " P"), (1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k")):
        if ax >= div:
            return f"{x / div:.{digits}g}{suffix}"
    return f"{x:.{digits}g}"


def _ms(seconds: float, decimals: int = 2) -> str:
    return f"{seconds * 1e3:,.{decimals}f} ms"


def header_line(m: Any, r: dict[str, Any]) -> str:
    pr, par = m.precision, m.parallel
    replicas = f" (x{par.dp} replicas)" if par.dp > 1 else ""
    prefix = f" prefix={r['prefix_tokens']:g}" if r["prefix_tokens"] else ""
    adp = f" attention-dp={par.attn_dp}" if par.attn_dp > 1 else ""
    return (f"{m.model.name} on {m.hardware.name} x{par.gpus_per_replica}{replicas} · "
            f"{pr.scheme} · weights {pr.weights} · KV {pr.kv} · activations {pr.activations} · "
            f"tp={par.tp} pp={par.pp}{adp} ep={par.ep} · B={r['batch_seqs']:g} "
            f"S={r['prompt_tokens']:g} N={r['output_tokens']:g}{prefix}")


def phases_table(m: Any, r: dict[str, Any]) -> Any:
    from rich.table import Table

    err = model_error(m)
    tab = Table(title="Phases (one replica)", title_justify="left")
    for col in ("phase", "time", "model error (CV)", "throughput", "FLOPs", "bytes",
                "FLOP/byte", "bound"):
        tab.add_column(col, justify="left" if col in ("phase", "bound") else "right")
    if "serving_ttft_s" in r:
        tab.add_row(f"TTFT serving (joins {r['batch_seqs'] - 1:g} decodes)",
                    _ms(r["serving_ttft_s"]), pm(err.prefill_ape),
                    "", "", "", "", "")
    tab.add_row(f"static-batch prefill (all {r['batch_seqs']:g} prompts at once)",
                _ms(r["prefill_s"]), pm(err.prefill_ape),
                f"{r['prefill_tok_s']:,.0f} prompt tok/s", _fmt(r["prefill_flops"]),
                _fmt(r["prefill_bytes"]) + "B", f"{r['prefill_intensity_flop_per_byte']:.1f}",
                r["prefill_bound"])
    tab.add_row(f"decode step = TPOT (T={r['decode_context_tokens']:g})",
                _ms(r["tpot_s"], 3), pm(err.decode_step_ape),
                f"{r['decode_aggregate_tok_s']:,.0f} tok/s aggregate, "
                f"{r['per_sequence_tok_s']:,.1f} per sequence",
                _fmt(r["decode_flops"]), _fmt(r["decode_bytes"]) + "B",
                f"{r['decode_intensity_flop_per_byte']:.1f}", r["decode_bound"])
    tab.add_row("E2E static batch = prefill + TPOT(N-1)", f"{r['e2e_s']:,.3f} s",
                "",
                f"{r['e2e_output_tok_s']:,.0f} output tok/s", "", "", "", "")
    return tab


def decode_terms_table(r: dict[str, Any], const: dict[str, float]) -> Any:
    from rich.table import Table

    t = Table(title="Decode roofline terms", title_justify="left", show_header=False)
    t.add_column(justify="left")
    t.add_column(justify="right")
    t.add_row("HBM traffic D_w + 2LB(T+1)d_kv·b_kv + D_a",
              f"{_fmt(r['decode_weight_bytes'])}B + {_fmt(r['decode_kv_bytes'])}B + "
              f"{_fmt(r['decode_other_bytes'])}B")
    t.add_row(f"ceiling {r['decode_ceiling_formula']}", f"{r['decode_ceiling_tok_s']:,.0f} tok/s")
    t.add_row("KV crossover T ≈ P·b_w / (2·L·B·d_kv·b_kv)",
              f"{r['kv_crossover_context_tokens']:,.0f} tokens")
    t.add_row("decode attention intensity 2h_q/(h_kv·b_kv)",
              f"{const['decode_attention_intensity_flop_per_byte']:.2f} FLOP/byte")
    t.add_row("ridge point C/β (dense peak)",
              f"{const['ridge_point_flop_per_byte']:.0f} FLOP/byte "
              f"(effective {const['effective_ridge_point_flop_per_byte']:.0f})")
    t.add_row("batch turning point ≈ (C/β)·b_w/2", f"{const['batch_turning_point_seqs']:.0f}")
    if "decode_expected_experts" in r:
        e = r["num_experts"]
        t.add_row("MoE distinct experts per layer E[U] = E(1-(1-k/E)^tokens)",
                  f"prefill {r['prefill_expected_experts']:.2f} of {e:g}, decode "
                  f"{r['decode_expected_experts']:.2f} of {e:g}")
    return t


def memory_table(m: Any, r: dict[str, Any], util: float) -> Any:
    from rich.table import Table

    mem = Table(title=f"Memory per GPU (utilization {util:g})", title_justify="left",
                show_header=False)
    mem.add_column(justify="left")
    mem.add_column(justify="right")
    mem.add_row("weights", f"{r['weights_per_gpu_bytes'] / GIB:.2f} GiB")
    mem.add_row(f"activation workspace (a {m.max_num_batched_tokens:,}-token step)",
                f"{r['workspace_bytes'] / GIB:.2f} GiB")
    mem.add_row("KV per token (whole model)",
                f"{r['kv_bytes_per_token'] / 1024:.1f} KiB ({r['kv_bytes_per_token']:,.0f} B)")
    mem.add_row("KV capacity", f"{r['kv_capacity_tokens']:,.0f} tokens")
    mem.add_row("max concurrent sequences of S+N tokens", f"{r['max_concurrent_seqs']:,.0f}")
    return mem


def fits_line(r: dict[str, Any]) -> str:
    seqs = f"B={r['batch_seqs']:g} sequences of {r['prompt_tokens'] + r['output_tokens']:g} tokens"
    if r["memory_fits"]:
        return (f"fits: {seqs} (KV for {r['max_concurrent_seqs']:,.0f} such sequences; "
                f"weights {r['weights_per_gpu_bytes'] / GIB:.1f} GiB, KV capacity "
                f"{r['kv_capacity_tokens']:,.0f} tokens per replica)")
    return (f"does not fit: {seqs} need {r['memory_shortfall_bytes'] / GIB:.2f} GiB more KV "
            f"per GPU than the {r['kv_capacity_tokens']:,.0f} tokens left (times above assume "
            "it fits); raise --tp/--pp, lower the batch, or use smaller weights/KV dtypes")


def print_single(out: Any, m: Any, r: dict[str, Any], const: dict[str, float],
                 op_tables: dict[str, list[dict[str, Any]]] | None, util: float,
                 details: bool, all_assumptions: bool, ttft_definition: str,
                 engine_log: Any = None) -> None:
    out.print(header_line(m, r), markup=False)
    out.print(phases_table(m, r))
    line = interval_line(r)
    if line:
        out.print(line, markup=False)
    if m.parallel.dp > 1:
        out.print(f"cluster ({m.parallel.dp} replicas): {r['cluster_decode_tok_s']:,.0f} "
                  "decode tok/s aggregate", markup=False)
    log = vllm_kv_log_for(m, util)
    other = engine_log is not None and engine_log.rule != "vllm"
    if details:
        out.print(decode_terms_table(r, const))
        out.print(memory_table(m, r, util))
    if details and other:
        # What the chosen engine would log at start-up with its own KV pool.
        out.print(f"{engine_log.engine_name} start-up log, as its KV sizing rule predicts it:",
                  markup=False)
        for line in engine_log.lines:
            out.print(f"  {line}", markup=False)
    elif details:
        # What a vLLM server would log at start-up with this memory plan: compare with a
        # real log to check the memory model.
        out.print(f"vLLM start-up log, as this memory plan predicts it (max_num_batched_tokens "
                  f"{m.max_num_batched_tokens:,}, block size {log.block_size_tokens}, "
                  f"max_model_len {log.max_model_len:,}):", markup=False)
        for line in log.lines():
            out.print(f"  {line}", markup=False)
        if log.note:
            out.print(f"  ({log.note})", markup=False)
    out.print(fits_line(r), markup=False)
    if not details and other:
        out.print(f"{engine_log.engine_name} would log: {engine_log.headline} "
                  "(--details: memory table, decode roofline terms, the whole start-up log)",
                  markup=False)
    elif not details:
        out.print(f"vLLM would log: GPU KV cache size: {log.kv_cache_tokens:,} tokens "
                  "(--details: memory table, decode roofline terms, the whole start-up log)",
                  markup=False)
    if op_tables:
        print_ops(out, op_tables, const)
    print_assumptions(out, m, all_assumptions, ttft_definition)


def print_ops(out: Any, op_tables: dict[str, list[dict[str, Any]]],
              const: dict[str, float]) -> None:
    from rich.table import Table

    for phase, rows in op_tables.items():
        t = Table(title=f"Operators: {phase}", title_justify="left")
        for col in ("op", "layers", "FLOPs", "bytes", "FLOP/byte", "time", "share", "bound"):
            t.add_column(col, justify="left" if col in ("op", "bound") else "right",
                         no_wrap=col == "op")
        for row in rows:
            t.add_row(row["op"], str(row["num_layers"] or ""), _fmt(row["flops"]),
                      _fmt(row["bytes"]) + "B",
                      f"{row.get('intensity_flop_per_byte', 0):.1f}" if row["bytes"] else "",
                      f"{row['time_s'] * 1e3:.3f} ms", f"{row['time_fraction']:.1%}",
                      row["bound"])
        out.print(t)
    out.print(f"ridge point: {const['ridge_point_flop_per_byte']:.0f} FLOP/byte", markup=False)


def print_sweep(out: Any, results: list[Any], rows: list[dict[str, Any]],
                all_assumptions: bool, ttft_definition: str) -> None:
    from rich.table import Table

    m0 = results[0][0]
    par = m0.parallel
    adp = f" attention-dp={par.attn_dp}" if par.attn_dp > 1 else ""
    out.print(f"{m0.model.name} · weights {m0.precision.weights} · KV {m0.precision.kv} · "
              f"x{par.gpus_per_replica} GPUs: tp={par.tp} pp={par.pp}{adp} ep={par.ep}",
              markup=False)
    tab = Table(title=f"Sweep ({len(rows)} points)", title_justify="left")
    cols = ("hardware", "scheme", "B", "S", "N", "T", "TTFT serving ms", "static prefill ms",
            "TPOT ms", "E2E s", "agg tok/s", "seq tok/s", "decode bound", "fits")
    for c in cols:
        tab.add_column(c, justify="left" if c in ("hardware", "scheme", "decode bound", "fits")
                       else "right", no_wrap=c in ("hardware", "scheme"))
    shown = rows if len(rows) <= 200 or out.fmt in ("csv", "json") else rows[:200]
    for r in shown:
        tab.add_row(r["hardware"], r["scheme"], f"{r['batch_seqs']:g}", f"{r['prompt_tokens']:g}",
                    f"{r['output_tokens']:g}", f"{r['decode_context_tokens']:g}",
                    f"{r['serving_ttft_s'] * 1e3:.2f}" if "serving_ttft_s" in r else "—",
                    f"{r['prefill_s'] * 1e3:.2f}", f"{r['tpot_s'] * 1e3:.3f}",
                    f"{r['e2e_s']:.3f}", f"{r['decode_aggregate_tok_s']:,.0f}",
                    f"{r['per_sequence_tok_s']:,.1f}", r["decode_bound"],
                    f"no (> context {r['context_window_tokens']:,.0f})"
                    if not r["within_context"] else "yes" if r["memory_fits"] else
                    f"no (-{r['memory_shortfall_bytes'] / GIB:.1f} GiB)")
    out.print(tab)
    if len(rows) > len(shown):
        out.print(f"({len(rows) - len(shown)} more rows: use --format csv or --json for all)",
                  markup=False)
    for m, _r, _c in results:
        err = model_error(m)
        out.print(f"{m.hardware.name}: model error (cross-validated) prefill "
                  f"{pm(err.prefill_ape)}, TPOT "
                  f"{pm(err.decode_step_ape)}", markup=False)
        print_assumptions(out, m, all_assumptions, ttft_definition)


def interval_line(r: dict[str, Any]) -> str | None:
    """The model's 80% error interval beside the serving TTFT, TPOT, E2E and decode rate
    (held-out replay residuals; None when the result carries none)."""
    keys = (("serving_ttft", "s"), ("tpot", "s"), ("e2e", "s"), ("decode_aggregate", "tok_s"))
    iv: dict[str, Any] = {k: r.get(f"{k}_interval80_{u}") for k, u in keys}
    if not all(v and None not in v for v in iv.values()):
        return None
    return (f"model error 80% (nominal; held-out replay residuals, below the knee): TTFT "
            f"serving [{iv['serving_ttft'][0] * 1e3:.2f}, {iv['serving_ttft'][1] * 1e3:.2f}] ms, "
            f"TPOT [{iv['tpot'][0] * 1e3:.3f}, {iv['tpot'][1] * 1e3:.3f}] ms, E2E "
            f"[{iv['e2e'][0]:.3f}, {iv['e2e'][1]:.3f}] s, decode "
            f"[{iv['decode_aggregate'][0]:,.0f}, {iv['decode_aggregate'][1]:,.0f}] tok/s")


__all__ = ["interval_line", "print_single", "print_sweep"]
