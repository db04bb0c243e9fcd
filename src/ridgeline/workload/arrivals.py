"""Arrival processes for open-loop load, shared by simulate and bench.

Syntax (`--arrival`, with `--rate` giving the rate when the spec omits it):

    poisson                      exponential gaps at `rate` (req/s)
    gamma:cv=2                   gamma gaps with coefficient of variation cv (cv=1 is Poisson;
                                 vLLM's --burstiness is the gamma shape = 1/cv**2)
    constant                     evenly spaced at 1/rate
    ramp:start=1,end=16          Poisson whose rate rises linearly from start to end (req/s)
                                 over the run (time-rescaling of a unit Poisson process)
    replay:path=FILE             timestamps from a trace (scheduled_s, else sent_s), a BurstGPT
                                 CSV, a Mooncake JSONL (workload/timed_trace_reader.py) or the
                                 first column of a CSV/text file (seconds), shifted to start at 0;
                                 speedup=K divides every time by K (K times the trace's rate)
    diurnal:peak=P,trough=T      non-homogeneous Poisson with rate trough + (peak - trough) *
       [,period=86400,phase=0]   (1 - cos(2 pi (t - phase) / period)) / 2 (req/s): trough at
                                 t = phase, peak half a period later; drawn by thinning a
                                 Poisson process at the peak rate (Lewis & Shedler)

Closed-loop load (a fixed number of users) is not an arrival process: the driver (the
simulator or the load generator) issues the next request when one finishes.

>>> import numpy as np
>>> t = arrival_times_s(parse_arrival("constant", rate_req_s=4.0), 3, np.random.default_rng(0))
>>> t.tolist()
[0.0, 0.25, 0.5]
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.inputs import check_input_file
from ridgeline.workload.spec_syntax import (
    check_keys,
    reject_unknown,
    split_spec,
    take_float,
)
from ridgeline.workload.timed_trace import FORMATS

KINDS = "poisson, gamma, constant, ramp, replay, diurnal"
# Sensible ranges: outside them the times overflow or the thinning never ends.
MIN_RATE_REQ_S = 1e-6        # one request in 11.6 days
MAX_RATE_REQ_S = 1e7         # ten million requests a second (a whole fleet's front door)
MIN_PERIOD_S = 1e-3
MAX_PERIOD_S = 1e9           # 31.7 years
MAX_CV = 100.0               # gamma gaps' coefficient of variation
MIN_CV = 1e-3
MAX_THINNING_ROUNDS = 1000   # diurnal: batches of candidates before giving up
# The schema of an arrival spec: the keys each kind takes ("value": a positional path).
ARRIVAL_KEYS: dict[str, tuple[str, ...]] = {
    "poisson": ("rate",), "gamma": ("rate", "cv"), "constant": ("rate",),
    "ramp": ("start", "end"),
    "replay": ("path", "value", "speedup", "format", "tokenizer", "seed", "cv"),
    "diurnal": ("peak", "trough", "period", "phase")}
RATE_TEXT = f"a rate from {MIN_RATE_REQ_S:g} to {MAX_RATE_REQ_S:g} req/s"


@dataclass(frozen=True)
class ArrivalProcess:
    """A parsed arrival process. Rates in requests per second."""

    kind: str
    rate_req_s: float | None = None
    cv: float = 1.0
    start_rate_req_s: float | None = None
    end_rate_req_s: float | None = None
    replay_times_s: tuple[float, ...] | None = None
    period_s: float = 86400.0
    phase_s: float = 0.0
    # replay of a BurstGPT or Mooncake file: each request's own lengths, in time order
    # (None: the file has none), and the file's format
    replay_prompt_tokens: tuple[int, ...] | None = None
    replay_output_tokens: tuple[int, ...] | None = None
    replay_format: str | None = None
    # shared prefixes the file names (Mooncake hash_ids, a load-test config's groups):
    # group per request (-1: none) and its shared tokens
    replay_prefix_group: tuple[int, ...] | None = None
    replay_prefix_tokens: tuple[int, ...] | None = None
    # False: the file has lengths but no times (ShareGPT, a Vidur length file); the
    # arrivals are Poisson (gamma with cv=) at rate_req_s
    replay_timed: bool = True

    def rate_at(self, t_s: np.ndarray) -> np.ndarray:
        """Diurnal: the asked rate (req/s) at times `t_s`."""
        lo, hi = float(self.end_rate_req_s), float(self.start_rate_req_s)
        x = 2.0 * np.pi * (np.asarray(t_s) - self.phase_s) / self.period_s
        return lo + (hi - lo) * (1.0 - np.cos(x)) / 2.0

    def describe(self) -> dict[str, object]:
        """Parameters for the trace header's `load` field."""
        out: dict[str, object] = {"arrival": self.kind}
        if self.rate_req_s is not None:
            out["rate_req_s"] = self.rate_req_s
        if self.kind == "gamma":
            out["cv"] = self.cv
        if self.kind == "ramp":
            out["start_rate_req_s"] = self.start_rate_req_s
            out["end_rate_req_s"] = self.end_rate_req_s
        if self.kind == "replay":
            out["replay_requests"] = len(self.replay_times_s or ())
            if self.replay_format:
                out["replay_format"] = self.replay_format
            if not self.replay_timed:
                out["replay_arrivals"] = "poisson" if self.cv == 1.0 else f"gamma:cv={self.cv:g}"
        if self.kind == "diurnal":
            out.update(peak_rate_req_s=self.start_rate_req_s,
                       trough_rate_req_s=self.end_rate_req_s, period_s=self.period_s,
                       phase_s=self.phase_s)
        return out


