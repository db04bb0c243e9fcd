"""The calibration profile: a measured step-time model, stored as JSON (docs/calibration.md).

A `CalibrationProfile` implements the engine's step-time interface (`step_time_s(BatchWork)`,
`kv_bytes_per_token`, `kv_capacity_tokens()`, `assumptions()`, `describe()`), so `estimate`,
`simulate` and `serve` take it in place of the roofline model
(docs/architecture.md#a-calibrated-profile-is-a-step-time-model).

A step's time is a measured table over the tokens the step computes plus an attention term:

    n     = prefill_tokens + decode_seqs            (tokens in the step)
    pairs = prefill_attn_pairs + decode_context_tokens   (query-key pairs of its attention)
    t     = T(n) + per_pair_s * pairs                (0 s when n = 0)

T is piecewise linear between the probed token counts (so a measured drop, e.g. decode at 8
sequences faster than at 4, is reproduced exactly at the probed points). With
`scheduling.ubatch_tokens = U` (llama.cpp's n_ubatch) a step of n > U tokens runs as
floor(n/U) graphs of U tokens plus one of the rest, as the engine does. Beyond the largest
probed count T is extended in proportion (t(max) * n / max, the compute-bound law); every
such step is counted in `extrapolated_steps` and printed by `assumptions()`: never silent.

>>> p = CalibrationProfile.from_table(tokens=[1, 2, 4, 8], step_s=[0.01, 0.02, 0.04, 0.03])
>>> from ridgeline.perf.step_time import BatchWork
>>> [round(p.step_time_s(BatchWork(decode_seqs=b)), 6) for b in (4, 6, 8)]
[0.04, 0.035, 0.03]
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from ridgeline.errors import RidgelineError
from ridgeline.inputs import load_json, validate_document, write_text_atomic
from ridgeline.perf.step_time import ArrayLike, BatchWork
from ridgeline.sim.engine import EngineConfig
from ridgeline.sim.slots import SlotSteps

PROFILE_KIND = "ridgeline-calibration"
PROFILE_SCHEMA_VERSION = 1

# Bounds a profile must meet to be a step-time model: each is far outside any
# real engine, so only a corrupted or hand-made file hits one.
MAX_PROBE_POINTS = 10_000          # token counts in the table
MAX_STEP_TOKENS = 10_000_000       # the largest context of any served model
MIN_STEP_S = 1e-7                  # a kernel launch alone takes microseconds
MAX_STEP_S = 3600.0                # one engine step of an hour cannot serve anyone
MAX_PER_PAIR_S = 1e-3              # a CPU spends ~5 us per query-key pair at most
MAX_KV_BYTES_PER_TOKEN = 1e8       # the largest models hold ~2 MB per token
MAX_KV_CAPACITY_TOKENS = 10**11
MAX_NUM_SEQS = 65_536              # as `--max-num-seqs` allows
MAX_BLOCK_SIZE_TOKENS = 4096
MAX_CREATED_UNIX_S = 1e11          # the year 5138


# Every part of a profile but `provenance` refuses a field it does not know (a misspelt
# `scheduling.max_num_seqs` must not fall back to a default) and a number that is not one;
# provenance is a free record of where the measurement came from (calibrate adds the
# engine's own facts to it), so it keeps what it is given.
_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class TraceRef(BaseModel):
    """A probe trace the fit used: where it was and what it held."""

    model_config = _STRICT

    path: str
    sha256: str
    requests: int = 0
    point: str = ""


class Provenance(BaseModel):
    """What was measured, where, when and how (enough to redo the measurement)."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    engine: str = "unknown"
    engine_version: str | None = None
    base_url: str | None = None
    model: str = "unknown"
    model_config_path: str | None = None
    host: dict[str, Any] = Field(default_factory=dict)
    created_unix_s: float = Field(default_factory=time.time, ge=0, le=MAX_CREATED_UNIX_S,
                                  allow_inf_nan=False)
    ridgeline_version: str = ""
    probe_design: dict[str, Any] = Field(default_factory=dict)
    probe_traces: list[TraceRef] = Field(default_factory=list)


