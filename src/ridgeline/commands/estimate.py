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
    All2AllBackendOpt,
    AssumptionsOpt,
    AttentionDpOpt,
    BandwidthEffOpt,
    CalibrationOpt,
    ComputeEffOpt,
    DataParallelSizeOpt,
    DeepepModeOpt,
    DpOpt,
    EnableDpAttentionOpt,
    EnableExpertParallelOpt,
    EngineCostsOpt,
    EngineOpt,
    EpOpt,
    JsonOpt,
    KernelOverheadOpt,
    KvOpt,
    MaxModelLenOpt,
    ModelArg,
    ModelOpt,
    MoeA2aBackendOpt,
    MoeBackendOpt,
    MoeRunnerBackendOpt,
    OutFormatOpt,
    PpOpt,
    PrefixCachingOpt,
    ServedModelNameOpt,
    TpOpt,
    WeightsOpt,
    model_from,
    moe_choices,
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
from ridgeline.jsonsafe import json_safe
from ridgeline.perf.grid import GRID_HELP, MAX_GRID_VALUES, parse_grid
from ridgeline.report.tables import out_for

GIB = 1024**3
# Sizes past any deployment (a million sequences in a step, 10 M tokens of context): past
# them the model's numbers are extrapolation into nothing real.
MAX_BATCH = 1 << 20
MAX_TOKENS = 10_000_000


