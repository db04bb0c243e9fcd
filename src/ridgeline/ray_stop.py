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

from typing import Any


def stop_ray_now(ray: Any) -> None:
    """`ray.shutdown()`, with the local node's processes killed instead of waited on."""
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


__all__ = ["stop_ray_now"]
