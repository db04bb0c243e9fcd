"""The workload of a load test, read from the tool's own config or result: `simulate --workload`.

What each source says, and what the simulation takes from it:

- an inference-perf config YAML, or a run's folder holding it (``results/config.yaml``)
  (``load: {type: constant|poisson, stages: [{rate,
  duration}, ...]}``, ``data: {type: shared_prefix, shared_prefix: {num_groups,
  num_prompts_per_group, system_prompt_len, question_len, output_len}}`` or ``type:
  random`` with ``input_distribution`` / ``output_distribution``): each stage sends
  int(rate x duration) requests (`constant`: exponential gaps rescaled to the stage's
  duration, as calibrate/inference_perf_replay.py replays measured runs; `poisson`: plain
  exponential gaps), stages end to end on the clock. Shared-prefix data: `num_groups x
  num_prompts_per_group` distinct prompts of system_prompt_len + question_len tokens,
  shuffled once and sent in turn (request i carries prompt i mod N, as inference-perf's
  data generator cycles its list); each distinct prompt is a prefix group over all its
  tokens, so a prompt that comes round again hits the prefix cache.
- a `vllm bench serve` command line (text, or a file holding it): the random dataset's
  lengths (`--random-input-len`, `--random-output-len`, `--random-range-ratio`,
  `--random-prefix-len`: one prefix shared by every request), `--num-prompts`,
  `--request-rate` (inf: every request at t=0) with `--burstiness` (gamma gaps of shape
  b, cv = 1/sqrt(b)), `--max-concurrency` (a closed loop of that many users when the rate
  is inf); the sharegpt dataset's lengths come from its file (workload/trace_formats.py).
- a `vllm bench serve` result JSON: the same rate, burstiness and concurrency, and each
  request's own input/output lengths when it was saved with --save-detailed (else their
  means), send times as sent when there is no concurrency cap.
- a GuideLLM benchmarks file (its first benchmark) or an AIPerf profile export: each
  request at its send time with its own input and output lengths, as the project's
  importers read them (trace/importers).

>>> w = read_workload("vllm bench serve --model m --random-input-len 100 --num-prompts 5 "
...                   "--request-rate 2", seed=0)
>>> w.arrival, w.rate_req_s, w.prompt, w.output, w.requests
('poisson', 2.0, 'fixed:100', 'fixed:128', 5)
"""

from __future__ import annotations

import argparse
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.inputs import check_input_file, load_json, read_text
from ridgeline.trace.importers import detect_format, load_trace
from ridgeline.workload.mini_yaml import mini_yaml
from ridgeline.workload.timed_trace import TimedTrace, _count, _time
from ridgeline.workload.vllm_lengths import random_lengths

FIELD = "--workload"
# vLLM's `vllm bench serve` defaults (vllm/benchmarks/serve.py and datasets.py)
VLLM_DEFAULTS = {"num_prompts": 1000, "random_input_len": 1024, "random_output_len": 128,
                 "random_range_ratio": 0.0, "random_prefix_len": 0, "burstiness": 1.0}
# an infinite request rate is every request at once: this rate puts 1,000 requests within
# 0.1 ms, far below any step time
BURST_RATE_REQ_S = 1e7
MAX_CONFIG_BYTES = 16 << 20
MAX_STAGE_REQUESTS = 20_000_000


@dataclass
class LoadTestWorkload:
    """What `simulate` runs for a load test's config: the scenario fields it sets."""

    source: str
    requests: int
    arrival: str
    rate_req_s: float | None = None
    concurrency: int | None = None
    prompt: str | None = None        # None: each request's own (from the replay)
    output: str | None = None
    prefix_groups: int = 0
    prefix_tokens: int = 0
    # lengths (and for an open loop the times) from the replay file `arrival` names
    from_file: bool = False
    described: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    # vLLM's --max-concurrency beside a finite rate: a cap on requests in flight, which a
    # load generator honours and the open-loop simulation does not
    max_in_flight: int | None = None


