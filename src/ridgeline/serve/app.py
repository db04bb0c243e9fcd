"""The emulator's HTTP app: OpenAI's API in front of the engine driven on the wall clock.

Endpoints: `GET /health` (no auth), `GET /version`, `POST /tokenize`, `POST /detokenize`
(vLLM's shapes), `GET /v1/models`, `POST /v1/completions`,
`POST /v1/chat/completions` (streaming SSE ending in `data: [DONE]`, or one JSON body),
`POST /v1/embeddings` (prefill-only timing), `POST /v1/load_lora_adapter` and
`/v1/unload_lora_adapter` (vLLM's),
`GET /metrics` (Prometheus text, vLLM's names), `GET /ridgeline/stats` (the emulator's own
timing error and counters, JSON; `?reset=1` clears the lag samples).

How a request is timed: its prompt length (see tokenizer.py) and its output length (below)
enter the engine's waiting queue; the driver steps the engine, each step lasting the perf
model's time for that step's batch, and the tokens a step produced are written to the
client at the step's end plus the engine's per-request cost (docs/serve.md, as `simulate`
adds it). So a client sees TTFT = queueing + prefill step(s) + that cost, and one chunk per
decode step.

Output length: `max_tokens` (completions default 16, OpenAI's; chat default: the rest of
the context, as vLLM, unless `default_max_tokens` caps it). The emulated model never stops
early unless the server was given an EOS length distribution (`eos_lengths`, e.g.
"lognormal:mean=200,sigma=0.8"): then a request without `ignore_eos` stops at a length
drawn from it (seeded by the request's `seed`, else by the server's), clipped to
[max(min_tokens, 1), max_tokens], with finish_reason "stop"; a request that reaches
max_tokens ends with "length".

Beside this engine timing: `--mode echo|random` changes the text (modes.py), fixed
latencies take requests off the engine (fixed_timing.py), failures are injected on purpose
(failures.py), tools and response_format get schema-valid output (structured.py), LoRA
adapters are extra model names with a step cost (lora.py), and /v1/embeddings is timed as
prefill-only requests (embeddings.py).

Exact prompt lengths from the client: a completions `prompt` given as a list of token ids
counts as its length (ids are not checked against any vocabulary), and the extension field
`"ridgeline": {"prompt_tokens": N}` (openai client: `extra_body=`) overrides any count.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import math
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ridgeline import __version__
from ridgeline.serve.driver import DriverCallbacks, EngineDriver, EngineLike, Overloaded, Stream
from ridgeline.serve.embeddings import embeddings_body, parse_embedding_request
from ridgeline.serve.failures import (
    FAILURE_TYPES,
    STATUS_FAILURES,
    FailingWriter,
    FailureInjector,
    cut_after_chunks,
    failure_response,
)
from ridgeline.serve.fixed_timing import (
    FixedTiming,
    FixedTimingResponse,
    InFlight,
    remote_prefill,
)
from ridgeline.serve.lora import LORA_STEP_COST, LoraError, LoraRegistry, LoraTimedEngine
from ridgeline.serve.modes import echo_pieces, random_pieces, request_text
from ridgeline.serve.prometheus import (
    CONTENT_TYPE,
    ITERATION_TOKEN_BUCKETS,
    ITL_BUCKETS_S,
    LAG_BUCKETS_S,
    N_BUCKETS,
    REQUEST_LATENCY_BUCKETS_S,
    TTFT_BUCKETS_S,
    Registry,
    token_count_buckets,
)
from ridgeline.serve.prompt_blocks import prompt_block_hashes
from ridgeline.serve.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    RequestError,
    error_body,
    parse_request,
)
from ridgeline.serve.responses import (
    RAW_SEND,
    ChunkRenderer,
    EngineResponse,
    Plan,
    SSEWriter,
)
from ridgeline.serve.structured import (
    SchemaError,
    ToolCall,
    json_content,
    json_pieces,
    tool_call,
)
from ridgeline.serve.tokenizer import filler_stop, get_tokenizer, model_tokenizer
from ridgeline.workload.lengths import parse_lengths

MAX_N = 128          # choices per request (`n`)
MAX_LOGPROBS = 20    # vLLM's default --max-logprobs is 20


@dataclass
class EmulatorConfig:
    """Server behaviour that is not the engine's (the engine has its own EngineConfig)."""

    served_model_name: str = "ridgeline-emulated"
    speed: float = 1.0
    max_model_len: int = 131072
    max_waiting: int = 1024                # waiting-queue bound; past it: overload_status
    overload_status: int = 429             # 429 (default) or 503
    retry_after_s: float = 1.0
    api_key: str | None = None
    default_max_tokens: int | None = None  # chat without max_tokens; None: rest of context
    eos_lengths: str | None = None         # length spec (workload syntax) of natural stops
    seed: int = 0
    max_body_bytes: int = 32 * 1024 * 1024
    shutdown_grace_s: float = 10.0         # in-flight streams get this long to finish
    header_timeout_s: float = 30.0         # a request's headers must arrive within this
    description: dict[str, Any] = field(default_factory=dict)  # shown in /ridgeline/stats
    tokenizer: str | None = None           # `serve --tokenizer`: count like the real model
    mode: str = "timing"                   # output text: timing (filler), echo, random
    fixed_timing: FixedTiming | None = None  # fixed per-request latencies (fixed_timing.py)
    failure_injection_rate_pct: float = 0.0  # percent of requests failed on purpose
    failure_types: tuple[str, ...] = FAILURE_TYPES
    failure_stall_s: float = 30.0          # silence of a `stall` failure
    lora_modules: tuple[tuple[str, str], ...] = ()   # adapters loaded at start (name, path)
    max_loras: int = 1                     # adapters loaded at once (lora.py)
    embedding_dim: int = 4096              # /v1/embeddings vector length (the model's width)


