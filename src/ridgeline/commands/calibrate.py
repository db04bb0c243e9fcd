"""`ridgeline calibrate host|engine|fit`: measure, then fit a step-time profile.

Only typer and the standard library at import time.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ridgeline.commands.options import number

calibrate_app = typer.Typer(help="Measure a host or a live engine; write a calibration "
                            "profile that --calibration accepts (docs/calibration.md).",
                            no_args_is_help=True)

OutOpt = Annotated[str, typer.Option("--out", "-o", help="Where to write the JSON.")]
PresetOpt = Annotated[str, typer.Option("--preset", help="Engine scheduling: llama.cpp or "
                                        "vllm.")]
SlotsOpt = Annotated[int | None, typer.Option("--slots", min=1, max=65_536,
                                              help="Engine slots (llama.cpp "
                                              "-np, vLLM max_num_seqs); default --max-batch.")]
NBatchOpt = Annotated[int, typer.Option("--n-batch", min=1, max=10_000_000,
                                        help="llama.cpp n_batch (token "
                                        "budget of a step).")]
NUbatchOpt = Annotated[int, typer.Option("--n-ubatch", min=1, max=10_000_000,
                                         help="llama.cpp n_ubatch (tokens "
                                         "per graph).")]
KvCapOpt = Annotated[int, typer.Option("--kv-capacity-tokens", min=1, max=10**11,
                                       help="The engine's KV "
                                       "cache in tokens (llama.cpp -c).")]
KvuOpt = Annotated[bool, typer.Option("--kv-unified", help="llama.cpp runs with -kvu (one KV "
                                      "stream: one graph per step). Default: per-slot KV, "
                                      "modelled by slot (LRU slots, one graph per run of "
                                      "consecutive slot ids).")]
ConfigOpt = Annotated[str | None, typer.Option("--config", help="The model's HF config.json "
                                               "(for KV bytes per token).")]


@calibrate_app.command("engine")
def engine_cmd(
    base_url: Annotated[str, typer.Option("--base-url", help="The live endpoint's root URL.")],
    out: OutOpt = "profile.json",
    model: Annotated[str, typer.Option("--model", "-m", help="Model name sent in requests "
                                       "(default: the server's first).")] = "",
    config: ConfigOpt = None,
    max_batch: Annotated[int | None, typer.Option(
        "--max-batch", min=1, max=4096, help="Decode probes at batch 1..N (default 8; vLLM: "
        "1, 2, 4, ... up to min(slots, 64)).")] = None,
    batches: Annotated[str | None, typer.Option("--batches", help="Decode batch sizes instead "
                                                "of 1..N, e.g. 1,2,4,8.")] = None,
    prompt_tokens: Annotated[int | None, typer.Option(
        "--prompt-tokens", min=1, max=10_000_000, help="Decode probes' prompt length "
        "(default 32; vLLM: 128).")] = None,
    output_tokens: Annotated[int | None, typer.Option(
        "--output-tokens", min=3, max=10_000_000, help="Decode probes' output length "
        "(default 32; vLLM: 64).")] = None,
    rounds: Annotated[int, typer.Option("--rounds", min=1, max=1000,
                                        help="Lockstep rounds per batch "
                                        "size.")] = 2,
    context_tokens: Annotated[int | None, typer.Option(
        "--context-tokens", min=0, max=10_000_000, help="Prompt of the long-context probes, "
        "at 1 stream and at the largest batch (0: none; default 384; vLLM: 1024).")] = None,
    prefill_tokens: Annotated[str | None, typer.Option(
        "--prefill-tokens", help="Prefill probe prompt lengths (default 16,64,128,256,512; "
        "vLLM: 128,512,1024,2048,4096 up to the token budget).")] = None,
    prefill_repeats: Annotated[int, typer.Option("--prefill-repeats", min=1, max=1000)] = 3,
    open_requests: Annotated[int | None, typer.Option(
        "--open-requests", min=0, max=100_000, help="Requests of the open-loop (Poisson) probe "
        "whose steps replace the lockstep decode steps (0: none; default 40, or 0 for "
        "llama.cpp with per-slot KV, whose slot model times each layout itself).")] = None,
    open_prompt_tokens: Annotated[int | None, typer.Option(
        "--open-prompt-tokens", min=1, max=10_000_000, help="(default 64; vLLM: 256)")
                                  ] = None,
    open_output_tokens: Annotated[int, typer.Option("--open-output-tokens", min=3,
                                                    max=10_000_000)] = 64,
    open_rate: Annotated[float | None, typer.Option("--open-rate", min=0.001, max=1e7,
                                                    help="Its rate, req/s (default: about "
                                                    "half the slots in flight).")] = None,
    preset: Annotated[str | None, typer.Option(
        "--preset", help="Engine scheduling: llama.cpp or vllm (default: the engine the "
        "server is recognised as, else llama.cpp).")] = None,
    slots: Annotated[int | None, typer.Option(
        "--slots", min=1, max=65_536, help="Engine slots (llama.cpp -np, vLLM max_num_seqs); "
        "default: what the server states (/props, vLLM's /metrics), else --max-batch "
        "(llama.cpp) or 256 (vLLM).")] = None,
    n_batch: Annotated[int | None, typer.Option(
        "--n-batch", min=1, max=10_000_000, help="Token budget of a step: llama.cpp n_batch "
        "(default 2048), vLLM max_num_batched_tokens (default: the server's, else 8192).")
                       ] = None,
    n_ubatch: NUbatchOpt = 512,
    kv_capacity_tokens: Annotated[int | None, typer.Option(
        "--kv-capacity-tokens", min=1, max=10**11, help="The engine's KV cache in tokens (default: "
        "llama.cpp's /props slots x n_ctx, vLLM's blocks x block size, else 1048576).")] = None,
    probe_dir: Annotated[str | None, typer.Option("--probe-dir", help="Where the probe traces "
                                                  "go (default: beside --out).")] = None,
    timeout_s: Annotated[float, typer.Option("--timeout", callback=number(gt=0, le=86400),
                                             help="Per-request limit, s.")] = 120.0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    kv_unified: KvuOpt = False,
) -> None:
    """Probe a live OpenAI-compatible engine through the bench client and fit a profile."""
    from pathlib import Path

    from ridgeline.bench.client import EndpointConfig
    from ridgeline.calibrate.engine import calibrate_engine
    from ridgeline.calibrate.presets import preset_scheduling
    from ridgeline.calibrate.probe import ProbeDesign

    if preset is not None:
        preset_scheduling(preset)  # a bad name fails before any request
    prefill_list = _ints(prefill_tokens, "--prefill-tokens") if prefill_tokens else None
    batch_list = _ints(batches, "--batches") if batches else None
    from ridgeline.calibrate.engine_detect import detect_engine
    from ridgeline.commands.bench_validate import check_base_url

    check_base_url(base_url)  # `http://[::1` reached aiohttp and exited 70
    detected = detect_engine(base_url)
    typer.echo(detected.line(), err=True)
    if preset is None:
        preset = "vllm" if detected.engine == "vllm" else "llama.cpp"
    gpu = _vllm_probe_defaults(preset, detected, slots, n_batch, max_batch, batch_list)
    if gpu:
        typer.echo(gpu.pop("line"), err=True)
        prompt_tokens = prompt_tokens or gpu["prompt_tokens"]
        output_tokens = output_tokens or gpu["output_tokens"]
        context_tokens = gpu["context_tokens"] if context_tokens is None else context_tokens
        prefill_list = prefill_list or gpu["prefill_tokens"]
        batch_list = batch_list or gpu["batches"]
        open_prompt_tokens = open_prompt_tokens or gpu["open_prompt_tokens"]
    max_batch = max_batch or 8
    slot_model = preset_scheduling(preset, slots or max_batch,
                                   kv_unified=kv_unified).slot_graphs
    if open_requests is None:
        open_requests = 0 if slot_model else 40
    design = ProbeDesign(max_batch=max_batch, decode_prompt_tokens=prompt_tokens or 32,
                         decode_output_tokens=output_tokens or 32, rounds=rounds,
                         context_prompt_tokens=384 if context_tokens is None
                         else context_tokens,
                         prefill_tokens=tuple(prefill_list or (16, 64, 128, 256, 512)),
                         prefill_repeats=prefill_repeats,
                         batches=tuple(batch_list or ()),
                         open_requests=open_requests,
                         open_prompt_tokens=open_prompt_tokens or 64,
                         open_output_tokens=open_output_tokens, open_rate_req_s=open_rate,
                         # vLLM: the open-loop probe aims at half the largest probed batch
                         # (not half of 256 slots), inside the measured range.
                         slots=max(batch_list) if gpu and batch_list else None)
    endpoint = EndpointConfig(base_url=base_url, model=model, timeout_s=timeout_s,
                              ignore_eos=True)
    pdir = probe_dir or str(Path(out).with_suffix("")) + "-probe"
    profile = calibrate_engine(endpoint, design, pdir, preset=preset, slots=slots,
                               n_batch=n_batch or 2048, n_ubatch=n_ubatch,
                               kv_capacity_tokens=kv_capacity_tokens, config_path=config,
                               seed=seed, log=lambda m: typer.echo(m, err=True),
                               kv_unified=kv_unified, detected=detected,
                               max_num_batched_tokens=n_batch if preset == "vllm" else None)
    _finish(profile, out)


@calibrate_app.command("fit")
def fit_cmd(
    traces: Annotated[list[str], typer.Argument(help="Probe traces (from `calibrate engine` "
                                                "or `bench`); with --engine: measured runs "
                                                "(inference-perf run folders, vLLM bench JSON "
                                                "--save-detailed, AIPerf profile_export.jsonl)."
                                                )],
    out: OutOpt = "profile.json",
    config: ConfigOpt = None,
    preset: PresetOpt = "llama.cpp",
    slots: SlotsOpt = None,
    n_batch: NBatchOpt = 2048,
    n_ubatch: NUbatchOpt = 512,
    kv_capacity_tokens: KvCapOpt = 1 << 20,
    kv_unified: KvuOpt = False,
    engine: Annotated[str | None, typer.Option(
        "--engine", help="Fit this engine's CPU costs (vllm, trtllm) on measured runs "
        "instead of a step profile; writes an engine costs file for `--engine FILE`.")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="With --engine: the runs' model (catalog name or HF "
        "config.json); default model_configs/<name>/config.json beside the runs.")] = None,
    hardware: Annotated[str, typer.Option("--hardware", "-g", help="With --engine: the GPU "
                                          "the runs ran on.")] = "h100-sxm",
    tp: Annotated[int, typer.Option("--tp", min=1, help="With --engine, for result files "
                                    "without flags: tensor parallelism.")] = 1,
    max_num_seqs: Annotated[int, typer.Option("--max-num-seqs", min=1)] = 256,
    max_num_batched_tokens: Annotated[int, typer.Option("--max-num-batched-tokens", min=1)
                                      ] = 8192,
    gpu_memory_utilization: Annotated[float, typer.Option("--gpu-memory-utilization",
                                                          min=0.01, max=1.0)] = 0.9,
    step_fit: Annotated[bool, typer.Option("--step-fit/--no-step-fit", help="With --engine: "
                                           "also fit the per-step CPU cost.")] = True,
    replications: Annotated[int, typer.Option(
        "--replications", min=1, max=1000, help="With --engine: arrival draws averaged per "
        "replayed inference-perf run (runs with measured arrivals replay once).")] = 8,
) -> None:
    """Fit a profile from existing probe traces (no requests sent), or with --engine the
    engine's CPU costs on measured serving runs (docs/engine.md)."""
    if engine is not None:
        _fit_engine(traces, out, engine, model, hardware, tp, max_num_seqs,
                    max_num_batched_tokens, gpu_memory_utilization, step_fit, replications)
        return
    from ridgeline.calibrate.engine import calibrate_from_traces
    from ridgeline.calibrate.presets import preset_scheduling

    preset_scheduling(preset)
    profile = calibrate_from_traces(list(traces), preset=preset, slots=slots, n_batch=n_batch,
                                    n_ubatch=n_ubatch, kv_capacity_tokens=kv_capacity_tokens,
                                    config_path=config, kv_unified=kv_unified)
    _finish(profile, out)


