"""`ridgeline estimate`, `roofline`, `models`, `hardware`: the roofline predictor's commands.

Only typer and the standard library are imported here; numpy, rich and the perf model are
imported inside the command bodies so `ridgeline` starts fast.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Any

import typer

from ridgeline.commands.options import (
    ActivationsOpt,
    BandwidthEffOpt,
    CalibrationOpt,
    ComputeEffOpt,
    DpOpt,
    EngineCostsOpt,
    EngineOpt,
    EpOpt,
    JsonOpt,
    KernelOverheadOpt,
    KvOpt,
    MaxModelLenOpt,
    ModelArg,
    ModelOpt,
    PpOpt,
    PrefixCachingOpt,
    ServedModelNameOpt,
    TpOpt,
    WeightsOpt,
    model_from,
    number,
)
from ridgeline.commands.whatif_options import (
    CpuDetokenizeOpt,
    CpuTokenizeOpt,
    EagerOpt,
    SpecAlphaOpt,
    SpecDraftOpt,
    SpecKOpt,
    whatif_from_options,
)
from ridgeline.errors import RidgelineError
from ridgeline.perf.grid import GRID_HELP, MAX_GRID_VALUES, parse_grid

GIB = 1024**3
# Sizes past any deployment (a million sequences in a step, 10 M tokens of context): past
# them the model's numbers are extrapolation into nothing real.
MAX_BATCH = 1 << 20
MAX_TOKENS = 10_000_000


def _capped(values: list[float], field: str, text: str, hi: float) -> list[float]:
    if values and max(values) > hi:
        raise RidgelineError(f"{field}: got {text!r}; allowed: values up to {hi:,.0f}")
    return values


def _fmt(x: float, digits: int = 3) -> str:
    """A compact human number: 1.23e+12 -> 1.23 T."""
    ax = abs(x)
    for div, suffix in ((1e15, " P"), (1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k")):
        if ax >= div:
            return f"{x / div:.{digits}g}{suffix}"
    return f"{x:.{digits}g}"


def _jsonable(x: Any) -> Any:
    import numpy as np

    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and x != x:
        return None
    return x


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(_jsonable(data), indent=2) + "\n")


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate_cmd)
    app.command("roofline")(roofline_cmd)
    app.command("models")(models_cmd)
    app.command("hardware")(hardware_cmd)


def _with_whatif(base: Any, wi: Any) -> Any:
    return lambda: [*base(), *wi.assumptions()]


def estimate_cmd(
    model_arg: ModelArg = None,
    model: ModelOpt = "llama-3.1-8b",
    hardware: Annotated[str, typer.Option(
        "--hardware", "-g", help="Catalog GPU name(s), comma separated, or a hardware JSON "
        "path (see `ridgeline hardware`).")] = "h100-sxm",
    batch: Annotated[str, typer.Option("--batch", "-b", help=f"Sequences per step: {GRID_HELP}."
                                       )] = "32",
    prompt: Annotated[str, typer.Option("--prompt", "-p", help=f"Prompt tokens: {GRID_HELP}."
                                        )] = "1024",
    output: Annotated[str, typer.Option("--output", "-o", help=f"Output tokens: {GRID_HELP}."
                                        )] = "256",
    context: Annotated[str | None, typer.Option(
        "--context", "-t", help="Decode context T for the decode step (default: the mean "
        f"context S + (N-2)/2): {GRID_HELP}.")] = None,
    prefix: Annotated[int, typer.Option("--prefix", min=0, help="Prompt tokens already in "
                                        "the prefix cache (not recomputed).")] = 0,
    weights: WeightsOpt = None,
    kv: KvOpt = None,
    activations: ActivationsOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    ep: EpOpt = 1,
    dp: DpOpt = 1,
    compute_efficiency: ComputeEffOpt = None,
    bandwidth_efficiency: BandwidthEffOpt = None,
    kernel_overhead_us: KernelOverheadOpt = None,
    gpu_memory_utilization: Annotated[float, typer.Option(
        "--gpu-memory-utilization", callback=number(gt=0, le=1), help="Fraction of GPU memory "
        "for weights + workspace + KV (as vLLM).")] = 0.9,
    ops: Annotated[bool, typer.Option("--ops", help="Per-operator breakdown (prefill and "
                                      "decode).")] = False,
    spec_k: SpecKOpt = 0,
    spec_alpha: SpecAlphaOpt = 0.7,
    spec_draft_model: SpecDraftOpt = None,
    enforce_eager: EagerOpt = False,
    cpu_tokenize_us_per_token: CpuTokenizeOpt = 0.0,
    cpu_detokenize_us_per_event: CpuDetokenizeOpt = 0.0,
    calibration: CalibrationOpt = None,
    engine: EngineOpt = "vllm",
    engine_costs: EngineCostsOpt = True,
    max_model_len: MaxModelLenOpt = None,
    served_model_name: ServedModelNameOpt = None,
    prefix_caching: PrefixCachingOpt = True,
    chunked_prefill: Annotated[bool, typer.Option(
        "--enable-chunked-prefill/--no-enable-chunked-prefill",
        "--chunked-prefill/--no-chunked-prefill", help="vLLM's; no effect here: estimate "
        "times the whole prefill of a batch as one step (simulate splits it).")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Predict prefill/TTFT, decode/TPOT, E2E, throughput and memory from first principles."""
    import numpy as np

    del served_model_name, chunked_prefill  # no effect on one step's estimate
    if prefix > 0 and not prefix_caching:
        raise RidgelineError(f"--prefix: got {prefix}; allowed: 0 with "
                             "--no-enable-prefix-caching (nothing is cached without it)")
    model = model_from(model_arg, model, "llama-3.1-8b")
    if max_model_len is not None:  # vLLM refuses a request longer than its context
        longest = max(parse_grid(prompt, "--prompt")) + max(parse_grid(output, "--output"))
        if longest > max_model_len:
            raise RidgelineError(f"--max-model-len: got {max_model_len}; allowed: at least "
                                 f"the longest --prompt + --output ({longest:g}; vLLM refuses "
                                 "longer requests)")
    for text, field, hi in ((batch, "--batch", MAX_BATCH), (prompt, "--prompt", MAX_TOKENS),
                            (output, "--output", MAX_TOKENS), (context, "--context",
                                                               MAX_TOKENS)):
        if text is not None:  # the same ceilings with or without a profile
            _capped(parse_grid(text, field), field, text, hi)
    if calibration:   # a measured profile times the phases instead of the roofline model
        from ridgeline.calibrate.report import estimate_calibrated

        estimate_calibrated(calibration, batch, prompt, output, context, prefix, as_json)
        return

    from ridgeline.perf.estimate import estimate, model_constants, op_rows
    from ridgeline.perf.serving_model import RooflineStepTime
    from ridgeline.specs import Parallelism, load_hardware, load_model
    from ridgeline.specs.precision import resolve_model_precision

    if not 0 < gpu_memory_utilization <= 1:
        raise RidgelineError(f"gpu-memory-utilization: got {gpu_memory_utilization}; allowed: "
                             "0 < value <= 1")
    spec = load_model(model)
    precision = resolve_model_precision(spec, weights, kv, activations)
    parallel = Parallelism(tp=tp, pp=pp, ep=ep, dp=dp).validate(spec)
    grids = {
        "batch": _capped(parse_grid(batch, "--batch"), "--batch", batch, MAX_BATCH),
        "prompt": _capped(parse_grid(prompt, "--prompt"), "--prompt", prompt, MAX_TOKENS),
        "output": _capped(parse_grid(output, "--output"), "--output", output, MAX_TOKENS),
        "context": _capped(parse_grid(context, "--context"), "--context", context, MAX_TOKENS)
        if context is not None else [float("nan")],
    }
    hw_names = [h.strip() for h in hardware.split(",") if h.strip()]
    if not hw_names:
        raise RidgelineError("--hardware: got ''; allowed: a catalog name or JSON path")
    points = math.prod(len(v) for v in grids.values())
    if points > MAX_GRID_VALUES:
        raise RidgelineError(f"--batch/--prompt/--output/--context: {points:,} combinations; "
                             f"allowed: at most {MAX_GRID_VALUES:,}")
    mesh = np.meshgrid(*(np.array(v) for v in grids.values()), indexing="ij")
    b, s, n, t = (x.ravel() for x in mesh)
    sweep = b.size > 1 or len(hw_names) > 1
    from ridgeline.perf.whatif import apply_whatif, kernel_overhead_for

    wi = whatif_from_options(spec_k, spec_alpha, spec_draft_model, enforce_eager,
                             cpu_tokenize_us_per_token, cpu_detokenize_us_per_event)
    from ridgeline.sim.engine_costs import load_engine_costs

    costs = load_engine_costs(engine) if engine_costs else None
    results = []
    for hw_name in hw_names:
        hw = load_hardware(hw_name).with_efficiency(
            compute_efficiency, bandwidth_efficiency,
            kernel_overhead_for(hw_name, kernel_overhead_us, wi))
        m = RooflineStepTime(spec, hw, precision, parallel, engine_costs=costs)
        ctx = None if context is None else t
        r = estimate(m, b, s, n, prefix, ctx, gpu_memory_utilization)
        if wi is not None:
            # What-ifs change the timings (one step-time function, wrapped); FLOPs, bytes and
            # memory stay those of the base model.
            r.update(estimate(apply_whatif(m, wi), b, s, n, prefix, ctx,
                              gpu_memory_utilization, details=False))
            m.assumptions = _with_whatif(m.assumptions, wi)  # type: ignore[method-assign]
        results.append((m, r, model_constants(m)))

    if not sweep:
        m, r, const = results[0]
        scalar = {k: (v.item() if isinstance(v, np.ndarray) else v) for k, v in r.items()}
        if not scalar["within_context"]:
            # vLLM refuses a request beyond max_model_len (HTTP 400): no estimate "fits" it.
            window = int(scalar["context_window_tokens"])
            total = scalar["prompt_tokens"] + scalar["output_tokens"]
            raise RidgelineError(
                f"--prompt/--output: S + N = {total:,.0f} tokens (decode context "
                f"{scalar['decode_context_tokens']:,.0f}) exceeds {spec.name}'s context window "
                f"of {window:,} tokens (max_position_embeddings); allowed: S + N <= {window:,} "
                "(vLLM rejects such a request)")
        ridge = const["ridge_point_flop_per_byte"]
        op_tables = None
        if ops:
            from ridgeline.perf.estimate import decode_work, prefill_work

            op_tables = {
                "prefill": op_rows(m.breakdown(prefill_work(b[0], s[0], prefix)), ridge),
                "decode": op_rows(m.breakdown(decode_work(b[0], scalar["decode_context_tokens"])),
                                  ridge),
            }
        if as_json:
            from ridgeline.perf.vllm_kv_log import vllm_kv_log_for

            out: dict[str, Any] = {"config": m.describe(), "constants": const, "result": scalar,
                                   "vllm_kv_log": vllm_kv_log_for(
                                       m, gpu_memory_utilization).describe(),
                                   "assumptions": m.assumptions()}
            if op_tables is not None:
                out["ops"] = op_tables
            _emit_json(out)
            return
        _print_single(m, scalar, const, op_tables, gpu_memory_utilization)
        return

    rows = []
    for m, r, _const in results:
        for i in range(b.size):
            row = {"hardware": m.hardware.name}
            row.update({k: (v[i].item() if isinstance(v, np.ndarray) else v) for k, v in r.items()})
            rows.append(row)
    if as_json:
        _emit_json({"config": results[0][0].describe() | {"hardware": hw_names},
                    "constants": {m.hardware.name: c for m, _, c in results},
                    "rows": rows,
                    "assumptions": {m.hardware.name: m.assumptions() for m, _, _ in results}})
        return
    _print_sweep(results, rows)


