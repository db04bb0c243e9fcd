"""Shared fixtures. The real-engine ones start llama.cpp's llama-server (project tooling)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ridgeline.calibrate.llama_server import ENV_BINARY, LlamaServer, find_llama_server


def llama_server_binary() -> Path:
    """The llama-server binary; skip when absent locally, fail when absent in CI (CI=true),
    where .ci/run builds it and exports RIDGELINE_LLAMA_SERVER."""
    exe = find_llama_server()
    if exe is not None:
        return exe
    reason = (f"llama-server not found (${ENV_BINARY} unset or not executable); build it with "
              f"tools/llama_server/build.sh and export {ENV_BINARY}=<printed path>")
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(reason)
    pytest.skip(reason)


def tiny_gguf() -> Path:
    pytest.importorskip("gguf", reason="the real-engine models need the 'gguf' package")
    from ridgeline.calibrate.gguf_model import ensure_model

    return ensure_model("tiny").gguf_path


@pytest.fixture(scope="module")
def tiny_llama_server() -> Iterator[LlamaServer]:
    """llama-server with the tiny random model, 4 slots, 1 thread (ggml's spinning barriers
    stall with 2 threads on 2 busy cores); stopped after the module."""
    exe = llama_server_binary()
    with LlamaServer(exe, tiny_gguf(), n_parallel=4, threads=1, ctx_per_slot=512) as srv:
        yield srv