@calibrate_app.command("host")
def host_cmd(
    out: OutOpt = "host.json",
    model: Annotated[str | None, typer.Option("--model", "-m", help="Also time this model's "
                                              "own GEMM shapes (catalog name or config.json).")
                     ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer sizes and repeats.")] = False,
) -> None:
    """Microbenchmark this host (memory bandwidth, GEMM sweep); write a host profile
    (also a hardware file: `estimate --hardware host.json`)."""
    from ridgeline.calibrate.host import measure_host
    from ridgeline.specs.model import load_model

    spec = load_model(model) if model else None
    import threading

    # Measured in a thread: one large GEMM holds the main thread for seconds (4.0 s on a
    # loaded box), and Python sees a Ctrl-C only between bytecodes of the main thread; it
    # waits here in 0.1 s steps instead. On Ctrl-C nothing is written; the thread ends
    # with the process.
    done: dict[str, Any] = {}
    # After a Ctrl-C the worker must not print: its progress line would follow the
    # "interrupted" line, and a daemon thread writing stderr at interpreter shutdown can
    # abort the exit with a fatal error (seen once in CI under load).
    quiet = threading.Event()
    echo_lock = threading.Lock()

    def progress(message: str) -> None:
        with echo_lock:
            if not quiet.is_set():
                typer.echo(message, err=True)

    def work() -> None:
        try:
            done["profile"] = measure_host(model_spec=spec, quick=quick, progress=progress)
        except BaseException as exc:  # re-raised on the main thread
            done["error"] = exc

    worker = threading.Thread(target=work, name="calibrate-host", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    except KeyboardInterrupt:
        with echo_lock:  # a line being printed finishes first; none start after
            quiet.set()
        raise
    if "error" in done:
        raise done["error"]
    prof = done["profile"]
    prof.write(out)
    typer.echo(f"host profile written to {out}")


def _fit_engine(paths: list[str], out: str, engine: str, model: str | None, hardware: str,
                tp: int, max_num_seqs: int, max_num_batched_tokens: int,
                gpu_memory_utilization: float, step_fit: bool, replications: int) -> None:
    import json

    from ridgeline.calibrate.engine_fit import fit_engine_document, make_build
    from ridgeline.calibrate.engine_runs import EngineFlags, load_measured_runs, model_config_for
    from ridgeline.errors import RidgelineError
    from ridgeline.sim.engine_costs import FIT_ENGINES

    if engine not in FIT_ENGINES:
        raise RidgelineError(f"--engine: got {engine!r}; allowed: {', '.join(FIT_ENGINES)}")
    flags = EngineFlags(tp, max_num_seqs, max_num_batched_tokens, gpu_memory_utilization)
    runs = load_measured_runs(paths, flags, model or "")
    for r in runs:
        model_config_for(r, model)     # every run's model resolves before any simulation
    build = make_build(lambda r: model_config_for(r, model), hardware)
    typer.echo(f"replaying {len(runs)} runs on {hardware} ...", err=True)
    doc, fit, _ = fit_engine_document(runs, build, engine, ", ".join(paths), step_fit,
                                      replications=replications)
    from ridgeline.inputs import write_text_atomic

    write_text_atomic(out, json.dumps(doc, indent=2) + "\n")  # a Ctrl-C leaves no half file
    typer.echo("fitted: " + ", ".join(f"{k} {v:g}" for k, v in fit.values.items()))
    typer.echo("training mean APE: " + ", ".join(f"{k} {v:.1%}"
                                                 for k, v in fit.train_ape.items()))
    typer.echo("cross-validated: " + doc["provenance"]["cv_error"])
    for note in fit.notes:
        typer.echo(note)
    typer.echo(f"engine costs written to {out} (use: --engine {out})")


def _vllm_probe_defaults(preset: str, detected: Any, slots: int | None, n_batch: int | None,
                         max_batch: int | None, batches: list[int] | None
                         ) -> dict[str, Any] | None:
    """Probe sizes for a GPU engine (the vllm preset), or None for llama.cpp: decode batches
    1, 2, 4, ... up to min(slots, 64) (or 1..--max-batch), longer prompts, and prefill
    lengths up to the step's token budget (a longer prompt is chunked over several steps,
    and a prefill probe times one). Also the line saying what was read and defaulted."""
    from ridgeline.calibrate.engine_detect import (
        VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS,
        VLLM_DEFAULT_MAX_NUM_SEQS,
    )

    if preset != "vllm":
        return None
    is_vllm = detected.engine == "vllm"
    n_slots = slots or (detected.max_num_seqs if is_vllm else None) or VLLM_DEFAULT_MAX_NUM_SEQS
    budget = n_batch or (detected.max_num_batched_tokens if is_vllm else None) or \
        VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS
    if batches is None and max_batch is None:
        top = min(n_slots, 64)
        batches = sorted({*(1 << k for k in range(7) if 1 << k <= top), top})
    elif batches is None:
        batches = list(range(1, min(max_batch or 8, n_slots) + 1))
    prefill = [p for p in (128, 512, 1024, 2048, 4096) if p <= budget] or [budget]
    line = (detected.settings_line() if is_vllm else
            "vllm preset on a server not recognised as vLLM: vLLM defaults used: "
            f"max_num_seqs {VLLM_DEFAULT_MAX_NUM_SEQS}, max_num_batched_tokens "
            f"{VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS}, block_size 16")
    given = [f for f, v in (("--slots", slots), ("--n-batch", n_batch)) if v]
    if given:
        line += f" ({' and '.join(given)} given: used instead)"
    return {"line": line, "prompt_tokens": 128, "output_tokens": 64, "context_tokens": 1024,
            "prefill_tokens": prefill, "batches": batches, "open_prompt_tokens": 256}


def _ints(text: str, option: str) -> list[int]:
    from ridgeline.errors import field_error

    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise field_error(option, text, "comma-separated integers >= 1") from None
    if not vals or min(vals) < 1 or max(vals) > 10_000_000 or len(vals) > 1000:
        raise field_error(option, text, "up to 1,000 comma-separated integers from 1 to "
                          "10,000,000")
    return vals


def _finish(profile: object, out: str) -> None:
    from rich.table import Table

    from ridgeline.report.tables import out_for

    profile.save(out)  # type: ignore[attr-defined]
    con = out_for()
    tab = Table(title="fitted step times (residuals)", title_justify="left")
    for c in ("point", "tokens", "pairs", "measured (ms)", "fitted (ms)", "error", "steps"):
        tab.add_column(c, justify="left" if c == "point" else "right")
    for r in profile.residuals:  # type: ignore[attr-defined]
        tab.add_row(r.point, str(r.tokens), f"{r.pairs:g}", f"{r.measured_s * 1e3:.2f}",
                    f"{r.fitted_s * 1e3:.2f}", f"{r.rel_error:+.1%}", str(r.samples))
    con.print(tab)
    for note in profile.fit_notes:  # type: ignore[attr-defined]
        con.print(f"[dim]{note}[/dim]")
    con.print(f"profile written to {out}", markup=False)
    con.close()


def register(app: typer.Typer) -> None:
    app.add_typer(calibrate_app, name="calibrate")