class _Metrics:
    """vLLM-named Prometheus metrics, fed by the driver's callbacks (emulated seconds)."""

    def __init__(self, model_name: str, driver_ref: list[EngineDriver],
                 cache_info: dict[str, str] | None = None,
                 max_model_len: int = 131072) -> None:
        # vLLM V1 labels every engine metric with model_name and engine (the data-parallel
        # engine index; one engine here).
        self.registry = reg = Registry({"model_name": model_name, "engine": "0"})

        def stat(name: str) -> Any:
            def read() -> float:
                if not driver_ref:
                    return 0.0
                if name == "num_waiting":  # the engine's queue and the held arrivals
                    return float(driver_ref[0].num_waiting())
                stats = driver_ref[0].engine.stats()
                value = stats.get(name, 0.0) if isinstance(stats, dict) else getattr(
                    stats, name, 0.0)
                return float(value)
            return read

        reg.gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                  stat("num_running"))
        reg.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                  stat("num_waiting"))
        reg.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                  stat("kv_usage_fraction"))
        if cache_info is not None:
            reg.info("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                     cache_info)
        reg.counter_fn("vllm:prefix_cache_queries_total", "Prefix-cache queries, in tokens "
                       "(prompt tokens of requests looked up).",
                       stat("prefix_cache_queries_tokens_total"))
        reg.counter_fn("vllm:prefix_cache_hits_total", "Prefix-cache hits, in tokens.",
                       stat("prefix_cache_hits_tokens_total"))
        self.preemptions = reg.counter("vllm:num_preemptions_total",
                                       "Cumulative number of preemptions from the engine.")
        self.prompt_tokens = reg.counter("vllm:prompt_tokens_total",
                                         "Number of prefill tokens processed.")
        self.generation_tokens = reg.counter("vllm:generation_tokens_total",
                                             "Number of generation tokens processed.")
        self.success = reg.counter("vllm:request_success_total",
                                   "Count of successfully processed requests.")
        self.ttft = reg.histogram("vllm:time_to_first_token_seconds",
                                  "Histogram of time to first token in seconds.", TTFT_BUCKETS_S)
        self.itl = reg.histogram("vllm:inter_token_latency_seconds",
                                 "Histogram of inter-token latency in seconds.", ITL_BUCKETS_S)
        self.request_tpot = reg.histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS_S)
        self.e2e = reg.histogram("vllm:e2e_request_latency_seconds",
                                 "Histogram of e2e request latency in seconds.",
                                 REQUEST_LATENCY_BUCKETS_S)
        self.queue = reg.histogram("vllm:request_queue_time_seconds",
                                   "Histogram of time spent in WAITING phase for request.",
                                   REQUEST_LATENCY_BUCKETS_S)
        self.inference = reg.histogram("vllm:request_inference_time_seconds",
                                       "Histogram of time spent in RUNNING phase for request.",
                                       REQUEST_LATENCY_BUCKETS_S)
        self.prefill = reg.histogram("vllm:request_prefill_time_seconds",
                                     "Histogram of time spent in PREFILL phase for request.",
                                     REQUEST_LATENCY_BUCKETS_S)
        self.decode = reg.histogram("vllm:request_decode_time_seconds",
                                    "Histogram of time spent in DECODE phase for request.",
                                    REQUEST_LATENCY_BUCKETS_S)
        self.iteration_tokens = reg.histogram(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
            ITERATION_TOKEN_BUCKETS)
        tokens = token_count_buckets(max_model_len)   # as vLLM: up to the context length
        self.prompt_hist = reg.histogram("vllm:request_prompt_tokens",
                                         "Number of prefill tokens processed.", tokens)
        self.gen_hist = reg.histogram("vllm:request_generation_tokens",
                                      "Number of generation tokens processed.", tokens)
        self.max_gen_hist = reg.histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.", tokens)
        self.max_tokens_hist = reg.histogram(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
            tokens)
        self.n_hist = reg.histogram("vllm:request_params_n",
                                    "Histogram of the n request parameter.", N_BUCKETS)
        self.rejected = reg.counter("ridgeline:requests_rejected_total",
                                    "Requests refused before entering the engine.")
        self.aborted = reg.counter("ridgeline:requests_aborted_total",
                                   "Requests whose client went away, freed at once.")
        self.injected = reg.counter("ridgeline:injected_failures_total",
                                    "Failures injected on purpose (--failure-injection-rate), "
                                    "by type.")
        self.lag = reg.histogram("ridgeline:emulator_lag_seconds",
                                 "Emitted minus intended wall time of each output chunk.",
                                 LAG_BUCKETS_S)

    def callbacks(self) -> DriverCallbacks:
        def on_first_token(stream: Stream, at_s: float) -> None:
            self.ttft.observe(at_s - stream.arrival_emu_s)
            self.prompt_tokens.inc(stream.prompt_tokens)

        def on_tokens(stream: Stream, n: int, at_s: float, prev_s: float | None) -> None:
            self.generation_tokens.inc(n)
            if prev_s is not None:
                self.itl.observe(at_s - prev_s)

        def on_finish(stream: Stream, at_s: float) -> None:
            # vLLM's request phases (v1/metrics/stats.py): queued -> scheduled -> first
            # token -> last token.
            arrival = stream.arrival_emu_s
            # Behind the wall clock the driver runs steps that started (even ended) before
            # a request arrived; keep arrival <= scheduled <= first <= last so the phases
            # are >= 0 and add up to the e2e latency, as vLLM's do.
            last = max(at_s, arrival)
            first = min(max(stream.first_token_emu_s if stream.first_token_emu_s is not None
                            else at_s, arrival), last)
            scheduled = min(max(stream.scheduled_emu_s if stream.scheduled_emu_s is not None
                                else arrival, arrival), first)
            n = stream.tokens_emitted
            self.e2e.observe(at_s - arrival)
            self.queue.observe(scheduled - arrival)
            self.prefill.observe(first - scheduled)
            self.decode.observe(last - first)
            self.inference.observe(last - scheduled)
            self.request_tpot.observe((last - first) / (n - 1) if n > 1 else 0.0)
            self.prompt_hist.observe(stream.prompt_tokens)
            self.gen_hist.observe(n)
            self.max_gen_hist.observe(n)
            self.max_tokens_hist.observe(stream.max_tokens)
            self.n_hist.observe(1)
            self.success.inc(finished_reason=stream.finish_reason or "stop")

        def on_step(result: Any) -> None:
            preempted = getattr(result, "preempted", None)
            if preempted:
                self.preemptions.inc(len(preempted))
            emitted = getattr(result, "emitted", None) or ()
            work = int(getattr(result, "prefill_tokens", 0)) + sum(n for _, n in emitted)
            if work:
                self.iteration_tokens.observe(work)

        return DriverCallbacks(on_first_token=on_first_token, on_tokens=on_tokens,
                               on_finish=on_finish, on_step=on_step,
                               on_lags=self.lag.observe_many)