def _read_replay(path_text: str, speedup: float = 1.0, fmt: str | None = None,
                 tokenizer: str | None = None, seed: int = 0, rate_req_s: float | None = None,
                 cv: float = 1.0) -> ArrivalProcess:
    """A replay process: the file's times, and its lengths where its format has them.
    Kept per file version (path, size, modification time): `simulate` reads the spec for
    its stderr note and again for the run, and a ShareGPT file is tokenized each time."""
    st = check_input_file(path_text, "--arrival").stat()
    return _read_replay_cached(path_text, st.st_size, st.st_mtime_ns, speedup, fmt, tokenizer,
                               seed, rate_req_s, cv)


@functools.lru_cache(maxsize=4)
def _read_replay_cached(path_text: str, _size: int, _mtime_ns: int, speedup: float,
                        fmt: str | None, tokenizer: str | None, seed: int,
                        rate_req_s: float | None, cv: float) -> ArrivalProcess:
    # Left lazy on purpose: the replay readers (msgspec, the peer-tool importers, the trace
    # reader: ~0.1 s on a loaded 2-core box) load only when a spec names a file, which the
    # default path of `simulate` and `bench` never does.
    from ridgeline.workload.timed_trace_reader import (
        read_replay_times,
        read_timed_trace,
        sniff_format,
    )

    path = check_input_file(path_text, "--arrival")
    if fmt is None and sniff_format(path) == "other":
        return ArrivalProcess("replay", replay_times_s=read_replay_times(path_text, speedup))
    tr = read_timed_trace(path_text, speedup, fmt=fmt, tokenizer=tokenizer, seed=seed)
    known = bool(np.all(tr.prompt_tokens >= 0) and np.all(tr.output_tokens >= 0))
    grouped = tr.prefix_group is not None and tr.prefix_tokens is not None
    return ArrivalProcess(
        "replay", replay_times_s=tuple(tr.times_s.tolist()), rate_req_s=rate_req_s, cv=cv,
        replay_prompt_tokens=tuple(tr.prompt_tokens.tolist()) if known else None,
        replay_output_tokens=tuple(tr.output_tokens.tolist()) if known else None,
        replay_format=tr.format,
        replay_prefix_group=tuple(tr.prefix_group.tolist()) if grouped else None,  # type: ignore[union-attr]
        replay_prefix_tokens=tuple(tr.prefix_tokens.tolist()) if grouped else None,  # type: ignore[union-attr]
        replay_timed=tr.timed)


