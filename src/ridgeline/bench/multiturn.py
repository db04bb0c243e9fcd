"""Multi-turn conversations: each next turn carries the whole history, after a think time.

`--multi-turn T [--think-time SPEC]`: `--concurrency C` users each hold one conversation at a
time; a conversation is T turns. Turn 1 sends a new user message of `--prompt` tokens; turn k
sends turn k-1's prompt, the server's reply to it and a new message, so a server with a prefix
cache reuses exactly that conversation's history (prefix reuse on purpose: the trace header
says `prompt_reuse: "multi-turn"`). With `--api chat` the history is a messages list (user /
assistant / user ...); with completions it is the concatenated text.

Message and output lengths are drawn per request from `--prompt`/`--output` (the lengths
stream of the seed); texts are unique per conversation (the point's text stream). Each trace
record carries `conversation` and `turn` (1-based).

The load is a closed loop: a user starts its next turn `think` seconds after the reply ended,
and its next conversation when one ends. Only a single client process (no --workers).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ridgeline.bench.client import (
    BenchRequest,
    EndpointConfig,
    InFlight,
    make_session,
    request_body,
    stream_request,
)
from ridgeline.errors import RidgelineError
from ridgeline.workload.think import ThinkTime, parse_think_time


@dataclass(frozen=True)
class MultiTurnSpec:
    turns: int
    think: ThinkTime

    def describe(self) -> dict[str, Any]:
        return {"turns": self.turns, "think_time": self.think.spec}


def parse_multi_turn(turns: int, think_time: str) -> MultiTurnSpec:
    if turns < 2:
        raise RidgelineError(f"--multi-turn: got {turns}; allowed: >= 2 turns per "
                             "conversation")
    return MultiTurnSpec(turns, parse_think_time(think_time))


@dataclass
class Turn:
    """One planned turn: the new user message and the output length asked for."""

    conversation: int
    turn: int
    message: str
    message_tokens: int
    max_tokens: int


def plan_conversations(n_requests: int, turns: int, message_lens: np.ndarray,
                       output_lens: np.ndarray, texts: Callable[[int], str]) -> list[list[Turn]]:
    """ceil(n / turns) conversations of `turns` turns (the last one may be shorter)."""
    convs: list[list[Turn]] = []
    for i in range(n_requests):
        c, k = divmod(i, turns)
        if k == 0:
            convs.append([])
        n = int(message_lens[i])
        convs[c].append(Turn(c, k + 1, texts(n), n, int(output_lens[i])))
    return convs


def _body(ep: EndpointConfig, history: list[dict[str, str]], req: BenchRequest) -> bytes:
    if ep.api != "chat":
        return request_body(ep, req)
    body = json.loads(request_body(ep, req))
    body["messages"] = history
    return json.dumps(body, separators=(",", ":")).encode()


async def run_conversations(ep: EndpointConfig, convs: list[list[Turn]], concurrency: int,
                            think: ThinkTime, think_rng: np.random.Generator, t0_perf: float,
                            emit: Callable[[dict], None], stop: asyncio.Event,
                            tokenizer: Any = None, stats: Any = None) -> None:
    """Run every conversation, `concurrency` at a time; each record goes to `emit`."""
    queue = list(range(len(convs)))
    queue.reverse()
    perf = time.perf_counter

    async def user(session: Any) -> None:
        while queue and not stop.is_set():
            c = queue.pop()
            text_prompt = ""
            history: list[dict[str, str]] = []
            for t in convs[c]:
                if stop.is_set():
                    return
                text_prompt = (text_prompt + " " + t.message) if text_prompt else t.message
                history.append({"role": "user", "content": t.message})
                req = BenchRequest(f"c{c}-t{t.turn}", text_prompt, t.max_tokens, None)
                state = InFlight(req, tokenizer)
                state.ready_s = perf() - t0_perf
                if stats is not None:
                    stats.sent += 1
                    stats.in_flight += 1
                await stream_request(session, ep, state, t0_perf, _body(ep, history, req))
                rec = state.record()
                rec["conversation"] = c
                rec["turn"] = t.turn
                if stats is not None:
                    stats.in_flight -= 1
                    stats.finished += 1
                    stats.errors += rec["status"] != "ok"
                    stats.lags_s.append(0.0)
                emit(rec)
                if rec["status"] != "ok":
                    break  # a conversation cannot go on without its reply
                reply = "".join(state.pieces)
                text_prompt += reply
                history.append({"role": "assistant", "content": reply})
                pause = float(think.sample(1, think_rng)[0])
                if pause > 0 and math.isfinite(pause):
                    try:
                        await asyncio.wait_for(stop.wait(), pause)
                        return
                    except asyncio.TimeoutError:
                        pass

    async with make_session(ep) as session:
        await asyncio.gather(*(user(session) for _ in range(max(1, concurrency))))


__all__ = ["MultiTurnSpec", "Turn", "parse_multi_turn", "plan_conversations",
           "run_conversations"]
