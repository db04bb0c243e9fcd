"""Command-line options shared by estimate, simulate and serve (defined once here).

Only typer and the standard library are imported: command modules must stay cheap to import.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from ridgeline.errors import RidgelineError

# ---- numbers: one parser and one range check for every numeric option ------------------


def _bounds_text(gt: float | None, ge: float | None, lt: float | None,
                 le: float | None) -> str:
    parts = [f"{op} {b:g}" for op, b in ((">", gt), (">=", ge), ("<", lt), ("<=", le))
             if b is not None]
    return "a finite number" + (" " + " and ".join(parts) if parts else "")


# Every number typed on the command line is at most this in size unless its option says
# otherwise: no count, size, rate or duration comes near, and 1e300 would overflow to inf
# inside the models.
MAX_NUMBER = 1e15


def range_problem(value: float, *, gt: float | None = None, ge: float | None = None,
                  lt: float | None = None, le: float | None = None) -> str | None:
    """None when `value` is finite and inside the bounds, else 'allowed: ...' text."""
    if le is None and lt is None:
        le = MAX_NUMBER
    if ge is None and gt is None and value < 0:
        ge = -MAX_NUMBER
    ok = (math.isfinite(value) and (gt is None or value > gt) and (ge is None or value >= ge)
          and (lt is None or value < lt) and (le is None or value <= le))
    return None if ok else f"allowed: {_bounds_text(gt, ge, lt, le)}"


def parse_number(text: str, field: str, *, gt: float | None = None, ge: float | None = None,
                 lt: float | None = None, le: float | None = None) -> float:
    """Parse a number typed by a user: finite (no nan/inf) and inside the bounds.

    >>> parse_number("2.5", "--rate", gt=0)
    2.5
    """
    try:
        value = float(str(text).strip())
    except ValueError:
        value = math.nan
    problem = range_problem(value, gt=gt, ge=ge, lt=lt, le=le)
    if problem:
        raise RidgelineError(f"{field}: got {str(text).strip()!r}; {problem}")
    return value


def number(*, gt: float | None = None, ge: float | None = None, lt: float | None = None,
           le: float | None = None) -> Callable[[Any], Any]:
    """A typer option callback: the value (or each value of a list) is finite and in range.

    click's own ranges (`min=`) let nan and inf through, so every float option uses this.
    """

    def check(value: Any) -> Any:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if v is None:
                continue
            problem = range_problem(float(v), gt=gt, ge=ge, lt=lt, le=le)
            if problem:
                raise typer.BadParameter(f"got {v!r}; {problem}")
        return value

    return check


# ---- output paths: found unwritable before the work, not after -------------------------


def writable_problem(path: str | os.PathLike[str], *, directory: bool = False) -> str | None:
    """None when `path` can be written (a file, or with directory=True a folder), else why.

    Creates nothing that stays: it tries a temporary file in the folder that would hold it.
    """
    p = Path(path).expanduser()
    if not str(path).strip():
        return "an empty path"
    if p.exists() and p.is_dir() != directory:
        return "a directory" if p.is_dir() else "a file, not a directory"
    folder = p if directory else p.parent
    while not folder.exists():  # the writer creates missing parents: test the first that is
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is not a directory"
    try:
        if p.exists() and not directory:
            with open(p, "a", encoding="utf-8"):
                pass
        else:
            with tempfile.TemporaryFile(dir=folder):
                pass
    except OSError as exc:
        return f"cannot write in {folder} ({exc.strerror or exc})"
    return None


def check_writable(path: str | os.PathLike[str], field: str, *, directory: bool = False) -> None:
    """Raise a one-line RidgelineError when `path` cannot be written."""
    problem = writable_problem(path, directory=directory)
    if problem:
        kind = "a writable folder" if directory else "a writable file path"
        raise RidgelineError(f"{field}: got {str(path)!r}: {problem}; allowed: {kind}")


def writable_file(value: Any) -> Any:
    """Option callback: an output file path that can be written (None passes)."""
    if value is not None:
        problem = writable_problem(value)
        if problem:
            raise typer.BadParameter(f"got {str(value)!r}: {problem}; allowed: a writable "
                                     "file path")
    return value


def writable_dir(value: Any) -> Any:
    """Option callback: an output folder that can be created or written (None passes)."""
    if value is not None:
        problem = writable_problem(value, directory=True)
        if problem:
            raise typer.BadParameter(f"got {str(value)!r}: {problem}; allowed: a writable "
                                     "folder")
    return value


# The step-time model tabulates every batch size up to --max-num-seqs (a second per ~50k
# rows); vLLM deployments use hundreds to a few thousand, so 65,536 is generous.
MAX_NUM_SEQS = 65_536

ModelOpt = Annotated[
    str,
    typer.Option("--model", "-m", help="Catalog model name (see `ridgeline models`), a path "
                 "to a Hugging Face config.json (or its folder), or a Hub id org/name (read "
                 "from huggingface_hub's local cache; needs ridgeline[tokenizer])."),
]
HardwareOpt = Annotated[
    str,
    typer.Option("--hardware", "-g", help="Catalog GPU name (see `ridgeline hardware`) or a "
                 "path to a hardware JSON file."),
]
# ---- vLLM's engine arguments: the same options under vLLM's names ---------------------

_WEIGHT_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4", "mxfp4")
# vLLM's --kv-cache-dtype values -> ours ("auto": the model's own 16-bit dtype).
_VLLM_KV_DTYPES = {"auto": None, "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
                   "float32": "fp32", "float": "fp32", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
                   "fp8_inc": "fp8", "fp8_ds_mla": "fp8"}


def kv_dtype(value: str | None) -> str | None:
    """A KV dtype, or vLLM's `--kv-cache-dtype` name for it."""
    if value is None:
        return None
    return _VLLM_KV_DTYPES.get(value.strip().lower(), value)