def workload_settings(w: LoadTestWorkload, requests: int | None = None) -> dict[str, Any]:
    """The scenario a workload sets (arrival, rate, concurrency, lengths, prefix groups,
    requests: the first `requests` of it when given) and which lengths come from its file:
    what `simulate --workload` simulates and `bench --workload` sends, one reading for both.

    >>> w = read_workload("vllm bench serve --random-input-len 64 --num-prompts 9", seed=0)
    >>> s = workload_settings(w, 4)
    >>> s["requests"], s["arrival"], s["rate"], s["prompt"], s["prompt_from_replay"]
    (4, 'constant', '10000000', 'fixed:64', False)
    """
    n = w.requests if requests is None else min(int(requests), w.requests)
    return {"arrival": w.arrival, "rate": None if w.rate_req_s is None else
            f"{w.rate_req_s:.17g}", "concurrency": w.concurrency, "prompt": w.prompt,
            "output": w.output, "prefix_groups": w.prefix_groups,
            "prefix_tokens": w.prefix_tokens, "requests": n,
            "prompt_from_replay": w.from_file and w.prompt is None,
            "output_from_replay": w.from_file and w.output is None}


def _bad(path: str, what: str, got: object, allowed: str) -> RidgelineError:
    text = repr(got)
    text = text if len(text) <= 60 else text[:57] + "..."
    return RidgelineError(f"{FIELD}: {path!r}: {what}: got {text}; allowed: {allowed}")


def _number(d: dict[str, Any], key: str, path: str, what: str, *, lo: float = 0.0,
            hi: float = 1e9, integer: bool = False, default: float | None = None) -> float:
    v = d.get(key, default) if isinstance(d, dict) else None
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi and (
        not integer or float(v) == int(v))
    if not ok:
        kind = "a whole number" if integer else "a number"
        raise _bad(path, f"{what}.{key}" if what else key, v, f"{kind} from {lo:g} to {hi:g}")
    return float(v)  # type: ignore[arg-type]


# ---- inference-perf ----------------------------------------------------------------------

def _read_mapping(path_text: str) -> dict[str, Any]:
    text = read_text(path_text, FIELD, max_bytes=MAX_CONFIG_BYTES)
    try:
        import json

        out = json.loads(text)
    except ValueError:
        try:
            out = mini_yaml(text)
        except Exception as exc:  # the YAML subset reader, or PyYAML when installed
            raise RidgelineError(f"{FIELD}: {path_text!r}: not YAML the reader understands "
                                 f"({' '.join(str(exc).split())[:120]}); allowed: an "
                                 "inference-perf config") from None
    if not isinstance(out, dict):
        raise _bad(path_text, "top level", type(out).__name__, "a mapping (inference-perf "
                   "config with load: and data:)")
    return out


def inference_perf_stages(cfg: dict[str, Any], path: str) -> tuple[str, list[tuple[float,
                                                                                 float]]]:
    load = cfg.get("load")
    if not isinstance(load, dict):
        raise _bad(path, "load", load, "a mapping with type and stages")
    kind = load.get("type", "constant")
    if kind not in ("constant", "poisson"):
        raise _bad(path, "load.type", kind, "constant, poisson")
    stages = load.get("stages")
    if not isinstance(stages, list) or not stages:
        raise _bad(path, "load.stages", stages, "a list of {rate, duration}")
    out = []
    for k, st in enumerate(stages):
        if not isinstance(st, dict):
            raise _bad(path, f"load.stages[{k}]", st, "a mapping {rate, duration}")
        rate = _number(st, "rate", path, f"load.stages[{k}]", lo=1e-6, hi=1e7)
        dur = _number(st, "duration", path, f"load.stages[{k}]", lo=1e-3, hi=1e8)
        if int(rate * dur) > MAX_STAGE_REQUESTS:
            raise _bad(path, f"load.stages[{k}]", f"{int(rate * dur):,} requests",
                       f"at most {MAX_STAGE_REQUESTS:,} per stage")
        out.append((rate, dur))
    return str(kind), out