# --- human output -------------------------------------------------------------------------

def _console() -> Any:
    from rich.console import Console

    # Pipes and CI logs get a wide page instead of rich's 80-column default.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def _print_single(m: Any, r: dict[str, Any], const: dict[str, float],
                  op_tables: dict[str, list[dict[str, Any]]] | None, util: float) -> None:
    from rich.table import Table

    con = _console()
    pr, par = m.precision, m.parallel
    replicas = f" (x{par.dp} replicas)" if par.dp > 1 else ""
    prefix = f" prefix={r['prefix_tokens']:g}" if r["prefix_tokens"] else ""
    con.print(f"[bold]{m.model.name}[/] on [bold]{m.hardware.name}[/] x{par.tp * par.pp}"
              f"{replicas} · weights {pr.weights} · KV {pr.kv} · activations {pr.activations}"
              f" · tp={par.tp} pp={par.pp} ep={par.ep} · B={r['batch_seqs']:g} "
              f"S={r['prompt_tokens']:g} N={r['output_tokens']:g}{prefix}")
    con.print(f"precision from {pr.source}")
    tab = Table(title="Phases (one replica)", title_justify="left")
    for col in ("phase", "time", "throughput", "FLOPs", "bytes", "FLOP/byte", "bound"):
        tab.add_column(col, justify="left" if col in ("phase", "bound") else "right")
    tab.add_row("prefill = TTFT", f"{r['prefill_s'] * 1e3:.2f} ms",
                f"{r['prefill_tok_s']:,.0f} prompt tok/s", _fmt(r["prefill_flops"]),
                _fmt(r["prefill_bytes"]) + "B", f"{r['prefill_intensity_flop_per_byte']:.1f}",
                r["prefill_bound"])
    tab.add_row(f"decode step = TPOT (T={r['decode_context_tokens']:g})",
                f"{r['tpot_s'] * 1e3:.3f} ms",
                f"{r['decode_aggregate_tok_s']:,.0f} tok/s aggregate, "
                f"{r['per_sequence_tok_s']:,.1f} per sequence",
                _fmt(r["decode_flops"]), _fmt(r["decode_bytes"]) + "B",
                f"{r['decode_intensity_flop_per_byte']:.1f}", r["decode_bound"])
    tab.add_row("E2E = TTFT + TPOT(N-1)", f"{r['e2e_s']:.3f} s",
                f"{r['e2e_output_tok_s']:,.0f} output tok/s", "", "", "", "")
    con.print(tab)
    if m.parallel.dp > 1:
        con.print(f"cluster ({m.parallel.dp} replicas): {r['cluster_decode_tok_s']:,.0f} decode "
                  "tok/s aggregate")
    seed = Table(title="Decode model (roofline bounds)", title_justify="left", show_header=False)
    seed.add_column(justify="left")
    seed.add_column(justify="right")
    seed.add_row("HBM traffic D_w + 2LB(T+1)d_kv·b_kv + D_a",
                 f"{_fmt(r['decode_weight_bytes'])}B + {_fmt(r['decode_kv_bytes'])}B + "
                 f"{_fmt(r['decode_other_bytes'])}B")
    seed.add_row(f"ceiling {r['decode_ceiling_formula']}",
                 f"{r['decode_ceiling_tok_s']:,.0f} tok/s")
    seed.add_row("KV crossover T ≈ P·b_w / (2·L·B·d_kv·b_kv)",
                 f"{r['kv_crossover_context_tokens']:,.0f} tokens")
    seed.add_row("decode attention intensity 2h_q/(h_kv·b_kv)",
                 f"{const['decode_attention_intensity_flop_per_byte']:.2f} FLOP/byte")
    seed.add_row("ridge point C/β (dense peak)",
                 f"{const['ridge_point_flop_per_byte']:.0f} FLOP/byte "
                 f"(effective {const['effective_ridge_point_flop_per_byte']:.0f})")
    seed.add_row("batch turning point ≈ (C/β)·b_w/2", f"{const['batch_turning_point_seqs']:.0f}")
    if "decode_expected_experts" in r:
        e = r["num_experts"]
        seed.add_row("MoE distinct experts per layer E[U] = E(1-(1-k/E)^tokens) (§6)",
                     f"prefill {r['prefill_expected_experts']:.2f} of {e:g}, decode "
                     f"{r['decode_expected_experts']:.2f} of {e:g}")
    con.print(seed)
    mem = Table(title=f"Memory per GPU (utilization {util:g})", title_justify="left",
                show_header=False)
    mem.add_column(justify="left")
    mem.add_column(justify="right")
    mem.add_row("weights", f"{r['weights_per_gpu_bytes'] / GIB:.2f} GiB")
    mem.add_row("activation workspace (this prefill)", f"{r['workspace_bytes'] / GIB:.2f} GiB")
    mem.add_row("KV per token (whole model)",
                f"{r['kv_bytes_per_token'] / 1024:.1f} KiB ({r['kv_bytes_per_token']:,.0f} B)")
    mem.add_row("KV capacity", f"{r['kv_capacity_tokens']:,.0f} tokens")
    mem.add_row("max concurrent sequences of S+N tokens", f"{r['max_concurrent_seqs']:,.0f}")
    con.print(mem)
    from ridgeline.perf.vllm_kv_log import vllm_kv_log_for

    log = vllm_kv_log_for(m, util)
    # What a vLLM server would log at start-up with this memory plan, serving (its
    # activation peak is a max_num_batched_tokens step, not this prefill): compare with a
    # real log to check the memory model.
    con.print(f"vLLM start-up log, as this memory plan predicts it (serving: "
              f"max_num_batched_tokens {m.max_num_batched_tokens:,}, block size "
              f"{log.block_size_tokens}, max_model_len {log.max_model_len:,}):")
    for line in log.lines():
        con.print(f"  {line}")
    if log.note:
        con.print(f"  [dim]({log.note})[/dim]")
    if r["memory_fits"]:
        con.print(f"[green]fits[/]: B={r['batch_seqs']:g} sequences of "
                  f"{r['prompt_tokens'] + r['output_tokens']:g} tokens")
    else:
        con.print(f"[bold red]does not fit[/]: short by {r['memory_shortfall_bytes'] / GIB:.2f} "
                  "GiB per GPU for this batch (times above assume it fits); raise --tp/--pp, "
                  "lower the batch, or use smaller weights/KV dtypes")
    if op_tables:
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
            con.print(t)
        con.print(f"ridge point: {const['ridge_point_flop_per_byte']:.0f} FLOP/byte")
    _print_assumptions(con, m.assumptions())