def _cache_info(engine_cfg: Any) -> dict[str, str] | None:
    """vLLM's `vllm:cache_config_info` labels (CacheConfig.metrics_info: its fields as
    strings) for the fields the emulated engine has."""
    if engine_cfg is None:
        return None
    fields = {"block_size": "block_size_tokens", "enable_prefix_caching":
              "enable_prefix_caching", "num_gpu_blocks": "num_kv_blocks",
              # Not CacheConfig's in vLLM; stated so `calibrate engine` can read the
              # emulated scheduler (it defaults them when a real server omits them).
              "max_num_seqs": "max_num_seqs",
              "max_num_batched_tokens": "max_num_batched_tokens"}
    info = {k: str(getattr(engine_cfg, v)) for k, v in fields.items()
            if hasattr(engine_cfg, v)}
    info["engine"] = "0"
    return info


def _request_error(exc: RequestError) -> JSONResponse:
    """A refused request's response; after a 408 or 413 the rest of the body was not read,
    so the connection is closed (it would be read as the next request)."""
    headers = {"Connection": "close"} if exc.status in (408, 413) else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


def _json_error(status: int, message: str, *, err_type: str = "invalid_request_error",
                param: str | None = None, code: str | None = None,
                headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, err_type=err_type, param=param, code=code),
                        status_code=status, headers=headers)