def _capped(values: list[float], field: str, text: str, hi: float) -> list[float]:
    if values and max(values) > hi:
        raise RidgelineError(f"{field}: got {text!r}; allowed: values up to {hi:,.0f}")
    return values


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(json_safe(data), indent=2) + "\n")


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
    attention_dp: AttentionDpOpt = 1,
    all2all_backend: All2AllBackendOpt = "",
    moe_a2a_backend: MoeA2aBackendOpt = None,
    deepep_mode: DeepepModeOpt = None,
    data_parallel_size: DataParallelSizeOpt = None,
    enable_expert_parallel: EnableExpertParallelOpt = False,
    enable_dp_attention: EnableDpAttentionOpt = False,
    compute_efficiency: ComputeEffOpt = None,
    bandwidth_efficiency: BandwidthEffOpt = None,
    kernel_overhead_us: KernelOverheadOpt = None,
    gpu_memory_utilization: Annotated[float, typer.Option(
        "--gpu-memory-utilization", callback=number(gt=0, le=1), help="Fraction of GPU memory "
        "for weights + workspace + KV (as vLLM).")] = 0.9,
    ops: Annotated[bool, typer.Option("--ops", help="Per-operator breakdown (prefill and "
                                      "decode).")] = False,
    details: Annotated[bool, typer.Option(
        "--details", help="Also the decode roofline terms, the memory table and the vLLM "
        "start-up log this memory plan predicts.")] = False,
    spec_k: SpecKOpt = 0,
    spec_alpha: SpecAlphaOpt = 0.7,
    spec_draft_model: SpecDraftOpt = None,
    enforce_eager: EagerOpt = False,
    cpu_tokenize_us_per_token: CpuTokenizeOpt = 0.0,
    cpu_detokenize_us_per_event: CpuDetokenizeOpt = 0.0,
    calibration: CalibrationOpt = None,
    engine: EngineOpt = "vllm",
    moe_backend: MoeBackendOpt = "auto",
    moe_runner_backend: MoeRunnerBackendOpt = None,
    engine_costs: EngineCostsOpt = True,
    max_model_len: MaxModelLenOpt = None,
    served_model_name: ServedModelNameOpt = None,
    prefix_caching: PrefixCachingOpt = True,
    chunked_prefill: Annotated[bool, typer.Option(
        "--enable-chunked-prefill/--no-enable-chunked-prefill",
        "--chunked-prefill/--no-chunked-prefill", help="vLLM's; no effect here: estimate "
        "times the whole prefill of a batch as one step (simulate splits it).")] = True,
    as_json: JsonOpt = False,
    fmt: OutFormatOpt = None,
    all_assumptions: AssumptionsOpt = False,
) -> None:
    """Predict prefill/TTFT, decode/TPOT, E2E, throughput and memory from first principles."""
    del served_model_name, chunked_prefill  # no effect on one step's estimate
    if prefix > 0 and not prefix_caching:
        raise RidgelineError(f"--prefix: got {prefix}; allowed: 0 with "
                             "--no-enable-prefix-caching (nothing is cached without it)")
    model = model_from(model_arg, model, "llama-3.1-8b")
    moe_backend, all2all_backend = moe_choices(moe_backend, moe_runner_backend, all2all_backend,
                                               moe_a2a_backend, deepep_mode)
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
    as_json = as_json or fmt == "json"
    if calibration:   # a measured profile times the phases instead of the roofline model
        from ridgeline.report.calibrate_text import estimate_calibrated

        estimate_calibrated(calibration, batch, prompt, output, context, prefix, as_json, fmt)
        return
    if not 0 < gpu_memory_utilization <= 1:
        raise RidgelineError(f"gpu-memory-utilization: got {gpu_memory_utilization}; allowed: "
                             "0 < value <= 1")
    from ridgeline.specs import load_model

    spec = load_model(model)
    from ridgeline.specs.parallel import resolve_layout

    lay = resolve_layout(spec, tp, ep, dp, attention_dp, data_parallel_size,
                         enable_expert_parallel, enable_dp_attention)
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
    wi = whatif_from_options(spec_k, spec_alpha, spec_draft_model, enforce_eager,
                             cpu_tokenize_us_per_token, cpu_detokenize_us_per_event)
    from ridgeline.perf.measured_kernels import kernel_engine_for
    from ridgeline.sim.engine_costs import load_engine_costs

    kv_rule = _kv_rule_for(engine)
    results, b = _run_estimates(spec, hw_names, grids, context is not None, prefix,
                                gpu_memory_utilization, wi, (weights, kv, activations),
                                (lay.tp, pp, lay.ep, lay.replicas, lay.attn_dp),
                                (compute_efficiency, bandwidth_efficiency,
                                                   kernel_overhead_us),
                                engine if engine_costs else None,
                                kernel_engine_for(engine if not engine.endswith(".json")
                                                  else load_engine_costs(engine).engine),
                                kv_rule, moe_backend, all2all_backend)
    if b.size == 1 and len(hw_names) == 1:
        _report_single(results[0], spec, ops, as_json, fmt, gpu_memory_utilization, details,
                       all_assumptions, engine if engine_costs else "none", kv_rule)
    else:
        _report_sweep(results, b.size, hw_names, as_json, fmt, all_assumptions,
                      engine if engine_costs else "none")


