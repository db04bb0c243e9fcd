"""Disaggregated serving: a prefill pool and a decode pool, each with its own layout.

Dynamo and llm-d deploy prefill and decode workers as separate engines, each with its own
parallelism (TP, PP, EP, attention-DP), worker count and batch limits. A pool is written as
a spec string of `key=value` pairs:

    --prefill-pool "workers=2,tp=4,max-batched-tokens=16384"
    --decode-pool  "workers=4,tp=8,ep=8,attention-dp=8,max-batch=256"

Keys left out take the main flags' values (--tp, --pp, --ep, --max-num-seqs,
--max-num-batched-tokens); `workers` takes P or D of `--pd P:D`, else 1. `--pd P:D` alone is
the shorthand for two pools of the main flags' layout.

>>> pools = resolve_pools(PoolDefaults(tp=2), (1, 3), None, "tp=4")
>>> [(p.role, p.workers, p.parallel.tp, p.gpus) for p in pools]
[('prefill', 1, 2, 2), ('decode', 3, 4, 12)]
>>> parse_pool_spec("tp=4,max-batch=64", "--decode-pool").max_batch
64
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ridgeline.errors import RidgelineError
from ridgeline.inputs import validate_document
from ridgeline.specs.model import ModelSpec
from ridgeline.specs.parallel import Parallelism

ROLES = ("prefill", "decode")
# Bounds of each key: a worker count past a million engines is the simulator's instance cap
# (checked again on the whole cluster); degrees past 1,024 GPUs exceed any NVLink domain.
MAX_WORKERS = 1_000_000
MAX_DEGREE = 1024
MAX_BATCH = 1_000_000
MAX_BATCHED_TOKENS = 10_000_000

_Workers = Annotated[int, Field(ge=1, le=MAX_WORKERS)]
_Degree = Annotated[int, Field(ge=1, le=MAX_DEGREE)]


class PoolSpecModel(BaseModel):
    """The keys a pool spec takes (hyphenated as on the command line); None: the default."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False)

    workers: _Workers | None = None
    tp: _Degree | None = None
    pp: _Degree | None = None
    ep: _Degree | None = None
    attention_dp: _Degree | None = Field(None, alias="attention-dp")
    max_batch: Annotated[int, Field(ge=1, le=MAX_BATCH)] | None = Field(None,
                                                                         alias="max-batch")
    max_batched_tokens: Annotated[int, Field(ge=1, le=MAX_BATCHED_TOKENS)] | None = Field(
        None, alias="max-batched-tokens")


POOL_KEYS = tuple(f.alias or n for n, f in PoolSpecModel.model_fields.items())


def parse_pool_spec(text: str, field: str) -> PoolSpecModel:
    """`workers=2,tp=4` -> its schema-checked keys; one `error:` line naming `field` and
    the key on a bad key or value."""
    raw: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise RidgelineError(f"{field}: {part.strip()!r} is not key=value; allowed keys: "
                                 f"{', '.join(POOL_KEYS)}")
        if key in raw:
            raise RidgelineError(f"{field}: {key!r} given twice; allowed: each key once")
        raw[key] = value
    # Whole numbers only: "4" is 4, "4.0" or "four" is refused (the schema's int check).
    typed = {k: int(v) if v.lstrip("+").isdigit() else v for k, v in raw.items()}
    out: PoolSpecModel = validate_document(PoolSpecModel, typed, field)
    return out


@dataclass(frozen=True)
class PoolDefaults:
    """The main flags a pool spec falls back on."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    attn_dp: int = 1
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192


@dataclass(frozen=True)
class Pool:
    """One pool of identical engine workers."""

    role: str
    workers: int
    parallel: Parallelism
    max_num_seqs: int
    max_num_batched_tokens: int

    @property
    def gpus_per_worker(self) -> int:
        return self.parallel.gpus_per_replica

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def layout(self) -> str:
        """`tp=4` or `tp=8,ep=8,attention-dp=8` (degrees of 1 left out but tp)."""
        p = self.parallel
        parts = [f"tp={p.tp}"] + [f"{k}={v}" for k, v in (("pp", p.pp), ("ep", p.ep),
                                                           ("attention-dp", p.attn_dp))
                                  if v > 1]
        return ",".join(parts)

    @property
    def spec(self) -> str:
        """The pool as a spec string (what `--prefill-pool` / `--decode-pool` take)."""
        return (f"workers={self.workers},{self.layout},max-batch={self.max_num_seqs},"
                f"max-batched-tokens={self.max_num_batched_tokens}")

    def describe(self) -> dict[str, object]:
        return {"workers": self.workers, "layout": self.layout,
                "parallelism": {"tp": self.parallel.tp, "pp": self.parallel.pp,
                                "ep": self.parallel.ep, "attn_dp": self.parallel.attn_dp},
                "gpus_per_worker": self.gpus_per_worker, "gpus": self.gpus,
                "max_num_seqs": self.max_num_seqs,
                "max_num_batched_tokens": self.max_num_batched_tokens}

    def validate(self, model: ModelSpec) -> Pool:
        """The layout checked against the model's shapes, the error naming the pool flag."""
        try:
            self.parallel.validate(model)
        except RidgelineError as exc:
            raise RidgelineError(f"--{self.role}-pool: {exc}") from None
        return self