class _EmulatorState:
    """Everything the handlers share: config, driver, metrics, tokenizer, RNG."""

    def __init__(self, engine: EngineLike, make_request: Any, config: EmulatorConfig) -> None:
        self.lora = LoraRegistry(config.served_model_name, config.max_loras,
                                 config.lora_modules)
        self.engine = LoraTimedEngine(engine, self.lora)   # adapters' requests cost more
        self.make_request = make_request
        self.config = config
        self.tokenizer = (model_tokenizer(config.tokenizer) if config.tokenizer
                          else get_tokenizer())
        # Prefix caching on: prompts are keyed by content (serve/prompt_blocks.py).
        engine_cfg = getattr(engine, "config", None)
        self.block_size_tokens = (int(engine_cfg.block_size_tokens) if getattr(
            engine_cfg, "enable_prefix_caching", False) else 0)
        self._driver_ref: list[EngineDriver] = []
        self.metrics = _Metrics(config.served_model_name, self._driver_ref,
                                _cache_info(engine_cfg), config.max_model_len)
        self.driver: EngineDriver | None = None
        self.rng = np.random.default_rng(config.seed)
        self.eos = None
        if config.eos_lengths:
            self.eos = parse_lengths(config.eos_lengths, "--eos-lengths")
        self.created_unix_s = int(time.time())
        # Own streams, so a failure or latency draw does not shift the output-length draws.
        self.failures = (FailureInjector(config.failure_injection_rate_pct,
                                         config.failure_types, config.failure_stall_s,
                                         np.random.default_rng([config.seed, 1]))
                         if config.failure_injection_rate_pct > 0 else None)
        self.timing_rng = np.random.default_rng([config.seed, 2])
        self.fixed_in_flight = InFlight()
        self.fixed_callbacks = self.metrics.callbacks()   # metrics of fixed-latency requests

    def start(self) -> None:
        if self.driver is None:
            self.driver = EngineDriver(
                self.engine, self.make_request, speed=self.config.speed,
                max_waiting=self.config.max_waiting, retry_after_s=self.config.retry_after_s,
                callbacks=self.metrics.callbacks())
            self._driver_ref.append(self.driver)
            self.driver.start()

    # -- request planning ---------------------------------------------------------------
    def plan(self, req: CompletionRequest | ChatCompletionRequest) -> Plan:
        cfg = self.config
        if not self.lora.known(req.model):
            raise RequestError(f"The model `{req.model}` does not exist.", status=404,
                               param="model", err_type="NotFoundError",
                               code="model_not_found")
        n_choices = 1 if req.n is None else req.n
        if not 1 <= n_choices <= MAX_N:
            raise RequestError(f"n: must be in [1, {MAX_N}], got {n_choices}", param="n")
        extra = req.model_extra or {}
        logprobs = None
        if isinstance(req, CompletionRequest) and req.logprobs is not None:
            logprobs = req.logprobs
        elif isinstance(req, ChatCompletionRequest) and req.logprobs:
            logprobs = req.top_logprobs or 0
        if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
            raise RequestError(f"logprobs: must be in [0, {MAX_LOGPROBS}], got {logprobs}",
                               param="top_logprobs" if isinstance(
                                   req, ChatCompletionRequest) else "logprobs")
        if isinstance(req, CompletionRequest):
            if req.echo:
                raise RequestError("echo: not supported by the emulator", param="echo")
            prompt_tokens = self._count_completion_prompt(req.prompt)
            max_tokens = req.max_tokens
            max_field = "max_tokens"
            if max_tokens is None:
                max_tokens = max(1, cfg.max_model_len - prompt_tokens)
        else:
            messages = [m.model_dump(exclude_none=True) for m in req.messages]
            prompt_tokens = self.tokenizer.count_chat(messages, cfg.max_model_len)
            max_field = ("max_completion_tokens" if req.max_completion_tokens is not None
                         else "max_tokens")
            max_tokens = (req.max_completion_tokens if req.max_completion_tokens is not None
                          else req.max_tokens)
            if max_tokens is None:  # vLLM: the rest of the context
                max_tokens = max(1, cfg.max_model_len - prompt_tokens)
                if cfg.default_max_tokens is not None:
                    max_tokens = min(cfg.default_max_tokens, max_tokens)
        if req.ridgeline is not None and req.ridgeline.prompt_tokens is not None:
            prompt_tokens = req.ridgeline.prompt_tokens
        if prompt_tokens < 1:
            raise RequestError("prompt: must contain at least one token", param="prompt")
        if prompt_tokens >= cfg.max_model_len:
            # vLLM's words for a prompt that leaves no room for even one output token (the
            # count may have stopped early past the limit, hence "at least").
            raise RequestError(
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, "
                f"your request has at least {prompt_tokens} input tokens. Please reduce the "
                "length of the input messages.", param="prompt")
        if max_tokens < 1:
            raise RequestError(f"{max_field}: must be at least 1, got {max_tokens}",
                               param=max_field)
        if prompt_tokens + max_tokens > cfg.max_model_len:
            raise RequestError(
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, "
                f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                f"prompt, {max_tokens} in the completion). Please reduce the length of the "
                "prompt or completion.", param=max_field)
        min_tokens = req.min_tokens or 0
        if min_tokens < 0 or min_tokens > max_tokens:
            raise RequestError(
                f"min_tokens: must be in [0, {max_field}={max_tokens}], got {min_tokens}",
                param="min_tokens")
        output_tokens = max_tokens
        if self.eos is not None and not req.ignore_eos:
            rng = self.rng if req.seed is None else np.random.default_rng(req.seed)
            natural = int(self.eos.sample(1, rng)[0])
            output_tokens = int(min(max(natural, min_tokens, 1), max_tokens))
        stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        text_limit = None
        pieces = None
        if cfg.mode == "echo":   # the request's text, cut to max_tokens (serve/modes.py)
            pieces = echo_pieces(request_text(req))[:max_tokens] or ("",)
            output_tokens = len(pieces)
        elif cfg.mode == "random":
            rng = self.rng if req.seed is None else np.random.default_rng(req.seed)
            pieces = random_pieces(output_tokens, rng)
        elif stops:
            hit = filler_stop(output_tokens, stops)
            if hit is not None:
                output_tokens, text_limit = hit
        call, pieces, truncated = self._structured(req, extra, max_tokens, pieces)
        if pieces is not None:
            output_tokens = len(pieces)
        opts = req.stream_options
        hashes = None
        if self.block_size_tokens:
            hashes = prompt_block_hashes(self.tokenizer, req, self.block_size_tokens,
                                         output_tokens)
        return Plan(prompt_tokens=int(prompt_tokens), output_tokens=output_tokens,
                    max_tokens=int(max_tokens),
                    include_usage=bool(opts and opts.include_usage),
                    continuous_usage=bool(opts and opts.continuous_usage_stats),
                    block_hashes=hashes, text_limit_chars=text_limit, n=n_choices,
                    logprobs=logprobs, pieces=pieces, tool_call=call,
                    truncated=truncated)

    def _structured(self, req: CompletionRequest | ChatCompletionRequest,
                    extra: dict[str, Any], max_tokens: int, pieces: tuple[str, ...] | None
                    ) -> tuple[ToolCall | None, tuple[str, ...] | None, bool]:
        """A synthetic tool call, or JSON content, when the request asks for one
        (serve/structured.py): (the call, the output pieces cut to max_tokens, cut?)."""
        seed = req.seed if req.seed is not None else int(self.rng.integers(2**31))
        param = "tools"
        try:
            call = None
            if isinstance(req, ChatCompletionRequest):
                call = tool_call(extra.get("tools"), extra.get("tool_choice", "auto"), seed)
            param = "response_format"
            text = call.arguments if call is not None else json_content(
                extra.get("response_format"), seed)
        except SchemaError as exc:
            raise RequestError(f"{param}: {exc}", param=param) from None
        except (ValueError, TypeError, OverflowError):   # a keyword of the wrong type
            raise RequestError(f"{param}: the schema has a keyword of the wrong type",
                               param=param) from None
        if text is None:
            return None, pieces, False
        full = json_pieces(text)
        return call, full[:max_tokens], len(full) > max_tokens

    def _count_completion_prompt(self, prompt: Any) -> int:
        if isinstance(prompt, str):
            return self.tokenizer.count(prompt, self.config.max_model_len)
        if not prompt:
            return 0
        if isinstance(prompt[0], int):
            if any(t < 0 for t in prompt):
                raise RequestError("prompt: token ids must be >= 0", param="prompt")
            return len(prompt)
        if len(prompt) != 1:
            raise RequestError("prompt: one prompt per request (batched prompts are not "
                               "supported)", param="prompt")
        return self._count_completion_prompt(prompt[0])


