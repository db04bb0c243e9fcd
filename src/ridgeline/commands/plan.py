"""`ridgeline plan`: the cheapest configuration meeting the SLOs (see ridgeline.plan).

Only typer and the standard library at import time.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ridgeline.commands.options import (
    All2AllBackendOpt,
    DeepepModeOpt,
    JsonOpt,
    MaxModelLenOpt,
    ModelArg,
    MoeA2aBackendOpt,
    MoeBackendOpt,
    MoeRunnerBackendOpt,
    OutFormatOpt,
    SeedOpt,
    ServedModelNameOpt,
    check_max_model_len,
    check_writable,
    kv_dtype,
    model_from,
    moe_choices,
)

if TYPE_CHECKING:
    from ridgeline.plan import PlanRequest, PlanResult


def _csv(text: str, what: str) -> tuple[str, ...]:
    from ridgeline.errors import RidgelineError

    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items:
        raise RidgelineError(f"{what}: got {text!r}; allowed: a comma list")
    return items


def _ints(text: str, what: str) -> tuple[int, ...]:
    from ridgeline.errors import RidgelineError

    try:
        vals = tuple(int(x) for x in _csv(text, what))
    except ValueError:
        raise RidgelineError(f"{what}: got {text!r}; allowed: a comma list of integers "
                             "(e.g. 1,2,4)") from None
    if any(v < 1 for v in vals):
        raise RidgelineError(f"{what}: got {text!r}; allowed: integers >= 1")
    return vals


def _prices(items: list[str] | None) -> tuple[tuple[str, float], ...]:
    from ridgeline.errors import RidgelineError

    out = []
    for item in items or ():
        name, sep, value = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            price = float(value)
        except ValueError:
            raise RidgelineError(f"--price: got {item!r}; allowed: NAME=USD_PER_GPU_HOUR, e.g. "
                                 "h100-sxm=2.5") from None
        if not price > 0:
            raise RidgelineError(f"--price: got {item!r}; the price must be > 0")
        out.append((name.strip(), price))
    return tuple(out)


# The options of `plan` (one alias per option, so the command reads as a list). Most take a
# comma list of candidates, unlike the same flags of `simulate`: hence their own aliases.
ModelsOpt = Annotated[str, typer.Option(
    "--model", "-m", help="Model(s), comma-separated (catalog names or config.json paths).")]
HardwareListOpt = Annotated[str, typer.Option(
    "--hardware", "-g", help="Candidate GPUs, comma-separated.")]
WeightsListOpt = Annotated[str, typer.Option(
    "--weights", "--quantization", help="Weight precisions to try, comma-separated "
    "(bf16,fp8,int4; vLLM's --quantization names too: fp8_block, awq, gptq, modelopt_fp4, "
    "mxfp4).")]
PlanKvOpt = Annotated[str | None, typer.Option(
    "--kv", "--kv-cache-dtype", callback=kv_dtype,
    help="KV-cache dtype (default: from the weights; vLLM's names are accepted).")]
PlanActivationsOpt = Annotated[str | None, typer.Option(
    "--activations", help="Activation/GEMM dtype for every candidate (default: as vLLM "
    "runs the weights on each GPU: fp8 -> W8A8 where the GPU has fp8 tensor cores, "
    "W8A16 where not; int4 -> W4A16).")]
EnginesOpt = Annotated[str, typer.Option(
    "--engine", help="Engines to try, comma-separated: vllm, sglang, trtllm (their scheduling and "
    "CPU costs; the launch command is that engine's).")]
TargetRateOpt = Annotated[float, typer.Option(
    "--rate", help="Target arrival rate (req/s, Poisson).")]
PlanSloOpt = Annotated[list[str] | None, typer.Option(
    "--slo", help="Per-request SLO (repeatable), e.g. ttft_ms<=1000; a percentile target "
    "such as 'TTFT P99 <= 1 s' is --slo ttft_ms<=1000 with --goodput-target 0.99.")]
GoodputTargetOpt = Annotated[float, typer.Option(
    "--goodput-target", help="Fraction of requests that must meet every SLO, in (0, 1).")]
HeadroomOpt = Annotated[float, typer.Option(
    "--headroom", help="Plan for rate x (1 + headroom): never plan near saturation.")]
PlanPromptOpt = Annotated[str, typer.Option("--prompt", help="Prompt lengths (as simulate).")]
PlanOutputOpt = Annotated[str, typer.Option("--output", help="Output lengths (as simulate).")]
TpListOpt = Annotated[str, typer.Option(
    "--tp", "--tensor-parallel-size", "-tp", help="TP degrees to try.")]
NoEpOpt = Annotated[bool, typer.Option("--no-ep", help="MoE: do not try EP = TP, nor "
                                        "attention-DP ranks with EP over all GPUs.")]
MaxNumSeqsListOpt = Annotated[str, typer.Option("--max-num-seqs", help="Batch caps to try.")]
MaxNumBatchedTokensListOpt = Annotated[str, typer.Option(
    "--max-num-batched-tokens", help="Token budgets per step to try.")]
ChunkedPrefillListOpt = Annotated[str, typer.Option(
    "--chunked-prefill", help="on, off or on,off.")]
EnableChunkedPrefillOpt = Annotated[bool | None, typer.Option(
    "--enable-chunked-prefill/--no-enable-chunked-prefill", help="vLLM's: the same as "
    "--chunked-prefill on / off.")]
PlanPrefixCachingOpt = Annotated[bool, typer.Option(
    "--enable-prefix-caching/--no-enable-prefix-caching",
    "--prefix-caching/--no-prefix-caching", help="vLLM's; no effect here: plan's "
    "synthetic prompts share no prefix.")]
TryPdOpt = Annotated[bool, typer.Option("--pd/--no-pd", help="Also try prefill/decode "
                                        "splits.")]
MaxReplicasOpt = Annotated[int, typer.Option("--max-replicas", min=1)]
ExtraReplicasOpt = Annotated[int, typer.Option(
    "--extra-replicas", min=0, help="Replica counts tried above the analytic minimum.")]
MaxGpusOpt = Annotated[int, typer.Option("--max-gpus", min=1)]
PriceOpt = Annotated[list[str] | None, typer.Option(
    "--price", help="Override a GPU's price: NAME=USD_PER_GPU_HOUR (repeatable).")]
ScreenRequestsOpt = Annotated[int, typer.Option(
    "--requests", "-n", min=1, help="Requests per screening simulation (short runs that "
    "only rule candidates out; the cheapest survivors are verified with long runs).")]
VerifyRequestsOpt = Annotated[int | None, typer.Option(
    "--verify-requests", min=1, help="Requests per verification run. Default and floor: "
    "what the --goodput-target percentile needs (6086 for 0.99, 1168 for 0.95, 61405 "
    "for 0.999: the percentile within a quarter of its tail, 10 requests beyond it); "
    "fewer run with a warning.")]
PlanWorkersOpt = Annotated[int | None, typer.Option(
    "--workers", min=1, help="Local worker processes (default: CPU cores).")]
PlanRayOpt = Annotated[str | None, typer.Option(
    "--ray", help="Run the simulations on Ray: 'local' starts one, else an address.")]
PlotOpt = Annotated[str | None, typer.Option(
    "--plot", help="Write the Pareto plot here (.png, .svg or .pdf; needs matplotlib).")]
ConfidenceOpt = Annotated[float | None, typer.Option(
    "--confidence", help="Also judge every configuration at the pessimistic end of the "
    "model's error (0.9 or 0.975: every step as much slower as the held-out residuals "
    "allow at that one-sided confidence) and show both answers.")]


def plan_cmd(
    model_arg: ModelArg = None,
    model: ModelsOpt = "llama-3.1-8b",
    hardware: HardwareListOpt = "h100-sxm",
    weights: WeightsListOpt = "bf16",
    kv: PlanKvOpt = None,
    activations: PlanActivationsOpt = None,
    engine: EnginesOpt = "vllm",
    all2all_backend: All2AllBackendOpt = "",
    moe_a2a_backend: MoeA2aBackendOpt = None,
    deepep_mode: DeepepModeOpt = None,
    moe_backend: MoeBackendOpt = "auto",
    moe_runner_backend: MoeRunnerBackendOpt = None,
    rate: TargetRateOpt = 10.0,
    slo: PlanSloOpt = None,
    goodput_target: GoodputTargetOpt = 0.99,
    headroom: HeadroomOpt = 0.2,
    prompt: PlanPromptOpt = "lognormal:mean=500,sigma=0.8,max=4096",
    output: PlanOutputOpt = "lognormal:mean=200,sigma=0.8,max=1024",
    tp: TpListOpt = "1,2,4,8",
    no_ep: NoEpOpt = False,
    max_num_seqs: MaxNumSeqsListOpt = "64,256",
    max_num_batched_tokens: MaxNumBatchedTokensListOpt = "2048,8192",
    chunked_prefill: ChunkedPrefillListOpt = "on",
    enable_chunked_prefill: EnableChunkedPrefillOpt = None,
    max_model_len: MaxModelLenOpt = None,
    served_model_name: ServedModelNameOpt = None,
    prefix_caching: PlanPrefixCachingOpt = True,
    pd: TryPdOpt = True,
    max_replicas: MaxReplicasOpt = 16,
    extra_replicas: ExtraReplicasOpt = 1,
    max_gpus: MaxGpusOpt = 64,
    price: PriceOpt = None,
    requests: ScreenRequestsOpt = 500,
    verify_requests: VerifyRequestsOpt = None,
    workers: PlanWorkersOpt = None,
    ray: PlanRayOpt = None,
    plot: PlotOpt = None,
    confidence: ConfidenceOpt = None,
    json_out: JsonOpt = False,
    fmt: OutFormatOpt = None,
    seed: SeedOpt = 0,
) -> None:
    """Find the cheapest configuration meeting the SLOs at a target rate, with headroom."""

    from ridgeline.errors import RidgelineError
    from ridgeline.metrics.slo import parse_slos
    from ridgeline.plan import PlanRequest
    from ridgeline.plan.search import plot_pareto

    del served_model_name, prefix_caching  # no effect on the plan (see their help)
    model = model_from(model_arg, model, "llama-3.1-8b")
    moe_backend, all2all_backend = moe_choices(moe_backend, moe_runner_backend, all2all_backend,
                                               moe_a2a_backend, deepep_mode)
    check_max_model_len(max_model_len, prompt, output)
    if enable_chunked_prefill is not None:
        chunked_prefill = "on" if enable_chunked_prefill else "off"
    chunk_map = {"on": True, "off": False}
    chunk_opts = _csv(chunked_prefill, "--chunked-prefill")
    if any(c not in chunk_map for c in chunk_opts):
        raise RidgelineError(f"--chunked-prefill: got {chunked_prefill!r}; allowed: on, off, "
                             "on,off")
    if ray is not None:
        try:
            import ray as _ray  # noqa: F401
        except ImportError:
            raise RidgelineError("--ray: Ray is not installed (pip install ray, or pip "
                                 "install 'ridgeline[ray]')") from None
    req = PlanRequest(
        models=_csv(model, "--model"), hardware=_csv(hardware, "--hardware"),
        weights=_csv(weights, "--weights"), kv=kv, activations=activations, prompt=prompt,
        output=output,
        rate_req_s=rate, slos=tuple(s.text for s in parse_slos(slo)),
        goodput_target=goodput_target, headroom=headroom, tp=_ints(tp, "--tp"),
        ep=not no_ep, max_num_seqs=_ints(max_num_seqs, "--max-num-seqs"),
        max_num_batched_tokens=_ints(max_num_batched_tokens, "--max-num-batched-tokens"),
        chunked_prefill=tuple(chunk_map[c] for c in chunk_opts), max_replicas=max_replicas,
        extra_replicas=extra_replicas, pd=pd, max_gpus=max_gpus, prices=_prices(price),
        requests=requests, seed=seed, verify_requests=verify_requests,
        engines=_csv(engine, "--engine"), all2all_backend=all2all_backend,
        moe_backend=moe_backend).validate()
    if plot:
        check_plot_path(plot)    # before the search, not after it
    if req.verify_requests_warning:
        typer.echo(f"warning: {req.verify_requests_warning}", err=True)
    pessimistic = None
    if confidence is not None:
        from ridgeline.plan.confidence import pessimistic_request, pessimistic_step_scale

        step_scale, step_desc = pessimistic_step_scale(confidence, req.hardware)
        pessimistic = pessimistic_request(req, step_scale).validate()
    result, worst, interrupted = _run_plans(req, pessimistic, workers, ray)
    if plot and not interrupted:
        plot_pareto(result, plot)
    at_confidence = None
    if worst is not None and not interrupted:
        at_confidence = {"step_time": step_desc, **worst.to_dict()}
    if json_out or fmt == "json":
        typer.echo(json.dumps(result.to_dict() | ({"at_confidence": at_confidence}
                                                  if at_confidence else {}), indent=2))
    else:
        _print_plan_tables(result, worst, confidence, at_confidence, interrupted, fmt)
    if interrupted:
        raise typer.Exit(130)
    if result.chosen is None:
        raise typer.Exit(1)


def _run_plans(req: PlanRequest, pessimistic: PlanRequest | None, workers: int | None,
               ray: str | None) -> tuple[PlanResult, PlanResult | None, bool]:
    """Run the plan (and the pessimistic one, with --confidence) under a progress display.
    Returns (result, the pessimistic result or None, interrupted); an interrupted run's
    result holds what had finished, marked partial."""
    from ridgeline.plan import plan
    from ridgeline.plan.search import PlanInterrupted
    from ridgeline.report.progress import progress_for

    # A bar with an ETA in a terminal; a line every few seconds on stderr in a log (a plan
    # takes minutes: a piped run must not sit silent).
    progress = progress_for("plan")
    tasks: dict[str, int] = {}

    def on_progress(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total)
        progress.update(tasks[stage], completed=done, total=total)

    worst = None
    try:
        with progress:
            result = plan(req, workers=workers, ray_address=ray, progress=on_progress)
            if pessimistic is not None:
                worst = plan(pessimistic, workers=workers, ray_address=ray,
                             progress=on_progress)
    except PlanInterrupted as exc:
        # Workers are stopped; print what had finished, marked partial, and exit 130.
        return exc.result, worst, True
    return result, worst, False


def _print_plan_tables(result: PlanResult, worst: PlanResult | None,
                       confidence: float | None, at_confidence: dict[str, Any] | None,
                       interrupted: bool, fmt: str | None) -> None:
    """The plan's tables, the pessimistic plan's under them (with --confidence), then the
    chosen configuration's launch command."""
    from ridgeline.report.tables import print_markdown_document

    print_markdown_document(result.markdown(launch=False), fmt)
    if at_confidence is not None and worst is not None:
        print_markdown_document(f"## At confidence {confidence:g}\n\n"
                                f"{at_confidence['step_time']['rule']}.\n\n"
                                + worst.markdown(launch=False), fmt)
    if result.chosen is not None and not interrupted:
        # plain text, never wrapped: a command to copy
        launch = result.launch()
        typer.echo(f"Launch the chosen configuration ({launch.engine}; every setting "
                   "the plan simulated):\n")
        typer.echo(launch.text())


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)


PLOT_FORMATS = ("png", "svg", "pdf")


def check_plot_path(path: str) -> None:
    """One-line RidgelineError, before the search, when the Pareto plot cannot be written at
    `path`: a directory, an unwritable place, a format matplotlib is not asked to write here,
    or no matplotlib."""
    from pathlib import Path

    from ridgeline.errors import RidgelineError

    suffix = Path(path).suffix.lower().lstrip(".")
    if Path(path).expanduser().is_dir():
        raise RidgelineError(f"--plot: got {path!r}: a directory; allowed: a file path ending "
                             f"in {', '.join('.' + f for f in PLOT_FORMATS)}")
    if suffix not in PLOT_FORMATS:
        raise RidgelineError(f"--plot: got {path!r}; allowed: a file path ending in "
                             f"{', '.join('.' + f for f in PLOT_FORMATS)}")
    check_writable(path, "--plot")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise RidgelineError("--plot: matplotlib is not installed (pip install "
                             "matplotlib)") from None