def parse_arrival(spec: str, rate_req_s: float | None = None) -> ArrivalProcess:
    """Parse an arrival spec; `rate_req_s` fills in `rate=` when the spec has none."""
    field = "--arrival"
    kind, params = split_spec(spec, field)
    check_keys(kind, params, ARRIVAL_KEYS, field, "arrival process",
               exclusive=(("path", "value"),))
    rate = take_float(params, "rate", field, default=rate_req_s or -1.0)
    needs_rate = kind in ("poisson", "gamma", "constant")
    if needs_rate and rate <= 0:
        raise RidgelineError(f"{field}: {kind} needs a rate > 0 (--rate or rate=)")
    if needs_rate and not MIN_RATE_REQ_S <= rate <= MAX_RATE_REQ_S:
        raise RidgelineError(f"{field}: rate {rate:g}; allowed: {RATE_TEXT}")
    bounded = {"lo": MIN_RATE_REQ_S, "hi": MAX_RATE_REQ_S}
    if kind in ("poisson", "constant"):
        proc = ArrivalProcess(kind, rate_req_s=rate)
    elif kind == "gamma":
        cv = take_float(params, "cv", field, positive=True, lo=MIN_CV, hi=MAX_CV)
        proc = ArrivalProcess(kind, rate_req_s=rate, cv=cv)
    elif kind == "ramp":
        start = take_float(params, "start", field, positive=True, **bounded)
        end = take_float(params, "end", field, positive=True, **bounded)
        proc = ArrivalProcess(kind, start_rate_req_s=start, end_rate_req_s=end)
    elif kind == "replay":
        path = params.pop("path", None) or params.pop("value", None)
        if not path:
            raise RidgelineError(f"{field}: replay needs path=FILE")
        speedup = take_float(params, "speedup", field, default=1.0, positive=True)
        fmt = params.pop("format", None)
        if fmt is not None and fmt not in FORMATS:
            raise RidgelineError(f"{field}: format: got {fmt!r}; allowed: {', '.join(FORMATS)}")
        seed = take_float(params, "seed", field, default=0.0, nonnegative=True, hi=2.0**32)
        cv = take_float(params, "cv", field, default=1.0, positive=True, lo=MIN_CV, hi=MAX_CV)
        if rate > 0 and not MIN_RATE_REQ_S <= rate <= MAX_RATE_REQ_S:
            raise RidgelineError(f"{field}: rate {rate:g}; allowed: {RATE_TEXT}")
        proc = _read_replay(path, speedup, fmt, params.pop("tokenizer", None), int(seed),
                            rate if rate > 0 else None, cv)
    elif kind == "diurnal":
        peak = take_float(params, "peak", field, positive=True, **bounded)
        trough = take_float(params, "trough", field, nonnegative=True, hi=MAX_RATE_REQ_S)
        if trough > peak:
            raise RidgelineError(f"{field}: diurnal trough={trough:g} must be <= peak={peak:g}")
        period = take_float(params, "period", field, default=86400.0, positive=True,
                            lo=MIN_PERIOD_S, hi=MAX_PERIOD_S)
        # Any phase is one within a period: reduced modulo the period, the rate's argument
        # stays small (a phase of -1e308 made every candidate's rate NaN: no end).
        phase = take_float(params, "phase", field, default=0.0, lo=-MAX_PERIOD_S * 1e3,
                           hi=MAX_PERIOD_S * 1e3) % period
        proc = ArrivalProcess(kind, start_rate_req_s=peak, end_rate_req_s=trough,
                              period_s=period, phase_s=phase)
    else:
        raise RidgelineError(f"{field}: unknown arrival process {kind!r}; allowed: {KINDS}")
    reject_unknown(params, field, kind, "rate (poisson, gamma, constant), cv (gamma), "
                   "start and end (ramp), path, speedup, format, tokenizer, seed and cv (replay), "
                   "peak, trough, period "
                   "and phase (diurnal)")
    return proc


