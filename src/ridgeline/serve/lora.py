"""LoRA adapters: `serve --lora-modules name=path ... --max-loras N`, vLLM's
`POST /v1/load_lora_adapter` / `POST /v1/unload_lora_adapter`, and their timing cost.

An adapter is a served model name: `/v1/models` lists it (`root` its path, `parent` the
base model), a request naming it is served with the adapter's cost, a request naming
neither the base nor a loaded adapter is a 404 (vLLM's). `--max-loras` bounds the adapters
loaded at once here (vLLM's bounds the adapters in one batch and keeps more in a CPU cache;
the emulator has no cache to model, so loading past the bound is refused with a 400).

Timing cost (an assumption, not a measurement): LoRA's extra matmuls (vLLM's punica
shrink/expand kernels) run over the whole batch whenever it holds an adapter's request, so
an engine step that holds one takes `1 + LORA_STEP_COST` times the base model's step time;
with fixed latencies (fixed_timing.py) an adapter request's TTFT and inter-token times are
multiplied by the same factor.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

LORA_STEP_COST = 0.10  # the extra fraction of a step's time when it holds an adapter


def parse_lora_module(text: str) -> tuple[str, str]:
    """vLLM's `--lora-modules` entry: `name=path` or JSON {"name": ..., "path": ...}.
    Raises ValueError."""
    text = text.strip()
    if text.startswith("{"):
        try:
            spec = json.loads(text)
        except ValueError:
            raise ValueError("not valid JSON") from None
        name, path = spec.get("name"), spec.get("path")
    else:
        name, sep, path = text.partition("=")
        if not sep:
            raise ValueError("expected name=path")
    if not isinstance(name, str) or not name.strip() or not isinstance(path, str) \
            or not path.strip():
        raise ValueError("an adapter needs a name and a path")
    return name.strip(), path.strip()


def expand_lora_argv(args: list[str]) -> list[str]:
    """vLLM's `--lora-modules a=/x b=/y` (several words after one flag) as typer reads it,
    `--lora-modules a=/x --lora-modules b=/y`. Only words that look like an adapter
    (`name=path` or JSON) are taken, so a model name after them stays the model.

    >>> expand_lora_argv(["--lora-modules", "a=/x", "b=/y", "llama"])
    ['--lora-modules', 'a=/x', '--lora-modules', 'b=/y', 'llama']
    """
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--":
            return out + args[i:]
        if args[i] == "--lora-modules" and i + 1 < len(args):
            out += args[i:i + 2]
            i += 2
            while i < len(args) and not args[i].startswith("-") and (
                    "=" in args[i] or args[i].lstrip().startswith("{")):
                out += ["--lora-modules", args[i]]
                i += 1
            continue
        out.append(args[i])
        i += 1
    return out


class LoraError(Exception):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class LoraRegistry:
    """The adapters loaded now (name -> path), and the ids of their requests in flight."""

    def __init__(self, base_model: str, max_loras: int,
                 modules: tuple[tuple[str, str], ...] = ()) -> None:
        self.base_model = base_model
        self.max_loras = max_loras
        self.adapters: dict[str, str] = {}
        self.in_flight: set[str] = set()   # request ids served with an adapter
        for name, path in modules:
            self.load(name, path)

    def load(self, name: str, path: str) -> None:
        if name == self.base_model or name in self.adapters:
            raise LoraError(f"The lora adapter '{name}' has already been loaded.", 400)
        if len(self.adapters) >= self.max_loras:
            raise LoraError(f"Cannot load the lora adapter '{name}': {self.max_loras} "
                            "adapters are loaded (--max-loras).", 400)
        self.adapters[name] = path

    def unload(self, name: str) -> None:
        if name not in self.adapters:
            raise LoraError(f"The lora adapter '{name}' cannot be found.", 404)
        del self.adapters[name]

    def is_adapter(self, model: str | None) -> bool:
        return model is not None and model in self.adapters

    def known(self, model: str | None) -> bool:
        return model is None or model == self.base_model or model in self.adapters

    def model_cards(self, created: int, max_model_len: int) -> list[dict[str, Any]]:
        return [{"id": name, "object": "model", "created": created, "owned_by": "ridgeline",
                 "root": path, "parent": self.base_model, "max_model_len": max_model_len}
                for name, path in self.adapters.items()]


class LoraTimedEngine:
    """The engine with the adapters' cost: a step that holds an adapter's request (running
    after the step, or emitting in it) lasts `1 + LORA_STEP_COST` times longer. Everything
    else is the wrapped engine's."""

    def __init__(self, engine: Any, registry: LoraRegistry) -> None:
        self._engine = engine
        self._registry = registry

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def step(self, now_s: float) -> Any:
        result = self._engine.step(now_s)
        ids = self._registry.in_flight
        if not ids:
            return result
        holds = any(rid in ids for rid, _ in (getattr(result, "emitted", None) or ()))
        if not holds:
            running = getattr(getattr(self._engine, "scheduler", None), "running", ())
            holds = any(getattr(seq, "request_id", None) in ids for seq in running)
        for rid in [*(getattr(result, "finished", None) or ()),
                    *(getattr(result, "rejected", None) or ())]:
            ids.discard(rid)
        if holds:
            result = dataclasses.replace(
                result, duration_s=float(result.duration_s) * (1.0 + LORA_STEP_COST))
        return result

    def abort_request(self, request_id: str) -> Any:
        self._registry.in_flight.discard(request_id)
        return self._engine.abort_request(request_id)


__all__ = [
    "LORA_STEP_COST",
    "LoraError",
    "LoraRegistry",
    "LoraTimedEngine",
    "expand_lora_argv",
    "parse_lora_module",
]