def constant_load_arrivals_s(rate_req_s: float, duration_s: float,
                             rng: np.random.Generator) -> np.ndarray:
    """inference-perf's `constant` load: int(rate x duration) exponential gaps, rescaled so
    they sum to the stage's duration; the send times are their running sums."""
    n = int(rate_req_s * duration_s)
    if n < 1:
        return np.zeros(0)
    gaps = rng.exponential(1.0 / rate_req_s, n)
    gaps *= duration_s / gaps.sum()
    return np.cumsum(gaps)


def inference_perf_trace(path_text: str, seed: int) -> Any:
    """An inference-perf config as a timed trace (see the module docstring)."""
    cfg = _read_mapping(path_text)
    kind, stages = inference_perf_stages(cfg, path_text)
    rng = np.random.default_rng(seed)
    times = []
    start_s = 0.0
    for rate, dur in stages:
        if kind == "constant":
            gaps = constant_load_arrivals_s(rate, dur, rng)
        else:
            gaps = np.cumsum(rng.exponential(1.0 / rate, int(rate * dur)))
        times.append(start_s + gaps)
        start_s += dur
    t = np.concatenate(times) if times else np.zeros(0)
    n = t.size
    if n == 0:
        raise _bad(path_text, "load.stages", "0 requests", "stages with rate x duration >= 1")
    data = cfg.get("data")
    dtype = data.get("type") if isinstance(data, dict) else None
    if dtype == "shared_prefix":
        sp = data.get("shared_prefix")  # type: ignore[union-attr]
        w = "data.shared_prefix"
        if not isinstance(sp, dict):
            raise _bad(path_text, w, sp, "a mapping")
        groups = int(_number(sp, "num_groups", path_text, w, lo=1, hi=1e6, integer=True))
        per = int(_number(sp, "num_prompts_per_group", path_text, w, lo=1, hi=1e6,
                          integer=True))
        sys_len = int(_number(sp, "system_prompt_len", path_text, w, hi=1e7, integer=True))
        q_len = int(_number(sp, "question_len", path_text, w, lo=1, hi=1e7, integer=True))
        out_len = int(_number(sp, "output_len", path_text, w, lo=1, hi=1e7, integer=True))
        unique = groups * per
        if unique > MAX_STAGE_REQUESTS:
            raise _bad(path_text, w, f"{unique:,} prompts", f"at most {MAX_STAGE_REQUESTS:,}")
        order = rng.permutation(unique)       # inference-perf shuffles its prompt list once
        prompt_id = order[np.arange(n) % unique]
        prompt = np.full(n, sys_len + q_len, dtype=np.int64)
        tr = TimedTrace(t, prompt, np.full(n, out_len, dtype=np.int64), "inference-perf")
        tr.prefix_group = prompt_id.astype(np.int64)
        tr.prefix_tokens = prompt.copy()
        return tr
    if dtype == "random":
        dists = []
        for key in ("input_distribution", "output_distribution"):
            d = data.get(key)  # type: ignore[union-attr]
            w = f"data.{key}"
            if not isinstance(d, dict):
                raise _bad(path_text, w, d, "a mapping {min, max, mean, std}")
            lo = _number(d, "min", path_text, w, lo=1, hi=1e7, integer=True, default=1)
            hi = _number(d, "max", path_text, w, lo=lo, hi=1e7, integer=True)
            mean = _number(d, "mean", path_text, w, lo=lo, hi=hi, default=(lo + hi) / 2)
            std = _number(d, "std", path_text, w, hi=1e7, default=0.0)
            x = rng.normal(mean, std, n) if std > 0 else np.full(n, mean)
            dists.append(np.clip(np.rint(x), lo, hi).astype(np.int64))
        return TimedTrace(t, dists[0], dists[1], "inference-perf")
    raise _bad(path_text, "data.type", dtype, "shared_prefix, random")