# --------------------------------------------------------------------------------------
# Handlers


def _state(request: Request) -> _EmulatorState:
    """The emulator's shared state, kept on the app (`create_app` puts it there)."""
    state: _EmulatorState = request.app.state.emulator
    return state


def _authorized(state: _EmulatorState, request: Request) -> bool:
    api_key = state.config.api_key
    if api_key is None:
        return True
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode(), api_key.encode())


def _unauthorized() -> JSONResponse:
    return _json_error(401, "Incorrect API key provided.", code="invalid_api_key",
                       headers={"www-authenticate": "Bearer"})


async def _health(request: Request) -> Response:
    driver = _state(request).driver
    if driver is not None and driver.draining:
        return Response(status_code=503)
    return Response(status_code=200)


async def _models(request: Request) -> Response:
    state = _state(request)
    if not _authorized(state, request):
        return _unauthorized()
    config = state.config
    return JSONResponse({"object": "list", "data": [{
        "id": config.served_model_name, "object": "model",
        "created": state.created_unix_s, "owned_by": "ridgeline",
        "root": config.served_model_name, "parent": None,
        "max_model_len": config.max_model_len,
    }, *state.lora.model_cards(state.created_unix_s, config.max_model_len)]})


async def _lora_adapter(request: Request, load: bool) -> Response:
    """vLLM's POST /v1/load_lora_adapter {"lora_name", "lora_path"} and
    /v1/unload_lora_adapter {"lora_name"}: 200 with a plain-text "Success: ..." line."""
    state = _state(request)
    if not _authorized(state, request):
        return _unauthorized()
    try:
        body = await _read_json(state, request)
        if not isinstance(body, dict):
            raise RequestError("request body must be a JSON object")
        name, path = body.get("lora_name"), body.get("lora_path")
        if load and not (isinstance(name, str) and name and isinstance(path, str) and path):
            raise RequestError("Both 'lora_name' and 'lora_path' must be provided.",
                               param="lora_name")
        if not load and not (isinstance(name, str) and name):
            raise RequestError("'lora_name' needs to be provided to unload a LoRA adapter.",
                               param="lora_name")
    except RequestError as exc:
        return _request_error(exc)
    try:
        if load:
            state.lora.load(str(name), str(path))
        else:
            state.lora.unload(str(name))
    except LoraError as exc:
        return _json_error(exc.status, exc.message,
                           err_type="NotFoundError" if exc.status == 404 else "BadRequestError")
    verb = "added" if load else "removed"
    return Response(f"Success: LoRA adapter '{name}' {verb} successfully.",
                    media_type="text/plain")


