"""Where a miss comes from: each request's time split into queueing, prefill, decode and
overhead, on a predicted and a measured side, and the component that differs most.

Per request (successful, with at least one output event), in seconds:

    queueing   arrival -> first scheduled by the engine
    prefill    first scheduled -> first output token
    decode     first -> last output token, split into
      steps    (output events' token gaps) x the request's typical step (the median gap
               per token: the decode step at the batch it saw)
      stalls   the rest: steps longer than the typical one (other requests' prefills in the
               same batch, preemptions)
    overhead   E2E minus the above (client, HTTP, tokenization, the stream's tail)

The components add up to the E2E latency on each side, so the differences of their means add
up to the difference of the mean E2E. Where a side cannot split queueing from prefill (a
trace file without engine timestamps, a server without vLLM's phase histograms), both sides
show "time to first token" instead (queueing + prefill + the overhead before the first
token) and overhead is the stream's tail only: the rows always mean the same on both sides.

Naming the culprit: a slower (or faster) step makes requests wait longer (shorter) for the
engine, so a queueing difference in the direction of a step difference is the step's, and
decode stalls behind other requests' prefills are the prefill's; the component with the
largest difference of mean E2E after that attribution is named, with its relative size
(predicted against measured).

>>> import numpy as np
>>> side = side_from_events("measured", sent_s=np.array([0.0]), end_s=np.array([0.5]),
...                         event_offsets=np.array([0, 4]),
...                         event_times_s=np.array([0.1, 0.2, 0.3, 0.45]),
...                         event_tokens=np.array([1, 1, 1, 1]))
>>> [round(side.means_s[k], 3) for k in ("ttft", "steps", "stalls", "overhead")]
[0.1, 0.3, 0.05, 0.05]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Rows of the table, in order: key, label.
COMPONENTS = (("queue", "queueing (arrival -> first scheduled)"),
              ("prefill", "prefill (-> first token)"),
              ("ttft", "time to first token (queueing + prefill + overhead before it)"),
              ("steps", "decode steps (gaps x typical step)"),
              ("stalls", "decode stalls (steps above the typical one)"),
              ("overhead", "fixed per-request overhead (E2E minus the rest)"))
# A step component differing by less than this is not taken as the cause of queueing.
STEP_CAUSE_MIN = 0.05


@dataclass
class Side:
    """One side's per-request means (seconds) and where they came from."""

    label: str
    requests: int
    means_s: dict[str, float]          # queue, prefill (or ttft), steps, stalls, overhead, e2e
    step_s: float                      # mean typical decode step (per token)
    mean_batch: float                  # mean requests decoding while a request decoded
    split: bool                        # queueing and prefill known apart
    sources: list[str] = field(default_factory=list)

    def merged(self) -> Side:
        """The same side with queueing and prefill folded into time to first token (and the
        overhead before the first token moved there too)."""
        if not self.split:
            return self
        m = dict(self.means_s)
        m["ttft"] = m.pop("queue") + m.pop("prefill") + m.pop("front_overhead", 0.0)
        m["overhead"] = m.pop("tail_overhead", m["overhead"])
        return Side(self.label, self.requests, m, self.step_s, self.mean_batch, False,
                    [*self.sources, "queueing and prefill folded into the time to first "
                     "token: the other side has them only together"])


@dataclass
class ComponentRow:
    key: str
    component: str
    predicted_ms: float
    measured_ms: float
    difference_ms: float
    share_of_e2e_difference: float