def _run_estimates(spec: Any, hw_names: list[str], grids: dict[str, list[float]],
                   has_context: bool, prefix: int, util: float, wi: Any,
                   dtypes: tuple[str | None, str | None, str | None],
                   degrees: tuple[int, int, int, int, int],
                   eff: tuple[float | None, float | None, float | None],
                   engine: str | None, kernel_engine: str = "vllm", kv_rule: str = "vllm",
                   moe_backend: str = "auto", ep_comm: str = "") -> tuple[list[Any], Any]:
    """(step model, result, constants) per GPU over the grid's points, and the batch axis."""
    import numpy as np

    from ridgeline.perf.estimate import estimate, model_constants
    from ridgeline.perf.roofline_step import RooflineStepTime
    from ridgeline.perf.whatif import apply_whatif, kernel_overhead_for
    from ridgeline.sim.engine_costs import load_engine_costs
    from ridgeline.specs import Parallelism, load_hardware
    from ridgeline.specs.precision import resolve_model_precision

    precision = resolve_model_precision(spec, *dtypes)
    tp, pp, ep, dp, attn_dp = degrees
    parallel = Parallelism(tp=tp, pp=pp, ep=ep, dp=dp, attn_dp=attn_dp,
                           ep_comm=ep_comm).validate(spec)
    mesh = np.meshgrid(*(np.array(v) for v in grids.values()), indexing="ij")
    b, s, n, t = (x.ravel() for x in mesh)
    costs = load_engine_costs(engine) if engine else None
    ctx = t if has_context else None
    results = []
    for hw_name in hw_names:
        hw = load_hardware(hw_name).with_efficiency(
            eff[0], eff[1], kernel_overhead_for(hw_name, eff[2], wi))
        m = RooflineStepTime(spec, hw, precision, parallel, engine_costs=costs,
                             engine=kernel_engine, kernel_engine=kernel_engine,
                             moe_backend=moe_backend)
        r = estimate(m, b, s, n, prefix, ctx, util, kv_rule=kv_rule)
        if wi is not None:
            # What-ifs change the timings (one step-time function, wrapped); FLOPs, bytes and
            # memory stay those of the base model.
            r.update(estimate(apply_whatif(m, wi), b, s, n, prefix, ctx, util,
                              details=False))
            m.assumptions = _with_whatif(m.assumptions, wi)  # type: ignore[method-assign]
        results.append((m, r, model_constants(m)))
    return results, b


# How this output defines its TTFTs (the first of the key assumptions).
TTFT_DEFINITION = ("TTFT: 'serving' is one request joining B-1 running decodes under "
                   "continuous batching (chunked prefill, no queue, the engine's per-request "
                   "costs); 'static-batch prefill' is all B prompts prefilled at once (the "
                   "time to the first token of a static batch)")


def _kv_rule_for(engine: str) -> str:
    """The KV sizing rule of `--engine`: its preset's (an engine costs file names the engine
    it was fitted on); vLLM's for anything else."""
    from ridgeline.perf.engine_memory import RULES
    from ridgeline.sim.engine_costs import load_engine_costs

    name = load_engine_costs(engine).engine if engine.endswith(".json") else engine
    return name if name in RULES else "vllm"


def _engine_kv_log(m: Any, util: float, rule: str) -> Any:
    """The start-up KV line(s) of the engine `rule` names, for step model `m`."""
    from ridgeline.perf.engine_kv_log import engine_kv_log
    from ridgeline.perf.engine_memory import engine_memory_at
    from ridgeline.perf.vllm_kv_log import vllm_kv_log_for

    vlog = vllm_kv_log_for(m, util)
    return engine_kv_log(engine_memory_at(rule, m, util), vlog.max_model_len,
                         tuple(vlog.lines()), vlog.kv_cache_tokens)


# estimate's JSON names every number with its unit: the engine's own setting names become
# fields of their own.
_KV_MEMORY_UNITS = {"chunked_prefill_size": "chunked_prefill_tokens",
                    "cuda_graph_max_bs": "cuda_graph_max_batch_seqs",
                    "max_running_requests": "max_running_seqs"}


def _kv_memory_json(em: Any) -> dict[str, Any]:
    """`EngineMemory.describe()` with unit-named keys (the setting's name beside its value)."""
    out = {_KV_MEMORY_UNITS.get(k, k): v for k, v in em.describe().items()
           if k != em.fraction_name}
    out.update(memory_fraction=em.fraction, fraction_name=em.fraction_name)
    return out


