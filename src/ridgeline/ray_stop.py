"""Stopping a local Ray that ridgeline started, fast, after a Ctrl-C.

`ray.shutdown()` sends each of its processes (raylet, GCS, workers) SIGTERM and waits for
each in turn, and its exit hook sleeps 0.5 s first "so that log messages finish printing":
1.6-2.9 s on a loaded 2-core box, past the 2 s a Ctrl-C may take (docs/cli.md). After a
Ctrl-C the work is abandoned, so nothing needs a graceful exit: the driver still
disconnects cleanly (no "raylet died" noise), then the node's processes get SIGKILL at once
(~0.3 s in all, measured). A cluster ridgeline did not start (`--ray ADDRESS`) is only
disconnected from, as `ray.shutdown()` always does.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (Linux /proc; elsewhere none are found)."""
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children", encoding="ascii") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except (OSError, ValueError):
                continue
            out += kids
            stack += kids
    return out


def stop_ray_now(ray: Any) -> None:
    """`ray.shutdown()`, with the local node's processes killed instead of waited on, then
    any process still left below this one (Ray's workers, children of the killed raylet,
    otherwise linger until they notice) killed too."""
    before = {pid: _identity(pid) for pid in descendants(os.getpid())}
    try:
        node = ray._private.worker._global_node
    except AttributeError:  # a Ray whose internals moved: the ordinary, slower shutdown
        node = None
    if node is not None and hasattr(node, "kill_all_processes"):
        graceful = node.kill_all_processes

        def kill_now(**kwargs: Any) -> Any:
            return graceful(**{**kwargs, "allow_graceful": False})

        node.kill_all_processes = kill_now
    ray.shutdown()
    for pid, ident in before.items():
        # Ray's own processes only (not, e.g., bench's emulator), and the same process
        # (its start time), not a new one that took a freed pid. Only the start time is
        # compared: Ray's agents retitle themselves ("ray::DashboardAgent") a few seconds
        # after they start, so a command line read before that differs from the one now.
        now = _identity(pid)
        if (ident is not None and now is not None and ident[0] == now[0]
                and (b"ray" in ident[1] or b"ray" in now[1])):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _identity(pid: int) -> tuple[str, bytes] | None:
    """(start time, command line) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            start = fh.read().rsplit(")", 1)[1].split()[19]
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return start, fh.read()
    except (OSError, IndexError):
        return None


__all__ = ["descendants", "stop_ray_now"]
