"""The emulator as vLLM users know it: vLLM's /metrics names (parsed with prometheus_client,
every panel of vLLM's Grafana dashboard resolves), /tokenize, /detokenize, /version, and
vLLM's defaults (prefix caching on, chat output up to the rest of the context). Runs the
`ridgeline serve` console script with the real engine."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ridgeline.serve.launcher import EmulatorProcess

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
MODEL = "llama-3.1-8b"
DATA = Path(__file__).parents[1] / "data"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    # the project's launcher: a free port without a race, health-checked, killed on stop
    with EmulatorProcess(command=[RIDGELINE, "serve", "--model", MODEL, "--port", "0",
                                  "--max-model-len", "4096", "--max-num-seqs", "2"]) as emu:
        yield emu.base_url


def _samples(url: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _value(samples: dict[str, list], name: str) -> float:
    return sum(s.value for s in samples[name])


def test_dashboard_metrics_parse_and_resolve(server: str) -> None:
    def send(i: int) -> httpx.Response:
        return httpx.post(server + "/v1/completions", timeout=60, json={
            "model": MODEL, "prompt": f"request {i} " + "the " * 40, "max_tokens": 6,
            "ignore_eos": True})

    # at once, 2 slots (--max-num-seqs 2): the later two wait (queue time > 0)
    with ThreadPoolExecutor(4) as pool:
        for r in pool.map(send, range(4)):
            assert r.status_code == 200, r.text
    samples = _samples(server)
    wanted = [line.split()[0] for line in (DATA / "vllm_grafana_metrics.txt").read_text()
              .splitlines() if line.startswith("vllm:")]
    missing = [n for n in wanted if n not in samples]
    assert not missing, missing
    for gone in ("vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds_count"):
        assert gone not in samples
    for name in ("vllm:request_inference_time_seconds_count", "vllm:iteration_tokens_total_count",
                 "vllm:cache_config_info"):
        assert name in samples, name
    # vLLM V1's labels on every engine series; cache_config_info carries the config
    assert all(s.labels.get("engine") == "0" and s.labels.get("model_name") == MODEL
               for s in samples["vllm:num_requests_running"])
    info = samples["vllm:cache_config_info"][0]
    assert info.value == 1 and info.labels["enable_prefix_caching"] == "True"
    assert info.labels["block_size"] == "16"
    # The phases add up per request: queue + prefill + decode = e2e, prefill + decode =
    # inference (vLLM's definitions); one per-request TPOT sample per request.
    n = _value(samples, "vllm:e2e_request_latency_seconds_count")
    assert n == 4
    e2e = _value(samples, "vllm:e2e_request_latency_seconds_sum")
    queue = _value(samples, "vllm:request_queue_time_seconds_sum")
    prefill = _value(samples, "vllm:request_prefill_time_seconds_sum")
    decode = _value(samples, "vllm:request_decode_time_seconds_sum")
    inference = _value(samples, "vllm:request_inference_time_seconds_sum")
    assert queue + prefill + decode == pytest.approx(e2e, rel=1e-9)
    assert prefill + decode == pytest.approx(inference, rel=1e-9)
    assert prefill > 0 and decode > 0 and queue > 0
    assert _value(samples, "vllm:request_time_per_output_token_seconds_count") == 4
    # per-request TPOT = decode time / (6 - 1) tokens, summed over the 4 requests
    assert _value(samples, "vllm:request_time_per_output_token_seconds_sum") == \
        pytest.approx(decode / 5, rel=1e-9)
    assert _value(samples, "vllm:request_max_num_generation_tokens_sum") == 4 * 6
    # every step's tokens: the 4 prompts' tokens plus 4 x 6 generated
    prompt_tokens = _value(samples, "vllm:prompt_tokens_total")
    assert _value(samples, "vllm:iteration_tokens_total_sum") == prompt_tokens + 24


def test_token_histograms_have_vllms_buckets_for_the_context(server: str) -> None:
    r = httpx.post(server + "/v1/completions", timeout=60, json={
        "model": MODEL, "prompt": "buckets " * 30, "max_tokens": 7, "ignore_eos": True})
    assert r.status_code == 200, r.text
    samples = _samples(server)
    # vLLM's build_1_2_5_buckets(max_model_len): 1, 2, 5, ... <= 4096 (--max-model-len)
    want = ["1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0", "500.0",
            "1000.0", "2000.0", "+Inf"]
    for name in ("vllm:request_prompt_tokens", "vllm:request_generation_tokens",
                 "vllm:request_params_max_tokens"):
        assert [s.labels["le"] for s in samples[name + "_bucket"]] == want, name


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": "end of stream", "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "end of stream"}]}),
])
def test_stream_ends_with_done(server: str, path: str, body: dict) -> None:
    # vLLM ends every stream with the sentinel line; OpenAI clients stop reading on it
    with httpx.stream("POST", server + path, timeout=60, json={
            "model": MODEL, "max_tokens": 3, "stream": True, **body}) as r:
        raw = b"".join(r.iter_bytes())
    assert r.status_code == 200
    assert raw.endswith(b"data: [DONE]\n\n") and raw.count(b"[DONE]") == 1


def test_histogram_observations_by_hand() -> None:
    from ridgeline.serve.prometheus import Histogram

    h = Histogram("x", "help", {}, (1.0, 5.0))
    h.observe_many(np.array([0.5, 1.0, 3.0, 7.0, 9.0]))
    h.observe(2.0)
    # le=1: 0.5 and 1.0 (Prometheus buckets are upper-inclusive); le=5: + 2.0, 3.0; +Inf: all
    assert h.render()[2:] == ['x_bucket{le="1.0"} 2', 'x_bucket{le="5.0"} 4',
                              'x_bucket{le="+Inf"} 6', "x_sum 22.5", "x_count 6"]
    # the text format's last line ends with a newline, as prometheus_client writes it
    from ridgeline.serve.prometheus import Registry

    reg = Registry()
    reg.counter("c_total", "help").inc(2)
    assert reg.render() == "# HELP c_total help\n# TYPE c_total counter\nc_total 2.0\n"


def test_repeated_prompt_is_cached_by_default(server: str) -> None:
    body = {"model": MODEL, "prompt": "a repeated prompt " + "of many words " * 30,
            "max_tokens": 2}
    usages = [httpx.post(server + "/v1/completions", json=body, timeout=60).json()["usage"]
              for _ in range(2)]
    assert usages[0]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = usages[1]["prompt_tokens_details"]["cached_tokens"]
    # every full 16-token block but the one holding the last prompt token (vLLM keeps one)
    assert cached == (usages[1]["prompt_tokens"] - 1) // 16 * 16 > 0


def test_chat_default_max_tokens_is_rest_of_context(server: str) -> None:
    r = httpx.post(server + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 5000})
    # the error names the limit: 4096 context, so no max given -> 4096 - prompt tokens
    assert r.status_code == 400
    tok = httpx.post(server + "/tokenize", json={"model": MODEL, "prompt": "hello world"})
    assert tok.json() == {"count": 2, "max_model_len": 4096, "tokens": [15339, 1917],
                          "token_strs": None}


def test_tokenize_detokenize_version(server: str) -> None:
    r = httpx.post(server + "/tokenize", json={"prompt": "tiktoken is great!",
                                               "return_token_strs": True})
    body = r.json()
    assert body["count"] == 6 and "".join(body["token_strs"]) == "tiktoken is great!"
    back = httpx.post(server + "/detokenize", json={"model": MODEL, "tokens": body["tokens"]})
    assert back.json() == {"prompt": "tiktoken is great!"}
    bad = httpx.post(server + "/detokenize", json={"tokens": ["x"]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    version = httpx.get(server + "/version").json()
    from ridgeline import __version__

    assert version == {"version": __version__}


def _sse(server: str, path: str, body: dict) -> list[dict]:
    import json

    out = []
    with httpx.stream("POST", server + path, json={**body, "stream": True}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


def test_stop_string_cuts_the_output(server: str) -> None:
    # the filler stream is " the of and to in a is that for it ..." (tokenizer.py)
    body = {"model": MODEL, "prompt": "x", "max_tokens": 12, "stop": [" to in", " it"],
            "ignore_eos": True}
    whole = httpx.post(server + "/v1/completions", json=body, timeout=60).json()
    choice = whole["choices"][0]
    assert choice["text"] == " the of and" and choice["finish_reason"] == "stop"
    # generation ran until " to in" was complete: 5 tokens (" the"," of"," and"," to"," in")
    assert whole["usage"]["completion_tokens"] == 5
    chunks = _sse(server, "/v1/completions", {**body, "stream_options":
                                               {"include_usage": True}})
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert text == " the of and"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    # no stop string in the output: runs to max_tokens
    plain = httpx.post(server + "/v1/completions", timeout=60, json={
        **body, "stop": "zebra"}).json()
    assert plain["choices"][0]["finish_reason"] == "length"
    assert plain["usage"]["completion_tokens"] == 12


def test_n_choices_and_logprobs(server: str) -> None:
    r = httpx.post(server + "/v1/completions", timeout=60, json={
        "model": MODEL, "prompt": "x", "max_tokens": 3, "n": 2, "logprobs": 2}).json()
    assert [c["index"] for c in r["choices"]] == [0, 1]
    assert r["usage"]["completion_tokens"] == 6
    lp = r["choices"][0]["logprobs"]
    assert lp["tokens"] == [" the", " of", " and"] and lp["text_offset"] == [0, 4, 7]
    assert all(len(top) == 2 and top[t] == lp["token_logprobs"][0]
               for top, t in zip(lp["top_logprobs"], lp["tokens"], strict=True))
    chat = httpx.post(server + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        "logprobs": True, "top_logprobs": 3}).json()
    content = chat["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == [" the", " of"]
    assert all(len(c["top_logprobs"]) == 3 and c["top_logprobs"][0]["token"] == c["token"]
               and c["bytes"] == list(c["token"].encode()) for c in content)
    chunks = _sse(server, "/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        "n": 3})
    indices = {c["choices"][0]["index"] for c in chunks if c["choices"]}
    assert indices == {0, 1, 2}


@pytest.mark.parametrize(("extra", "param"), [
    ({"tools": [{"type": "function", "function": {}}]}, "tools"),   # no function name
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"n": 0}, "n"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
])
def test_unsupported_fields_are_400s(server: str, extra: dict, param: str) -> None:
    r = httpx.post(server + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        **extra})
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_chat_template_of_the_served_tokenizer(tmp_path: Path) -> None:
    """`serve --tokenizer DIR` with a tokenizer_config.json chat template: a chat prompt is
    counted as the template renders it (checked against the rendering written by hand)."""
    pytest.importorskip("jinja2")
    tokenizers = pytest.importorskip("tokenizers")
    import json

    from ridgeline.perf.step_time import LinearStepTime
    from ridgeline.serve.app import EmulatorConfig, create_app
    from ridgeline.serve.launcher import running_in_thread
    from tests.serve.test_serve_standin import StandInEngine, StandInRequest

    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    specials = ["[UNK]", "<s>", "<|user|>", "<|assistant|>"]
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["hello there general kenobi"] * 50, trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    template = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n"
                "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": template, "bos_token": "<s>"}))
    by_hand = "<s><|user|>\nhello there\n<|assistant|>\n"
    want = len(tok.encode(by_hand, add_special_tokens=False).ids)
    assert want < len(tok.encode(by_hand.replace("<|", "< |"), add_special_tokens=False).ids)
    engine = StandInEngine(LinearStepTime(base_s=0.001), max_num_seqs=8)
    app = create_app(engine, StandInRequest, EmulatorConfig(
        served_model_name=MODEL, max_model_len=4096, tokenizer=str(tmp_path)))
    with running_in_thread(app) as url:
        r = httpx.post(url + "/v1/chat/completions", timeout=30, json={
            "model": MODEL, "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 2}).json()
    assert r["usage"]["prompt_tokens"] == want