WeightsOpt = Annotated[
    str | None, typer.Option("--weights", "--quantization",
                             help="Weight dtype: fp32, bf16, fp16, fp8, int8, "
                             "int4, fp4, mxfp4, or a vLLM --quantization name (fp8_block, awq, "
                             "gptq, modelopt_fp4, ...) (default: the checkpoint's "
                             "quantization_config, else bf16; the flag overrides the config).")
]
KvOpt = Annotated[
    str | None, typer.Option("--kv", "--kv-cache-dtype", callback=kv_dtype,
                             help="KV-cache dtype (default: the model's 16-bit dtype, "
                             "as vLLM's --kv-cache-dtype auto; vLLM's names are accepted).")
]
PrefixCachingOpt = Annotated[
    bool, typer.Option("--enable-prefix-caching/--no-enable-prefix-caching",
                       "--prefix-caching/--no-prefix-caching",
                       help="Automatic prefix caching: reuse the KV of shared prompt prefixes "
                       "(on by default, as in vLLM V1).")
]
ChunkedPrefillOpt = Annotated[
    bool, typer.Option("--enable-chunked-prefill/--no-enable-chunked-prefill",
                       "--chunked-prefill/--no-chunked-prefill",
                       help="Chunked prefill: split long prefills across steps (vLLM V1 "
                       "default: on).")
]
MaxModelLenOpt = Annotated[
    int | None, typer.Option("--max-model-len", min=2, help="Context limit (prompt + "
                             "max_tokens), as vLLM's; default: the model's "
                             "max_position_embeddings.")
]
ServedModelNameOpt = Annotated[
    str | None, typer.Option("--served-model-name", help="vLLM's: the model's name on the "
                             "API (a label here; default: --model).")
]
ModelArg = Annotated[
    str | None, typer.Argument(metavar="MODEL", show_default=False,
                               help="The model, as `vllm serve MODEL` takes it (the same as "
                               "--model).")
]