def resolve_pools(main: PoolDefaults, pd: tuple[int, int] | None, prefill: str | None,
                  decode: str | None) -> tuple[Pool, Pool]:
    """Both pools: each spec's keys over the main flags; `workers` over P or D of `pd`
    (both given and different: an error, one would be ignored)."""
    out = []
    for k, (role, text) in enumerate(zip(ROLES, (prefill, decode), strict=True)):
        field = f"--{role}-pool"
        got = parse_pool_spec(text, field) if text else PoolSpecModel()
        count = pd[k] if pd else None
        if got.workers is not None and count is not None and got.workers != count:
            raise RidgelineError(f"{field}: workers={got.workers} but --pd gives {count}; "
                                 "allowed: one of them, or the same number")
        workers = got.workers or count or 1
        par = Parallelism(tp=_pick(got.tp, main.tp), pp=_pick(got.pp, main.pp),
                          ep=_pick(got.ep, main.ep), attn_dp=_pick(got.attention_dp,
                                                                   main.attn_dp))
        out.append(Pool(role, workers, par, _pick(got.max_batch, main.max_num_seqs),
                        _pick(got.max_batched_tokens, main.max_num_batched_tokens)))
    return out[0], out[1]


def _pick(value: int | None, default: int) -> int:
    return default if value is None else value


# Where the first token of a disaggregated request comes from, said beside its TTFT.
TTFT_CONVENTION = ("TTFT under P/D: the first token is counted when the prefill worker emits "
                   "it (its prefill step's end); the KV transfer and the decode worker's "
                   "first step delay the second token (ITL/TPOT). A proxy that streams only "
                   "from the decode worker shows TTFT later by about the transfer time")


def pool_stats(pools: tuple[Pool, Pool], roles: list[str], timeline: dict[str, np.ndarray],
               transfer_s: np.ndarray | None, wait_s: np.ndarray | None,
               link: dict[str, object], kv_bytes_per_token: float) -> dict[str, object]:
    """Per pool: workers, layout, GPUs, utilisation (busy step time over the run's span,
    mean over the pool's workers) and mean batch (sequences per step); the KV transfers'
    count and time statistics (ms), and the time they waited for a busy link."""
    rep = timeline.get("replica", np.zeros(0, dtype=np.int64))
    start = timeline.get("start_s", np.zeros(0))
    end = timeline.get("end_s", np.zeros(0))
    batch = timeline.get("batch_size", np.zeros(0))
    span_s = float(end.max()) if end.size else 0.0
    role_of = np.asarray(roles) if roles else np.zeros(0, dtype=str)
    out: dict[str, object] = {}
    for pool in pools:
        idx = np.flatnonzero(role_of == pool.role)
        mine = np.isin(rep, idx)
        busy = np.bincount(rep[mine], weights=(end - start)[mine], minlength=len(roles))
        util = float(busy[idx].mean() / span_s) if span_s > 0 and idx.size else 0.0
        out[pool.role] = {**pool.describe(), "utilisation": util,
                          "steps": int(mine.sum()),
                          "mean_batch_size": float(batch[mine].mean()) if mine.any() else 0.0}
    out["kv_transfer"] = {**link, "kv_bytes_per_token": kv_bytes_per_token,
                          **_transfer_stats(transfer_s, wait_s)}
    out["gpus"] = pools[0].gpus + pools[1].gpus
    return out


def _transfer_stats(transfer_s: np.ndarray | None, wait_s: np.ndarray | None
                    ) -> dict[str, object]:
    def ms(x: np.ndarray | None) -> dict[str, float] | None:
        if x is None:
            return None
        v = x[np.isfinite(x)] * 1e3
        if not v.size:
            return None
        return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)),
                "p99": float(np.percentile(v, 99)), "max": float(v.max())}

    count = int(np.isfinite(transfer_s).sum()) if transfer_s is not None else 0
    return {"transfers": count, "transfer_ms": ms(transfer_s), "link_wait_ms": ms(wait_s)}


def pool_lines(stats: dict[str, object]) -> list[str]:
    """The pools and the KV transfers in a few lines of text."""
    lines = []
    for role in ROLES:
        p = stats[role]
        assert isinstance(p, dict)
        lines.append(f"{role} pool: {p['workers']} worker{'s' if p['workers'] != 1 else ''} "
                     f"x {p['layout']} ({_gpus(p['gpus'])}, {p['gpus_per_worker']} each), "
                     f"max batch {p['max_num_seqs']}, {p['max_num_batched_tokens']} batched "
                     f"tokens; busy {p['utilisation']:.0%}, mean batch "
                     f"{p['mean_batch_size']:.1f}")
    kv = stats["kv_transfer"]
    assert isinstance(kv, dict)
    t, w = kv["transfer_ms"], kv["link_wait_ms"]
    text = (f"KV transfer: {kv['link']} link {float(kv['bandwidth_bytes_s']) / 1e9:g} GB/s "
            f"per transfer, {float(kv['kv_bytes_per_token']) / 1024:g} KiB per token; "
            f"{kv['transfers']:,} transfers")
    if isinstance(t, dict) and isinstance(w, dict):
        text += (f", {t['mean']:.3g} ms mean, {t['p99']:.3g} ms p99; waited for the link "
                 f"{w['mean']:.3g} ms mean, {w['p99']:.3g} ms p99")
    lines.append(text)
    lines.append(f"GPUs: {stats['gpus']} in all")
    return lines


def _gpus(n: object) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


__all__ = ["POOL_KEYS", "TTFT_CONVENTION", "Pool", "PoolDefaults", "PoolSpecModel",
           "parse_pool_spec", "pool_lines", "pool_stats", "resolve_pools"]