@dataclass
class Decomposition:
    """Predicted against measured, component by component (means over requests)."""

    rows: list[ComponentRow]
    e2e_predicted_ms: float
    e2e_measured_ms: float
    step_predicted_ms: float
    step_measured_ms: float
    batch_predicted: float
    batch_measured: float
    culprit: str
    culprit_relative: float
    sentence: str
    follows: list[str]
    sources: dict[str, list[str]]

    def lines(self) -> list[str]:
        out = [f"{'component':<62} {'predicted':>10} {'measured':>10} {'diff':>10} "
               f"{'share':>7}"]
        for r in self.rows:
            share = (f"{r.share_of_e2e_difference:>7.0%}"
                     if math.isfinite(r.share_of_e2e_difference) else f"{'-':>7}")
            out.append(f"{r.component:<62} {r.predicted_ms:>8.2f}ms {r.measured_ms:>8.2f}ms "
                       f"{r.difference_ms:>+8.2f}ms {share}")
        out.append(f"{'E2E (sum of the above)':<62} {self.e2e_predicted_ms:>8.2f}ms "
                   f"{self.e2e_measured_ms:>8.2f}ms "
                   f"{self.e2e_predicted_ms - self.e2e_measured_ms:>+8.2f}ms {'100%':>7}")
        out.append(f"{'decode step, per token (typical)':<62} {self.step_predicted_ms:>8.2f}ms "
                   f"{self.step_measured_ms:>8.2f}ms "
                   f"{self.step_predicted_ms - self.step_measured_ms:>+8.2f}ms {'':>7}")
        out.append(self.sentence)
        for side, src in self.sources.items():
            out.append(f"{side}: " + "; ".join(src))
        return out

    def to_dict(self) -> dict[str, Any]:
        def clean(x: Any) -> Any:
            return None if isinstance(x, float) and not math.isfinite(x) else x

        return {"components": [{k: clean(v) for k, v in r.__dict__.items()}
                               for r in self.rows],
                "e2e_predicted_ms": clean(self.e2e_predicted_ms),
                "e2e_measured_ms": clean(self.e2e_measured_ms),
                "decode_step_predicted_ms": clean(self.step_predicted_ms),
                "decode_step_measured_ms": clean(self.step_measured_ms),
                "mean_batch_predicted": clean(self.batch_predicted),
                "mean_batch_measured": clean(self.batch_measured),
                "culprit": self.culprit, "culprit_relative": clean(self.culprit_relative),
                "follows": self.follows, "sentence": self.sentence, "sources": self.sources}