def check_max_model_len(max_model_len: int | None, prompt: str, output: str) -> None:
    """vLLM refuses a request whose prompt + max_tokens exceed --max-model-len: refuse a
    workload whose longest prompt plus longest output could."""
    if max_model_len is None:
        return
    from ridgeline.workload.lengths import parse_lengths

    def longest(spec: str, field: str) -> float:
        d = parse_lengths(spec, field)
        if d.kind == "fixed":
            return d.params["value"]
        if d.kind == "uniform":
            return min(d.params["max"], d.max_tokens or math.inf)
        if d.kind == "empirical" and d.values is not None:
            return float(max(d.values))
        return float(d.max_tokens) if d.max_tokens is not None else math.inf

    worst = longest(prompt, "--prompt") + longest(output, "--output")
    if worst > max_model_len:
        raise RidgelineError(f"--max-model-len: got {max_model_len}; allowed: at least the "
                             f"longest prompt + output ({worst:g}; vLLM refuses longer "
                             "requests): raise it or clip --prompt/--output with max=")


def model_from(positional: str | None, option: str, default: str) -> str:
    """The model of `ridgeline CMD MODEL` or `--model`; both must agree when both are given."""
    if positional is None:
        return option
    if option != default and option != positional:
        raise RidgelineError(f"MODEL: got {positional!r} and --model {option!r}; give one")
    return positional
ActivationsOpt = Annotated[
    str | None, typer.Option("--activations", help="Activation/GEMM dtype: bf16, fp16, "
                             "fp8, int8, fp4, fp32 (default: as vLLM runs the weights on the "
                             "GPU: fp8 -> W8A8 where it has fp8 tensor cores, else W8A16; "
                             "NVFP4 -> W4A4 on Blackwell; int4/mxfp4 -> W4A16).")
]
TpOpt = Annotated[int, typer.Option("--tp", "--tensor-parallel-size", "-tp", min=1,
                                    help="Tensor-parallel degree.")]
PpOpt = Annotated[int, typer.Option("--pp", "--pipeline-parallel-size", "-pp", min=1,
                                    help="Pipeline-parallel degree.")]
EpOpt = Annotated[int, typer.Option("--ep", "--ep-size", min=1, help="Expert-parallel "
                                    "degree (MoE): the experts are spread over this many GPUs "
                                    "of the instance (a divisor of tp x attention-dp).")]
DpOpt = Annotated[int, typer.Option("--dp", min=1, help="Data-parallel replicas (with "
                                    "--enable-dp-attention, SGLang's: attention ranks).")]
# Attention data-parallelism with expert parallelism, as each engine spells it
# (ridgeline.specs.parallel.resolve_layout reads them together).
AttentionDpOpt = Annotated[int, typer.Option(
    "--attention-dp", min=1, help="Attention data-parallel ranks in one instance (MoE): each "
    "runs attention with --tp GPUs on its own sequences; the MoE layers span all ranks.")]
DataParallelSizeOpt = Annotated[int | None, typer.Option(
    "--data-parallel-size", min=1, help="vLLM's: on a MoE model attention data-parallel "
    "ranks (the MoE layers span DP x TP GPUs); on a dense model replicas.")]
EnableExpertParallelOpt = Annotated[bool, typer.Option(
    "--enable-expert-parallel", help="vLLM's: experts spread over all DP x TP GPUs "
    "(EP = DP x TP) instead of split among them.")]
EnableDpAttentionOpt = Annotated[bool, typer.Option(
    "--enable-dp-attention", help="SGLang's: --dp N attention ranks inside one instance of "
    "--tp GPUs (tp/dp per rank).")]


def _ep_backend(value: str) -> str:
    """--all2all-backend: one of the backends perf/comm.py prices ("": the engine's)."""
    if not value:
        return ""
    from ridgeline.perf.comm import check_ep_backend

    return check_ep_backend(value)