def _inference_perf(path_text: str, seed: int) -> LoadTestWorkload:
    cfg = _read_mapping(path_text)
    kind, stages = inference_perf_stages(cfg, path_text)
    tr = inference_perf_trace(path_text, seed)
    n = int(tr.times_s.size)
    counts = [int(r * d) for r, d in stages]
    stage_text = ", ".join(f"{r:g} req/s x {d:g} s ({c:,} requests)"
                           for (r, d), c in zip(stages, counts, strict=True))
    data = cfg["data"]
    desc: dict[str, Any] = {"source": "inference-perf config", "path": path_text,
                            "load_type": kind, "stages": [
                                {"rate_req_s": r, "duration_s": d, "requests": c}
                                for (r, d), c in zip(stages, counts, strict=True)],
                            "requests": n, "data_type": data["type"]}
    if data["type"] == "shared_prefix":
        sp = data["shared_prefix"]
        desc.update({k: sp[k] for k in ("num_groups", "num_prompts_per_group",
                                        "system_prompt_len", "question_len", "output_len")})
        lengths = (f"shared prefix: {sp['num_groups']} groups x "
                   f"{sp['num_prompts_per_group']} prompts of {sp['system_prompt_len']} + "
                   f"{sp['question_len']} tokens, cycled; output {sp['output_len']} tokens")
    else:
        lengths = (f"random lengths: prompt mean {tr.prompt_tokens.mean():.0f}, output mean "
                   f"{tr.output_tokens.mean():.0f} tokens")
    summary = (f"workload: inference-perf config {path_text} ({kind} load): {stage_text}; "
               f"{n:,} requests\nworkload: {lengths}")
    return LoadTestWorkload("inference-perf", n, f"replay:path={path_text},format="
                            f"inference-perf,seed={seed}", from_file=True, described=desc,
                            summary=summary)