async def _load_lora(request: Request) -> Response:
    return await _lora_adapter(request, load=True)


async def _unload_lora(request: Request) -> Response:
    return await _lora_adapter(request, load=False)


async def _version(request: Request) -> Response:
    return JSONResponse({"version": __version__})  # vLLM's shape: {"version": str}


async def _tokenize(request: Request) -> Response:
    """vLLM's POST /tokenize: {"prompt"} or {"messages"} -> {"count", "max_model_len",
    "tokens", "token_strs"}. Chat messages are tokenized as their contents joined by
    newlines (the emulator has no chat template unless --tokenizer gives one)."""
    state = _state(request)
    if not _authorized(state, request):
        return _unauthorized()
    try:
        body = await _read_json(state, request)
        if not isinstance(body, dict):
            raise RequestError("request body must be a JSON object")
        if isinstance(body.get("prompt"), str):
            text = body["prompt"]
        elif isinstance(body.get("messages"), list):
            text = "\n".join(str(m.get("content") or "") for m in body["messages"]
                             if isinstance(m, dict))
        else:
            raise RequestError("prompt: a string (or messages: a list) is required",
                               param="prompt")
        ids = state.tokenizer.ids(text)
        if ids is None:
            raise RequestError("/tokenize: the emulator counts tokens approximately "
                               "(no tokenizer); start it with --tokenizer", status=501)
        strs = None
        if body.get("return_token_strs"):
            strs = [state.tokenizer.decode([t]) or "" for t in ids]
    except RequestError as exc:
        return _request_error(exc)
    return JSONResponse({"count": len(ids), "max_model_len": state.config.max_model_len,
                         "tokens": ids, "token_strs": strs})


async def _detokenize(request: Request) -> Response:
    """vLLM's POST /detokenize: {"tokens"} -> {"prompt"}."""
    state = _state(request)
    if not _authorized(state, request):
        return _unauthorized()
    try:
        body = await _read_json(state, request)
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens):
            raise RequestError("tokens: a list of token ids (integers >= 0) is required",
                               param="tokens")
        try:
            text = state.tokenizer.decode(tokens)
        except (ValueError, KeyError, OverflowError, TypeError):
            raise RequestError("tokens: an id outside the vocabulary",
                               param="tokens") from None
        if text is None:
            raise RequestError("/detokenize: the emulator counts tokens approximately "
                               "(no tokenizer); start it with --tokenizer", status=501)
    except RequestError as exc:
        return _request_error(exc)
    return JSONResponse({"prompt": text})


async def _metrics(request: Request) -> Response:
    state = _state(request)
    if not _authorized(state, request):
        return _unauthorized()
    return Response(state.metrics.registry.render(), media_type=CONTENT_TYPE)


async def _stats(request: Request) -> Response:
    state = _state(request)
    if not _authorized(state, request):
        return _unauthorized()
    config = state.config
    driver = state.driver
    out: dict[str, Any] = {"speed": config.speed, "tokenizer": state.tokenizer.name,
                           "tokenizer_exact": state.tokenizer.exact,
                           **config.description, "mode": config.mode,
                           "fixed_timing": (dataclasses.asdict(config.fixed_timing)
                                            if config.fixed_timing is not None else None),
                           "failure_injection_rate_pct": config.failure_injection_rate_pct,
                           "lora_adapters": dict(state.lora.adapters)}
    if driver is not None:
        lag = driver.lag.samples()
        out.update({
            "steps": driver.steps, "tokens_delivered": driver.tokens_delivered,
            "open_streams": len(driver.streams), "emulated_now_s": driver.now_emu_s(),
            "lag_samples": int(lag.size),
            "lag_p50_s": float(np.percentile(lag, 50)) if lag.size else None,
            "lag_p99_s": float(np.percentile(lag, 99)) if lag.size else None,
            "lag_max_s": float(lag.max()) if lag.size else None,
        })
        over = driver.overhead
        if over is not None:   # the per-request engine cost as it stands now
            out["request_overhead"] = {
                "request_overhead_s": over.request_overhead_s,
                "request_overhead_steps": over.request_overhead_steps,
                "token_gaps": over.gaps,
                "mean_decode_step_s": over.mean_step_s() if over.gaps else None,
                "shift_s": over.shift_s() if over.gaps else None,
                "pending_steps": driver.pending_deliveries}
        if request.query_params.get("reset") in ("1", "true"):
            driver.lag.reset()
    return JSONResponse(out)