All2AllBackendOpt = Annotated[str, typer.Option(
    "--all2all-backend", callback=_ep_backend, help="vLLM's: the MoE layers' expert-parallel "
    "dispatch/combine, allgather_reducescatter, deepep_high_throughput or deepep_low_latency "
    "(default: the engine preset's; SGLang's --moe-a2a-backend none is "
    "allgather_reducescatter, deepep the DeepEP ones).")]
ComputeEffOpt = Annotated[
    float | None,
    typer.Option("--compute-efficiency", callback=number(gt=0, le=1),
                 help="Achieved/peak FLOP/s; given, the plain roofline times the step "
                      "instead of the fitted kernel model (default: the fitted model)."),
]
BandwidthEffOpt = Annotated[
    float | None,
    typer.Option("--bandwidth-efficiency", callback=number(gt=0, le=1),
                 help="Achieved/peak memory bandwidth; given, the plain roofline times the "
                      "step instead of the fitted kernel model (default: the fitted model)."),
]
KernelOverheadOpt = Annotated[
    float | None,
    typer.Option("--kernel-overhead-us", callback=number(ge=0, le=1e6), help="Per-kernel "
                 "launch gap in microseconds, added to the kernel durations (default from "
                 "hardware file)."),
]
SloOpt = Annotated[
    list[str] | None,
    typer.Option("--slo", help="SLO bound on a per-request metric, METRIC:LIMIT (at most), "
                 "e.g. ttft_ms:500, tpot_ms:50, e2e_s:20 (repeatable)."),
]
TraceOutOpt = Annotated[
    str | None, typer.Option("--trace", callback=writable_file,
                             help="Write the per-request trace (JSONL) here.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
# The output formats of ridgeline.report.tables (repeated here: this module imports only
# typer; tests/commands/test_output_format.py checks they agree).
OUTPUT_FORMATS = ("table", "plain", "markdown", "csv", "json")


def _output_format(value: str | None) -> str | None:
    if value is not None and value not in OUTPUT_FORMATS:
        raise typer.BadParameter(f"got {value!r}; allowed: {', '.join(OUTPUT_FORMATS)}")
    return value


OutFormatOpt = Annotated[
    str | None,
    typer.Option("--format", callback=_output_format, metavar="FORMAT",
                 help="Output format: table (rich tables; the default in a terminal), plain "
                 "(full-width text, no cell cut; the default when piped), markdown, csv, "
                 "json."),
]
AssumptionsOpt = Annotated[
    bool,
    typer.Option("--assumptions", help="Print every assumption with its provenance (default: "
                 "the few that change the answer)."),
]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, max=2**63 - 1,
                                      help="Random seed (runs are reproducible).")]
CalibrationOpt = Annotated[
    str | None,
    typer.Option("--calibration", help="A calibration profile (`ridgeline calibrate`): its "
                 "measured step times and scheduling replace the roofline model's."),
]
EngineOpt = Annotated[
    str,
    typer.Option("--engine", help="Engine preset: vllm (V1, default), trtllm (in-flight "
                 "batching, guaranteed no evict), sglang (prefill-first batches, radix cache, "
                 "overlap scheduling), or an engine costs .json; its fitted CPU "
                 "costs (per request, per step) are on by default (docs/engine.md)."),
]
MoeBackendOpt = Annotated[
    str,
    typer.Option("--moe-backend", help="The engine's MoE runner backend, as SGLang's "
                 "--moe-runner-backend: auto (default: the engine's own choice for the model "
                 "and GPU), triton, flashinfer_trtllm or marlin (which measured MoE fit times "
                 "the expert layers where the tables have several)."),
]
# SGLang's spellings of the same MoE choices, read together with ridgeline's by
# `moe_choices` (one reader, so that a bad value or two spellings that disagree fail alike).
MoeRunnerBackendOpt = Annotated[
    str | None,
    typer.Option("--moe-runner-backend", help="SGLang's spelling of --moe-backend (same "
                 "values)."),
]
MoeA2aBackendOpt = Annotated[
    str | None,
    typer.Option("--moe-a2a-backend", help="SGLang's spelling of --all2all-backend: none "
                 "(allgather_reducescatter) or deepep (with --deepep-mode)."),
]
DeepepModeOpt = Annotated[
    str | None,
    typer.Option("--deepep-mode", help="SGLang's, with --moe-a2a-backend deepep: normal "
                 "(deepep_high_throughput) or low_latency (deepep_low_latency)."),
]
# SGLang's --moe-a2a-backend / --deepep-mode pairs and the backend each is here
# (perf/comm.py); SGLang's deepep mode "auto" switches per batch, which one priced step
# cannot, so it is refused rather than guessed.
SGLANG_A2A = {("none", None): "allgather_reducescatter",
              ("deepep", "normal"): "deepep_high_throughput",
              ("deepep", "low_latency"): "deepep_low_latency"}


