"""A load generator must never measure a prompt cache it did not ask for.

Against the emulator with prefix caching on (its cache keys blocks by content, as vLLM's):
* a sweep's points and repeated runs send prompts no cache has seen: zero hit tokens, and
  each point's TTFT P50 agrees with the same point run alone;
* re-sending the same prompts (`--prompt-nonce` repeats a run's texts) does hit, with
  exactly the number of tokens vLLM's rule gives (every full block but the one holding the
  last prompt token), and TTFT drops: the check above can fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ridgeline.sim.engine import Engine, EngineConfig, EngineRequest
from ridgeline.sim.kv_cache import block_hashes

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
PROMPT_TOKENS = 1024
BLOCK = 16


@pytest.fixture(scope="module")
def emulator() -> Iterator[str]:
    from ridgeline.serve.launcher import EmulatorProcess

    with EmulatorProcess(model="llama-3.1-8b", hardware="h100-sxm",
                         extra_args=["--enable-prefix-caching"]) as emu:
        yield emu.base_url


def prefix_counters(base_url: str) -> tuple[float, float]:
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    vals = {}
    for line in text.splitlines():
        if line.startswith("vllm:prefix_cache_"):
            name = line.split("{")[0]
            vals[name] = float(line.rsplit(" ", 1)[1])
    return vals["vllm:prefix_cache_hits_total"], vals["vllm:prefix_cache_queries_total"]


def bench(base_url: str, tmp: Path, name: str, *args: str) -> list[dict]:
    """Run the installed command; return the analysis JSON of each point."""
    out = subprocess.run(
        [RIDGELINE, "bench", "--base-url", base_url, "--requests", "8",
         "--prompt", f"fixed:{PROMPT_TOKENS}", "--output", "fixed:4", "--seed", "3",
         "--no-server-metrics", "--trace", str(tmp / f"{name}.jsonl"), "--json", *args],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    points = obj.get("points", [obj])
    return [p["analysis"] for p in points]


def ttft_p50(analysis: dict) -> dict:
    return analysis["latency"]["ttft_ms"]["percentiles"]["p50"]


@pytest.mark.slow
def test_sweep_points_and_reruns_never_hit_the_cache(emulator: str, tmp_path: Path) -> None:
    h0, q0 = prefix_counters(emulator)
    sweep = bench(emulator, tmp_path, "sweep", "--concurrency", "1,2")
    again = bench(emulator, tmp_path, "again", "--concurrency", "1,2")  # same seed, new run
    h1, q1 = prefix_counters(emulator)
    assert q1 - q0 >= 4 * 8 * PROMPT_TOKENS  # every request was looked up
    assert h1 - h0 == 0
    # The C=2 point in a sweep (after C=1 ran) and run alone agree: within 25% (a cache hit
    # cuts TTFT by more than 30%, see the next test; 8 requests on a shared 2-core box
    # can put the two points' narrow intervals a few ms apart).
    alone = bench(emulator, tmp_path, "alone", "--concurrency", "2")[0]
    for point in (sweep[1], again[1]):
        p = ttft_p50(point)
        a = ttft_p50(alone)
        overlap = a["ci95_low"] <= p["value"] <= a["ci95_high"] or \
            p["ci95_low"] <= a["value"] <= p["ci95_high"]
        assert overlap or abs(p["value"] - a["value"]) <= 0.25 * a["value"], (p, a)


@pytest.mark.slow
def test_repeating_the_prompts_does_hit_the_cache(emulator: str, tmp_path: Path) -> None:
    first = bench(emulator, tmp_path, "first", "--concurrency", "1", "--prompt-nonce", "77")[0]
    h0, _ = prefix_counters(emulator)
    second = bench(emulator, tmp_path, "second", "--concurrency", "1",
                   "--prompt-nonce", "77")[0]
    h1, _ = prefix_counters(emulator)
    # vLLM's rule: at least one prompt token is computed, so a 1024-token prompt reuses
    # (1024 - 1) // 16 = 63 full blocks.
    assert h1 - h0 == 8 * ((PROMPT_TOKENS - 1) // BLOCK) * BLOCK
    print("TTFT P50 cold / cached:", ttft_p50(first)["value"], ttft_p50(second)["value"])
    assert ttft_p50(second)["value"] < 0.7 * ttft_p50(first)["value"]
    # The emulator says so per request (usage.prompt_tokens_details, as vLLM), and bench
    # warns about a cache the workload did not ask for (footer note).
    for name, cached, warned in (("first", 0, False), ("second", 1008, True)):
        lines = [json.loads(x) for x in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        recs = [x for x in lines if x.get("type") == "request"]
        assert [r["cached_prompt_tokens"] for r in recs] == [cached] * 8
        assert any("prefix cache" in n for n in lines[-1]["notes"]) is warned


def test_block_hashes_chain_and_engine_reuses_exactly_the_common_blocks() -> None:
    a = list(range(100))
    b = list(range(50)) + [999] * 50  # shares blocks 0..2 (tokens 0..47) with a
    ha, hb = block_hashes(a, BLOCK), block_hashes(b, BLOCK)
    assert len(ha) == 6 and ha[:3] == hb[:3] and ha[3] != hb[3]
    # A change in block 0 changes every later key (chained), though later tokens agree.
    hc = block_hashes([7, *a[1:]], BLOCK)
    assert all(x != y for x, y in zip(ha, hc, strict=True))

    from ridgeline.sim.kv_cache import BlockPool

    pool = BlockPool(64, BLOCK, enable_prefix_caching=True)
    pool.allocate(len(ha))
    for k in ha:
        assert pool.register(k)
    pool.release(list(ha), private_blocks=0)
    assert pool.lookup_keys(hb, len(hb)) == list(ha[:3])
    assert pool.lookup_keys(hc, len(hc)) == []


def test_engine_counts_content_hits() -> None:
    from ridgeline.perf.roofline_step import RooflineStepTime

    model = RooflineStepTime.from_names(model="llama-3.1-8b", hardware="h100-sxm")
    eng = Engine(EngineConfig(num_kv_blocks=1000, enable_prefix_caching=True), model)
    ids = list(range(200))
    hashes = block_hashes(ids, BLOCK)
    eng.add_request(EngineRequest("a", 200, 2, block_hashes=hashes))
    while eng.has_unfinished():
        eng.step(0.0)
    eng.add_request(EngineRequest("b", 200, 2, block_hashes=hashes))
    eng.add_request(EngineRequest("c", 200, 2, block_hashes=block_hashes([5, *ids[1:]], BLOCK)))
    while eng.has_unfinished():
        eng.step(0.0)
    st = eng.stats()
    # a: miss; b: 12 full blocks (199 // 16) hit; c: differs in block 0, miss.
    assert st.prefix_cache_hits_tokens_total == 12 * BLOCK
    assert st.prefix_cache_queries_tokens_total == 3 * 200


def test_a_cycled_pool_prompt_is_retagged_and_keeps_its_length() -> None:
    import numpy as np

    from ridgeline.bench.dataset import synthetic_requests
    from ridgeline.bench.load import RequestSource
    from ridgeline.bench.prompts import TAG_WORDS, PromptTagger
    from ridgeline.workload.lengths import parse_lengths

    pool = synthetic_requests(3, parse_lengths("fixed:20"), parse_lengths("fixed:4"),
                              np.random.default_rng(0), prefix_groups=1, prefix_tokens=8)
    src = RequestSource(pool, None, None, PromptTagger(nonce=1, point=0))
    first = [src.get(i) for i in range(3)]
    again = [src.get(i) for i in range(3, 9)]
    assert [r.prompt for r in first] == [r.prompt for r in pool]  # the pool itself as drawn
    prompts = [r.prompt for r in first + again]
    assert len(set(prompts)) == len(prompts)  # every cycle is new text
    for r in again:
        words, base = r.prompt.split(), pool[int(r.id[1:]) % 3].prompt.split()
        assert len(words) == 28 and words[:8] == base[:8]  # shared prefix kept
        assert words[8 + TAG_WORDS:] == base[8 + TAG_WORDS:]  # only the tag changed
    # A worker's share of an unbounded run cycles with its own tags.
    w0, w1 = src.subset(0, 2), src.subset(1, 2)
    a, b = w0.get(4), w1.get(4)
    assert a is not None and b is not None and a.prompt != b.prompt


def test_a_dataset_file_prompt_gets_its_tag_as_a_first_line() -> None:
    """File prompts (ShareGPT, JSONL) are not cut: the tag is a line before the text."""
    from ridgeline.bench.prompts import TAG_WORDS, PromptTagger

    t = PromptTagger(nonce=1, point=0, mode="prefix")
    tagged = t.apply("What is a roofline?", 0, "r3")
    tag_line, text = tagged.split("\n")
    assert text == "What is a roofline?" and tag_line.split() == t.words("r3")
    assert len(t.words("r3")) == TAG_WORDS and t.words("r3") != t.words("r4")