async def _read_json(state: _EmulatorState, request: Request) -> Any:
    config = state.config
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > config.max_body_bytes:
        raise RequestError(f"request body larger than {config.max_body_bytes} bytes",
                           status=413)
    parts: list[bytes] = []

    async def receive() -> None:
        size = 0
        async for chunk in request.stream():
            parts.append(chunk)
            size += len(chunk)
            if size > config.max_body_bytes:
                raise RequestError(f"request body larger than {config.max_body_bytes} "
                                   "bytes", status=413)

    try:  # a body announced and never sent held the connection forever
        await asyncio.wait_for(receive(), config.header_timeout_s)
    except asyncio.TimeoutError:
        raise RequestError(f"request body did not arrive within "
                           f"{config.header_timeout_s:g} s", status=408) from None
    try:
        return json.loads(b"".join(parts))
    except (ValueError, RecursionError):
        raise RequestError("request body is not valid JSON") from None


async def _generate(request: Request, chat: bool) -> Any:
    arrival_s = time.perf_counter()   # fixed latencies count from here
    state = _state(request)
    if not _authorized(state, request):
        return _unauthorized()
    config = state.config
    try:
        payload = await _read_json(state, request)
        req = parse_request("chat" if chat else "completion", payload)
        plan = state.plan(req)
    except RequestError as exc:
        return _request_error(exc)
    failure = state.failures.draw(bool(req.stream)) if state.failures is not None else None
    if failure is not None:
        state.metrics.injected.inc(type=failure)
        if failure in STATUS_FAILURES:
            return failure_response(failure, config.served_model_name)
    # stream_cut / stall: (chunks still delivered, seconds of silence before the end)
    cut = ((cut_after_chunks(plan.output_tokens),
            config.failure_stall_s if failure == "stall" else None)
           if failure is not None else None)
    request_id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    adapter = state.lora.is_adapter(req.model)
    renderer = ChunkRenderer(chat, request_id, req.model if adapter and req.model
                             else config.served_model_name, int(time.time()), plan)
    if config.fixed_timing is not None:
        if state.driver is not None and state.driver.draining:   # shutting down
            return _json_error(503, "Server is shutting down; retry later.",
                               err_type="service_unavailable", code="service_unavailable")
        # an adapter's request: every latency x (1 + LORA_STEP_COST), as a slower clock
        speed = config.speed / (1.0 + LORA_STEP_COST) if adapter else config.speed
        return FixedTimingResponse(renderer, bool(req.stream), config.fixed_timing,
                                   state.timing_rng, state.fixed_callbacks, speed,
                                   remote=remote_prefill(req.model_extra), cut=cut,
                                   on_abort=state.metrics.aborted.inc, arrival_s=arrival_s,
                                   in_flight=state.fixed_in_flight)
    driver = state.driver
    if driver is None:  # lifespan not run (a bare ASGI test client): start lazily
        state.start()
        driver = state.driver
    assert driver is not None
    writer: SSEWriter | None = None
    if req.stream and cut is not None:
        writer = FailingWriter(renderer, lambda: driver.abort(request_id), *cut)
    elif req.stream:
        writer = SSEWriter(renderer, lambda: driver.abort(request_id))
    try:
        extra = {"block_hashes": plan.block_hashes} if plan.block_hashes else {}
        stream = driver.submit(plan.prompt_tokens, plan.output_tokens, plan.max_tokens,
                               request_id=request_id, writer=writer, **extra)
        renderer.engine_request = stream.engine_request
        if adapter:
            state.lora.in_flight.add(request_id)
    except Overloaded as exc:
        state.metrics.rejected.inc(reason="overload" if not driver.draining
                                   else "shutdown")
        status = 503 if driver.draining else config.overload_status
        return _json_error(
            status, f"Server overloaded: {exc.reason}; retry later.",
            err_type="rate_limit_exceeded" if status == 429 else "service_unavailable",
            code="rate_limit_exceeded" if status == 429 else "service_unavailable",
            headers={"retry-after": str(max(1, math.ceil(exc.retry_after_s)))})

    def abort() -> None:
        state.metrics.aborted.inc()
        driver.abort(request_id)

    return EngineResponse(stream, renderer, writer, abort)