def _agree(flag_a: str, value_a: str, flag_b: str, value_b: str, typed_b: str = "") -> str:
    """The one value two spellings of a choice give, or the `error:` naming both (`typed_b`:
    what the user typed for the second, where it is not `value_b` itself)."""
    if value_a and value_b and value_a != value_b:
        got = f"{typed_b} ({value_b})" if typed_b else repr(value_b)
        raise RidgelineError(f"{flag_b[2:]}: got {got}, which conflicts with {flag_a} "
                             f"{value_a!r}; allowed: one of them, or both naming the same "
                             "backend")
    return value_a or value_b


def moe_choices(moe_backend: str, moe_runner_backend: str | None, all2all_backend: str,
                moe_a2a_backend: str | None, deepep_mode: str | None) -> tuple[str, str]:
    """(MoE runner backend, EP dispatch/combine backend) from ridgeline's flags and SGLang's
    spellings of them; "" for the latter: the engine preset's."""
    from ridgeline.perf.comm import EP_BACKENDS
    from ridgeline.perf.measured_kernels import MOE_BACKENDS

    allowed = ", ".join(MOE_BACKENDS)
    for flag, value in (("--moe-backend", moe_backend),
                        ("--moe-runner-backend", moe_runner_backend)):
        if value is not None and value not in MOE_BACKENDS:
            raise RidgelineError(f"{flag[2:]}: got {value!r}; allowed: {allowed}")
    runner = _agree("--moe-backend", "" if moe_backend == "auto" else moe_backend,
                    "--moe-runner-backend",
                    "" if moe_runner_backend in (None, "auto") else moe_runner_backend)
    sglang_a2a = typed = ""
    if deepep_mode is not None and moe_a2a_backend is None:
        raise RidgelineError(f"deepep-mode: got {deepep_mode!r} without --moe-a2a-backend; "
                             "allowed: with --moe-a2a-backend deepep only")
    if moe_a2a_backend is not None:
        if moe_a2a_backend not in ("none", "deepep"):
            raise RidgelineError(f"moe-a2a-backend: got {moe_a2a_backend!r}; allowed: none, "
                                 "deepep (with --deepep-mode normal or low_latency)")
        if (moe_a2a_backend, deepep_mode) not in SGLANG_A2A:
            got = "nothing" if deepep_mode is None else repr(deepep_mode)
            raise RidgelineError(
                f"deepep-mode: got {got} with --moe-a2a-backend "
                f"{moe_a2a_backend}; allowed: normal or low_latency with deepep (one mode "
                "per run: SGLang's auto switches per batch); none with no --deepep-mode")
        sglang_a2a = SGLANG_A2A[(moe_a2a_backend, deepep_mode)]
        typed = moe_a2a_backend + (f" --deepep-mode {deepep_mode}" if deepep_mode else "")
    if all2all_backend and all2all_backend not in EP_BACKENDS:
        raise RidgelineError(f"all2all-backend: got {all2all_backend!r}; allowed: "
                             f"{', '.join(EP_BACKENDS)}")
    a2a = _agree("--all2all-backend", all2all_backend,
                 "--moe-a2a-backend", sglang_a2a, typed)
    return runner or "auto", a2a


