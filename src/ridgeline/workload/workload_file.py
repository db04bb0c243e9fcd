"""`--workload FILE` when FILE is a published request trace rather than a load test's config.

A trace (BurstGPT, Mooncake, the Azure LLM inference traces, a Vidur trace) already is a
workload: each request at the file's timestamp with the file's prompt and output lengths
(Mooncake's shared blocks as prefix groups). It becomes the same `LoadTestWorkload` a
load-test config becomes, so `simulate --workload` and `bench --workload` take it the same
way; anything else goes to the config readers (workload/load_test_configs.py).

Files without timestamps (ShareGPT, Vidur's length files) or without lengths (Vidur's arrival
traces) are not a whole workload: refused, naming the form that is (a `vllm bench serve`
command line that gives the rate).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.inputs import check_input_file
from ridgeline.workload.load_test_configs import FIELD, LoadTestWorkload, read_workload
from ridgeline.workload.timed_trace_reader import read_timed_trace, sniff_format

TRACE_NAMES = {"burstgpt": "BurstGPT trace", "mooncake": "Mooncake trace",
               "azure": "Azure LLM inference trace", "vidur": "Vidur trace",
               "session": "session trace (Qwen-Bailian)"}
NOT_WHOLE = {"sharegpt": "has no timestamps", "vidur-lengths": "has no timestamps",
             "vidur-arrivals": "has no request lengths"}


def read_workload_file(value: str, seed: int = 0) -> LoadTestWorkload:
    """The workload `--workload value` names: a published trace (see the module docstring),
    else a load test's config, result or command line (`read_workload`)."""
    path = Path(value)
    if not path.is_file() or value.strip().startswith(("vllm ", "python")):
        return read_workload(value, seed)
    check_input_file(value, FIELD)
    fmt = sniff_format(path, FIELD)
    if fmt in NOT_WHOLE:
        raise RidgelineError(
            f"{FIELD}: {value!r} is a {fmt} file, which {NOT_WHOLE[fmt]}; allowed: a timed "
            "trace with lengths (BurstGPT, Mooncake, Azure, Vidur splitwise_*.csv), or the "
            f"load test that sends it, e.g. \"vllm bench serve --dataset-name sharegpt "
            f"--dataset-path {value} --request-rate 4\"")
    if fmt not in TRACE_NAMES:
        return read_workload(value, seed)
    return trace_workload(value, fmt)


def trace_workload(path_text: str, fmt: str) -> LoadTestWorkload:
    """A timed trace with lengths as a workload: every request at its own time and lengths."""
    tr = read_timed_trace(path_text, field=FIELD, fmt=fmt)
    n = int(tr.times_s.size)
    span_s = float(tr.times_s[-1]) if n else 0.0
    zeros = int(np.count_nonzero(tr.output_tokens == 0))
    name = TRACE_NAMES[fmt]
    desc: dict[str, object] = {"source": name, "path": path_text, "format": fmt,
                               "requests": n, "span_s": span_s,
                               "zero_output_requests": zeros}
    groups = tr.prefix_group is not None and bool(np.any(tr.prefix_group >= 0))
    sessions = ""
    if tr.session is not None and bool(np.any(tr.session >= 0)):
        in_session = tr.session[tr.session >= 0]
        n_sessions = int(np.unique(in_session).size)
        each = in_session.size / n_sessions
        desc.update(sessions=n_sessions, mean_requests_per_session=each,
                    requests_outside_sessions=int(n - in_session.size))
        sessions = f" in {n_sessions:,} sessions ({each:.1f} requests each" + (
            f"; {n - in_session.size:,} outside any)" if in_session.size < n else ")")
    gaps = tr.parent_gap_s[np.isfinite(tr.parent_gap_s)] if tr.parent_gap_s is not None \
        else np.zeros(0)
    think = ""
    if gaps.size:
        desc.update(parent_gap_median_s=float(np.median(gaps)),
                    parent_gap_p90_s=float(np.percentile(gaps, 90)))
        think = (f"\nworkload: a turn arrives {np.median(gaps):.2f} s after its parent's "
                 f"arrival (median; p90 {np.percentile(gaps, 90):.2f} s): think time plus "
                 "the parent's serving time, replayed as recorded")
    summary = (f"workload: {name} {path_text}: {n:,} requests{sessions} at the file's "
               f"timestamps over {span_s:,.1f} s\nworkload: each request's own lengths: "
               f"prompt mean {tr.prompt_tokens.mean():.1f}, output mean "
               f"{tr.output_tokens.mean():.1f} tokens"
               + (f" ({zeros} zero-token responses asked as 1)" if zeros else "")
               + ("; shared prefixes from its hash_ids" if groups else "") + think)
    return LoadTestWorkload(name, n, f"replay:path={path_text},format={fmt}", from_file=True,
                            described=desc, summary=summary)


__all__ = ["read_workload_file", "trace_workload"]
