"""The roofline step-time model: the one function that times an engine step.

`RooflineStepTime.step_time_s(work)` is what `estimate` (prefill = a step of prompt tokens,
decode = a step of B sequences), `simulate` and `serve` all call
(docs/architecture.md#one-step-time-function). Each
operator takes max(F / C_eff, D / beta_eff) plus a per-kernel overhead; the step takes their
sum plus the exposed communication (TP all-reduce, PP sends, EP all-to-all).

>>> from ridgeline.perf.step_time import BatchWork
>>> m = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
>>> decode = BatchWork(decode_seqs=32, decode_context_tokens=32 * 1024)
>>> 0.004 < m.step_time_s(decode) < 0.02
True
>>> m.step_time_s(BatchWork())
0.0
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.perf import kernels
from ridgeline.perf.comm import default_ep_backend
from ridgeline.perf.fast_step import CompiledStep
from ridgeline.perf.kernels import profile_for, time_rows
from ridgeline.perf.measured_attention import deepep_phase, domain_gpus
from ridgeline.perf.measured_kernels import check_moe_backend
from ridgeline.perf.memory import MemoryPlan, plan_memory
from ridgeline.perf.ops import (
    ATTENTION,
    GEMM,
    GEMM16,
    VAR,
    WORK_VARS,
    OpTable,
    build_table,
)
from ridgeline.perf.step_time import ArrayLike, BatchWork
from ridgeline.perf.window import EXT_VAR, EXT_VARS, WINDOW_VARS, build_ext_table, window_work
from ridgeline.specs import load_hardware, load_model
from ridgeline.specs.hardware import HardwareSpec
from ridgeline.specs.model import ModelSpec
from ridgeline.specs.parallel import Parallelism
from ridgeline.specs.precision import Precision, resolve_model_precision, resolve_precision

_CHUNK = 1 << 12  # columns evaluated per block (bounds temporary memory on huge grids)
_FILL = 1 << 15  # a large grid's work variables are built this many steps at a time (8 _CHUNKs)
# From this many steps a grid's times are built block by block (`_grid_times`): its whole
# work-variable matrix would be over 20 MB; below, the whole matrix costs less.
_GRID_BLOCKS_MIN = 1 << 18
_FIELDS = ("prefill_tokens", "prefill_attn_pairs", "prefill_context_tokens", "prefill_seqs",
           "decode_seqs", "decode_context_tokens")


def _block_times(coefs: tuple[np.ndarray, np.ndarray, np.ndarray], blk: np.ndarray,
                 res: np.ndarray) -> None:
    """The step times of one block of steps into `res`: sum_j max(comp_j . x, mem_j . x) +
    lin . x, `blk` holding each step's work variables (those `coefs` are restricted to)."""
    comp, mem, lin = coefs
    x = comp @ blk
    np.maximum(x, mem @ blk, out=x)
    np.sum(x, axis=0, out=res)
    res += lin @ blk


@dataclass
class StepBreakdown:
    """Per-operator FLOPs, bytes and seconds of one step (or a grid of steps).

    Arrays have shape (ops, *grid); `comm_s` and `total_s` have the grid's shape.
    """

    names: list[str]
    kinds: list[str]
    layers: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    overhead_s: np.ndarray
    time_s: np.ndarray
    comm_s: np.ndarray
    total_s: np.ndarray


def _check_domain(hw: HardwareSpec, par: Parallelism) -> None:
    """Refuse a TP or EP group wider than the NVLink domain (a PCIe part: a server's 8 GPUs)
    when the hardware file gives no network bandwidth to cost the links between nodes."""
    domain = hw.nvlink_domain_gpus if hw.nvlink_domain_gpus > 1 else 8
    if hw.network_bandwidth_bytes_s > 0:
        return
    for flag, p in (("--tp", par.tp), ("--ep", par.ep)):
        if p > domain:
            raise RidgelineError(
                f"{flag}: got {p}; allowed: at most {domain} on {hw.name} (its NVLink domain; "
                "the hardware file gives no network bandwidth to cost the links between "
                "nodes)")