EngineCostsOpt = Annotated[
    bool,
    typer.Option("--engine-costs/--no-engine-costs", help="Add the engine's fitted CPU costs "
                 "(off: GPU work only, the bare roofline)."),
]


# ---- the one output-path guard: run on the command line before any command starts -------

# Per command, the options that name files (or, with a trailing "/", folders) it writes.
# `report --timeline` is an input; `simulate --timeline` an output: hence per command.
OUTPUT_OPTIONS: dict[str, tuple[str, ...]] = {
    "simulate": ("--trace", "--timeline", "--report"),
    "bench": ("--trace", "--report"),
    "report": ("--out",),
    "plot": ("--out",),
    "calibrate": ("--out", "-o", "--probe-dir/"),
    "analyze": ("--summary-file",),
    "gate": ("--summary-file",),
    "demo": ("--out-dir/", "--report"),
    "export": ("--out", "-o"),
}
# Commands the guard leaves to themselves (plan checks its own outputs).
UNGUARDED = frozenset({"plan"})


def _path_candidates(token: str) -> list[str]:
    """The token, and what may be paths inside it: `replay:path=F`, `empirical:F`,
    `sharegpt:path=F,...`, `--opt=F`."""
    out = [token]
    if token.startswith("-") and "=" in token:
        out.append(token.split("=", 1)[1])
    if ":" in token:
        rest = token.split(":", 1)[1]
        out.append(rest)
        for part in rest.split(","):
            if "=" in part:
                out.append(part.split("=", 1)[1])
            else:
                out.append(part)
    return [c for c in out if c and len(c) < 4096]


def _file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


_NON_FINITE = frozenset({"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity",
                         "+infinity", "-infinity"})


def check_numbers(root: Any, args: list[str]) -> None:
    """Before a command runs: a number option with no check of its own (no callback, no
    stated range) still gets the rules of docs/cli.md: a float finite (`--top-p nan` was
    sent to the server), an integer at most MAX_NUMBER in size (`--workers 2**63` ran).
    `root` is the click command tree (typer.main.get_command(app))."""
    cmd, i = root, 0
    while i < len(args) and getattr(cmd, "commands", None) and args[i] in cmd.commands:
        cmd, i = cmd.commands[args[i]], i + 1
    by_opt = {o: p for p in getattr(cmd, "params", ()) for o in getattr(p, "opts", ())}
    tokens = args[i:]
    for k, tok in enumerate(tokens):
        if tok == "--":
            return
        opt, eq, val = tok.partition("=")
        param = by_opt.get(opt) if tok.startswith("-") else None
        if param is None or getattr(param, "is_flag", False):
            continue
        text = val if eq else (tokens[k + 1] if k + 1 < len(tokens) else "")
        desc = getattr(param, "type_descriptor", None)
        kind = getattr(desc, "annotation", None)
        info = getattr(desc, "parameter_info", None)
        # click's own ranges (min=/max=) let nan through; an int with a stated maximum is
        # bounded already (--seed: up to 2**63-1)
        if param.callback is not None or kind not in (int, float) or (
                kind is int and getattr(info, "max", None) is not None):
            continue
        name = max(param.opts, key=len)
        low = text.strip().lower()
        if kind is float and low in _NON_FINITE:
            raise RidgelineError(f"{name}: got {text.strip()!r}; allowed: a finite number")
        digits = low.lstrip("+-")
        if kind is int and digits.isdigit() and int(digits) > MAX_NUMBER:
            raise RidgelineError(f"{name}: got {text.strip()[:40]!r}; allowed: at most "
                                 f"{MAX_NUMBER:.0e} in size")