# ---- vllm bench serve --------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting (exit_on_error=False misses some errors,
    e.g. a flag at the end without its value)."""

    def error(self, message: str) -> Any:
        raise ValueError(message)


def _vllm_parser() -> argparse.ArgumentParser:
    ap = _Parser(add_help=False, exit_on_error=False, prog="vllm bench serve")
    ap.add_argument("--dataset-name", default="random")
    ap.add_argument("--dataset-path")
    ap.add_argument("--num-prompts", type=int, default=VLLM_DEFAULTS["num_prompts"])
    for name in ("input", "output", "prefix"):
        ap.add_argument(f"--random-{name}-len", type=int,
                        default=VLLM_DEFAULTS[f"random_{name}_len"])
    ap.add_argument("--random-range-ratio", type=float,
                    default=VLLM_DEFAULTS["random_range_ratio"])
    ap.add_argument("--request-rate", type=float, default=math.inf)
    ap.add_argument("--burstiness", type=float, default=VLLM_DEFAULTS["burstiness"])
    ap.add_argument("--max-concurrency", type=int)
    ap.add_argument("--sharegpt-output-len", type=int)
    ap.add_argument("--tokenizer")
    return ap


def _vllm_command(text: str, origin: str) -> LoadTestWorkload:
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
        if "serve" in words:
            words = words[words.index("serve") + 1:]
        args, _ = _vllm_parser().parse_known_args(words)
    except (argparse.ArgumentError, ValueError) as exc:
        raise RidgelineError(f"{FIELD}: {origin}: {' '.join(str(exc).split())}; allowed: "
                             "vllm bench serve's flags with their values") from None
    rate = float(args.request_rate)
    checks = (("--num-prompts", args.num_prompts, 1, MAX_STAGE_REQUESTS),
              ("--random-input-len", args.random_input_len, 1, 1e7),
              ("--random-output-len", args.random_output_len, 1, 1e7),
              ("--random-prefix-len", args.random_prefix_len, 0, 1e7),
              ("--burstiness", args.burstiness, 1e-4, 1e6),
              ("--max-concurrency", args.max_concurrency or 1, 1, 1e6))
    for flag, v, lo, hi in checks:
        if not lo <= v <= hi:
            raise RidgelineError(f"{FIELD}: {origin}: {flag}: got {v}; allowed: {lo:g} to "
                                 f"{hi:g}")
    if not (rate > 0):
        raise RidgelineError(f"{FIELD}: {origin}: --request-rate: got {rate:g}; allowed: "
                             "> 0 or inf")
    if args.dataset_name not in ("random", "sharegpt"):
        raise RidgelineError(f"{FIELD}: {origin}: --dataset-name: got "
                             f"{args.dataset_name!r}; allowed: random, sharegpt")
    n = int(args.num_prompts)
    cv = 1.0 / math.sqrt(args.burstiness)
    arrival, rate_req_s, conc = _vllm_timing(rate, cv, args.max_concurrency)
    desc: dict[str, Any] = {"source": "vllm bench serve", "origin": origin,
                            "dataset_name": args.dataset_name, "num_prompts": n,
                            "request_rate": "inf" if math.isinf(rate) else rate,
                            "burstiness": args.burstiness,
                            "max_concurrency": args.max_concurrency}
    w = LoadTestWorkload("vllm bench serve", n, arrival, rate_req_s, conc, described=desc)
    if not math.isinf(rate) and args.max_concurrency:
        w.max_in_flight = int(args.max_concurrency)
    if args.dataset_name == "random":
        rr = args.random_range_ratio
        w.prompt = random_lengths(args.random_input_len, rr)
        w.output = random_lengths(args.random_output_len, rr)
        if args.random_prefix_len:
            w.prefix_groups, w.prefix_tokens = 1, int(args.random_prefix_len)
        desc.update(random_input_len=args.random_input_len,
                    random_output_len=args.random_output_len, random_range_ratio=rr,
                    random_prefix_len=args.random_prefix_len)
        lengths = (f"random dataset: prompt {w.prompt}" + (
            f" after a shared {args.random_prefix_len}-token prefix"
            if args.random_prefix_len else "") + f", output {w.output}")
    else:
        if not args.dataset_path:
            raise RidgelineError(f"{FIELD}: {origin}: --dataset-path: missing; allowed: the "
                                 "ShareGPT JSON file --dataset-name sharegpt reads")
        spec = f"replay:path={args.dataset_path},format=sharegpt"
        if args.tokenizer:
            spec += f",tokenizer={args.tokenizer}"
        w.arrival = spec + (f",cv={cv:g}" if cv != 1.0 and conc is None else "")
        w.from_file = True
        if args.sharegpt_output_len:
            w.output = f"fixed:{args.sharegpt_output_len}"
        lengths = (f"sharegpt dataset {args.dataset_path}: each conversation's first turn "
                   "pair" + (f", output {w.output}" if w.output else ""))
        desc.update(dataset_path=args.dataset_path)
    w.summary = f"workload: vllm bench serve, {n:,} requests, {_timing_text(rate, args)}\n" \
                f"workload: {lengths}"
    return w


def _vllm_timing(rate: float, cv: float, max_concurrency: int | None
                 ) -> tuple[str, float | None, int | None]:
    """(arrival spec, rate, closed-loop users) of vLLM's request rate and concurrency."""
    if math.isinf(rate):
        if max_concurrency:
            return "poisson", None, int(max_concurrency)
        return "constant", BURST_RATE_REQ_S, None
    return ("poisson" if cv == 1.0 else f"gamma:cv={cv:g}"), rate, None


def _timing_text(rate: float, args: Any) -> str:
    if math.isinf(rate):
        return (f"closed loop of {args.max_concurrency} users (--max-concurrency, request "
                "rate inf)" if args.max_concurrency else "all sent at once (request rate inf)")
    text = f"{rate:g} req/s, " + ("Poisson" if args.burstiness == 1.0 else
                                 f"gamma gaps (burstiness {args.burstiness:g})")
    if args.max_concurrency:
        text += (f"; --max-concurrency {args.max_concurrency} caps what is in flight, which "
                 "the open-loop simulation does not (it is the rate's bound only when "
                 "latency x rate stays below it)")
    return text