class Scheduling(BaseModel):
    """The measured engine's scheduling parameters, as ridgeline's EngineConfig names them."""

    model_config = _STRICT

    preset: str = Field("vllm", max_length=64)
    max_num_seqs: StrictInt = Field(256, ge=1, le=MAX_NUM_SEQS)
    max_num_batched_tokens: StrictInt = Field(8192, ge=1, le=MAX_STEP_TOKENS)
    chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    block_size_tokens: StrictInt = Field(16, ge=1, le=MAX_BLOCK_SIZE_TOKENS)
    ubatch_tokens: StrictInt | None = Field(None, ge=1, le=MAX_STEP_TOKENS)
    # llama.cpp with a per-slot KV cache (-np N without -kvu): a step's prompt tokens never
    # share a graph with its decodes (split_equal), so a mixed step is T(decodes) + T(prompt).
    prefill_own_graph: StrictBool = False
    # The same engine, modelled by slot (sim/slots.py): the simulator assigns each
    # request llama-server's slot (LRU) and a step costs the sum of T over the graphs
    # split_equal makes of its slots (one per run of consecutive ids). Off for -kvu (one
    # stream: one graph per ubatch) and for other engines.
    slot_graphs: StrictBool = False
    # The server's LRU slot order when calibration ended (slot model only): the slots in the
    # order a burst of new requests would get them, replayed from calibrate's own requests
    # (`sim.slots.replay_requests`: pinned probes in their `id_slot`, others by LRU). verify
    # starts the first trace after calibration from it; None (older profiles): unknown.
    slot_order_after_calibration: list[StrictInt] | None = Field(None, max_length=MAX_NUM_SEQS)
    # When that order held (wall clock, the last probe's end) and how it was obtained.
    slot_order_at_unix_s: float | None = Field(None, ge=0, le=MAX_CREATED_UNIX_S,
                                               allow_inf_nan=False)
    slot_order_provenance: str | None = Field(None, max_length=2000)
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_order(self) -> Scheduling:
        o = self.slot_order_after_calibration
        if o is not None and sorted(o) != list(range(self.max_num_seqs)):
            raise ValueError(f"slot_order_after_calibration must list each slot 0.."
                             f"{self.max_num_seqs - 1} once")
        return self


class Residual(BaseModel):
    """One probed point: measured step time against the fitted profile's."""

    model_config = _STRICT

    point: str = Field(max_length=200)
    tokens: int = Field(ge=0, le=MAX_STEP_TOKENS)
    pairs: float = Field(ge=0)
    measured_s: float = Field(ge=0, le=MAX_STEP_S)
    fitted_s: float = Field(ge=0)
    samples: int = Field(0, ge=0)

    @property
    def rel_error(self) -> float:
        return (self.fitted_s - self.measured_s) / self.measured_s if self.measured_s else math.nan


