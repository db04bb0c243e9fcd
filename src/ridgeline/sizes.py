"""Will it fit? The memory a run may use, and one refusal, before the work starts.

A run that cannot fit is refused in one line that says what would fit, instead of being
killed by the kernel (or failing with MemoryError) minutes later. The budget is the
smallest of: the machine's memory, this process's address-space limit (`ulimit -v`,
`prlimit --as`) and its cgroup's limit (a container's `--memory`), less what the process
already holds; 80% of it, for what the estimates leave out.

>>> fits = memory_budget_bytes()[0] > 0
>>> fits
True
"""

from __future__ import annotations

import os
import resource

from ridgeline.errors import RidgelineError

SAFETY = 0.8


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_limit_bytes() -> int | None:
    v2 = _read_int("/sys/fs/cgroup/memory.max")
    if v2 is not None:
        return v2
    v1 = _read_int("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    return v1 if v1 is not None and v1 < 1 << 60 else None


def _proc_status_kb(key: str) -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def memory_budget_bytes() -> tuple[int, str]:
    """(bytes a run may still allocate, which limit sets it)."""
    limits: list[tuple[int, str]] = []
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        limits.append((phys - _proc_status_kb("VmRSS") * 1024, "this machine's memory"))
    except (ValueError, OSError, AttributeError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append((soft - _proc_status_kb("VmSize") * 1024,
                       "this process's address-space limit (ulimit -v)"))
    cg = _cgroup_limit_bytes()
    if cg is not None:
        limits.append((cg - _proc_status_kb("VmRSS") * 1024, "this container's memory limit"))
    if not limits:
        return 1 << 62, "no known limit"
    room, what = min(limits)
    return max(int(room * SAFETY), 0), what


def check_fits(need_bytes: float, field: str, what: str, *, per_unit_bytes: float,
               unit: str, advice: str = "") -> None:
    """Refuse `what` (needing `need_bytes`) when it exceeds the budget; the error says how
    many `unit`s would fit at `per_unit_bytes` each, and `advice`."""
    budget, which = memory_budget_bytes()
    if need_bytes <= budget:
        return
    fit = int(budget // per_unit_bytes) if per_unit_bytes > 0 else 0
    raise RidgelineError(
        f"{field}: {what} needs about {need_bytes / 2**30:,.1f} GiB, more than the "
        f"{budget / 2**30:,.1f} GiB {which} leaves; allowed: up to about {fit:,} {unit}"
        + (f"; {advice}" if advice else ""))


__all__ = ["check_fits", "memory_budget_bytes"]