def _print_assumptions(con: Any, items: list[str]) -> None:
    con.print("[bold]Assumptions[/]")
    for a in items:
        con.print(f"  - {a}")


def _print_sweep(results: list[Any], rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    con = _console()
    m0 = results[0][0]
    con.print(f"[bold]{m0.model.name}[/] · weights {m0.precision.weights} · KV {m0.precision.kv}"
              f" · tp={m0.parallel.tp} pp={m0.parallel.pp} ep={m0.parallel.ep}")
    tab = Table(title=f"Sweep ({len(rows)} points)", title_justify="left")
    cols = ("hardware", "B", "S", "N", "T", "TTFT ms", "TPOT ms", "E2E s", "agg tok/s",
            "seq tok/s", "decode bound", "fits")
    for c in cols:
        tab.add_column(c, justify="left" if c in ("hardware", "decode bound", "fits") else "right",
                       no_wrap=c == "hardware")
    shown = rows if len(rows) <= 200 else rows[:200]
    for r in shown:
        tab.add_row(r["hardware"], f"{r['batch_seqs']:g}", f"{r['prompt_tokens']:g}",
                    f"{r['output_tokens']:g}", f"{r['decode_context_tokens']:g}",
                    f"{r['ttft_s'] * 1e3:.2f}", f"{r['tpot_s'] * 1e3:.3f}", f"{r['e2e_s']:.3f}",
                    f"{r['decode_aggregate_tok_s']:,.0f}", f"{r['per_sequence_tok_s']:,.1f}",
                    r["decode_bound"],
                    f"no (> context {r['context_window_tokens']:,.0f})"
                    if not r["within_context"] else "yes" if r["memory_fits"] else
                    f"no (-{r['memory_shortfall_bytes'] / GIB:.1f} GiB)")
    con.print(tab)
    if len(rows) > len(shown):
        con.print(f"({len(rows) - len(shown)} more rows: use --json for all)")
    for m, _r, _c in results:
        con.print(f"[bold]{m.hardware.name}[/]")
        _print_assumptions(con, m.assumptions())


# --- roofline ------------------------------------------------------------------------------

def roofline_cmd(
    hardware: Annotated[str, typer.Option("--hardware", "-g", help="Catalog GPU or JSON path."
                                          )] = "h100-sxm",
    m: Annotated[str, typer.Option("--m", help=f"Rows of A (tokens): {GRID_HELP}."
                                   )] = "1,8,64,256,4096",
    k: Annotated[int, typer.Option("--k", min=1, max=10**9, help="Inner dimension.")] = 4096,
    n: Annotated[int, typer.Option("--n", min=1, max=10**9,
                                   help="Columns of B (output features).")] = 4096,
    dtype: Annotated[str, typer.Option("--dtype", help="Element dtype (sets bytes/element "
                                       "and the peak).")] = "bf16",
    efficiency: Annotated[bool, typer.Option(
        "--efficiency/--peak", help="Scale peak and bandwidth by the hardware's efficiency "
        "factors (default: dense peak, as the roofline is usually drawn).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """GEMM [m,k]x[k,n]: arithmetic intensity, attainable FLOP/s, bound; m at the ridge."""
    import numpy as np

    from ridgeline.perf.roofline import (
        attainable_flops,
        gemm_bytes,
        gemm_flops,
        gemm_intensity,
        m_at_ridge,
        ridge_point,
    )
    from ridgeline.specs import load_hardware
    from ridgeline.specs.precision import DTYPE_BYTES

    if dtype not in DTYPE_BYTES:
        raise RidgelineError(f"--dtype: got {dtype!r}; allowed: {', '.join(DTYPE_BYTES)}")
    hw = load_hardware(hardware)
    peak = hw.peak("bf16" if dtype == "fp16" else ("int8" if dtype == "int4" else dtype))
    bw = hw.memory_bandwidth_bytes_s
    if efficiency:
        peak, bw = peak * hw.compute_efficiency, bw * hw.bandwidth_efficiency
    b = DTYPE_BYTES[dtype]
    ms = np.array(parse_grid(m, "--m"))
    if np.any(ms < 1):
        raise RidgelineError("--m: got a value < 1; allowed: >= 1")
    inten = gemm_intensity(ms, k, n, b)
    att = attainable_flops(inten, peak, bw)
    ridge = ridge_point(peak, bw)
    m_ridge = m_at_ridge(k, n, ridge, b)
    rows = [{"m": int(mi), "k": k, "n": n, "flops": float(f), "bytes": float(d),
             "intensity_flop_per_byte": float(i), "attainable_flops_per_s": float(a),
             "attainable_peak_fraction": float(a / peak),
             "bound": "compute" if i >= ridge else "memory"}
            for mi, f, d, i, a in zip(ms, gemm_flops(ms, k, n), gemm_bytes(ms, k, n, b), inten,
                                      att, strict=True)]
    if as_json:
        _emit_json({"hardware": hw.name, "dtype": dtype, "bytes_per_element": b,
                    "peak_flops_per_s": peak, "bandwidth_bytes_per_s": bw,
                    "ridge_point_flop_per_byte": ridge, "m_at_ridge": m_ridge, "rows": rows})
        return
    from rich.table import Table

    con = _console()
    con.print(f"[bold]{hw.name}[/] {dtype}: peak {peak / 1e12:g} TFLOP/s, bandwidth "
              f"{bw / 1e12:g} TB/s{' (effective)' if efficiency else ' (dense peak)'}")
    from rich.markup import escape

    tab = Table(title=escape(f"GEMM [m,{k}] x [{k},{n}]"), title_justify="left")
    for c in ("m", "FLOP/byte", "attainable TFLOP/s", "of peak", "bound"):
        tab.add_column(c, justify="left" if c == "bound" else "right")
    for r in rows:
        tab.add_row(str(r["m"]), f"{r['intensity_flop_per_byte']:.1f}",
                    f"{r['attainable_flops_per_s'] / 1e12:.0f}",
                    f"{r['attainable_peak_fraction']:.1%}", r["bound"])
    con.print(tab)
    con.print(f"ridge point: {ridge:.0f} FLOP/byte; the GEMM reaches it at m ≈ {m_ridge:.0f}")
    _print_assumptions(con, [
        f"intensity = 2mnk / (b(mk + kn + mn)) with b = {b:g} bytes for every element "
        "(each of A, B, C moved once)",
        "attainable = min(peak, intensity x bandwidth): compute and memory fully overlap",
    ])


# --- catalogs ------------------------------------------------------------------------------

def models_cmd(as_json: JsonOpt = False) -> None:
    """List the model catalog (values from each model's Hugging Face config.json)."""
    from ridgeline.specs import load_model, model_catalog

    rows = []
    for name, raw in model_catalog().items():
        s = load_model(name)
        rows.append({
            "name": name, "model_type": s.model_type, "total_params": s.total_params,
            "active_params": s.active_params, "num_layers": s.num_layers,
            "hidden_size": s.hidden_size, "num_heads": s.num_heads,
            "num_kv_heads": s.num_kv_heads, "head_dim": s.head_dim,
            "num_experts": s.num_experts, "experts_per_token": s.experts_per_token,
            "kv_bytes_per_token_bf16": s.num_softmax_layers * s.kv_elements_per_token_per_layer * 2,
            "vocab_size": s.vocab_size, "tie_word_embeddings": s.tie_word_embeddings,
            "source": raw.get("_source", ""),
        })
    if as_json:
        _emit_json(rows)
        return
    from rich.table import Table

    tab = Table(title="Models", title_justify="left")
    for c in ("name", "type", "params", "active", "layers", "hidden", "q/kv heads", "head dim",
              "k/E experts", "KV/token", "vocab", "tied"):
        tab.add_column(c, justify="left" if c in ("name", "type", "tied") else "right",
                       no_wrap=True)
    for r in rows:
        tab.add_row(r["name"], r["model_type"], f"{r['total_params'] / 1e9:.2f} B",
                    f"{r['active_params'] / 1e9:.2f} B", str(r["num_layers"]),
                    str(r["hidden_size"]), f"{r['num_heads']}/{r['num_kv_heads']}",
                    str(r["head_dim"]),
                    f"{r['experts_per_token']}/{r['num_experts']}" if r["num_experts"] else "-",
                    f"{r['kv_bytes_per_token_bf16'] / 1024:.1f} KiB", str(r["vocab_size"]),
                    "yes" if r["tie_word_embeddings"] else "no")
    _console().print(tab)


def hardware_cmd(as_json: JsonOpt = False) -> None:
    """List the GPU catalog (dense datasheet peaks; sources in the JSON files)."""
    from ridgeline.perf.kernels import CATALOG_DEFAULT_COMPUTE_EFFICIENCY, profile_for
    from ridgeline.specs import hardware_catalog, load_hardware

    rows = []
    for name in hardware_catalog():
        h = load_hardware(name)
        prof = profile_for(h)
        # The step model `estimate`/`simulate` use by default: the fitted kernel model when
        # the GPU has one, else the plain roofline at the file's efficiencies.
        kernel_model = ({"kernels": prof.kernels, "topology": prof.topology,
                         "derived": prof.derived, "rule": prof.rule}
                        if prof is not None else None)
        rows.append(h.describe() | {"ridge_point_bf16_flop_per_byte": h.ridge_point("bf16"),
                                    "kernel_model": kernel_model, "source": h.source})
    if as_json:
        _emit_json(rows)
        return
    from rich.table import Table

    tab = Table(title="Hardware (dense peaks)", title_justify="left")
    for c in ("name", "bf16 TFLOP/s", "fp8", "fp4", "HBM TB/s", "memory GiB", "ridge bf16",
              "link GB/s/dir", "kernel model", "plain C/β", "overhead µs"):
        tab.add_column(c, justify="left" if c == "name" else "right", no_wrap=c == "name")
    for r in rows:
        pk = r["peak_flops_per_s"]
        tab.add_row(r["name"], f"{pk['bf16'] / 1e12:,.0f}",
                    f"{pk['fp8'] / 1e12:,.0f}" if "fp8" in pk else "-",
                    f"{pk['fp4'] / 1e12:,.0f}" if "fp4" in pk else "-",
                    f"{r['memory_bandwidth_bytes_per_s'] / 1e12:.2f}",
                    f"{r['memory_bytes'] / GIB:.0f}",
                    f"{r['ridge_point_bf16_flop_per_byte']:.0f}",
                    f"{r['interconnect_bandwidth_bytes_per_s'] / 1e9:.0f}",
                    _kernel_model_cell(r["kernel_model"]),
                    f"{r['compute_efficiency']:g}/{r['bandwidth_efficiency']:g}",
                    f"{r['kernel_overhead_us']:g}")
    _console().print(tab)
    _console().print("kernel model: whose measured kernels time the steps by default (fitted: "
                     "this GPU's own; derived: another part's on this GPU's datasheet, "
                     "docs/model.md). plain C/β: the GPU file's compute/bandwidth "
                     "efficiencies, which time the plain roofline (a GPU without a kernel "
                     "model, or --compute-efficiency/--bandwidth-efficiency given); a derived "
                     "kernel model scales its GEMM efficiency by "
                     f"C/{CATALOG_DEFAULT_COMPUTE_EFFICIENCY:g}.")


def _kernel_model_cell(km: dict[str, Any] | None) -> str:
    if km is None:
        return "none (plain)"
    return f"{'derived from' if km['derived'] else 'fitted'} {km['kernels']}"