class CalibrationProfile(BaseModel):
    """A fitted step-time model of one engine serving one model on one host."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    kind: Literal["ridgeline-calibration"] = PROFILE_KIND
    schema_version: StrictInt = PROFILE_SCHEMA_VERSION
    provenance: Provenance = Field(default_factory=Provenance)
    tokens: list[StrictInt] = Field(description="probed tokens per step, ascending, >= 1",
                                    min_length=2, max_length=MAX_PROBE_POINTS)
    step_s: list[float] = Field(description="T(n): step seconds at those token counts, "
                                "without the attention term", max_length=MAX_PROBE_POINTS)
    per_pair_s: float = Field(0.0, description="seconds per attention query-key pair",
                              ge=0, le=MAX_PER_PAIR_S, allow_inf_nan=False)
    # Seconds per query-key pair of a decode token (its context), when measured apart from
    # the prefill's (llama.cpp on a CPU spends ~5x more per pair in decode
    # attention than in a prompt's); None: per_pair_s for both.
    decode_per_pair_s: float | None = Field(None, ge=0, le=MAX_PER_PAIR_S,
                                            allow_inf_nan=False)
    kv_bytes_per_token_value: float = Field(0.0, alias="kv_bytes_per_token", ge=0,
                                            le=MAX_KV_BYTES_PER_TOKEN, allow_inf_nan=False)
    kv_capacity_tokens_value: StrictInt = Field(1 << 20, alias="kv_capacity_tokens", ge=1,
                                                le=MAX_KV_CAPACITY_TOKENS)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    residuals: list[Residual] = Field(default_factory=list)
    fit_notes: list[str] = Field(default_factory=list)

    # llama-server's LRU slot order at the start of a replay (sim/slots.py); None: fresh.
    _slot_order: list[int] | None = PrivateAttr(default=None)
    _extrapolated_steps: int = PrivateAttr(default=0)
    _max_tokens_seen: float = PrivateAttr(default=0.0)

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if not 1 <= v <= PROFILE_SCHEMA_VERSION:
            raise ValueError(f"schema versions 1..{PROFILE_SCHEMA_VERSION} (a newer ridgeline "
                             "wrote this profile, or it is not one: upgrade ridgeline or "
                             "recalibrate)")
        return v

    @model_validator(mode="after")
    def _check(self) -> CalibrationProfile:
        if not self.tokens or len(self.tokens) != len(self.step_s):
            raise ValueError("tokens and step_s must be non-empty lists of one length")
        if any(b <= a for a, b in zip(self.tokens, self.tokens[1:], strict=False)) or \
                self.tokens[0] < 1 or self.tokens[-1] > MAX_STEP_TOKENS:
            raise ValueError(f"tokens must be ascending integers from 1 to {MAX_STEP_TOKENS:,}")
        for i, s in enumerate(self.step_s):
            if not (MIN_STEP_S <= s <= MAX_STEP_S):
                raise ValueError(f"step_s[{i}] = {s!r}: step times must be finite seconds in "
                                 f"[{MIN_STEP_S:g}, {MAX_STEP_S:g}]")
        if not (self.per_pair_s >= 0 and math.isfinite(self.per_pair_s)):
            raise ValueError("per_pair_s must be finite and >= 0")
        u = self.scheduling.ubatch_tokens
        if u is not None and u > self.tokens[-1]:
            raise ValueError(f"scheduling.ubatch_tokens ({u}) must not exceed the largest "
                             f"probed token count ({self.tokens[-1]})")
        return self

    # ---- construction and files ---------------------------------------------------------
    @classmethod
    def from_table(cls, tokens: list[int], step_s: list[float], per_pair_s: float = 0.0,
                   **kw: Any) -> CalibrationProfile:
        return cls(tokens=list(tokens), step_s=list(step_s), per_pair_s=per_pair_s, **kw)

    @classmethod
    def load(cls, path: str | Path, option: str = "--calibration") -> CalibrationProfile:
        """Read a profile file; a bad file is one RidgelineError line naming `option`."""
        obj = load_json(path, option, max_bytes=64 << 20)
        return cls.read(obj, f"{option}: {path}")

    @classmethod
    def read(cls, obj: Any, source: str) -> CalibrationProfile:
        """The one reader of a parsed profile document (a file's JSON, a UI body): every
        field checked by this schema, failures one RidgelineError line naming `source` and
        the field's path (`scheduling.bacth: unknown field; allowed: ...`)."""
        if not isinstance(obj, dict) or obj.get("kind") != PROFILE_KIND:
            raise RidgelineError(f"{source} is not a calibration profile (expected "
                                 f"\"kind\": \"{PROFILE_KIND}\"; make one with `ridgeline "
                                 "calibrate engine`)")
        return validate_document(cls, obj, f"{source}: calibration profile")

    def save(self, path: str | Path) -> None:
        write_text_atomic(path, self.model_dump_json(indent=2, by_alias=True) + "\n")

    # ---- the step-time interface --------------------------------------------------------
    def table_time_s(self, n: ArrayLike) -> np.ndarray:
        """T(n) for token counts n (array), with ubatch splitting and counted extrapolation."""
        x = np.asarray(n, dtype=np.float64)
        tok = np.asarray(self.tokens, dtype=np.float64)
        ts = np.asarray(self.step_s, dtype=np.float64)
        u = self.scheduling.ubatch_tokens
        if u is not None:
            full = np.floor(x / u)
            rem = x - full * u
            t_u = float(np.interp(u, tok, ts))
            return full * t_u + self._interp(rem, tok, ts)
        return self._interp(x, tok, ts)

    def _interp(self, x: np.ndarray, tok: np.ndarray, ts: np.ndarray) -> np.ndarray:
        top = tok[-1]
        # Below the smallest probe (only 0 < n < tokens[0]): proportional to T(tokens[0]).
        out = np.interp(x, np.concatenate(([0.0], tok)), np.concatenate(([0.0], ts)))
        over = x > top
        if np.any(over):
            self._extrapolated_steps += int(np.count_nonzero(over))
            self._max_tokens_seen = max(self._max_tokens_seen, float(np.max(x)))
            out = np.where(over, ts[-1] * x / top, out)
        return out

    def step_time_s(self, work: BatchWork) -> ArrayLike:
        """Seconds one engine step takes; broadcasts over array fields; no work -> 0 s."""
        p = np.asarray(work.prefill_tokens, dtype=np.float64)
        d = np.asarray(work.decode_seqs, dtype=np.float64)
        n = p + d
        graphs = self.table_time_s(p) + self.table_time_s(d) \
            if self.scheduling.prefill_own_graph else self.table_time_s(n)
        t = graphs + self.attention_s(np.asarray(work.prefill_attn_pairs, dtype=np.float64),
                                      np.asarray(work.decode_context_tokens, dtype=np.float64))
        out = np.where(n > 0, t, 0.0)
        return float(out) if out.ndim == 0 else out

    def attention_s(self, prefill_pairs: Any, decode_pairs: Any) -> Any:
        """The attention term: prefill pairs at per_pair_s, decode ones at decode_per_pair_s
        (per_pair_s when that is not set)."""
        dec = self.per_pair_s if self.decode_per_pair_s is None else self.decode_per_pair_s
        return self.per_pair_s * prefill_pairs + dec * decode_pairs

    def graphs_time_s(self, graph_tokens: list[int], prefill_pairs: float,
                      decode_pairs: float) -> float:
        """A step that runs as graphs of these token counts (llama.cpp's ubatches): the sum
        of the one-graph table over them, plus the attention term. Zero graphs: 0 s."""
        if not graph_tokens:
            return 0.0
        t = float(np.sum(self.table_time_s(np.asarray(graph_tokens, dtype=np.float64))))
        return t + float(self.attention_s(float(prefill_pairs), float(decode_pairs)))

    def slot_steps(self, n_slots: int) -> Any:
        """The scheduler hook that times steps by slot layout (`scheduling.slot_graphs`), or
        None: the engine then times steps from BatchWork alone."""
        if not self.scheduling.slot_graphs:
            return None
        return SlotSteps(n_slots, self.scheduling.ubatch_tokens or MAX_STEP_TOKENS,
                         self.graphs_time_s, self._slot_order)

    def with_slot_order(self, order: list[int] | None) -> CalibrationProfile:
        """This profile with the server's LRU slot order at the start of a simulated run (a
        server with history, e.g. read from its log by `sim.slots.check_log`)."""
        n = self.scheduling.max_num_seqs
        if order is not None and sorted(order) != list(range(n)):
            raise RidgelineError(f"--slot-order: got {','.join(map(str, order))}; allowed: "
                                 f"each of the profile's slots 0..{n - 1} once")
        out = self.model_copy()
        out._slot_order = None if order is None else list(order)
        return out

    def step_time_s_of(self, **fields: float) -> float:
        """One step's seconds from BatchWork fields given by name (a convenience)."""
        return float(self.step_time_s(BatchWork(**fields)))

    @property
    def kv_bytes_per_token(self) -> float:
        return self.kv_bytes_per_token_value

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9) -> int:
        """The measured engine's KV capacity (its own setting; the utilization is ignored)."""
        return int(self.kv_capacity_tokens_value)

    @property
    def interconnect_bandwidth_bytes_s(self) -> float:
        return math.inf   # a single measured engine: no P/D transfer is modelled

    @property
    def extrapolated_steps(self) -> int:
        return self._extrapolated_steps

    def engine_config(self) -> Any:
        """The EngineConfig that schedules like the measured engine."""
        s = self.scheduling
        bs = s.block_size_tokens
        return EngineConfig(max_num_seqs=s.max_num_seqs,
                            max_num_batched_tokens=s.max_num_batched_tokens,
                            chunked_prefill=s.chunked_prefill, block_size_tokens=bs,
                            num_kv_blocks=max(1, self.kv_capacity_tokens() // bs),
                            enable_prefix_caching=s.enable_prefix_caching)

    def assumptions(self) -> list[str]:
        pv = self.provenance
        out = [
            f"calibrated profile: {pv.engine} {pv.engine_version or ''} serving {pv.model} "
            f"(measured {time.strftime('%Y-%m-%d %H:%M', time.gmtime(pv.created_unix_s))} "
            "UTC)".replace("  ", " "),
            f"step time = T(tokens in step) + {self.per_pair_s:.3g} s x attention pairs"
            + (f" (decode pairs: {self.decode_per_pair_s:.3g} s)"
               if self.decode_per_pair_s is not None else "") + "; T "
            f"measured at {len(self.tokens)} token counts {self.tokens[0]}..{self.tokens[-1]},"
            " linear between them",
            f"scheduling ({self.scheduling.preset}): max_num_seqs "
            f"{self.scheduling.max_num_seqs}, token budget "
            f"{self.scheduling.max_num_batched_tokens}, chunked prefill "
            f"{'on' if self.scheduling.chunked_prefill else 'off'}"
            + (f", ubatch {self.scheduling.ubatch_tokens} tokens"
               if self.scheduling.ubatch_tokens else "")
            + (", a step's prompt tokens in their own graph: T(decodes) + T(prompt)"
               if self.scheduling.prefill_own_graph else ""),
        ]
        if self.scheduling.slot_graphs:
            out.append("llama.cpp per-slot KV (-np without -kvu): each request gets "
                       "llama-server's LRU slot (a fresh server's order: highest id first); a "
                       "step costs the sum of T over its graphs, one per run of consecutive "
                       "slot ids (split_equal); the simulator and emulator run this on the "
                       "Python engine (not the C core); estimate assumes one run")
        if self._extrapolated_steps:
            out.append(f"WARNING: {self._extrapolated_steps} steps had more tokens than the "
                       f"largest probe ({self.tokens[-1]}; up to {self._max_tokens_seen:g}): "
                       "extrapolated in proportion to tokens; probe larger prefills")
        return out

    def describe(self) -> dict[str, Any]:
        pv = self.provenance
        return {"model": pv.model, "hardware": pv.host.get("hostname", "calibrated host"),
                "engine": pv.engine, "engine_version": pv.engine_version,
                "calibration": {"created_unix_s": pv.created_unix_s,
                                "tokens": self.tokens, "per_pair_s": self.per_pair_s},
                "precision": {}, "parallelism": {},
                "kv_bytes_per_token": self.kv_bytes_per_token,
                "kv_capacity_tokens": self.kv_capacity_tokens()}


__all__ = ["CalibrationProfile", "Provenance", "Residual", "Scheduling", "TraceRef"]
