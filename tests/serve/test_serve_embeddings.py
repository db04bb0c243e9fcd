"""`POST /v1/embeddings` on the installed `ridgeline serve`: OpenAI's shapes, the vectors'
dimension, and the timing of a prefill-only request."""

from __future__ import annotations

import base64
import math
import statistics
import struct
import time

import httpx
import pytest

from tests.serve_emulator_helpers import emulator, one_error_line, serve_refuses


def test_shapes_dimensions_and_errors() -> None:
    with emulator("--time-to-first-token", "0", "--inter-token-latency", "0") as emu:
        url = emu.base_url + "/v1/embeddings"
        r = httpx.post(url, json={"input": ["a cat", "a dog", "a cat"]})
        assert r.status_code == 200
        body = r.json()
        assert body["object"] == "list" and body["model"] == "llama-3.1-8b"
        vecs = [d["embedding"] for d in body["data"]]
        assert [d["index"] for d in body["data"]] == [0, 1, 2]
        assert all(len(v) == 4096 for v in vecs)       # Llama 3.1 8B's hidden size
        assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-9) for v in vecs)
        assert vecs[0] == vecs[2] and vecs[0] != vecs[1]
        # token-id inputs: usage counts them exactly
        r = httpx.post(url, json={"input": [[1, 2, 3], [4, 5]], "dimensions": 16})
        assert r.json()["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
        floats = r.json()["data"][0]["embedding"]
        assert len(floats) == 16
        r = httpx.post(url, json={"input": [[1, 2, 3]], "dimensions": 16,
                                  "encoding_format": "base64"})
        raw = base64.b64decode(r.json()["data"][0]["embedding"])
        assert struct.unpack("<16f", raw) == pytest.approx(floats, rel=1e-6)
        for bad, status in (({"input": []}, 400), ({"input": "x", "dimensions": 0}, 400),
                            ({"input": "x", "encoding_format": "hex"}, 400),
                            ({"input": "x", "model": "nope"}, 404), ({}, 400)):
            assert httpx.post(url, json=bad).status_code == status


def test_fixed_latency_embedding_takes_the_ttft_formula() -> None:
    """TTFT 100 ms + 0.1 ms x 1000 prompt tokens = 200 ms."""
    with emulator("--time-to-first-token", "100", "--prefill-time-per-token", "0.1",
                  "--embedding-dim", "8") as emu, httpx.Client(timeout=30) as client:
        assert client.get(emu.base_url + "/v1/models").status_code == 200
        took = []
        for _ in range(3):
            t0 = time.perf_counter()
            r = client.post(emu.base_url + "/v1/embeddings", json={"input": [7] * 1000})
            took.append((time.perf_counter() - t0) * 1000)
            assert len(r.json()["data"][0]["embedding"]) == 8
        assert statistics.median(took) == pytest.approx(200.0, rel=0.05)


def test_engine_timed_embedding_costs_a_prefill_not_a_generation() -> None:
    """On the engine model: an 8000-token embedding takes what the same prompt's first
    token takes (its prefill, within 15%), not what generating 100 more tokens takes."""
    with emulator() as emu, httpx.Client(timeout=60) as client:
        base = emu.base_url
        prompt = list(range(1, 8001))
        assert client.get(base + "/v1/models").status_code == 200

        def timed(path: str, body: dict) -> float:
            t0 = time.perf_counter()
            assert client.post(base + path, json=body).status_code == 200
            return time.perf_counter() - t0

        # distinct prompts each time (no prefix-cache hits), the two kinds interleaved so a
        # change in the machine's load touches both alike
        embs, firsts = [], []
        for i in range(3):
            embs.append(timed("/v1/embeddings", {"input": [[i, *prompt]]}))
            firsts.append(timed("/v1/completions", {"prompt": [100 + i, *prompt],
                                                    "max_tokens": 1}))
        emb, first = statistics.median(embs), statistics.median(firsts)
        long = timed("/v1/completions", {"prompt": [200, *prompt], "max_tokens": 100,
                                         "ignore_eos": True})
    assert emb == pytest.approx(first, rel=0.15)
    # 100 decode steps each read the 16 GB of bf16 weights at <= 3.35 TB/s (H100 SXM):
    # >= 4.8 ms a step, so the 100-token request takes >= 0.48 s more than its prefill.
    assert long - emb > 0.45


def test_bad_embedding_dim_is_an_error() -> None:
    assert one_error_line(serve_refuses("--embedding-dim", "0"), "--embedding-dim")
