"""A minimal Prometheus text-format registry with vLLM's metric names.

Dashboards, gateways and autoscalers built for vLLM read these names, so the emulator
exports them under the same names, labels (`model_name`) and histogram buckets as vLLM:

- gauges: vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc,
  vllm:cache_config_info (an info gauge, 1, whose labels are the cache config)
- counters: vllm:num_preemptions_total, vllm:prompt_tokens_total,
  vllm:generation_tokens_total, vllm:request_success_total{finished_reason},
  vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total
- histograms: vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds (per
  token gap), vllm:request_time_per_output_token_seconds (per request TPOT),
  vllm:e2e_request_latency_seconds, vllm:request_queue_time_seconds,
  vllm:request_prefill_time_seconds, vllm:request_decode_time_seconds,
  vllm:request_inference_time_seconds, vllm:iteration_tokens_total (tokens per step),
  vllm:request_prompt_tokens, vllm:request_generation_tokens,
  vllm:request_max_num_generation_tokens, vllm:request_params_max_tokens,
  vllm:request_params_n

Every series carries vLLM V1's labels `model_name` and `engine` (the engine index, "0").
The names removed from vLLM V1 are not exported: vllm:gpu_cache_usage_perc (now
kv_cache_usage_perc) and vllm:time_per_output_token_seconds (now
inter_token_latency_seconds). tests/data/vllm_grafana_metrics.txt lists the metric names
the panels of vLLM's reference Grafana dashboard query; the tests check each is exported.

Latencies are on the emulated timeline (wall time x --speed), so at --speed 1 they are
what a client sees and at any speed they are what the modelled server would report.
ridgeline adds ridgeline:emulator_lag_seconds, the emulator's own timing error.

>>> reg = Registry({"model_name": "m"})
>>> c = reg.counter("vllm:prompt_tokens_total", "Prompt tokens.")
>>> c.inc(5)
>>> 'vllm:prompt_tokens_total{model_name="m"} 5.0' in reg.render()
True
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np

# vLLM's bucket boundaries (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                  2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                             30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
                             7680.0)
# vLLM's iteration_tokens_total buckets when no CUDA graph sizes are captured (eager mode).
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8096)
N_BUCKETS = (1, 2, 5, 10, 20)
LAG_BUCKETS_S = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2,
                 0.5, 1.0)


def token_count_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's `build_1_2_5_buckets(max_model_len)`, the buckets of its per-request token
    histograms (request_prompt_tokens, request_generation_tokens, ...): 1, 2, 5, 10, 20, 50,
    ... up to the model's context length, so a 4,096-token model's end at 2,000.

    >>> token_count_buckets(4096)[-3:], token_count_buckets(131072)[-1]
    ((500, 1000, 2000), 100000)
    """
    out: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_model_len:
                return tuple(out)
            out.append(m * scale)
        scale *= 10


def _labels_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in labels.items()
    )
    return "{" + inner + "}"


def _fmt(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return repr(float(value))


class Counter:
    def __init__(self, name: str, help_text: str, labels: dict[str, str]) -> None:
        self.name, self.help, self.labels = name, help_text, labels
        self._values: dict[tuple[tuple[str, str], ...], float] = {}

    def inc(self, amount: float = 1.0, **extra: str) -> None:
        key = tuple(sorted(extra.items()))
        self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **extra: str) -> float:
        return self._values.get(tuple(sorted(extra.items())), 0.0)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        values = self._values or {(): 0.0}
        for key, v in values.items():
            lines.append(f"{self.name}{_labels_text({**self.labels, **dict(key)})} {_fmt(v)}")
        return lines


class Gauge:
    """A gauge whose value is read from a callback at scrape time."""

    def __init__(self, name: str, help_text: str, labels: dict[str, str],
                 read: Callable[[], float]) -> None:
        self.name, self.help, self.labels, self.read = name, help_text, labels, read

    def render(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge",
                f"{self.name}{_labels_text(self.labels)} {_fmt(self.read())}"]


class FnCounter(Gauge):
    """A counter whose value is read from a callback at scrape time."""

    def render(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter",
                f"{self.name}{_labels_text(self.labels)} {_fmt(self.read())}"]


class Info(Gauge):
    """Prometheus "info" as vLLM writes it: a gauge fixed at 1 whose labels carry data."""

    def __init__(self, name: str, help_text: str, labels: dict[str, str],
                 info: dict[str, str]) -> None:
        super().__init__(name, help_text, {**labels, **info}, lambda: 1.0)


class Histogram:
    def __init__(self, name: str, help_text: str, labels: dict[str, str],
                 buckets: Sequence[float]) -> None:
        self.name, self.help, self.labels = name, help_text, labels
        self.bounds = tuple(float(b) for b in buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def observe_many(self, values: np.ndarray) -> None:
        idx = np.searchsorted(np.asarray(self.bounds), values, side="left")
        for i, n in zip(*np.unique(idx, return_counts=True), strict=True):
            self.counts[int(i)] += int(n)
        self.sum += float(np.sum(values))
        self.count += int(values.size)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        cumulative = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cumulative += n
            labels = _labels_text({**self.labels, "le": _fmt(bound)})
            lines.append(f"{self.name}_bucket{labels} {cumulative}")
        base = _labels_text(self.labels)
        lines.append(f"{self.name}_sum{base} {_fmt(self.sum)}")
        lines.append(f"{self.name}_count{base} {self.count}")
        return lines


class Registry:
    """Holds metrics in registration order and renders the exposition text."""

    def __init__(self, labels: dict[str, str] | None = None) -> None:
        self.labels = dict(labels or {})
        self._metrics: list[Counter | Gauge | Histogram] = []

    def counter(self, name: str, help_text: str) -> Counter:
        m = Counter(name, help_text, self.labels)
        self._metrics.append(m)
        return m

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> Gauge:
        m = Gauge(name, help_text, self.labels, read)
        self._metrics.append(m)
        return m

    def counter_fn(self, name: str, help_text: str, read: Callable[[], float]) -> FnCounter:
        c = FnCounter(name, help_text, self.labels, read)
        self._metrics.append(c)
        return c

    def info(self, name: str, help_text: str, info: dict[str, str]) -> Info:
        m = Info(name, help_text, {}, info)  # vLLM: only the info's own labels
        self._metrics.append(m)
        return m

    def histogram(self, name: str, help_text: str, buckets: Sequence[float]) -> Histogram:
        m = Histogram(name, help_text, self.labels, buckets)
        self._metrics.append(m)
        return m

    def render(self) -> str:
        lines: list[str] = []
        for m in self._metrics:
            lines.extend(m.render())
        return "\n".join(lines) + "\n"


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

__all__ = ["CONTENT_TYPE", "ITERATION_TOKEN_BUCKETS", "ITL_BUCKETS_S", "LAG_BUCKETS_S",
           "N_BUCKETS", "REQUEST_LATENCY_BUCKETS_S", "TTFT_BUCKETS_S", "Counter", "Gauge",
           "Histogram", "Info", "Registry", "token_count_buckets"]
