"""The one trace format: a JSONL file, a header line, then one line per request.

Every producer of per-request timing (simulate, bench, importers) writes it; every metric
reads it. Times are seconds on one monotonic clock per run (the header says which clock and
its wall-clock anchor). See docs/trace.md for the full description.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

# How a request's output token count was obtained.
TokenCountSource = Literal["usage", "tokenizer", "chunks", "requested", "simulated", "unknown"]

# Final state of a request. "ok": finished normally. "error": failed (see error_kind).
# "cutoff": stopped by the client (Ctrl-C, duration limit) before it finished.
# "rejected": refused by the engine/server before any work (e.g. 429, no KV capacity).
RequestStatus = Literal["ok", "error", "cutoff", "rejected"]


class TraceHeader(BaseModel):
    """First line of a trace: what the run was, so a number can be reproduced and explained.

    This is the metrics chapter's "must record" table: environment, load, configuration.
    """

    model_config = ConfigDict(extra="allow")

    type: Literal["header"] = "header"
    # A later version may mean fields this reader would misread: refused, not guessed.
    schema_version: int = Field(SCHEMA_VERSION, ge=1, le=SCHEMA_VERSION)
    tool: str = "ridgeline"
    tool_version: str = ""
    source: str = Field(description="simulate | bench | serve | import:<format>")
    clock: str = Field("perf_counter", description="the monotonic clock all times use")
    start_time_unix_s: float | None = Field(None, description="wall-clock time of t=0, if known")
    model: str | None = None
    hardware: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    precision: dict[str, Any] = Field(default_factory=dict)
    parallelism: dict[str, Any] = Field(default_factory=dict)
    engine_config: dict[str, Any] = Field(default_factory=dict)
    load: dict[str, Any] = Field(default_factory=dict, description="pattern and its parameters")
    dataset: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = None
    # What the source can and cannot tell. Metrics that need a missing capability are
    # reported as unavailable, never guessed.
    has_event_times: bool = True
    has_scheduled_times: bool = True
    # Added for importers (defaults keep the meaning of traces written before them):
    # whether event_tokens is known per event, whether sent_s values are real send times
    # (LLMPerf records none), and the source's own measurement duration when it has one.
    has_event_tokens: bool = True
    has_send_times: bool = True
    duration_s: float | None = Field(None, description="source-reported run duration, if any")
    # The run's own SLOs (`bench --slo`, as METRIC:LIMIT texts): `report` and `advise` judge
    # the trace by them when given none. Empty in traces written before the field existed.
    slos: list[str] = Field(default_factory=list, description="SLOs the run was measured "
                            "against, e.g. ttft_ms:500")
    notes: list[str] = Field(default_factory=list)


class RequestRecord(BaseModel):
    """One request's timing. Event times are when output became visible to the client."""

    model_config = ConfigDict(extra="allow")

    type: Literal["request"] = "request"
    id: str
    scheduled_s: float | None = Field(None, description="when the load pattern meant to send it")
    sent_s: float = Field(description="when the request was actually sent / arrived")
    event_times_s: list[float] = Field(
        default_factory=list, description="arrival time of each output event (chunk)"
    )
    event_tokens: list[int] | None = Field(
        None, description="tokens in each event; omitted means one token per event"
    )
    end_s: float | None = Field(None, description="when the response completed or failed")
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    token_count_source: TokenCountSource = "unknown"
    status: RequestStatus = "ok"
    error_kind: str | None = None
    error: str | None = None
    # Per-request summary values for sources without per-event times (importers). Seconds.
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None


class TraceFooter(BaseModel):
    """Optional last line, written when a run ends cleanly (absent after a crash)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["footer"] = "footer"
    end_time_s: float
    requests_written: int
    interrupted: bool = False
    notes: list[str] = Field(default_factory=list)