def arrival_times_s(proc: ArrivalProcess, n: int, rng: np.random.Generator) -> np.ndarray:
    """The first n arrival times in seconds, starting at 0 for the first request."""
    if n <= 0:
        return np.zeros(0)
    if proc.kind == "replay" and not proc.replay_timed:
        if proc.rate_req_s is None:
            raise RidgelineError(f"--rate: a {proc.replay_format} file has no timestamps; "
                                 "give the arrival rate (req/s) with --rate or rate=")
        if n > len(proc.replay_times_s or ()):
            raise RidgelineError(f"--requests: {n} asked but the replay file holds "
                                 f"{len(proc.replay_times_s or ())} requests")
        return arrival_times_s(ArrivalProcess("gamma", rate_req_s=proc.rate_req_s,
                                              cv=proc.cv), n, rng)
    if proc.kind == "replay":
        times = np.asarray(proc.replay_times_s, dtype=np.float64)
        if n > times.size:
            raise RidgelineError(
                f"--requests: {n} asked but the replay file holds {times.size} timestamps"
            )
        return times[:n]
    if proc.kind == "diurnal":
        return _diurnal_times_s(proc, n, rng)
    if proc.kind == "ramp":
        # Unit-rate Poisson points u_i mapped through the inverse of the cumulative rate
        # Lambda(t) = r0 t + (r1 - r0) t^2 / (2 D), with D chosen so Lambda(D) = n.
        r0, r1 = float(proc.start_rate_req_s), float(proc.end_rate_req_s)
        duration_s = 2.0 * n / (r0 + r1)
        u = np.concatenate([[0.0], np.cumsum(rng.exponential(1.0, size=n - 1))])
        slope = (r1 - r0) / duration_s
        if abs(slope) < 1e-15:
            return u / r0
        return (-r0 + np.sqrt(np.maximum(r0 * r0 + 2.0 * slope * u, 0.0))) / slope
    rate = float(proc.rate_req_s)
    if proc.kind == "constant":
        gaps = np.full(n - 1, 1.0 / rate)
    elif proc.kind == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n - 1)
    else:  # gamma with mean 1/rate and coefficient of variation cv
        shape = 1.0 / (proc.cv * proc.cv)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def _diurnal_times_s(proc: ArrivalProcess, n: int, rng: np.random.Generator) -> np.ndarray:
    """Thinning: candidates from a Poisson process at the peak rate, each kept with
    probability rate(t) / peak. Not shifted to start at 0: the curve's phase is kept."""
    peak = float(proc.start_rate_req_s)
    mean_rate = (peak + float(proc.end_rate_req_s)) / 2.0
    out: list[np.ndarray] = []
    kept = 0
    t = 0.0
    for _ in range(MAX_THINNING_ROUNDS):
        if kept >= n:
            break
        m = max(1024, int(1.2 * (n - kept) * peak / max(mean_rate, 1e-12)))
        cand = t + np.cumsum(rng.exponential(1.0 / peak, size=m))
        t = float(cand[-1])
        keep = cand[rng.random(m) * peak < proc.rate_at(cand)]
        out.append(keep)
        kept += keep.size
    else:
        if kept < n:
            raise RidgelineError(f"--arrival: diurnal thinning kept {kept:,} of {n:,} arrivals "
                                 f"in {MAX_THINNING_ROUNDS} rounds; allowed: a trough closer "
                                 "to the peak")
    return np.concatenate(out)[:n]


def expected_duration_s(proc: ArrivalProcess, n: int) -> float:
    """Expected time from the first to the last of n arrivals."""
    if proc.kind == "replay" and not proc.replay_timed and proc.rate_req_s:
        return max(n - 1, 0) / float(proc.rate_req_s)
    if proc.kind == "replay":
        times = proc.replay_times_s or (0.0,)
        return float(times[min(n, len(times)) - 1])
    if proc.kind == "ramp":
        return 2.0 * n / (float(proc.start_rate_req_s) + float(proc.end_rate_req_s))
    if proc.kind == "diurnal":   # over whole periods: n / mean rate
        return n / ((float(proc.start_rate_req_s) + float(proc.end_rate_req_s)) / 2.0)
    return max(n - 1, 0) / float(proc.rate_req_s)


__all__ = ["KINDS", "ArrivalProcess", "arrival_times_s", "expected_duration_s",
           "parse_arrival"]
