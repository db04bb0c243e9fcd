"""The peers' documented command lines run unchanged as `ridgeline bench <line>`: each line
of tests/data/peer_command_lines/ (vLLM's `vllm bench serve`, AIPerf's `aiperf profile`,
GuideLLM's `guidellm benchmark`, their sources named in the files) against `ridgeline
serve` on 127.0.0.1, through the installed command. Each must exit 0, send the number of
requests its `expect:` says, and write in the working directory exactly the files it
names (the trace nobody asked for goes to the cache folder)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ridgeline.serve.launcher import EmulatorProcess

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
DATA = Path(__file__).parents[1] / "data" / "peer_command_lines"
SERVED = "meta-llama/Llama-3.1-8B-Instruct"


def _lines() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted(DATA.glob("*.txt")):
        for n, raw in enumerate(path.read_text().splitlines(), 1):
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            args, _, comment = raw.partition("  # ")
            assert "expect:" in comment, f"{path.name}:{n} names no expectation"
            out.append((f"{path.stem}:{n}", args, comment.split("expect:", 1)[1].strip()))
    return out


LINES = _lines()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with EmulatorProcess(command=[RIDGELINE, "serve", "--model", "llama-3.1-8b",
                                  "--served-model-name", SERVED, "--port", "0",
                                  "--speed", "50"]) as emu:
        yield emu.base_url


def _expect(text: str) -> tuple[str, int, list[str], dict[str, str]]:
    """`requests=N` (or `>=N`), `files=GLOB,...`, and `header.a.b=V`: a field of the
    (first) trace header that must read V."""
    fields = dict(part.replace(">=", "=>=", 1).split("=", 1) for part in text.split())
    req = fields["requests"]
    op, n = (">=", int(req[2:])) if req.startswith(">=") else ("==", int(req))
    files = [f for f in fields.get("files", "").split(",") if f]
    header = {k[len("header."):]: v for k, v in fields.items() if k.startswith("header.")}
    return op, n, files, header


def _traces(folders: list[Path]) -> list[list[dict]]:
    out = []
    for folder in folders:
        for trace in sorted(folder.rglob("*.jsonl")):
            if trace.name.endswith(".telemetry.jsonl"):
                continue
            lines = [json.loads(ln) for ln in trace.read_text().splitlines()]
            if lines and lines[0].get("type") == "header":
                out.append(lines)
    return out


def _field(obj: dict, dotted: str) -> str:
    for key in dotted.split("."):
        obj = obj[key]
    return json.dumps(obj, separators=(",", ":")) if not isinstance(obj, str) else obj


def test_every_source_file_has_lines() -> None:
    assert {name.split(":")[0] for name, _, _ in LINES} == {
        "aiperf_profile", "guidellm_benchmark", "vllm_bench_serve"}


@pytest.mark.parametrize(("where", "line", "expect"), LINES, ids=[x[0] for x in LINES])
def test_peer_command_line_runs(server: str, tmp_path: Path, where: str, line: str,
                                expect: str) -> None:
    hostport = server.split("://", 1)[1]
    args = shlex.split(line.replace("localhost:8000", hostport))
    if where.startswith("vllm"):  # vLLM's default host is 127.0.0.1; the port is ours
        args += ["--port", hostport.rsplit(":", 1)[1]]
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    out = subprocess.run([RIDGELINE, "bench", *args, "--no-progress"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    op, n, files, header = _expect(expect)
    traces = _traces([work, cache])
    sent = sum(1 for t in traces for rec in t if rec.get("type") == "request")
    assert sent >= n if op == ">=" else sent == n, (sent, out.stderr[-2000:])
    for dotted, value in header.items():  # the peer's flag reached the run
        assert _field(traces[0][0], dotted) == value, (dotted, traces[0][0])
    written = sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file())
    wanted = sorted({str(p.relative_to(work)) for f in files for p in work.glob(f)})
    assert all(list(work.glob(f)) for f in files), (files, written)
    assert written == wanted, written
