"""`ridgeline plan`: the cheapest configuration meeting the SLOs (see ridgeline.plan).

Only typer and the standard library at import time.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ridgeline.commands.options import (
    JsonOpt,
    MaxModelLenOpt,
    ModelArg,
    SeedOpt,
    ServedModelNameOpt,
    check_max_model_len,
    check_writable,
    kv_dtype,
    model_from,
    weights_dtype,
)


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


def plan_cmd(
    model_arg: ModelArg = None,
    model: Annotated[str, typer.Option("--model", "-m", help="Model(s), comma-separated "
                                       "(catalog names or config.json paths).")
                     ] = "llama-3.1-8b",
    hardware: Annotated[str, typer.Option("--hardware", "-g", help="Candidate GPUs, "
                                          "comma-separated.")] = "h100-sxm",
    weights: Annotated[str, typer.Option("--weights", "--quantization",
                                         help="Weight precisions to try, comma-separated "
                                         "(bf16,fp8,int4; vLLM's --quantization names "
                                         "too: awq, gptq, modelopt_fp4, mxfp4).")] = "bf16",
    kv: Annotated[str | None, typer.Option("--kv", "--kv-cache-dtype", callback=kv_dtype,
                                           help="KV-cache dtype (default: from the "
                                           "weights; vLLM's names are accepted).")] = None,
    rate: Annotated[float, typer.Option("--rate", help="Target arrival rate (req/s, "
                                        "Poisson).")] = 10.0,
    slo: Annotated[list[str] | None, typer.Option(
        "--slo", help="Per-request SLO (repeatable), e.g. ttft_ms<=1000; a percentile target "
        "such as 'TTFT P99 <= 1 s' is --slo ttft_ms<=1000 with --goodput-target 0.99.")
    ] = None,
    goodput_target: Annotated[float, typer.Option(
        "--goodput-target", help="Fraction of requests that must meet every SLO, in (0, 1).")
    ] = 0.99,
    headroom: Annotated[float, typer.Option(
        "--headroom", help="Plan for rate x (1 + headroom): never plan near saturation.")
    ] = 0.2,
    prompt: Annotated[str, typer.Option("--prompt", help="Prompt lengths (as simulate).")
                      ] = "lognormal:mean=500,sigma=0.8,max=4096",
    output: Annotated[str, typer.Option("--output", help="Output lengths (as simulate).")
                      ] = "lognormal:mean=200,sigma=0.8,max=1024",
    tp: Annotated[str, typer.Option("--tp", "--tensor-parallel-size", "-tp",
                                    help="TP degrees to try.")] = "1,2,4,8",
    no_ep: Annotated[bool, typer.Option("--no-ep", help="MoE: do not try EP = TP.")] = False,
    max_num_seqs: Annotated[str, typer.Option("--max-num-seqs", help="Batch caps to try.")
                            ] = "64,256",
    max_num_batched_tokens: Annotated[str, typer.Option(
        "--max-num-batched-tokens", help="Token budgets per step to try.")] = "2048,8192",
    chunked_prefill: Annotated[str, typer.Option(
        "--chunked-prefill", help="on, off or on,off.")] = "on",
    enable_chunked_prefill: Annotated[bool | None, typer.Option(
        "--enable-chunked-prefill/--no-enable-chunked-prefill", help="vLLM's: the same as "
        "--chunked-prefill on / off.")] = None,
    max_model_len: MaxModelLenOpt = None,
    served_model_name: ServedModelNameOpt = None,
    prefix_caching: Annotated[bool, typer.Option(
        "--enable-prefix-caching/--no-enable-prefix-caching",
        "--prefix-caching/--no-prefix-caching", help="vLLM's; no effect here: plan's "
        "synthetic prompts share no prefix.")] = True,
    pd: Annotated[bool, typer.Option("--pd/--no-pd", help="Also try prefill/decode "
                                     "splits.")] = True,
    max_replicas: Annotated[int, typer.Option("--max-replicas", min=1)] = 16,
    extra_replicas: Annotated[int, typer.Option(
        "--extra-replicas", min=0, help="Replica counts tried above the analytic minimum.")
    ] = 1,
    max_gpus: Annotated[int, typer.Option("--max-gpus", min=1)] = 64,
    price: Annotated[list[str] | None, typer.Option(
        "--price", help="Override a GPU's price: NAME=USD_PER_GPU_HOUR (repeatable).")
    ] = None,
    requests: Annotated[int, typer.Option(
        "--requests", "-n", min=1, help="Requests per screening simulation (short runs that "
        "only rule candidates out; the cheapest survivors are verified with long runs).")
    ] = 500,
    verify_requests: Annotated[int | None, typer.Option(
        "--verify-requests", min=1, help="Requests per verification run (default: what the "
        "--goodput-target percentile needs, 6086 for 0.99).")] = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", min=1, help="Local worker processes (default: CPU cores).")] = None,
    ray: Annotated[str | None, typer.Option(
        "--ray", help="Run the simulations on Ray: 'local' starts one, else an address.")
    ] = None,
    plot: Annotated[str | None, typer.Option(
        "--plot", help="Write the Pareto plot here (.png, .svg or .pdf; needs matplotlib).")
    ] = None,
    json_out: JsonOpt = False,
    seed: SeedOpt = 0,
) -> None:
    """Find the cheapest configuration meeting the SLOs at a target rate, with headroom."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from ridgeline.errors import RidgelineError
    from ridgeline.metrics.slo import parse_slos
    from ridgeline.plan import PlanRequest, plan
    from ridgeline.plan.search import PlanInterrupted, plot_pareto

    del served_model_name, prefix_caching  # no effect on the plan (see their help)
    model = model_from(model_arg, model, "llama-3.1-8b")
    check_max_model_len(max_model_len, prompt, output)
    if enable_chunked_prefill is not None:
        chunked_prefill = "on" if enable_chunked_prefill else "off"
    weights = ",".join(weights_dtype(w.strip()) or "" for w in weights.split(","))
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
        weights=_csv(weights, "--weights"), kv=kv, prompt=prompt, output=output,
        rate_req_s=rate, slos=tuple(s.text for s in parse_slos(slo)),
        goodput_target=goodput_target, headroom=headroom, tp=_ints(tp, "--tp"),
        ep=not no_ep, max_num_seqs=_ints(max_num_seqs, "--max-num-seqs"),
        max_num_batched_tokens=_ints(max_num_batched_tokens, "--max-num-batched-tokens"),
        chunked_prefill=tuple(chunk_map[c] for c in chunk_opts), max_replicas=max_replicas,
        extra_replicas=extra_replicas, pd=pd, max_gpus=max_gpus, prices=_prices(price),
        requests=requests, seed=seed, verify_requests=verify_requests).validate()
    if plot:
        check_plot_path(plot)    # before the search, not after it
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        console=Console(stderr=True), transient=True,
                        # off the terminal a bar is noise, and its closing newline would
                        # stand before a one-line error
                        disable=not sys.stderr.isatty())
    tasks: dict[str, int] = {}

    def on_progress(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total)
        progress.update(tasks[stage], completed=done, total=total)

    interrupted = False
    try:
        with progress:
            result = plan(req, workers=workers, ray_address=ray, progress=on_progress)
    except PlanInterrupted as exc:
        # Workers are stopped; print what had finished, marked partial, and exit 130.
        result, interrupted = exc.result, True
    if plot and not interrupted:
        plot_pareto(result, plot)
    if json_out:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        from rich.console import Console as _C
        from rich.markdown import Markdown

        _C().print(Markdown(result.markdown()))
    if interrupted:
        raise typer.Exit(130)
    if result.chosen is None:
        raise typer.Exit(1)


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
