"""A tiny stand-in engine with the API of `ridgeline.sim.engine.Engine` (docs/engine.md).

Used by the serve tests that check the HTTP layer, so they do not depend on the real
scheduler's policies: FIFO admission up to `max_num_seqs`, a whole prompt prefilled in
one step (which emits the first token), then one token per decode step; no KV limit
except `kv_tokens` (a prompt + output larger than it is rejected). Step time comes from
any StepTimeModel. The tests on timing and the closed loop use the real engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ridgeline.perf.step_time import BatchWork, LinearStepTime


@dataclass
class StandInRequest:
    request_id: str
    prompt_tokens: int
    output_tokens: int
    arrival_s: float = 0.0


@dataclass
class StandInResult:
    duration_s: float
    emitted: list[tuple[str, int]] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)


class StandInEngine:
    def __init__(self, step_model: object | None = None, max_num_seqs: int = 4,
                 kv_tokens: int = 1_000_000) -> None:
        self.step_model = step_model or LinearStepTime(base_s=0.002)
        self.max_num_seqs = max_num_seqs
        self.kv_tokens = kv_tokens
        self.waiting: list[StandInRequest] = []
        self.running: dict[str, list[int]] = {}  # id -> [prompt, output, generated]
        self.aborted: list[str] = []
        self.steps = 0

    def add_request(self, req: StandInRequest) -> None:
        self.waiting.append(req)

    def abort_request(self, request_id: str) -> None:
        self.aborted.append(request_id)
        self.running.pop(request_id, None)
        self.waiting = [r for r in self.waiting if r.request_id != request_id]

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def stats(self) -> dict[str, float]:
        used = sum(p + g for p, _, g in self.running.values())
        return {"num_running": len(self.running), "num_waiting": len(self.waiting),
                "kv_usage_fraction": used / self.kv_tokens, "num_preemptions": 0}

    def step(self, now_s: float) -> StandInResult:
        res = StandInResult(0.0)
        prefill: list[StandInRequest] = []
        while self.waiting and len(self.running) + len(prefill) < self.max_num_seqs:
            req = self.waiting.pop(0)
            if req.prompt_tokens + req.output_tokens > self.kv_tokens:
                res.rejected.append(req.request_id)
                continue
            prefill.append(req)
        decode_ids = list(self.running)
        if not prefill and not decode_ids:
            return res
        work = BatchWork.for_chunks([r.prompt_tokens for r in prefill], [0] * len(prefill),
                                    [p + g for p, _, g in self.running.values()])
        res.duration_s = float(self.step_model.step_time_s(work))
        self.steps += 1
        for rid in decode_ids:
            state = self.running[rid]
            state[2] += 1
            res.emitted.append((rid, 1))
            if state[2] >= state[1]:
                res.finished.append(rid)
                del self.running[rid]
        for req in prefill:
            res.emitted.append((req.request_id, 1))
            if req.output_tokens == 1:
                res.finished.append(req.request_id)
            else:
                self.running[req.request_id] = [req.prompt_tokens, req.output_tokens, 1]
        return res
