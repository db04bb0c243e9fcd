"""The roofline step time, evaluated cheaply for the simulator's call pattern.

`RooflineStepTime.step_time_s` is sum_j max(F_j / C_eff, D_j / beta_eff) + kernel launches +
exposed communication, where every operator's FLOPs F_j and bytes D_j are linear in the work
variables of `ridgeline.perf.ops` (`OpTable`). Of those, only decode attention depends on
`decode_context_tokens` (dc). So a step's time is

    t = max(P + c_dc * dc, Q + m_dc * dc)

where P (Q) is every other operator's max(compute, memory) time, the kernel launches and the
communication, plus decode attention's compute (memory) time without its dc term: functions of
the other five fields only (and of the expected unique experts E[U], a function of the token
count). `CompiledStep` computes P and Q with a straight-line Python function generated once
from the coefficient matrices (constants inlined), and for decode-only steps (the simulator's
fast-forwarded and look-ahead steps: only decode_seqs and dc non-zero) reads them from a table
indexed by decode_seqs. A call of a few steps is then a handful of numpy operations.

Every step's value depends only on that step's six numbers, never on the other steps of the
call, its position or the call's width: the same arithmetic in the same order, in Python
floats or elementwise numpy (no BLAS, no reductions), gives the same bits. So the simulator's
event-driven and step-by-step modes agree exactly however their steps are grouped.

It equals the per-operator reference (`RooflineStepTime.breakdown`) up to floating-point
reassociation (tests/perf/test_perf_fast_step.py checks 1e-12 relative). `CompiledStep.evaluate`
returns None where it does not apply (large grids with prefill work, non-integer or huge
decode_seqs, an operator table with more than one dc-dependent operator); the caller then
uses the matrix path.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ridgeline.perf.ops import VAR, WORK_VARS
from ridgeline.perf.step_time import BatchWork

# A call evaluates steps with prefill work one by one in Python: at most this many per call
# (beyond it the matrix path is faster).
MAX_SCALAR_COLUMNS = 16
# decode_seqs values the decode-only table may grow to cover (beyond: the matrix path).
MAX_TABLE_SEQS = 1 << 16
# Steps per block of a large decode-only call (its temporaries, ~6 x 8 bytes a step, in cache).
DECODE_BLOCK = 1 << 14

_F64 = np.dtype(np.float64)
try:  # the C function behind np.count_nonzero (its Python wrapper costs 3x on short arrays)
    from numpy._core.multiarray import count_nonzero as _count_nonzero
except ImportError:  # numpy < 2
    _count_nonzero = np.count_nonzero
_INPUTS = ("pt", "pairs", "pc", "ps", "dq")  # the generated function's arguments


def _name(var: str) -> str:
    return f"x_{var}"


def _affine(coefs: np.ndarray, skip: int | None = None) -> str:
    """sum_v coefs[v] * x_v over the non-zero coefficients, left to right in WORK_VARS
    order (adding a zero term is exact, so skipping them changes nothing)."""
    parts = [f"{float(c)!r} * {_name(WORK_VARS[v])}" for v, c in enumerate(coefs)
             if c != 0.0 and v != skip]
    return " + ".join(parts) if parts else "0.0"


class CompiledStep:
    """Straight-line evaluation of sum_j max(comp_j . x, mem_j . x) + lin . x.

    comp, mem: (ops, WORK_VARS) seconds per unit of each work variable; lin: (WORK_VARS,)
    seconds that add (kernel launches, exposed communication).
    """

    def __init__(self, comp: np.ndarray, mem: np.ndarray, lin: np.ndarray, moe: bool,
                 num_experts: float, miss: float, table_seqs: int = 256) -> None:
        dc = VAR["dc"]
        uses_dc = np.flatnonzero((comp[:, dc] != 0) | (mem[:, dc] != 0))
        self.applicable = len(uses_dc) <= 1 and lin[dc] == 0
        if not self.applicable:
            return
        jd = int(uses_dc[0]) if len(uses_dc) else None
        self.c_dc = float(comp[jd, dc]) if jd is not None else 0.0
        self.m_dc = float(mem[jd, dc]) if jd is not None else 0.0
        used = (comp != 0).any(axis=0) | (mem != 0).any(axis=0) | (lin != 0)
        lines = [f"def _pq({', '.join(_name(v) for v in _INPUTS)}):",
                 "    x_n = x_pt + x_dq",
                 "    x_s = x_ps + x_dq",
                 "    x_any = 1.0 if x_n > 0 else 0.0",
                 "    x_pre = 1.0 if x_pt > 0 else 0.0",
                 "    x_dec = 1.0 if x_dq > 0 else 0.0"]
        if moe and used[VAR["u"]]:
            lines.append(f"    x_u = {float(num_experts)!r} * (1.0 - {float(miss)!r} ** x_n)")
        else:
            lines.append("    x_u = 0.0")
        lines.append("    t = 0.0")
        kept: list[int] = []
        for j in range(comp.shape[0]):
            if j == jd or not (comp[j].any() or mem[j].any()):
                continue
            kept.append(j)
            lines.append(f"    c = {_affine(comp[j])}")
            lines.append(f"    m = {_affine(mem[j])}")
            lines.append("    t += c if c > m else m")
        if lin.any():
            lines.append(f"    t += {_affine(lin)}")
        if jd is None:
            lines.append("    return t, t")
        else:
            lines.append(f"    return t + ({_affine(comp[jd], skip=dc)}), "
                         f"t + ({_affine(mem[jd], skip=dc)})")
        self.source = "\n".join(lines)
        # The same terms as data, for the simulator's C core (ridgeline.sim.core), which
        # evaluates them in this order: rows (ops x compute/memory x WORK_VARS), the linear
        # terms, decode attention's rows without dc (zeros when no operator reads dc).
        zeros = np.zeros(len(WORK_VARS))
        self.program = {
            "rows": np.array([(comp[j], mem[j]) for j in kept], dtype=np.float64).reshape(
                len(kept), 2, len(WORK_VARS)),
            "lin": np.array(lin, dtype=np.float64), "has_lin": bool(lin.any()),
            "jd_comp": np.array(comp[jd], dtype=np.float64) if jd is not None else zeros,
            "jd_mem": np.array(mem[jd], dtype=np.float64) if jd is not None else zeros,
            "has_jd": jd is not None, "moe_u": bool(moe and used[VAR["u"]]),
            "num_experts": float(num_experts), "miss": float(miss),
        }
        namespace: dict[str, object] = {}
        exec(compile(self.source, "<ridgeline.perf.fast_step>", "exec"), namespace)
        self._pq: Callable[[float, float, float, float, float], tuple[float, float]] = \
            namespace["_pq"]  # type: ignore[assignment]
        self._cm = np.array([[self.c_dc], [self.m_dc]])
        self._table_seqs = max(1, int(table_seqs))
        self._tab = np.zeros((3, 0))
        self._table(self._table_seqs + 1)

    # --- pieces ----------------------------------------------------------------------------
    def pq(self, pt: float, pairs: float, pc: float, ps: float, dq: float
           ) -> tuple[float, float]:
        """(P, Q) of one step: everything but decode attention's dc term (Python floats)."""
        return self._pq(pt, pairs, pc, ps, dq)

    def _table(self, need: int = 0) -> np.ndarray:
        """Rows P, Q and decode_seqs of decode-only steps, one column per decode_seqs = 0, 1,
        ... (at least `need`; grown on demand), built by the same function as single steps."""
        tab = self._tab
        if tab.shape[1] < need:
            pq = self._pq
            size = max(need, 2 * tab.shape[1])
            tab = np.array([(*pq(0.0, 0.0, 0.0, 0.0, float(b)), float(b))
                            for b in range(size)], dtype=np.float64).T.copy()
            self._tab = tab
        return tab

    def scalar(self, pt: float, pairs: float, pc: float, ps: float, dq: float, dc: float
               ) -> float:
        """One step's seconds (Python floats in, a float out)."""
        p, q = self._pq(pt, pairs, pc, ps, dq)
        a = dc * self.c_dc + p
        b = dc * self.m_dc + q
        return a if a > b else b

    # --- the call ----------------------------------------------------------------------------
    def evaluate(self, work: BatchWork) -> float | np.ndarray | None:
        """Seconds of the steps of `work` (fields scalars or arrays, broadcast), or None
        where this path does not apply."""
        if not self.applicable:
            return None
        dc, dq = work.decode_context_tokens, work.decode_seqs
        pt, pairs = work.prefill_tokens, work.prefill_attn_pairs
        pc, ps = work.prefill_context_tokens, work.prefill_seqs
        nd = np.ndarray
        if (type(dc) is nd and type(dq) is nd and type(pt) is nd and type(pairs) is nd
                and type(pc) is nd and type(ps) is nd and len(dc.shape) == 1
                and dc.shape == dq.shape == pt.shape == pairs.shape == pc.shape == ps.shape
                and dc.dtype == _F64):
            # The simulator's call: six 1-D arrays of one length (only dc's dtype matters:
            # the others are read exactly, as Python floats or whole numbers).
            return self._columns(pt, pairs, pc, ps, dq, dc)
        arrs = [np.asarray(x, dtype=np.float64) for x in (pt, pairs, pc, ps, dq, dc)]
        if not any(a.ndim for a in arrs):
            return self.scalar(*(float(a) for a in arrs))
        shape = np.broadcast_shapes(*(a.shape for a in arrs))
        size = int(np.prod(shape))
        if size > MAX_SCALAR_COLUMNS and any(
                (a != 0 if a.ndim == 0 else
                 _count_nonzero(a) * (size // a.size) > MAX_SCALAR_COLUMNS)
                for a in arrs[:4]):
            # Prefill work in more steps of a large grid than are evaluated one by one
            # (`_columns` would give up after copying the grid; a broadcast field holds
            # each of its values size / a.size times).
            return None
        # A decode-only grid (every prefill field a scalar zero: `_columns` reads none of
        # them) copies only decode_seqs and dc.
        decode_only = all(a.ndim == 0 and a == 0 for a in arrs[:4])
        flat = [a if i < 4 and decode_only else np.broadcast_to(a, shape).reshape(size)
                for i, a in enumerate(arrs)]
        out = self._columns(*flat)
        return None if out is None else out.reshape(shape)

    def _columns(self, pt: np.ndarray, pairs: np.ndarray, pc: np.ndarray, ps: np.ndarray,
                 dq: np.ndarray, dc: np.ndarray) -> np.ndarray | None:
        if not dc.shape[0]:
            return np.zeros(0)
        cnz = _count_nonzero
        n_pf = cnz(pt) + cnz(pairs) + cnz(pc) + cnz(ps)   # fields of steps with prefill work
        if not n_pf and dc.shape[0] > DECODE_BLOCK:
            # A large decode-only grid block by block (elementwise: the same values), its
            # temporaries in cache instead of five grid-sized arrays.
            out = np.empty(dc.shape[0])
            for start in range(0, dc.shape[0], DECODE_BLOCK):
                stop = start + DECODE_BLOCK
                x = self._decode_pq(dq[start:stop])
                if x is None:
                    return None
                self._max_dc(x, dc[start:stop], out[start:stop])
            return out
        x = self._decode_pq(dq)
        if x is None:
            return None
        # Steps with prefill work: P, Q one by one.
        if n_pf:
            pq = self._pq
            f = (pt.item(0), pairs.item(0), pc.item(0), ps.item(0))
            if n_pf == (f[0] != 0) + (f[1] != 0) + (f[2] != 0) + (f[3] != 0):
                # The simulator's pattern: a mixed step, then decode-only ones.
                x[0, 0], x[1, 0] = pq(f[0], f[1], f[2], f[3], dq.item(0))
            else:
                mask = pt != 0
                mask |= pairs != 0
                mask |= pc != 0
                mask |= ps != 0
                cols = np.flatnonzero(mask)
                if cols.size > MAX_SCALAR_COLUMNS:
                    return None
                for j in cols.tolist():
                    x[0, j], x[1, j] = pq(pt.item(j), pairs.item(j), pc.item(j), ps.item(j),
                                          dq.item(j))
        return self._max_dc(x, dc, None)

    def _decode_pq(self, dq: np.ndarray) -> np.ndarray | None:
        """Every step's P, Q as a decode-only step, from the table indexed by decode_seqs
        (rows P, Q, decode_seqs). A fraction, NaN or negative value does not match its row
        (a negative index wraps around); one past the table raises IndexError."""
        idx = dq.astype(np.intp)
        try:
            x = self._tab.take(idx, axis=1)
        except IndexError:
            top = int(idx.max())
            if top >= MAX_TABLE_SEQS or int(idx.min()) < 0:
                return None
            x = self._table(top + 1).take(idx, axis=1)
        if _count_nonzero(x[2] != dq):
            return None
        return x

    def _max_dc(self, x: np.ndarray, dc: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """max(dc * c_dc + P, dc * m_dc + Q), elementwise (into `out` when given)."""
        y = np.multiply(self._cm, dc)
        np.add(y, x[:2], out=y)
        return np.maximum(y[0], y[1], out=out)

    # --- scalar entry points (the simulator's per-step calls, no arrays) -----------------------
    def decode_rows(self, need: int) -> tuple[list[float], list[float]] | None:
        """P and Q of decode-only steps as Python lists indexed by decode_seqs, at least
        `need` long: the decode-only table's values, which `evaluate` reads for such steps
        (None where `evaluate` would leave the table for the matrix path)."""
        if not self.applicable or need > MAX_TABLE_SEQS:
            return None
        tab = self._table(need)
        return tab[0].tolist(), tab[1].tolist()