class RooflineStepTime:
    """Per-operator roofline step time for one model on one replica (TP x PP GPUs)."""

    def __init__(self, model: ModelSpec, hardware: HardwareSpec,
                 precision: Precision | None = None, parallel: Parallelism | None = None,
                 max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                 engine_costs: Any = None, engine: str = "vllm",
                 kernel_engine: str | None = None, moe_backend: str | None = None) -> None:
        """`engine_costs` (optional): anything with `linear_terms()` -> seconds per work
        variable that add to every step (the engine's CPU and mode costs) and
        `assumptions()` -> list[str]; it is compiled into the step like the launches.
        `engine`: the serving engine whose kernels run (picks its kernel profile);
        `moe_backend`: the engine's MoE runner backend (None or "auto": its default for
        the model)."""
        self.model = model
        self.hardware = hardware
        # What this GPU runs: a defaulted fp8/fp4 GEMM falls back to weight-only where the
        # GPU has no tensor cores for it (specs/precision.py).
        self.precision = (precision or resolve_precision()).on_hardware(hardware)
        self.parallel = (parallel or Parallelism()).validate(model)
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        hw = hardware
        self.gemm_peak_flops = hw.peak(self.precision.gemm_compute_dtype)
        self.attention_peak_flops = hw.peak(self.precision.attention_compute_dtype)
        self.vector_peak_flops = hw.peak_flops.get("fp32", self.attention_peak_flops)
        self.bandwidth_eff_bytes_s = hw.memory_bandwidth_bytes_s * hw.bandwidth_efficiency
        self.link_eff_bytes_s = hw.interconnect_bandwidth_bytes_s * hw.bandwidth_efficiency
        self.kernel_overhead_s = hw.kernel_overhead_us * 1e-6
        # Windowed layers add work variables of their own (perf/window.py).
        self._window = float(model.sliding_window) if model.is_windowed else 0.0
        build = build_ext_table if self._window else build_table
        # The fitted kernel model of a catalog GPU (None: the plain roofline below).
        self.engine = engine
        self.kernel_profile = profile_for(hw, kernel_engine or engine)
        if self.kernel_profile is not None and self.kernel_profile.measured is not None:
            # The measured MoE fit follows the runner backend the engine picks for this model.
            self.kernel_profile = replace(self.kernel_profile, measured=self.kernel_profile
                                          .measured.for_model(model.model_type, moe_backend))
        elif moe_backend not in (None, "auto"):
            check_moe_backend(moe_backend)
        prof = self.kernel_profile
        collectives = None
        if prof is not None:
            def collectives(kind: str, p: int) -> tuple[float, ...] | None:
                if kind.startswith("deepep_"):
                    # DeepEP was measured inside one NVLink domain; past it the all-to-all
                    # over the network prices it (`_ep_comm`'s fallback).
                    mk = prof.measured_attention
                    return None if mk is None or p > domain_gpus(hw) else deepep_phase(mk, kind)
                return prof.collective(kind, p, hw.interconnect_bandwidth_bytes_s, hw)
        if self.parallel.ep > 1 and not self.parallel.ep_comm:
            self.parallel = replace(self.parallel,
                                    ep_comm=default_ep_backend(kernel_engine or engine))
        _check_domain(hw, self.parallel)
        self.table: OpTable = build(model, self.precision, self.parallel,
                                    self.link_eff_bytes_s, hw.interconnect_latency_s,
                                    collectives)
        self.gemm16_peak_flops = hw.peak(self.precision.attention_compute_dtype)
        peaks = {GEMM: self.gemm_peak_flops, ATTENTION: self.attention_peak_flops,
                 GEMM16: self.gemm16_peak_flops}
        c_eff = np.array([peaks.get(k, self.vector_peak_flops) for k in self.table.kinds])
        self.compute_eff_flops_s = c_eff * hw.compute_efficiency  # per operator (plain)
        self._n_ops = k = len(self.table.names)
        # Seconds per unit of each work variable: compute rows, then memory rows.
        if prof is None:
            self._stack = np.vstack([self.table.flops / self.compute_eff_flops_s[:, None],
                                     self.table.bytes / self.bandwidth_eff_bytes_s])
        else:
            self._stack = np.vstack(time_rows(self.table, hw, self.precision, prof))
        # Terms that add (not max): kernel launches, exposed communication, engine costs.
        self._linear = self.table.kernels.sum(axis=0) * self.kernel_overhead_s \
            + self.table.comm_s
        self.engine_costs = engine_costs
        if engine_costs is not None:
            extra = np.asarray(engine_costs.linear_terms(), dtype=np.float64)
            # Engine costs are over WORK_VARS; windowed models' extra variables get none.
            self._linear = self._linear.copy()
            self._linear[:extra.size] += extra
        self._moe = model.is_moe
        # Experts on one GPU: u counts the touched ones among them (the op table's).
        self._E = self.table.experts_per_gpu
        self._miss = self.table.expert_miss
        self._memory = plan_memory(model, hw, self.precision, self.parallel, 0.9,
                                   max_num_batched_tokens, max_num_seqs)
        self._ranks = self.parallel.attn_dp
        # The same sum, compiled for calls of a few steps (the simulator's pattern).
        nw = len(WORK_VARS)
        self._fast = CompiledStep(self._stack[:k, :nw], self._stack[k:, :nw],
                                  self._linear[:nw], self._moe, self._E, self._miss,
                                  table_seqs=max_num_seqs)
        if self._window or self._ranks > 1:
            # min(T, w) is not a linear form of the step's sums, nor is the slowest attention
            # rank's share ceil(B / attn_dp): the C core and the compiled path do not apply;
            # steps go through `_times_exact` (Python engine).
            self._fast.applicable = False

    # --- construction by name ------------------------------------------------------------
    @classmethod
    def from_names(cls, model: str | ModelSpec, hardware: str, weights: str | None = None,
                   kv: str | None = None, activations: str | None = None, tp: int = 1,
                   pp: int = 1, ep: int = 1, attn_dp: int = 1, ep_comm: str = "",
                   compute_efficiency: float | None = None,
                   bandwidth_efficiency: float | None = None,
                   kernel_overhead_us: float | None = None,
                   max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                   check_fit: bool = True, engine_costs: Any = None,
                   kernel_model: bool = True, engine: str = "vllm",
                   moe_backend: str | None = None) -> RooflineStepTime:
        """Build from catalog names or file paths (or an already parsed `ModelSpec`);
        RidgelineError on bad input or no fit.
        Weights/activations None: the checkpoint's quantization_config, else bf16.

        `kernel_model=False` times the catalog GPU with the plain roofline (the roofline bound
        max(F/C_eff, D/beta_eff) per operator) instead of the fitted kernel model."""
        from dataclasses import replace

        spec = model if isinstance(model, ModelSpec) else load_model(model)
        hw = load_hardware(hardware).with_efficiency(compute_efficiency, bandwidth_efficiency,
                                                     kernel_overhead_us)
        if not kernel_model:
            hw = replace(hw, kernel_profile="")
        out = cls(spec, hw, resolve_model_precision(spec, weights, kv, activations),
                  Parallelism(tp=tp, pp=pp, ep=ep, attn_dp=attn_dp, ep_comm=ep_comm),
                  max_num_batched_tokens,
                  max_num_seqs,
                  engine_costs, engine, moe_backend=moe_backend)
        if check_fit and not out.memory().fits:
            raise RidgelineError(out.no_fit_message())
        return out

    # --- the step time -------------------------------------------------------------------
    @property
    def experts_per_gpu(self) -> float:
        """Routed experts each GPU holds (E / ep; 0 for a dense model)."""
        return self._E if self._moe else 0.0

    def lockstep_work(self, work: BatchWork) -> BatchWork:
        """The step as the attention ranks run it in lockstep: each rank takes its share of
        the sequences and the step lasts as long as the busiest rank, ceil(B / attn_dp)
        sequences with their mean tokens and context; the others are padded to it (as the
        engines pad their ranks' batches for the MoE collectives). Identity for attn_dp = 1."""
        a = self._ranks
        if a == 1:
            return work
        ps, dq = (np.asarray(x, dtype=np.float64) for x in (work.prefill_seqs,
                                                           work.decode_seqs))
        # A prefill with tokens but no sequence count is one sequence.
        ps_eff = np.where((ps <= 0) & (np.asarray(work.prefill_tokens) > 0), 1.0, ps)
        ps_pad = a * np.ceil(ps_eff / a)
        dq_pad = a * np.ceil(dq / a)
        fp = np.divide(ps_pad, ps_eff, out=np.zeros_like(ps_pad), where=ps_eff > 0)
        fd = np.divide(dq_pad, dq, out=np.zeros_like(dq_pad), where=dq > 0)

        def out(x: np.ndarray) -> ArrayLike:
            return float(x) if x.ndim == 0 else x

        return BatchWork(
            prefill_tokens=out(np.asarray(work.prefill_tokens, dtype=np.float64) * fp),
            prefill_attn_pairs=out(np.asarray(work.prefill_attn_pairs, dtype=np.float64) * fp),
            prefill_context_tokens=out(np.asarray(work.prefill_context_tokens,
                                                  dtype=np.float64) * fp),
            prefill_seqs=out(np.where(ps > 0, ps_pad, ps)),
            decode_seqs=out(dq_pad),
            decode_context_tokens=out(np.asarray(work.decode_context_tokens,
                                                 dtype=np.float64) * fd))

    def work_vars(self, work: BatchWork) -> tuple[np.ndarray, tuple[int, ...]]:
        """The work variables (WORK_VARS, M) of a BatchWork and the grid shape."""
        work = self.lockstep_work(work)
        vals = [getattr(work, f) for f in _FIELDS]
        if not any(isinstance(v, np.ndarray) and v.ndim for v in vals):
            pt, pairs, pc, ps, dq, dc = (float(v) for v in vals)
            n = pt + dq
            u = self._E * (1.0 - self._miss ** n) if self._moe else 0.0
            row = [n > 0, n, ps + dq, pt, pairs, pc, dq, dc, u, pt > 0, dq > 0]
            if self._window:
                row += [float(x) for x in window_work(self._window, *(np.array(y) for y in (
                    pt, pairs, pc, ps, dq, dc)))]
            return np.array([row], dtype=np.float64).T, ()
        # Array path: fill the (WORK_VARS, M) matrix row by row with broadcasting (no
        # intermediate broadcast copies); scalar-zero fields leave their rows zero.
        shape = np.broadcast_shapes(*(np.shape(x) for x in vals))
        nvar = len(EXT_VARS) if self._window else len(WORK_VARS)
        v = np.zeros((nvar, int(np.prod(shape))))
        self._vars_into(v, v.reshape(nvar, *shape), vals)
        return v, shape

    def _vars_into(self, v: np.ndarray, grid: np.ndarray, vals: list[Any]) -> None:
        """Fill the zeroed work-variable matrix `v` (WORK_VARS or EXT_VARS, M) from the six
        fields `vals` (in _FIELDS order, broadcasting to `grid`, `v` in their shape)."""
        for name, x in zip(("pt", "pairs", "pc", "s", "dq", "dc"), vals, strict=True):
            if isinstance(x, np.ndarray) or x:
                grid[VAR[name]] = x
        n = v[VAR["n"]]
        np.add(v[VAR["pt"]], v[VAR["dq"]], out=n)
        v[VAR["s"]] += v[VAR["dq"]]
        v[VAR["any"]] = n > 0
        v[VAR["pre"]] = v[VAR["pt"]] > 0
        v[VAR["dec"]] = v[VAR["dq"]] > 0
        if self._moe:
            u = v[VAR["u"]]
            np.power(self._miss, n, out=u)
            np.subtract(1.0, u, out=u)
            u *= self._E
        if self._window:
            base = [v[VAR[x]] for x in ("pt", "pairs", "pc")]
            ps = v[VAR["s"]] - v[VAR["dq"]]
            for x, val in zip(WINDOW_VARS, window_work(self._window, *base, ps, v[VAR["dq"]],
                                                       v[VAR["dc"]]), strict=True):
                v[EXT_VAR[x]] = val

    def _times_exact(self, v: np.ndarray) -> np.ndarray:
        """The same sum evaluated elementwise, operator by operator, term by term (no BLAS):
        each step's value depends only on its own column (windowed models, which the
        compiled path does not cover, keep the engine's modes bit-identical)."""
        k = self._n_ops
        comp, mem = self._stack[:k], self._stack[k:]
        out = np.zeros(v.shape[1])
        for j in range(k):
            c = np.zeros(v.shape[1])
            m = np.zeros(v.shape[1])
            for i in np.flatnonzero(comp[j]).tolist():
                c += comp[j, i] * v[i]
            for i in np.flatnonzero(mem[j]).tolist():
                m += mem[j, i] * v[i]
            out += np.maximum(c, m)
        for i in np.flatnonzero(self._linear).tolist():
            out += self._linear[i] * v[i]
        return out

    def _times(self, v: np.ndarray) -> np.ndarray:
        k = self._n_ops
        if v.shape[1] <= 8:
            x = self._stack @ v
            return np.maximum(x[:k], x[k:]).sum(axis=0) + self._linear @ v
        # Large grids: only the work variables that are non-zero somewhere, only the
        # operators that use them, in cache-sized blocks.
        cols = np.flatnonzero(v.any(axis=1))
        coefs = self._block_coefs(cols)
        out = np.empty(v.shape[1])
        for start in range(0, v.shape[1], _CHUNK):
            _block_times(coefs, v[cols, start:start + _CHUNK], out[start:start + _CHUNK])
        return out

    def _block_coefs(self, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Compute and memory coefficients of the operators that use the work variables
        `cols`, and the linear ones, restricted to `cols` (for `_block_times`)."""
        k = self._n_ops
        sub = self._stack[:, cols]
        rows = np.flatnonzero(sub[:k].any(axis=1) | sub[k:].any(axis=1))
        return sub[:k][rows], sub[k:][rows], self._linear[cols]

    def _grid_times(self, vals: list[Any], shape: tuple[int, ...]) -> np.ndarray:
        """`_times(work_vars(...))` of a large grid without its (WORK_VARS, M) matrix: the
        work variables of _FILL steps at a time (the same operations on the same values:
        `_vars_into`), twice: first to find the variables non-zero somewhere, then to time
        each _CHUNK of steps as `_times` does."""
        size = int(np.prod(shape))
        flat = [x if np.ndim(x) == 0 else np.broadcast_to(np.asarray(x), shape).reshape(size)
                for x in vals]
        # Zeroed once: every fill writes the same rows (the rows of zero scalars stay zero),
        # but adds decode_seqs into the row of prefill_seqs, which is zeroed again when no
        # field value is written there.
        blk = np.zeros((len(WORK_VARS), _FILL))
        s_row = VAR["s"]
        s_kept = not (isinstance(flat[3], np.ndarray) or flat[3])
        used = np.zeros(len(WORK_VARS), dtype=bool)

        def fill(start: int) -> np.ndarray:
            b = blk[:, :min(_FILL, size - start)]
            if s_kept:
                b[s_row] = 0.0
            self._vars_into(b, b, [x if np.ndim(x) == 0 else x[start:start + b.shape[1]]
                                   for x in flat])
            return b

        for start in range(0, size, _FILL):
            used |= fill(start).any(axis=1)
        cols = np.flatnonzero(used)
        coefs = self._block_coefs(cols)
        out = np.empty(size)
        for start in range(0, size, _FILL):
            vc = fill(start)[cols]
            for at in range(0, vc.shape[1], _CHUNK):
                _block_times(coefs, vc[:, at:at + _CHUNK],
                             out[start + at:start + at + _CHUNK])
        return out

    def step_time_s(self, work: BatchWork) -> ArrayLike:
        """Seconds one engine step takes; broadcasts over array fields; no work -> 0 s.

        Scalars and calls of a few steps with prefill work (any number of decode-only
        steps) take the compiled path (`ridgeline.perf.fast_step`); large grids with
        prefill work take the matrix path. Both are sum_j max(F_j/C_eff, D_j/beta_eff) +
        launches + communication, equal up to floating-point reassociation.
        """
        t = self._fast.evaluate(work)
        if t is not None:
            return t
        if not self._window and self._ranks == 1:
            vals = [getattr(work, f) for f in _FIELDS]
            shape = np.broadcast_shapes(*(np.shape(x) for x in vals))
            if int(np.prod(shape)) > _GRID_BLOCKS_MIN:
                return self._grid_times(vals, shape).reshape(shape)
        v, shape = self.work_vars(work)
        t = self._times_exact(v) if self._window or self._ranks > 1 else self._times(v)
        return float(t[0]) if shape == () else t.reshape(shape)

    def breakdown(self, work: BatchWork) -> StepBreakdown:
        """The same computation, kept per operator (for `estimate --ops`)."""
        v, shape = self.work_vars(work)
        t = self.table
        flops = t.flops @ v
        byts = t.bytes @ v
        k = self._n_ops
        # The rows the step time takes the maximum of (with the fitted kernel model: GEMM
        # fill and floors, attention curves; "memory" then includes the latency side).
        compute_s = self._stack[:k] @ v
        memory_s = self._stack[k:] @ v
        overhead_s = t.kernels @ v * self.kernel_overhead_s
        time_s = np.maximum(compute_s, memory_s) + overhead_s
        comm_s = t.comm_s @ v
        total = time_s.sum(axis=0) + comm_s
        if self.engine_costs is not None:
            total = total + (self._linear - t.kernels.sum(axis=0) * self.kernel_overhead_s
                             - t.comm_s) @ v
        shp = (self._n_ops, *shape)
        return StepBreakdown(
            names=list(t.names), kinds=list(t.kinds), layers=t.layers,
            flops=flops.reshape(shp), bytes=byts.reshape(shp),
            compute_s=compute_s.reshape(shp), memory_s=memory_s.reshape(shp),
            overhead_s=overhead_s.reshape(shp), time_s=time_s.reshape(shp),
            comm_s=comm_s.reshape(shape), total_s=total.reshape(shape))

    # --- memory and transfer -------------------------------------------------------------
    def memory(self, gpu_memory_utilization: float = 0.9) -> MemoryPlan:
        if gpu_memory_utilization == 0.9:
            return self._memory
        if not 0 < gpu_memory_utilization <= 1:
            raise RidgelineError(f"gpu-memory-utilization: got {gpu_memory_utilization}; "
                                 "allowed: 0 < value <= 1")
        return plan_memory(self.model, self.hardware, self.precision, self.parallel,
                           gpu_memory_utilization, self.max_num_batched_tokens,
                           self.max_num_seqs)

    @property
    def kv_bytes_per_token(self) -> float:
        """Unique KV bytes per token, all layers, for the replica (what P/D transfer moves)."""
        return self._memory.kv_bytes_per_token

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9) -> int:
        """Tokens of KV cache the replica holds at this memory utilization."""
        return self.memory(gpu_memory_utilization).kv_capacity_tokens

    @property
    def interconnect_bandwidth_bytes_s(self) -> float:
        """Effective per-direction link bandwidth (datasheet x bandwidth efficiency)."""
        return self.link_eff_bytes_s

    def no_fit_message(self, gpu_memory_utilization: float = 0.9) -> str:
        mem = self.memory(gpu_memory_utilization)
        gib = 1024**3
        return (f"{self.model.name} does not fit on {self.hardware.name} with "
                f"tp={self.parallel.tp} pp={self.parallel.pp}"
                + (f" attention-dp={self.parallel.attn_dp}" if self.parallel.attn_dp > 1
                   else "") + (f" ep={self.parallel.ep}" if self.parallel.ep > 1 else "")
                + f" weights={self.precision.weights}"
                f": needs {(mem.weight_bytes + mem.workspace_bytes + mem.reserve_bytes) / gib:.1f}"
                f" GiB/GPU (weights {mem.weight_bytes / gib:.1f} GiB) of "
                f"{mem.budget_bytes / gib:.1f} GiB usable, short by "
                f"{mem.shortfall_bytes / gib:.1f} GiB; raise --tp/--pp or use smaller weights")

    # --- what it assumed -----------------------------------------------------------------
    def assumptions(self) -> list[str]:
        hw, pr, par = self.hardware, self.precision, self.parallel
        prof = self.kernel_profile
        if prof is None:
            eff = [f"efficiency: compute {hw.compute_efficiency:g} x dense peak "
                   f"({pr.gemm_compute_dtype} GEMM {self.gemm_peak_flops / 1e12:g} TFLOP/s), "
                   f"bandwidth {hw.bandwidth_efficiency:g} x "
                   f"{hw.memory_bandwidth_bytes_s / 1e12:g} TB/s, {hw.kernel_overhead_us:g} us "
                   "per kernel launch (plain roofline: no fitted kernel model)"]
        else:
            eff = [
                *kernels.assumptions(prof, hw, pr, par.tp, self.model.is_mla),
                f"peaks: {pr.gemm_compute_dtype} GEMM {self.gemm_peak_flops / 1e12:g} TFLOP/s, "
                f"{hw.memory_bandwidth_bytes_s / 1e12:g} TB/s (datasheet); "
                f"{hw.kernel_overhead_us:g} us launch gap per kernel on top of the fitted "
                "kernel durations"]
        out = [
            *eff,
            "compute/IO overlap: each operator takes max(F/C_eff, D/beta_eff) (full overlap "
            "inside a kernel); operators run one after another (times add)",
            "weights are read from HBM once per step (no cross-step caching); the input "
            "embedding reads only the step's rows; the LM head is read in full every step",
            "GQA: decode attention reads each sequence's unique KV once (heads of a group "
            "share it) and writes the new token's KV; prefill attention is FlashAttention-style "
            "(no S x S matrix in HBM), causal pairs only",
            f"precision: {pr.scheme}: weights {pr.weights} ({pr.weight_bytes:g} B incl. "
            f"scales), KV "
            f"{pr.kv} ({pr.kv_bytes:g} B), activations {pr.activations} (residual stream "
            f"{pr.activation_bytes:g} B); embeddings {pr.embedding_bytes:g} B, LM head "
            f"{pr.lm_head_bytes:g} B"
            + "".join(f"; {k} {v}" for k, v in pr.module_weights)
            + f"; chosen by {pr.source}" + (f"; {pr.fallback}" if pr.fallback else ""),
        ]
        m = self.model
        out.extend(m.notes)  # what the model's family parser could not cost
        if m.is_windowed:
            kind = ("chunked local attention (a token sees its own chunk; costed as a window "
                    "of the chunk size, an upper bound)" if m.window_kind == "chunked"
                    else "sliding-window attention")
            out.append(
                f"{kind}: {m.num_window_layers} of {m.num_softmax_layers} attention layers "
                f"see the last {m.sliding_window:,} tokens: KV held and read per sequence "
                f"min(T, {m.sliding_window:,}) there, banded prefill pairs; a batch's windowed "
                "reads come from its mean context and chunk (exact for equal sequences, an "
                "upper bound otherwise); "
                + ("the simulator's KV blocks hold every token of the chunked layers (vLLM "
                   "keeps them in full-attention groups unless "
                   "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE); "
                   if m.window_kind == "chunked" else
                   "the simulator's KV blocks follow vLLM's hybrid allocator (layers in KV "
                   "groups of one kind, one pool of memory // (page x group size) blocks; a "
                   "window group frees the blocks before the window: <= ceil(w/B) + 1 per "
                   "sequence; shared prefix blocks stay in every group); ")
                + "evaluated on the Python path (the C core does not cover windowed layers)")
        if m.num_linear_layers:
            out.append(
                f"linear attention (Gated DeltaNet): {m.num_linear_layers} of "
                f"{m.num_layers} layers hold a constant state of "
                f"{m.linear_state_elements:,} elements per sequence (no KV); decode ~7 d_k d_v "
                "FLOPs per value head and one state read + write per sequence per step; "
                "prefill in chunks of 64 tokens; memory sets aside the state of max_num_seqs "
                "sequences")
        if self.model.is_moe:
            m = self.model
            out.append(f"expert routing: each token picks k={m.experts_per_token} of "
                       f"E={m.num_experts} experts independently and uniformly; a step of n "
                       "tokens reads E[U] = E(1-(1-k/E)^n) experts per MoE layer, each once")
        if self.model.is_mla:
            out.append("MLA: the latent (kv_lora_rank + rope dim) is cached and replicated on "
                       "every TP rank; prefill expands it to K/V, decode absorbs W_UK/W_UV")
        if par.tp > 1 or par.pp > 1 or par.ep > 1 or par.attn_dp > 1:
            out.extend(f"communication (exposed, not overlapped): {t}"
                       for t in self.table.comm_terms)
            if prof is None:
                out.append(f"link: {hw.interconnect or 'interconnect'} "
                           f"{hw.interconnect_bandwidth_bytes_s / 1e9:g} GB/s per direction x "
                           f"{hw.bandwidth_efficiency:g}, {hw.interconnect_latency_s * 1e6:g} "
                           "us per collective")
            else:
                out.append(f"link: alpha-beta fitted on measured NCCL collectives, topology "
                           f"{prof.topology}; bus bandwidth = its measured fraction of the "
                           f"datasheet link x {hw.interconnect or 'interconnect'} "
                           f"{hw.interconnect_bandwidth_bytes_s / 1e9:g} GB/s")
        out.extend(self._layout_assumptions())
        if par.pp > 1:
            out.append("pipeline: a step's time is its latency through all stages "
                       "(no micro-batch overlap)")
        out.append(f"memory: util x capacity holds weights, the activation workspace of "
                   f"the largest step ({self.max_num_batched_tokens} tokens: chunked prefill, as "
                   "vLLM profiles it) and a "
                   f"{self._memory.reserve_bytes / 1024**3:g} GiB runtime reserve; the rest "
                   "is KV cache")
        if self.engine_costs is not None:
            out.extend(self.engine_costs.assumptions())
        return out

    def _layout_assumptions(self) -> list[str]:
        """What attention data-parallelism, expert parallelism and groups wider than the
        NVLink domain assumed."""
        hw, par, m = self.hardware, self.parallel, self.model
        out = []
        if par.attn_dp > 1:
            out.append(
                f"attention data-parallel: {par.attn_dp} ranks of tp={par.tp} in lockstep; "
                "attention, dense MLP, shared experts, norms and the LM head run per rank on "
                f"ceil(B/{par.attn_dp}) sequences (the busiest rank; the others are padded to "
                "it), the routed experts on every rank's tokens; each rank caches its own "
                f"sequences (KV capacity {par.attn_dp} x one GPU's; max_num_seqs and "
                f"max_num_batched_tokens are per rank, x{par.attn_dp} for the instance)")
        if par.ep > 1 and m.is_moe:
            out.append(
                f"expert parallel: ep={par.ep}, {m.num_experts // par.ep} of {m.num_experts} "
                f"experts per GPU" + (f", each split {par.moe_tp} ways" if par.moe_tp > 1
                                      else "")
                + f"; k/ep = {m.experts_per_token / par.ep:g} routed pairs per token per GPU; "
                "expert weights read for the touched experts of that GPU, "
                f"(E/ep)(1-(1-k/E)^n)")
        domain = hw.nvlink_domain_gpus if hw.nvlink_domain_gpus > 1 else 8
        wide = [f"{name}={p}" for name, p in (("tp", par.tp), ("ep", par.ep)) if p > domain]
        if wide and hw.network_bandwidth_bytes_s > 0:
            out.append(
                f"inter-node: {', '.join(wide)} spans more than the {domain}-GPU NVLink "
                f"domain of {hw.name}: collectives crossing nodes run at most at the network's "
                f"{hw.network_bandwidth_bytes_s / 1e9:g} GB/s per GPU (one NIC per GPU) plus "
                f"{(hw.network_latency_s or hw.interconnect_latency_s) * 1e6:g} us")
        return out

    def describe(self) -> dict[str, Any]:
        """Model, hardware, precision and parallelism (for trace headers and JSON)."""
        hw = self.hardware
        return {
            "model": self.model.name,
            "hardware": hw.name,
            "precision": self.precision.describe(),
            "parallelism": self.parallel.describe(),
            "efficiency": {"compute_efficiency": hw.compute_efficiency,
                           "bandwidth_efficiency": hw.bandwidth_efficiency,
                           "kernel_overhead_us": hw.kernel_overhead_us,
                           "kernel_profile": hw.kernel_profile},
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_capacity_tokens": self.kv_capacity_tokens(),
        }


__all__ = ["VAR", "WORK_VARS", "RooflineStepTime", "StepBreakdown"]