def _vllm_result(path_text: str, data: dict[str, Any]) -> LoadTestWorkload:
    """A `vllm bench serve --save-result` JSON."""
    n = int(_number(data, "num_prompts", path_text, "", lo=1, hi=MAX_STAGE_REQUESTS,
                    integer=True))
    raw_rate = data.get("request_rate", "inf")
    try:
        rate = float(raw_rate)
    except (TypeError, ValueError):
        raise _bad(path_text, "request_rate", raw_rate, "a number or 'inf'") from None
    if not rate > 0:
        raise _bad(path_text, "request_rate", raw_rate, "> 0 or 'inf'")
    burst = _number(data, "burstiness", path_text, "", lo=1e-4, hi=1e6, default=1.0)
    conc = data.get("max_concurrency")
    if conc is not None:
        conc = int(_number(data, "max_concurrency", path_text, "", lo=1, hi=1e6, integer=True))
    cv = 1.0 / math.sqrt(burst)
    arrival, rate_req_s, users = _vllm_timing(rate, cv, conc)
    ns = argparse.Namespace(max_concurrency=conc, burstiness=burst)
    desc: dict[str, Any] = {"source": "vllm bench serve result", "path": path_text,
                            "num_prompts": n, "request_rate": raw_rate, "burstiness": burst,
                            "max_concurrency": conc}
    w = LoadTestWorkload("vllm bench serve result", n, arrival, rate_req_s, users,
                         described=desc)
    if not math.isinf(rate) and conc:
        w.max_in_flight = int(conc)
    if isinstance(data.get("input_lens"), list) and isinstance(data.get("output_lens"), list):
        w.arrival = f"replay:path={path_text},format=vllm-result" + (
            f",cv={cv:g}" if cv != 1.0 and users is None else "")
        w.from_file = True
        if users is None and isinstance(data.get("start_times"), list):
            w.rate_req_s = None
            timing = "send times as recorded (start_times)"
        else:
            timing = _timing_text(rate, ns)
        lengths = "each request's recorded input/output lengths (input_lens, output_lens)"
        n = w.requests = len(data["input_lens"])
    else:
        done = _number(data, "completed", path_text, "", lo=1, hi=MAX_STAGE_REQUESTS,
                       integer=True)
        p = _number(data, "total_input_tokens", path_text, "", lo=1, hi=1e13) / done
        o = _number(data, "total_output_tokens", path_text, "", lo=1, hi=1e13) / done
        w.prompt, w.output = f"fixed:{max(1, round(p))}", f"fixed:{max(1, round(o))}"
        lengths = (f"mean lengths of the completed requests: prompt {w.prompt}, output "
                   f"{w.output} (saved without --save-detailed)")
        timing = _timing_text(rate, ns)
    w.summary = (f"workload: vllm bench serve result {path_text}, {n:,} requests, {timing}\n"
                 f"workload: {lengths}")
    return w


def vllm_result_trace(path_text: str, field: str) -> Any:
    """A detailed `vllm bench serve` result as a trace: input_lens, output_lens (a failed
    request's 0 generated tokens kept as 0) and start_times (seconds) when saved."""
    data = load_json(path_text, field)
    if not isinstance(data, dict):
        raise _bad(path_text, "top level", type(data).__name__, "a vllm bench serve result "
                   "object")
    ins, outs = data.get("input_lens"), data.get("output_lens")
    if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs) \
            or not ins:
        raise _bad(path_text, "input_lens/output_lens", type(ins).__name__,
                   "two lists of equal length (saved with --save-detailed)")
    given = data.get("start_times")
    timed = isinstance(given, list) and len(given) == len(ins)
    starts: list[Any] = given if isinstance(given, list) and timed else [0.0] * len(ins)
    where = f"{field}: {path_text!r}"
    p = np.array([_count(x, f"input_lens[{i}]", where) for i, x in enumerate(ins)], np.int64)
    o = np.array([_count(x, f"output_lens[{i}]", where) for i, x in enumerate(outs)], np.int64)
    t = np.array([_time(x, f"start_times[{i}]", where) for i, x in enumerate(starts)])
    order = np.argsort(t, kind="stable")
    return TimedTrace(t[order] - t[order].min(), p[order], o[order], "vllm-result",
                      timed=timed)


# ---- GuideLLM, AIPerf ---------------------------------------------------------------------