def guard_command_line(args: list[str]) -> None:
    """Before a command runs: refuse an output path that is one of the inputs (after
    resolving links: same device and inode), an output that cannot be written, and an
    input that is a device, FIFO or socket (`/dev/zero` never ends). One RidgelineError
    line naming the option; nothing has been read or written yet."""
    from ridgeline.inputs import non_regular_kind

    if "--help" in args or not args:
        return
    names = [a for a in args if not a.startswith("-")]
    command = names[0] if names else ""
    if command in UNGUARDED:
        return
    wanted = OUTPUT_OPTIONS.get(command, ())
    is_dir = {w.rstrip("/"): w.endswith("/") for w in wanted}
    outputs: list[tuple[str, str]] = []
    inputs: list[tuple[str, str]] = []
    prev = "argument"
    skip_next = False
    for i, tok in enumerate(args):
        if skip_next:
            skip_next = False
            continue
        opt, eq, val = tok.partition("=")
        if tok.startswith("-") and opt in is_dir:
            if eq:
                outputs.append((opt, val))
            elif i + 1 < len(args):
                outputs.append((opt, args[i + 1]))
                skip_next = True
            continue
        if tok.startswith("-"):
            prev = opt
            if eq:
                inputs.extend((opt, c) for c in _path_candidates(val))
            continue
        inputs.extend((prev, c) for c in _path_candidates(tok))
        prev = "argument"
    ids: dict[tuple[int, int], str] = {}
    for field, path in inputs:
        kind = non_regular_kind(path)
        if kind is not None and kind != "a directory":
            raise RidgelineError(f"{field}: {path!r} is not a regular file ({kind}); allowed: "
                                 "a file")
        fid = _file_id(path) if kind is None else None
        if fid is not None:
            ids.setdefault(fid, f"{field} {path!r}" if field != "argument" else repr(path))
    seen: dict[str, str] = {}
    for field, path in outputs:  # two outputs of one run in one file: one would be lost
        where = os.path.realpath(os.path.expanduser(path)) if path.strip() else ""
        if where and where != os.devnull and where in seen and seen[where] != field:
            raise RidgelineError(f"{field}: got {path!r}: {seen[where]} writes the same file; "
                                 "allowed: a different path for each output")
        seen.setdefault(where, field)
    for field, path in outputs:
        fid = _file_id(path)
        if fid is not None and fid in ids:
            raise RidgelineError(f"{field}: got {path!r}: it is also an input of this command "
                                 f"({ids[fid]}) and would be overwritten; allowed: a path that "
                                 "is not one of the inputs")
        if non_regular_kind(path) not in (None, "a directory", "a character device"):
            raise RidgelineError(f"{field}: got {path!r}: {non_regular_kind(path)}; allowed: "
                                 "a regular file path")
        if non_regular_kind(path) == "a character device":
            continue  # /dev/null: writing is discarding, as the user asked
        check_writable(path, field, directory=is_dir[field])


def layout_from_flags(model: str, tp: int, ep: int, dp: int, attention_dp: int,
                      data_parallel_size: int | None, enable_expert_parallel: bool,
                      enable_dp_attention: bool) -> tuple[int, int, int, int]:
    """(tp, ep, attn_dp, replicas) the parallel-layout flags ask for, read as each engine
    spells them (ridgeline.specs.parallel.resolve_layout); the flags as given when none of
    the attention-DP or vLLM/SGLang layout flags is used (no model is loaded)."""
    if attention_dp == 1 and data_parallel_size is None and not enable_expert_parallel \
            and not enable_dp_attention:
        return tp, ep, 1, dp
    from ridgeline.specs import load_model
    from ridgeline.specs.parallel import resolve_layout

    lay = resolve_layout(load_model(model), tp, ep, dp, attention_dp, data_parallel_size,
                         enable_expert_parallel, enable_dp_attention)
    return lay.tp, lay.ep, lay.attn_dp, lay.replicas