async def _embeddings(request: Request) -> Response:
    """OpenAI's POST /v1/embeddings, each input timed as a prefill-only request
    (serve/embeddings.py)."""
    arrival_s = time.perf_counter()
    state = _state(request)
    if not _authorized(state, request):
        return _unauthorized()
    config = state.config
    try:
        ereq = parse_embedding_request(await _read_json(state, request))
        if not state.lora.known(ereq.model):
            raise RequestError(f"The model `{ereq.model}` does not exist.", status=404,
                               param="model", err_type="NotFoundError",
                               code="model_not_found")
        counts = [len(x) if isinstance(x, list) else
                  state.tokenizer.count(x, config.max_model_len) for x in ereq.inputs]
        for c in counts:
            if c < 1:
                raise RequestError("input: must contain at least one token", param="input")
            if c >= config.max_model_len:   # room for its one engine position
                raise RequestError(
                    f"This model's maximum context length is {config.max_model_len} tokens. "
                    f"However, you requested {c} tokens in the input for embedding "
                    "generation. Please reduce the length of the input.", param="input")
    except RequestError as exc:
        return _request_error(exc)
    failure = state.failures.draw(False) if state.failures is not None else None
    if failure is not None:
        state.metrics.injected.inc(type=failure)
        return failure_response(failure, config.served_model_name)
    adapter = state.lora.is_adapter(ereq.model)
    speed = config.speed / (1.0 + LORA_STEP_COST) if adapter else config.speed
    fixed = config.fixed_timing
    if fixed is not None:   # the TTFT formula, the longest input's
        delay_s = max(fixed.first_token_s(c, state.timing_rng) for c in counts) / speed
        await asyncio.sleep(max(0.0, arrival_s + delay_s - time.perf_counter()))
    else:
        if state.driver is None:
            state.start()
        driver = state.driver
        assert driver is not None
        streams: list[Stream] = []
        try:
            for c in counts:   # a prompt and one output position: its prefill
                rid = "embd-" + uuid.uuid4().hex
                streams.append(driver.submit(c, 1, 1, request_id=rid))
                if adapter:
                    state.lora.in_flight.add(rid)
        except Overloaded as exc:
            for s in streams:
                driver.abort(s.request_id)
            state.metrics.rejected.inc(reason="overload")
            return _json_error(config.overload_status, f"Server overloaded: {exc.reason}; "
                               "retry later.", err_type="rate_limit_exceeded",
                               headers={"retry-after": str(max(1, math.ceil(
                                   exc.retry_after_s)))})
        try:
            for s in streams:
                await s.done.wait()
        finally:
            for s in streams:
                if not s.finished:
                    driver.abort(s.request_id)
        failed = next((s for s in streams if s.error is not None), None)
        if failed is not None:
            return _json_error(failed.error_status, str(failed.error),
                               err_type="server_error")
    model = ereq.model if adapter and ereq.model else config.served_model_name
    return JSONResponse(embeddings_body(ereq, model, ereq.dimensions or config.embedding_dim,
                                        counts))


async def _completions(request: Request) -> Any:
    return await _generate(request, chat=False)


async def _chat_completions(request: Request) -> Any:
    return await _generate(request, chat=True)


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    return _json_error(status, f"{detail}: {request.method} {request.url.path}",
                       err_type="invalid_request_error" if status < 500 else "server_error")


async def _server_error(request: Request, exc: Exception) -> Response:
    return _json_error(500, f"internal error: {type(exc).__name__}",
                       err_type="server_error")


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    state: _EmulatorState = app.state.emulator
    state.start()
    yield
    driver = state.driver
    if driver is not None:
        await driver.drain(state.config.shutdown_grace_s)
        await driver.stop()


ROUTES = [
    Route("/health", _health, methods=["GET"]),
    Route("/version", _version, methods=["GET"]),
    Route("/tokenize", _tokenize, methods=["POST"]),
    Route("/detokenize", _detokenize, methods=["POST"]),
    Route("/v1/models", _models, methods=["GET"]),
    Route("/v1/load_lora_adapter", _load_lora, methods=["POST"]),
    Route("/v1/unload_lora_adapter", _unload_lora, methods=["POST"]),
    Route("/metrics", _metrics, methods=["GET"]),
    Route("/ridgeline/stats", _stats, methods=["GET"]),
    Route("/v1/completions", _completions, methods=["POST"]),
    Route("/v1/chat/completions", _chat_completions, methods=["POST"]),
    Route("/v1/embeddings", _embeddings, methods=["POST"]),
]


def create_app(engine: EngineLike, make_request: Any, config: EmulatorConfig) -> Starlette:
    """The emulator as an ASGI app. `make_request(**fields)` builds an EngineRequest.

    The handlers are module functions that find the shared state on the app
    (`app.state.emulator`). The engine loop starts with the app's lifespan (uvicorn runs it);
    on shutdown new requests get 503, streams in flight get `config.shutdown_grace_s` to
    finish and are then ended with an error event and `[DONE]`.
    """
    app = _EmulatorApp(
        routes=ROUTES,
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
        lifespan=_lifespan,
    )
    app.state.emulator = _EmulatorState(engine, make_request, config)
    return app


class _EmulatorApp(Starlette):
    """Starlette that also hands the server's own `send` to the streaming responses.

    Starlette's middleware wraps `send` in a coroutine per layer; `SSEWriter` uses the
    server's unwrapped `send` (scope key `RAW_SEND`) to write a token chunk with one
    transport write, which is most of the cost of the fan-out at a step boundary.
    """

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope[RAW_SEND] = send
        await super().__call__(scope, receive, send)


__all__ = ["EmulatorConfig", "create_app"]
