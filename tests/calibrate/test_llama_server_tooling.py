"""The real engine as tooling: random-weight GGUFs and a llama-server that starts and stops.

The server tests skip without a llama-server binary (tools/llama_server/build.sh) unless CI=true,
where .ci/run builds it and a missing binary fails them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.calibrate.llama_server import LlamaServer, stream_completion
from tests.conftest import llama_server_binary, tiny_gguf

gguf = pytest.importorskip("gguf", reason="the real-engine models need the 'gguf' package")

from ridgeline.bench.dataset import WORDS  # noqa: E402
from ridgeline.calibrate.gguf_model import (  # noqa: E402
    EMBED_DIM0,
    MEMBOUND,
    SMALL,
    TINY,
    ensure_model,
    main,
)
from ridgeline.specs.model import load_model  # noqa: E402


def test_gguf_file_matches_config_and_is_rigged() -> None:
    m = ensure_model("tiny")
    reader = gguf.GGUFReader(str(m.gguf_path))
    tensors = {t.name: t for t in reader.tensors}
    n_params = sum(int(t.n_elements) for t in reader.tensors)
    spec = load_model(str(m.config_path))
    assert n_params == spec.total_params == TINY.total_params
    assert spec.model_type == "llama" and spec.num_kv_heads == TINY.num_kv_heads
    head = tensors["output.weight"].data.reshape(TINY.vocab_size, TINY.hidden_size)
    emb = tensors["token_embd.weight"].data.reshape(TINY.vocab_size, TINY.hidden_size)
    tok_types = reader.fields["tokenizer.ggml.token_type"]
    types = [int(tok_types.parts[i][0]) for i in tok_types.data]
    normal = [t == 1 for t in types]
    # Specials (0-2), 256 bytes, ChatML markers: strongly negative on dim 0, nothing else.
    assert all(head[i, 0] < -50 for i in range(len(types)) if not normal[i])
    assert all(head[i, 0] == 0 for i in range(len(types)) if normal[i])
    assert sum(not n for n in normal) == 3 + 256 + 2
    assert (emb[:, 0] == EMBED_DIM0).all()


def test_shapes_have_the_parameter_counts_worked_by_hand() -> None:
    """Per layer: q and o d^2 each, k and v (kv heads x 64) x d each, gate/up/down ff x d
    each, two norms of d; plus embeddings and head v x d each and the final norm d.
    tiny: 2 x 786,944 + 2 x 6,000 x 256 + 256; membound: 8 x 6,292,992 + 2 x 32,000 x 768
    + 768; small: 4 x 3,146,752 + 2 x 1,000 x 512 + 512."""
    assert TINY.total_params == TINY.to_model_spec().total_params == 4_646_144
    assert MEMBOUND.total_params == MEMBOUND.to_model_spec().total_params == 99_496_704
    assert SMALL.total_params == SMALL.to_model_spec().total_params == 13_611_520


def test_a_fresh_cache_writes_the_model_once(tmp_path: Path, monkeypatch, capsys) -> None:
    """Into an empty cache: a folder named by the shape and a 12-hex-digit key, a GGUF whose
    vocabulary has the specials, 256 byte tokens and the ChatML markers first, every piece
    once; a second call takes the files as they are."""
    m = ensure_model("tiny", root=tmp_path)
    name, key = m.directory.name.rsplit("-", 1)
    assert name == "ridgeline-tiny" and len(key) == 12 and int(key, 16) >= 0
    assert sorted(p.name for p in m.directory.iterdir()) == ["config.json", "model.gguf"]
    reader = gguf.GGUFReader(str(m.gguf_path))
    field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode() for i in field.data]
    assert len(tokens) == len(set(tokens)) == TINY.vocab_size == 6000
    assert tokens[:3] == ["<unk>", "<s>", "</s>"] and tokens[3] == "<0x00>"
    assert tokens[258] == "<0xFF>" and tokens[259:261] == ["<|im_start|>", "<|im_end|>"]
    cfg = json.loads(m.config_path.read_text())
    assert (cfg["vocab_size"], cfg["intermediate_size"]) == (6000, 768)
    stamp = m.gguf_path.stat().st_mtime_ns
    again = ensure_model("tiny", root=tmp_path)
    assert again.gguf_path == m.gguf_path and m.gguf_path.stat().st_mtime_ns == stamp
    # `python -m ridgeline.calibrate.gguf_model` with no name writes the tiny model.
    monkeypatch.setenv("RIDGELINE_CACHE", str(tmp_path / "cache"))
    assert main([]) == 0
    out = capsys.readouterr().out.split("\t")
    assert out[0] == "tiny" and out[1].startswith(str(tmp_path / "cache" / "models"))


def test_membound_shape_is_the_issue_model() -> None:
    spec = MEMBOUND.to_model_spec()
    assert 95e6 < spec.total_params < 105e6  # ~100 M parameters
    assert 380e6 < 4 * spec.total_params < 420e6  # ~400 MB in F32


def test_cli_estimate_reads_the_written_config() -> None:
    m = ensure_model("tiny")
    cfg = json.loads(m.config_path.read_text())
    assert cfg["model_type"] == "llama" and cfg["torch_dtype"] == "float32"
    exe = Path(sys.executable).parent / "ridgeline"
    run = subprocess.run([str(exe), "estimate", "--model", str(m.config_path), "--hardware",
                          "h100-sxm", "--weights", "fp32", "--batch", "1", "--prompt", "32",
                          "--output", "8"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes once reaped.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_exact_tokens_and_client_times_match_server_timings(tiny_llama_server) -> None:
    srv = tiny_llama_server
    words = " ".join(WORDS[i % len(WORDS)] for i in range(0, 7 * 24, 7))  # 24 prompt words
    for n in (1, 5, 32):
        r = stream_completion(srv.base_url, words, n, model=srv.alias)
        # max_tokens N -> exactly N one-token chunks, none empty, and the server agrees.
        assert len(r.texts) == n and all(r.texts)
        assert r.usage["completion_tokens"] == n
        assert r.timings["predicted_n"] == n
        # 24 one-token words + BOS.
        assert r.usage["prompt_tokens"] == 25
        assert r.finish_reason == "length"
    # The client's first-to-last-token span covers n-1 of the server's n predicted tokens.
    # The tiny model's steps take ~1 ms, so the server's HTTP thread can send a few tokens
    # in one write (n=5 may arrive in a single read); over 32 tokens that granularity is
    # small: allow 30% + 10 ms. On a loaded 2-core box the client thread can be descheduled
    # for the whole ~20 ms and read all 32 tokens at once (CI saw 0.5 ms against 19.8 ms
    # once): up to three tries, each printed; a client that mis-times always still fails.
    n = 32
    tries = []
    for _ in range(3):
        r = stream_completion(srv.base_url, words, n, model=srv.alias)
        server_s = r.timings["predicted_ms"] / 1e3 * (n - 1) / n
        tries.append((r.decode_s, server_s))
        if r.decode_s == pytest.approx(server_s, rel=0.3, abs=0.010):
            break
    print("client vs server decode span (s):", tries)
    assert r.decode_s == pytest.approx(server_s, rel=0.3, abs=0.010), tries


def test_server_is_stopped_even_when_the_body_raises() -> None:
    srv = LlamaServer(llama_server_binary(), tiny_gguf(), n_parallel=1, ctx_per_slot=256)
    with pytest.raises(RuntimeError, match="boom"), srv:
        pid = srv.proc.pid
        assert srv.health() == 200
        raise RuntimeError("boom")
    assert not _alive(pid)
    assert srv.health() is None


FAKE_SERVER = """#!{python}
import http.server, signal, sys
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
if "--ignore-term" in args:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{{}}")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _fake_binary(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "llama-server"
    exe.write_text(body.format(python=sys.executable))
    exe.chmod(0o755)
    return exe


