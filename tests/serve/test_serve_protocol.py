"""The emulator speaks OpenAI's API: the official `openai` client parses every response.

The engine here is the stand-in (tests/serve/test_serve_standin.py) with a 1 ms step, so these
tests check the protocol, not the timing (tests/serve/test_serve_timing.py does that).
Expected token counts are written out by hand from cl100k_base.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from ridgeline.perf.step_time import LinearStepTime
from ridgeline.serve.app import EmulatorConfig, create_app
from ridgeline.serve.launcher import running_in_thread
from ridgeline.serve.tokenizer import FILLER_WORDS, filler_text, get_tokenizer
from tests.serve.test_serve_standin import StandInEngine, StandInRequest

MODEL = "emu-model"


@pytest.fixture(scope="module")
def server() -> str:
    engine = StandInEngine(LinearStepTime(base_s=0.001), max_num_seqs=8)
    app = create_app(engine, StandInRequest, EmulatorConfig(
        served_model_name=MODEL, max_model_len=4096, eos_lengths="fixed:3", seed=1))
    with running_in_thread(app) as url:
        yield url


@pytest.fixture()
def client(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0)


def test_tokenizer_is_real_cl100k() -> None:
    tok = get_tokenizer()
    assert tok.exact and tok.name == "cl100k_base"
    # Known cl100k_base counts: "hello world" = [15339, 1917]; "tiktoken is great!" = 6.
    assert tok.count("hello world") == 2
    assert tok.count("tiktoken is great!") == 6
    # Special-token text is counted as ordinary text, never an error.
    assert tok.count("<|endoftext|>") > 1
    assert tok.ids("hello world") == [15339, 1917]


def test_fast_tokenizer_gives_the_packages_ids() -> None:
    """The compiled module called directly (fast start-up) encodes as the package does."""
    import random

    import bpe_openai

    from ridgeline.serve.tokenizer import rust_cl100k

    fast = rust_cl100k()
    assert fast is not None
    ref = bpe_openai.get_encoding("cl100k_base")
    rng = random.Random(1)
    alphabet = "abc xyz\n\t 0123456789 ,.!?'\"éü日本😀<|endoftext|>"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200)))
        assert fast.encode_ordinary(text) == ref.encode_ordinary(text), text
        assert fast.decode(fast.encode_ordinary(text)) == text


def test_filler_retokenizes_to_its_token_count() -> None:
    tok = get_tokenizer()
    for word in FILLER_WORDS:
        assert tok.count(word) == 1
    for n in (1, 7, 20, 333):
        assert tok.count(filler_text(0, n)) == n
        assert tok.count(filler_text(5, n)) == n
    assert filler_text(0, 3) + filler_text(3, 2) == filler_text(0, 5)


def test_models(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_completion_non_streaming(client: openai.OpenAI) -> None:
    r = client.completions.create(model=MODEL, prompt="hello world", max_tokens=5,
                                  extra_body={"ignore_eos": True})
    assert r.object == "text_completion"
    assert r.choices[0].text == " the of and to in"
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (2, 5, 7)


def test_completion_streaming_with_usage(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(
        model=MODEL, prompt="hello world", max_tokens=6, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    token_chunks = [c for c in chunks if c.choices]
    assert len(token_chunks) == 6  # one chunk per decode step at this low load
    text = "".join(c.choices[0].text for c in token_chunks)
    assert get_tokenizer().count(text) == 6
    assert [c.choices[0].finish_reason for c in token_chunks] == [None] * 5 + ["length"]
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage.completion_tokens == 6
    assert usage_chunk.usage.prompt_tokens == 2


def test_chat_non_streaming(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
        extra_body={"ignore_eos": True})
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == " the of and to"
    # 3 (reply priming) + 3 (message framing) + "user" (1) + "hi" (1) = 8
    assert r.usage.prompt_tokens == 8
    assert r.usage.completion_tokens == 4


def test_chat_streaming(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": "be brief"},
                               {"role": "user", "content": "hello world"}],
        max_completion_tokens=3, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c.choices[0].delta.content for c in chunks[1:] if c.choices]
    assert content == [" the", " of", " and"]
    assert chunks[-2].choices[0].finish_reason == "length"
    # 3 + (3 + "system" 1 + "be brief" 2) + (3 + "user" 1 + "hello world" 2) = 15
    assert chunks[-1].usage.prompt_tokens == 15
    assert chunks[-1].usage.completion_tokens == 3


def test_exact_prompt_lengths_from_the_client(client: openai.OpenAI) -> None:
    r = client.completions.create(model=MODEL, prompt=list(range(1000)), max_tokens=1)
    assert r.usage.prompt_tokens == 1000
    r = client.completions.create(model=MODEL, prompt="hello", max_tokens=1,
                                  extra_body={"ridgeline": {"prompt_tokens": 777}})
    assert r.usage.prompt_tokens == 777


def test_eos_min_tokens_and_ignore_eos(client: openai.OpenAI) -> None:
    # The server's EOS length distribution is fixed:3.
    r = client.completions.create(model=MODEL, prompt="x", max_tokens=10)
    assert (r.usage.completion_tokens, r.choices[0].finish_reason) == (3, "stop")
    r = client.completions.create(model=MODEL, prompt="x", max_tokens=10,
                                  extra_body={"min_tokens": 7})
    assert (r.usage.completion_tokens, r.choices[0].finish_reason) == (7, "stop")
    r = client.completions.create(model=MODEL, prompt="x", max_tokens=10,
                                  extra_body={"ignore_eos": True})
    assert (r.usage.completion_tokens, r.choices[0].finish_reason) == (10, "length")
    r = client.completions.create(model=MODEL, prompt="x", max_tokens=2)
    assert (r.usage.completion_tokens, r.choices[0].finish_reason) == (2, "length")


BAD_REQUESTS = [
    (b"{not json", 400, None),
    (b"[1, 2]", 400, None),
    (json.dumps({"prompt": "x", "max_tokens": -1}).encode(), 400, "max_tokens"),
    (json.dumps({"prompt": "x", "max_tokens": 0}).encode(), 400, "max_tokens"),
    (json.dumps({"prompt": "x", "max_tokens": 10**30}).encode(), 400, "max_tokens"),
    (json.dumps({"prompt": "x", "max_tokens": 4096}).encode(), 400, "max_tokens"),
    (json.dumps({"prompt": "x", "max_tokens": "5"}).encode(), 400, "max_tokens"),
    (json.dumps({"prompt": "x", "stream": "yes"}).encode(), 400, "stream"),
    (json.dumps({"prompt": 5}).encode(), 400, "prompt"),
    (json.dumps({"prompt": ""}).encode(), 400, "prompt"),
    (json.dumps({"prompt": ["a", "b"]}).encode(), 400, "prompt"),
    (json.dumps({"prompt": [-1, 2]}).encode(), 400, "prompt"),
    (json.dumps({"max_tokens": 3}).encode(), 400, "prompt"),
    (json.dumps({"prompt": "x", "n": 0}).encode(), 400, "n"),
    (json.dumps({"prompt": "x", "min_tokens": 20, "max_tokens": 3}).encode(), 400,
     "min_tokens"),
    (json.dumps({"prompt": "x", "stream_options": {"include_usage": 3}}).encode(), 400,
     "stream_options"),
    (json.dumps({"prompt": "x", "ridgeline": {"prompt_tokens": 0}}).encode(), 400,
     "ridgeline"),
    (json.dumps({"prompt": "x", "model": "other"}).encode(), 404, "model"),
    (b'{"prompt": "x", "max_tokens": 1e400}', 400, "max_tokens"),
    (("[" * 100000 + "]" * 100000).encode(), 400, None),
]


@pytest.mark.parametrize(("body", "status", "param"), BAD_REQUESTS)
def test_bad_completion_requests_get_openai_errors(server: str, body: bytes, status: int,
                                                   param: str | None) -> None:
    r = httpx.post(server + "/v1/completions", content=body,
                   headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert err["param"] == param


def test_bad_chat_requests(server: str) -> None:
    for body in ({"messages": []}, {"messages": "hi"}, {"messages": [{"content": "x"}]},
                 {"messages": [{"role": "user", "content": 5}]},
                 {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -3}):
        r = httpx.post(server + "/v1/chat/completions", json=body)
        assert r.status_code == 400, (body, r.text)
        assert "error" in r.json()


def test_unknown_fields_are_ignored(server: str) -> None:
    r = httpx.post(server + "/v1/completions",
                   json={"prompt": "x", "max_tokens": 1, "frobnicate": {"a": [1]}})
    assert r.status_code == 200


def test_unknown_route_and_method_are_json_errors(server: str) -> None:
    r = httpx.get(server + "/v1/nothing")
    assert r.status_code == 404 and "error" in r.json()
    r = httpx.get(server + "/v1/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_openai_client_raises_on_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="x", max_tokens=-5)


def test_metrics_count_what_was_served(server: str) -> None:
    def scrape() -> dict[str, float]:
        out = {}
        for line in httpx.get(server + "/metrics").text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    before = scrape()
    for _ in range(3):
        httpx.post(server + "/v1/completions",
                   json={"prompt": "hello world", "max_tokens": 4, "ignore_eos": True})
    after = scrape()
    label = f'{{model_name="{MODEL}",engine="0"}}'

    def delta(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    assert delta(f"vllm:prompt_tokens_total{label}") == 3 * 2
    assert delta(f"vllm:generation_tokens_total{label}") == 3 * 4
    assert delta(f"vllm:time_to_first_token_seconds_count{label}") == 3
    assert delta(f"vllm:inter_token_latency_seconds_count{label}") == 3 * 3
    assert delta(f"vllm:e2e_request_latency_seconds_count{label}") == 3
    success = (f'vllm:request_success_total{{model_name="{MODEL}",engine="0",'
               'finished_reason="length"}')
    assert delta(success) == 3
    assert after[f"vllm:num_requests_running{label}"] == 0
    assert f"vllm:kv_cache_usage_perc{label}" in after


def test_api_key_guards_everything_but_health() -> None:
    engine = StandInEngine(LinearStepTime(base_s=0.001))
    app = create_app(engine, StandInRequest,
                     EmulatorConfig(served_model_name=MODEL, api_key="s3cret"))
    with running_in_thread(app) as url:
        assert httpx.get(url + "/health").status_code == 200
        for path in ("/v1/models", "/metrics", "/ridgeline/stats"):
            assert httpx.get(url + path).status_code == 401
            assert httpx.get(url + path, headers={"authorization": "Bearer nope"}
                             ).status_code == 401
        r = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 1})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        good = openai.OpenAI(base_url=url + "/v1", api_key="s3cret", max_retries=0)
        assert good.completions.create(model=MODEL, prompt="x", max_tokens=1).usage
        bad = openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.completions.create(model=MODEL, prompt="x", max_tokens=1)


def test_continuous_usage_stats(server: str) -> None:
    body = {"prompt": "hello world", "max_tokens": 3, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with httpx.stream("POST", server + "/v1/completions", json=body) as resp:
        events = [json.loads(line[6:]) for line in resp.iter_lines()
                  if line.startswith("data: {")]
    token_events = [e for e in events if e["choices"]]
    assert [e["usage"]["completion_tokens"] for e in token_events] == [1, 2, 3]
    assert all(e["usage"]["prompt_tokens"] == 2 for e in events)
    assert events[-1]["choices"] == [] and events[-1]["usage"]["total_tokens"] == 5