def _report_single(res: Any, spec: Any, ops: bool, as_json: bool, fmt: str | None,
                   util: float, details: bool, all_assumptions: bool,
                   error_engine: str = "vllm", kv_rule: str = "vllm") -> None:
    import numpy as np

    from ridgeline.perf.estimate import op_rows
    from ridgeline.perf.model_error import model_error
    from ridgeline.report.assumptions import key_assumptions

    m, r, const = res
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
    _add_model_error(scalar, m, error_engine)
    op_tables = None
    if ops:
        from ridgeline.perf.estimate import decode_work, prefill_work

        ridge = const["ridge_point_flop_per_byte"]
        b0, s0, p0 = scalar["batch_seqs"], scalar["prompt_tokens"], scalar["prefix_tokens"]
        op_tables = {
            "prefill": op_rows(m.breakdown(prefill_work(b0, s0, p0)), ridge),
            "decode": op_rows(m.breakdown(decode_work(b0, scalar["decode_context_tokens"])),
                              ridge),
        }
    if as_json:
        from ridgeline.perf.engine_memory import engine_memory_at
        from ridgeline.perf.vllm_kv_log import vllm_kv_log_for

        out: dict[str, Any] = {"config": m.describe(), "constants": const, "result": scalar,
                               "model_error": model_error(m).describe(),
                               "kv_memory": _kv_memory_json(engine_memory_at(kv_rule, m,
                                                                             util)),
                               "engine_kv_log": _engine_kv_log(m, util, kv_rule).describe(),
                               "key_assumptions": key_assumptions(m, TTFT_DEFINITION),
                               "assumptions": m.assumptions()}
        if kv_rule == "vllm":   # vLLM's own three lines, with their counts
            out["vllm_kv_log"] = vllm_kv_log_for(m, util).describe()
        if op_tables is not None:
            out["ops"] = op_tables
        _emit_json(out)
        return
    from ridgeline.report.estimate_text import print_single

    with out_for(fmt) as page:
        print_single(page, m, scalar, const, op_tables, util, details, all_assumptions,
                     TTFT_DEFINITION, _engine_kv_log(m, util, kv_rule))


def _report_sweep(results: list[Any], size: int, hw_names: list[str], as_json: bool,
                  fmt: str | None, all_assumptions: bool, error_engine: str = "vllm") -> None:
    import numpy as np

    rows = []
    for m, r, _const in results:
        for i in range(size):
            # the scheme can differ per GPU (fp8 is W8A16 on an A100, W8A8 on an H100)
            row = {"hardware": m.hardware.name, "scheme": m.precision.scheme}
            row.update({k: (v[i].item() if isinstance(v, np.ndarray) else v) for k, v in r.items()})
            _add_model_error(row, m, error_engine)
            rows.append(row)
    if as_json:
        _emit_json({"config": results[0][0].describe() | {"hardware": hw_names},
                    "constants": {m.hardware.name: c for m, _, c in results},
                    "rows": rows,
                    "assumptions": {m.hardware.name: m.assumptions() for m, _, _ in results}})
        return
    from ridgeline.report.estimate_text import print_sweep

    with out_for(fmt) as page:
        print_sweep(page, results, rows, all_assumptions, TTFT_DEFINITION)


def _add_model_error(result: dict[str, Any], m: Any, engine: str) -> None:
    """Model-error intervals beside the TTFT, TPOT, E2E and throughput values (in place);
    `engine` "none" without engine costs (the residuals of the model without them)."""
    from ridgeline.metrics.prediction_interval import annotate_estimate, distance_from_data

    annotate_estimate(result, distance_from_data(
        m.hardware.name, engine, m.model.name,
        memory_bandwidth_bytes_s=m.hardware.memory_bandwidth_bytes_s))




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
    fmt: OutFormatOpt = None,
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
    if as_json or fmt == "json":
        _emit_json({"hardware": hw.name, "dtype": dtype, "bytes_per_element": b,
                    "peak_flops_per_s": peak, "bandwidth_bytes_per_s": bw,
                    "ridge_point_flop_per_byte": ridge, "m_at_ridge": m_ridge, "rows": rows})
        return
    from rich.table import Table

    con = out_for(fmt)
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
    con.print("Assumptions", style="bold")
    for a in (f"intensity = 2mnk / (b(mk + kn + mn)) with b = {b:g} bytes for every element "
              "(each of A, B, C moved once)",
              "attainable = min(peak, intensity x bandwidth): compute and memory fully overlap"):
        con.print(f"  - {a}", markup=False)
    con.close()