def _first_last(event_offsets: np.ndarray, event_times_s: np.ndarray,
                idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (event_times_s[event_offsets[idx]], event_times_s[event_offsets[idx + 1] - 1])


def typical_step_s(event_offsets: np.ndarray, event_times_s: np.ndarray,
                   event_tokens: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per request: the median of its gaps between output events, each divided by the tokens
    the later event carried (a chunk of k tokens is k steps); NaN with one event."""
    out = np.full(idx.size, np.nan)
    for k, i in enumerate(idx.tolist()):
        a, b = int(event_offsets[i]), int(event_offsets[i + 1])
        if b - a < 2:
            continue
        gaps = np.diff(event_times_s[a:b]) / np.maximum(event_tokens[a + 1:b], 1)
        out[k] = float(np.median(gaps))
    return out


def decode_concurrency(first_s: np.ndarray, last_s: np.ndarray) -> np.ndarray:
    """Per request: the time-average, over its own [first, last] token span, of the number of
    requests between their first and last token (itself included): the batch it decoded in.
    NaN for a request with one token (no span)."""
    times = np.concatenate([first_s, last_s])
    steps = np.concatenate([np.ones(first_s.size), -np.ones(last_s.size)])
    order = np.lexsort((-steps, times))         # at one time, starts before ends
    t = times[order]
    count = np.cumsum(steps[order])             # count just after each breakpoint
    area = np.concatenate([[0.0], np.cumsum(count[:-1] * np.diff(t))])  # F(t_k)
    f_first = np.interp(first_s, t, area)
    f_last = np.interp(last_s, t, area)
    span = last_s - first_s
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(span > 0, (f_last - f_first) / np.where(span > 0, span, 1.0), np.nan)


def side_from_events(label: str, sent_s: np.ndarray, end_s: np.ndarray,
                     event_offsets: np.ndarray, event_times_s: np.ndarray,
                     event_tokens: np.ndarray, scheduled_s: np.ndarray | None = None,
                     first_engine_s: np.ndarray | None = None,
                     keep: np.ndarray | None = None,
                     sources: list[str] | None = None) -> Side:
    """A side from per-request send/end times and output events (arrays over all requests;
    `keep`: the requests to use, default every one with an output event). `scheduled_s`
    (engine time of the first scheduling) and `first_engine_s` (the engine's first token,
    before any per-request overhead; default the first event) split the time to first token
    into queueing, prefill and the overhead before the first token."""
    counts = np.diff(event_offsets)
    mask = counts > 0 if keep is None else (keep & (counts > 0))
    idx = np.flatnonzero(mask)
    first, last = _first_last(event_offsets, event_times_s, idx)
    sent = sent_s[idx]
    end = np.where(np.isfinite(end_s[idx]), end_s[idx], last)
    step = typical_step_s(event_offsets, event_times_s, event_tokens, idx)
    tokens = np.array([int(event_tokens[event_offsets[i] + 1:event_offsets[i + 1]].sum())
                       for i in idx.tolist()], dtype=np.float64)
    decode = last - first
    steps = np.where(np.isfinite(step), tokens * np.nan_to_num(step), 0.0)
    means: dict[str, float] = {
        "ttft": _mean(first - sent), "steps": _mean(steps), "stalls": _mean(decode - steps),
        "overhead": _mean(end - last), "e2e": _mean(end - sent)}
    split = scheduled_s is not None
    if scheduled_s is not None:
        sched = scheduled_s[idx]
        first_eng = first if first_engine_s is None else first_engine_s[idx]
        front = first - first_eng
        means.update(queue=_mean(sched - sent), prefill=_mean(first_eng - sched),
                     front_overhead=_mean(front), tail_overhead=means["overhead"])
        means["overhead"] = means["tail_overhead"] + means["front_overhead"]
        del means["ttft"]
    batch = decode_concurrency(first, last)
    return Side(label, int(idx.size), means, _mean(step), _mean(batch), split,
                list(sources or []))


def with_server_phases(side: Side, phases: dict[str, Any] | None) -> Side:
    """The measured side with queueing and prefill from the server's own histograms (means
    over the requests it finished during the run); the overhead is then the client's E2E
    minus the server's queueing and prefill and the decode seen by the client."""
    if not phases or side.split or phases.get("queue_s") is None \
            or phases.get("prefill_s") is None:
        return side
    m = dict(side.means_s)
    ttft = m.pop("ttft")
    m["queue"], m["prefill"] = float(phases["queue_s"]), float(phases["prefill_s"])
    m["front_overhead"] = ttft - m["queue"] - m["prefill"]
    m["tail_overhead"] = m["overhead"]
    m["overhead"] = m["tail_overhead"] + m["front_overhead"]
    src = [*side.sources, f"queueing and prefill: the server's histograms "
           f"({phases.get('source', 'vllm:request_queue/prefill_time_seconds')}, "
           f"{int(phases.get('requests', 0))} requests)"]
    return Side(side.label, side.requests, m, side.step_s, side.mean_batch, True, src)


def _mean(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else math.nan


def _rel(p: float, m: float) -> float:
    return (p - m) / m if m and math.isfinite(m) and math.isfinite(p) else math.nan


def decompose(predicted: Side, measured: Side) -> Decomposition:
    """The table and the named component (see the module docstring)."""
    if not (predicted.split and measured.split):
        predicted, measured = predicted.merged(), measured.merged()
    keys = [k for k, _ in COMPONENTS if k in predicted.means_s and k in measured.means_s]
    e2e_p = sum(predicted.means_s[k] for k in keys)
    e2e_m = sum(measured.means_s[k] for k in keys)
    d_e2e = e2e_p - e2e_m
    labels = dict(COMPONENTS)
    rows = []
    diff: dict[str, float] = {}
    for k in keys:
        p, m = predicted.means_s[k], measured.means_s[k]
        diff[k] = p - m
        rows.append(ComponentRow(k, labels[k], p * 1e3, m * 1e3, (p - m) * 1e3,
                                 (p - m) / d_e2e if d_e2e else math.nan))
    rel = {k: _rel(predicted.means_s[k], measured.means_s[k]) for k in keys}
    rel["steps"] = _rel(predicted.step_s, measured.step_s)
    culprit, follows, attributed = _attribute(diff, rel)
    sentence = _sentence(culprit, rel.get(culprit, math.nan), predicted, measured, follows,
                         attributed)
    return Decomposition(rows, e2e_p * 1e3, e2e_m * 1e3, predicted.step_s * 1e3,
                         measured.step_s * 1e3, predicted.mean_batch, measured.mean_batch,
                         culprit, rel.get(culprit, math.nan), sentence, follows,
                         {"predicted": predicted.sources, "measured": measured.sources})


def _attribute(diff: dict[str, float], rel: dict[str, float]
               ) -> tuple[str, list[str], dict[str, float]]:
    """(the named component, the components that follow it, each root's attributed E2E
    difference in seconds)."""
    root = {k: v for k, v in diff.items() if k != "queue"}
    follows: dict[str, list[str]] = {k: [] for k in root}
    first_key = "prefill" if "prefill" in root else "ttft"
    # Stalls behind other requests' prefills are the prefill's when both moved together.
    if "stalls" in root and first_key == "prefill" and _same_way(diff["stalls"],
                                                                 diff["prefill"]) \
            and abs(rel.get("prefill", 0.0)) >= STEP_CAUSE_MIN:
        root["prefill"] += root.pop("stalls")
        follows["prefill"].append("the decode stalls behind prefills")
    if "queue" in diff:
        causes = [k for k in ("steps", "prefill") if k in root
                  and abs(rel.get(k, 0.0)) >= STEP_CAUSE_MIN
                  and _same_way(diff["queue"], diff[k])]
        if causes:
            k = max(causes, key=lambda c: abs(root[c]))
            root[k] += diff["queue"]
            follows[k].append("the queueing")
        else:
            root["queue"] = diff["queue"]
            follows["queue"] = []
    culprit = max(root, key=lambda c: abs(root[c]))
    return culprit, follows[culprit], root


def _same_way(a: float, b: float) -> bool:
    return a * b > 0


def _sentence(culprit: str, rel: float, p: Side, m: Side, follows: list[str],
              attributed: dict[str, float]) -> str:
    name = {"queue": "queueing", "prefill": "prefill", "ttft": "time to first token",
            "steps": "decode step", "stalls": "decode stalls", "overhead": "per-request "
            "overhead"}[culprit]
    if culprit == "steps":
        head = (f"{name} {rel:+.0%} at mean batch {m.mean_batch:.1f} (predicted "
                f"{p.step_s * 1e3:.2f} ms, measured {m.step_s * 1e3:.2f} ms per token)")
    else:
        pv, mv = p.means_s[culprit] * 1e3, m.means_s[culprit] * 1e3
        size = f"{rel:+.0%}" if math.isfinite(rel) else f"{pv - mv:+.2f} ms"
        head = f"{name} {size} (predicted {pv:.2f} ms, measured {mv:.2f} ms)"
    tail = f": {' and '.join(follows)} follow{'s' if len(follows) == 1 else ''}" \
        if follows else ""
    return (f"differs most: {head}{tail}; {attributed[culprit] * 1e3:+.2f} ms of the mean "
            "E2E difference")


__all__ = ["COMPONENTS", "ComponentRow", "Decomposition", "Side", "decode_concurrency",
           "decompose", "side_from_events", "typical_step_s", "with_server_phases"]