def test_manager_kills_a_server_that_ignores_sigterm(tmp_path: Path) -> None:
    """No llama.cpp needed: a stand-in that answers /health and ignores SIGTERM is killed."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    srv = LlamaServer(_fake_binary(tmp_path, FAKE_SERVER), model,
                      extra_args=["--ignore-term"], log_path=tmp_path / "log.txt")
    with srv:
        pid = srv.proc.pid
        assert srv.health() == 200 and srv.base_url.startswith("http://127.0.0.1:")
        assert f"-np {srv.n_parallel} -c {srv.n_parallel * srv.ctx_per_slot}" in " ".join(
            srv.command())
        srv_stop = srv.stop
        srv.stop = lambda timeout_s=0.5: srv_stop(timeout_s)  # type: ignore[method-assign]
    assert not _alive(pid)


def test_manager_reports_a_server_that_exits(tmp_path: Path) -> None:
    from ridgeline.errors import RidgelineError

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    exe = _fake_binary(tmp_path, "#!/bin/sh\necho 'error: bad model file' >&2\nexit 3\n")
    with pytest.raises(RidgelineError, match=r"exited with 3: error: bad model file"):
        LlamaServer(exe, model, log_path=tmp_path / "log.txt").start()
    with pytest.raises(RidgelineError, match=r"binary .* not found"):
        LlamaServer(tmp_path / "nope", model).start()


def test_binary_lookup_skips_locally_and_fails_in_ci(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIDGELINE_LLAMA_SERVER", str(tmp_path / "missing"))
    monkeypatch.setenv("RIDGELINE_CACHE", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="build it with tools/llama_server"):
        llama_server_binary()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="llama-server not found"):
        llama_server_binary()


def test_build_script_reuses_a_cached_binary(tmp_path: Path) -> None:
    """No build, no network: a working binary at the cache path is reused and printed."""
    exe = tmp_path / "llama.cpp" / "0.3.36" / "build" / "bin" / "llama-server"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\necho 'version: fake'\n")
    exe.chmod(0o755)
    script = Path(__file__).resolve().parents[2] / "tools" / "llama_server" / "build.sh"
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "RIDGELINE_CACHE": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == str(exe)
    assert "reusing" in run.stderr


def test_without_a_binary_the_launcher_says_how_to_build_one(tmp_path: Path,
                                                              monkeypatch) -> None:
    import ridgeline.calibrate.llama_server as ls
    from ridgeline.errors import RidgelineError

    monkeypatch.setattr(ls, "find_llama_server", lambda: None)
    with pytest.raises(RidgelineError, match=r"llama-server: not found; build it with "
                       r"tools/llama_server/build\.sh"), ls.llama_server(tmp_path / "m.gguf"):
        pass
    # A server never started stops without error (a `finally` may call it).
    LlamaServer(tmp_path / "llama-server", tmp_path / "m.gguf").stop()