def peer_result_trace(path_text: str, tool: str) -> Any:
    """A GuideLLM benchmarks file or an AIPerf profile export as a trace of what was sent:
    each request's send time and its prompt and output lengths, through the project's
    importers (trace/importers). Requests whose lengths the file does not give (an errored
    request's, in AIPerf) are left out; `skipped` counts them."""
    tr = load_trace(path_text, tool)
    t = np.where(np.isfinite(tr.scheduled_s), tr.scheduled_s, tr.sent_s)
    keep = np.flatnonzero((tr.prompt_tokens >= 0) & (tr.output_tokens >= 0) & np.isfinite(t))
    if keep.size == 0:
        raise _bad(path_text, "requests", f"{len(tr)} without prompt and output lengths",
                   "a result with each request's input and output token counts")
    order = keep[np.argsort(t[keep], kind="stable")]
    out = TimedTrace(t[order] - t[order[0]], tr.prompt_tokens[order].astype(np.int64),
                     tr.output_tokens[order].astype(np.int64), tool)
    out.skipped = len(tr) - keep.size  # type: ignore[attr-defined]
    return out


def _peer_result(path_text: str, tool: str) -> LoadTestWorkload:
    tr = peer_result_trace(path_text, tool)
    n = int(tr.times_s.size)
    name = {"guidellm": "GuideLLM benchmarks", "aiperf": "AIPerf profile export"}[tool]
    span = float(tr.times_s[-1]) if n else 0.0
    skipped = int(getattr(tr, "skipped", 0))
    desc = {"source": name, "path": path_text, "requests": n, "skipped_requests": skipped,
            "span_s": span}
    summary = (f"workload: {name} {path_text}: {n:,} requests at their send times over "
               f"{span:,.1f} s" + (f" ({skipped} without lengths left out)" if skipped else "")
               + f"\nworkload: each request's own lengths: prompt mean "
               f"{tr.prompt_tokens.mean():.1f}, output mean {tr.output_tokens.mean():.1f} tokens")
    return LoadTestWorkload(name, n, f"replay:path={path_text},format={tool}", from_file=True,
                            described=desc, summary=summary)


# ---- dispatch ----------------------------------------------------------------------------

def config_trace(fmt: str, path_text: str, seed: int, field: str) -> Any:
    """`replay:path=F,format=inference-perf|vllm-result|guidellm|aiperf` (see
    workload/timed_trace_reader.py)."""
    if fmt == "inference-perf":
        return inference_perf_trace(path_text, seed)
    if fmt in ("guidellm", "aiperf"):
        return peer_result_trace(path_text, fmt)
    return vllm_result_trace(path_text, field)


def read_workload(value: str, seed: int = 0) -> LoadTestWorkload:
    """`--workload`: a file (inference-perf YAML, a vllm command line, a vllm result JSON)
    or the `vllm bench serve ...` command line itself."""
    text = value.strip()
    if text.startswith(("vllm ", "python")) or " bench serve" in text:
        return _vllm_command(text, "the command line")
    folder = Path(value)
    if folder.is_dir():
        # an inference-perf run: the config it dumped (results/config.yaml)
        for cand in (folder / "config.yaml", folder / "results" / "config.yaml"):
            if cand.is_file():
                return _inference_perf(str(cand), seed)
        raise _bad(value, "folder", "no config.yaml", "an inference-perf run folder (its "
                   "results/config.yaml) or a file")
    check_input_file(value, FIELD)
    tool = detect_format(value)
    if tool in ("guidellm", "aiperf"):
        return _peer_result(value, tool)
    if tool == "vllm":
        data = load_json(value, FIELD)
        if isinstance(data, dict) and "num_prompts" in data:
            return _vllm_result(value, data)
    body = read_text(value, FIELD, max_bytes=MAX_CONFIG_BYTES).strip()
    if body.startswith(("{", "[")):
        raise _bad(value, "format", body[:30], "an inference-perf config YAML, a vllm bench "
                   "serve command line or result JSON, a GuideLLM benchmarks file, an AIPerf "
                   "profile export")
    if "bench serve" in body or "benchmark_serving" in body:
        return _vllm_command(body, repr(value))
    return _inference_perf(value, seed)


__all__ = ["LoadTestWorkload", "config_trace", "read_workload", "workload_settings"]