# --- catalogs ------------------------------------------------------------------------------

def models_cmd(as_json: JsonOpt = False, fmt: OutFormatOpt = None) -> None:
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
            "checkpoint_weights": s.quant.weights if s.quant else "bf16",
            "checkpoint_quantization": s.quant.describe() if s.quant else None,
            "source": raw.get("_source", ""),
        })
    if as_json or fmt == "json":
        _emit_json(rows)
        return
    from rich.table import Table

    tab = Table(title="Models", title_justify="left")
    for c in ("name", "type", "params", "active", "layers", "hidden", "q/kv heads", "head dim",
              "k/E experts", "KV/token", "vocab", "tied", "ckpt"):
        tab.add_column(c, justify="left" if c in ("name", "type", "tied") else "right",
                       no_wrap=True)
    for r in rows:
        tab.add_row(r["name"], r["model_type"], f"{r['total_params'] / 1e9:.2f} B",
                    f"{r['active_params'] / 1e9:.2f} B", str(r["num_layers"]),
                    str(r["hidden_size"]), f"{r['num_heads']}/{r['num_kv_heads']}",
                    str(r["head_dim"]),
                    f"{r['experts_per_token']}/{r['num_experts']}" if r["num_experts"] else "-",
                    f"{r['kv_bytes_per_token_bf16'] / 1024:.1f} KiB", str(r["vocab_size"]),
                    "yes" if r["tie_word_embeddings"] else "no", r["checkpoint_weights"])
    with out_for(fmt) as out:
        out.print(tab)


def hardware_cmd(as_json: JsonOpt = False, fmt: OutFormatOpt = None) -> None:
    """List the GPU catalog (dense datasheet peaks; sources in the JSON files)."""
    from ridgeline.perf.kernels import CATALOG_DEFAULT_COMPUTE_EFFICIENCY, profile_for
    from ridgeline.specs import hardware_catalog, load_hardware
    from ridgeline.specs.hardware import aliases_of

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
                                    "kernel_model": kernel_model, "source": h.source,
                                    "aliases": aliases_of(name)})
    if as_json or fmt == "json":
        _emit_json(rows)
        return
    from rich.table import Table

    tab = Table(title="Hardware (dense peaks)", title_justify="left")
    for c in ("name", "bf16 TFLOP/s", "fp8", "fp4", "HBM TB/s", "memory GiB", "ridge bf16",
              "link GB/s/dir", "NVLink GPUs", "kernel model", "plain C/β", "overhead µs"):
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
                    str(r["nvlink_domain_gpus"]),
                    _kernel_model_cell(r["kernel_model"]),
                    f"{r['compute_efficiency']:g}/{r['bandwidth_efficiency']:g}",
                    f"{r['kernel_overhead_us']:g}")
    out = out_for(fmt)
    out.print(tab)
    out.print("kernel model: whose measured kernels time the steps by default (fitted: "
                     "this GPU's own; derived: another part's on this GPU's datasheet, "
                     "docs/model.md). plain C/β: the GPU file's compute/bandwidth "
                     "efficiencies, which time the plain roofline (a GPU without a kernel "
                     "model, or --compute-efficiency/--bandwidth-efficiency given); a derived "
                     "kernel model scales its GEMM efficiency by "
                     f"C/{CATALOG_DEFAULT_COMPUTE_EFFICIENCY:g}. NVLink GPUs: how many GPUs "
                     "one NVLink/xGMI domain joins (1: PCIe only). Names people type (H100, "
                     "A100-80GB, MI300X, nvidia-smi's names) resolve through an alias table; "
                     "--json lists each GPU's aliases.", markup=False)
    out.close()


def _kernel_model_cell(km: dict[str, Any] | None) -> str:
    if km is None:
        return "none (plain)"
    return f"{'derived from' if km['derived'] else 'fitted'} {km['kernels']}"
