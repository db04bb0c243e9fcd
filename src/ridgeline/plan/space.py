"""The search space of `ridgeline plan` and its analytic pruning.

A *family* is (model, hardware, weights, TP, EP); a *candidate* adds the batching limits
(max_num_seqs, max_num_batched_tokens, chunked prefill) and the cluster shape (replicas, or a
prefill/decode split). Every candidate is a `Scenario` simulated at the planning rate
lambda x (1 + headroom) (see ridgeline.plan.search).

Pruning uses the perf model and queueing theory only; each rule is a bound that a simulation
could not beat, so a pruned candidate would fail anyway (the tests check this exhaustively on
small spaces):

1. memory fit: weights + workspace + reserve must fit (`RooflineStepTime.memory`);
2. TTFT floor: a request's TTFT is at least its first prefill chunk alone on an idle replica;
   if more than (1 - goodput target) of the sampled prompts exceed a TTFT bound that way,
   no load level can meet it;
3. TPOT floor: likewise with one decode step of batch 1 at the request's context;
4. throughput ceiling: per replica at most mu = 1 / (S * tau_prefill + N * t_dec(B*) / B*)
   requests/s (tau_prefill per prompt token at a full chunk, B* = min(max_num_seqs,
   KV capacity / (S + N)) the largest decode batch; S, N mean prompt/output), times
   `CEILING_SLACK` because mixed steps share one weight read between prefill and decode;
5. Little's law: L = lambda_r x W_min in flight per replica with W_min = S * tau_prefill +
   N * t_dec(1) (the fastest a request can finish) must fit the batch cap and the KV cache
   (lambda x W x context x KV bytes/token, `theory.queueing.little_kv_bytes`); otherwise the
   replica cannot carry lambda_r even in the best case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.metrics.slo import parse_slos
from ridgeline.perf.estimate import decode_work, prefill_work
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.plan.recheck import verify_requests
from ridgeline.sim.engine_costs import ENGINES
from ridgeline.sim.scenario import Scenario
from ridgeline.specs import load_hardware, load_model
from ridgeline.specs.hardware import catalog_name, hardware_catalog
from ridgeline.specs.precision import KV_DTYPES, WEIGHT_DTYPES, resolve_precision
from ridgeline.theory.queueing import little_in_system, little_kv_bytes
from ridgeline.workload.lengths import parse_lengths
from ridgeline.workload.streams import workload_streams

CEILING_SLACK = 1.25
MAX_GPUS_PER_REPLICA = 8


@dataclass(frozen=True)
class PlanRequest:
    """What `ridgeline plan` searches: the fixed inputs and the axes of the space."""

    models: tuple[str, ...] = ("llama-3.1-8b",)
    hardware: tuple[str, ...] = ("h100-sxm",)
    weights: tuple[str, ...] = ("bf16",)
    kv: str | None = None
    activations: str | None = None  # None: as vLLM runs the weights on each GPU
    prompt: str = "lognormal:mean=500,sigma=0.8,max=4096"
    output: str = "lognormal:mean=200,sigma=0.8,max=1024"
    rate_req_s: float = 10.0
    slos: tuple[str, ...] = ()
    goodput_target: float = 0.99
    headroom: float = 0.2
    tp: tuple[int, ...] = (1, 2, 4, 8)
    ep: bool = True
    max_num_seqs: tuple[int, ...] = (64, 256)
    max_num_batched_tokens: tuple[int, ...] = (2048, 8192)
    chunked_prefill: tuple[bool, ...] = (True,)
    max_replicas: int = 16
    extra_replicas: int = 1
    pd: bool = True
    max_gpus: int = 64
    prices: tuple[tuple[str, float], ...] = ()
    requests: int = 500                  # per screening run
    seed: int = 0
    gpu_memory_utilization: float = 0.9
    verify_requests: int | None = None   # per verification run (None: `verify_requests`)
    engines: tuple[str, ...] = ("vllm",)  # scheduling and CPU costs simulated (sim.engine_costs)
    all2all_backend: str = ""  # the EP dispatch/combine (perf/comm.py); "": each engine's own
    moe_backend: str = "auto"  # the MoE runner backend (perf/measured_kernels.py)

    def replace(self, **changes: Any) -> PlanRequest:
        import dataclasses

        return dataclasses.replace(self, **changes)

    def validate(self) -> PlanRequest:
        if not self.slos:
            raise RidgelineError("--slo: give at least one SLO (e.g. --slo ttft_ms<=1000)")
        parse_slos(list(self.slos))
        parse_lengths(self.prompt, "--prompt")
        parse_lengths(self.output, "--output")
        if not (self.rate_req_s > 0 and math.isfinite(self.rate_req_s)):
            raise RidgelineError(f"--rate: got {self.rate_req_s}; allowed: > 0 req/s")
        if not 0 < self.goodput_target < 1:
            raise RidgelineError(f"--goodput-target: got {self.goodput_target}; allowed: "
                                 "strictly between 0 and 1 (no finite run can show that 100% "
                                 "of requests meet the SLOs; use e.g. 0.999)")
        if not 0 <= self.headroom <= 4:
            raise RidgelineError(f"--headroom: got {self.headroom}; allowed: 0..4")
        for name in ("max_replicas", "max_gpus", "requests"):
            if getattr(self, name) < 1:
                raise RidgelineError(f"--{name.replace('_', '-')}: allowed: >= 1")
        for t in self.tp:
            if t < 1:
                raise RidgelineError(f"--tp: got {t}; allowed: >= 1")
        if self.verify_requests is not None and self.verify_requests < 1:
            raise RidgelineError(f"--verify-requests: got {self.verify_requests}; allowed: "
                                 ">= 1")
        self._check_lists()
        for hw in self.hardware:
            self.price_of(hw)
        if self.activations is not None:
            resolve_precision("bf16", self.kv, self.activations)  # one line if unknown

        for engine in self.engines:
            if engine not in ENGINES:
                raise RidgelineError(f"--engine: got {engine!r}; allowed: "
                                     f"{', '.join(ENGINES)}")
        return self

    def _check_lists(self) -> None:
        """Every element of every comma list, before any work: a dtype, GPU or model the
        search cannot use is an error naming it (`--weights bf16,int3`), not a candidate
        dropped later among the pruned."""
        for w in self.weights:
            if w.lower() not in WEIGHT_DTYPES:
                raise RidgelineError(f"--weights: got {w!r} (in {','.join(self.weights)}); "
                                     f"allowed: {', '.join(WEIGHT_DTYPES)}")
        if self.kv is not None and self.kv.lower() not in KV_DTYPES:
            raise RidgelineError(f"--kv: got {self.kv!r}; allowed: {', '.join(KV_DTYPES)}")
        for hw in self.hardware:
            load_hardware(hw)
        for m in self.models:
            load_model(m)
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            for v in getattr(self, name):
                if v < 1:
                    raise RidgelineError(f"--{name.replace('_', '-')}: got {v}; allowed: "
                                         ">= 1")

    @property
    def screening_simulations(self) -> int:
        """The most screening simulations the space can hold: every configuration family
        (models x GPUs x dtypes x TP x batch caps x token budgets x chunking) at each
        replica count tried (the analytic minimum and --extra-replicas above it, at most
        --max-replicas) in each layout (colocated, and two P/D splits)."""
        families = math.prod(len(x) for x in (
            self.models, self.hardware, self.weights, self.tp, self.max_num_seqs,
            self.max_num_batched_tokens, self.chunked_prefill))
        counts = min(self.extra_replicas + 1, self.max_replicas)
        # colocated; two P/D splits of one layout; P/D with the prefill pool at half and
        # at twice the family's TP, two worker ratios each (`_mixed_pd`)
        return families * counts * (7 if self.pd else 1)

    @property
    def needed_verify_requests(self) -> int:
        return verify_requests(self.goodput_target)

    @property
    def verify_requests_warning(self) -> str | None:
        """Why a --verify-requests below the target's floor weakens the verification (None
        when it does not)."""
        need = self.needed_verify_requests
        if self.verify_requests is None or self.verify_requests >= need:
            return None
        return (f"--verify-requests {self.verify_requests} is below the floor of {need} a "
                f"{self.goodput_target:g} target needs (P{100 * self.goodput_target:g} within "
                "a quarter of its tail, 10 requests beyond it): the verification is weaker "
                "than the target says")

    @property
    def verify_request_count(self) -> int:
        """Requests per verification run: --verify-requests, else enough for the target."""
        return self.verify_requests or self.needed_verify_requests

    @property
    def planning_rate_req_s(self) -> float:
        """The rate every candidate is simulated at: lambda x (1 + headroom)."""
        return self.rate_req_s * (1.0 + self.headroom)

    def price_of(self, hardware: str) -> float:
        """USD per GPU-hour: --price overrides, else the catalog's price (a GPU named by
        an alias, such as H100, is its catalog entry on either side)."""
        key = _gpu_key(hardware)
        for name, price in self.prices:
            if name == hardware or _gpu_key(name, strict=False) == key:
                return price

        entry = hardware_catalog().get(key)
        price = entry.get("price_usd_per_gpu_hour") if entry else None
        if price is None:
            raise RidgelineError(f"--price: no price for {hardware!r}; give --price "
                                 f"{hardware}=USD_PER_GPU_HOUR")
        return float(price)


def _gpu_key(name: str, strict: bool = True) -> str:
    """The catalog entry a GPU name means; a JSON path (or, not strict, any name the
    catalog does not know) stays as given."""
    from pathlib import Path

    if name.endswith(".json") or Path(name).is_file():
        return name
    try:
        return catalog_name(name)
    except RidgelineError:
        if strict:
            raise
        return name


@dataclass(frozen=True)
class Candidate:
    """One configuration: its scenario, family and price."""

    scenario: Scenario
    family: str
    usd_per_hour: float

    @property
    def gpus(self) -> int:
        return self.scenario.gpus

    @property
    def shape(self) -> str:
        """`replicas=2`, `pd=1:1`, or with pools of their own layout
        `pd=2:3 (prefill tp=4, decode tp=8)`."""
        sc = self.scenario
        if not sc.pd:
            return f"replicas={sc.replicas}"
        text = f"pd={sc.pd[0]}:{sc.pd[1]}"
        pools = sc.pools() if sc.own_pools() else None
        if pools is not None:
            text += f" (prefill {pools[0].layout}, decode {pools[1].layout})"
        return text

    @property
    def label(self) -> str:
        sc = self.scenario
        shape = self.shape
        return (f"{self.family}, max_num_seqs={sc.max_num_seqs}, "
                f"max_num_batched_tokens={sc.max_num_batched_tokens}"
                f"{'' if sc.chunked_prefill else ', no chunked prefill'}, {shape}")

    def sort_key(self) -> tuple[Any, ...]:
        sc = self.scenario
        return (round(self.usd_per_hour, 9), self.gpus, self.family, sc.pd is not None,
                sc.pd or (0, 0), sc.prefill_pool or "", -sc.max_num_seqs,
                -sc.max_num_batched_tokens, not sc.chunked_prefill)


@dataclass
class Space:
    """The enumerated space: candidates to simulate and pruned ones with their reasons."""

    candidates: list[Candidate] = field(default_factory=list)
    pruned: list[tuple[Candidate | None, str, str]] = field(default_factory=list)
    families: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.candidates) + len(self.pruned)


@dataclass
class _Bounds:
    """Per-family-and-batching analytic numbers."""

    mu_req_s: float                    # throughput ceiling per mixed replica (with slack)
    prefill_mu_req_s: float            # per prefill-only instance
    decode_mu_req_s: float             # per decode-only instance
    w_min_s: float                     # fastest request
    inflight_cap: float                # min(max_num_seqs, KV capacity / mean context)
    kv_capacity_tokens: int
    prefill_share: float


def _lengths(req: PlanRequest) -> tuple[np.ndarray, np.ndarray]:
    s = workload_streams(req.seed).lengths
    n = min(req.requests, 4000)
    return (parse_lengths(req.prompt, "--prompt").sample(n, s).astype(np.float64),
            parse_lengths(req.output, "--output").sample(n, s).astype(np.float64))


def _floors(sm: Any, req: PlanRequest, prompts: np.ndarray, outputs: np.ndarray,
            mbt: int, chunked: bool) -> str | None:
    """TTFT and TPOT floors: reasons an SLO cannot be met even on an idle replica (None: fine)."""
    allowed = 1.0 - req.goodput_target
    first_chunk = np.minimum(prompts, mbt) if chunked else prompts
    for slo in parse_slos(list(req.slos)):
        if slo.op not in ("<=", "<"):
            continue
        if slo.metric in ("ttft", "e2e"):
            t = np.asarray(sm.step_time_s(prefill_work(1.0, first_chunk)), dtype=np.float64)
            fail = float(np.mean(t > slo.bound_base))
            if fail > allowed:
                return (f"{slo.text}: {fail:.0%} of prompts exceed it prefilled alone on an "
                        f"idle replica ({np.median(t) * 1e3:.0f} ms median)")
        if slo.metric in ("tpot", "itl_max"):
            multi = outputs > 1
            t = np.asarray(sm.step_time_s(decode_work(1.0, prompts)), dtype=np.float64)
            fail = float(np.mean((t > slo.bound_base) & multi))
            if fail > allowed:
                return (f"{slo.text}: {fail:.0%} of requests exceed it at batch 1 "
                        f"({np.median(t) * 1e3:.1f} ms median decode step)")
    return None


def _bounds(sm: Any, req: PlanRequest, s_mean: float, n_mean: float, mns: int,
            mbt: int, kv_tokens: int | None = None) -> _Bounds:
    """`kv_tokens`: the engine's KV pool (its own sizing rule); vLLM's rule when None."""
    if kv_tokens is None:
        kv_tokens = int(sm.kv_capacity_tokens(req.gpu_memory_utilization))
    ctx = s_mean + max(n_mean - 2.0, 0.0) / 2.0
    b_star = max(1.0, min(float(mns), math.floor(kv_tokens / max(s_mean + n_mean, 1.0))))
    chunk = max(1.0, min(float(mbt), s_mean))
    tau = float(sm.step_time_s(prefill_work(1.0, chunk))) / chunk
    t_dec = float(sm.step_time_s(decode_work(b_star, ctx)))
    t_dec1 = float(sm.step_time_s(decode_work(1.0, ctx)))
    pre_s = s_mean * tau
    dec_s = max(n_mean - 1.0, 0.0) * t_dec / b_star
    return _Bounds(
        mu_req_s=CEILING_SLACK / (pre_s + dec_s),
        prefill_mu_req_s=CEILING_SLACK / pre_s,
        decode_mu_req_s=CEILING_SLACK / dec_s if dec_s > 0 else math.inf,
        w_min_s=pre_s + max(n_mean - 1.0, 0.0) * t_dec1,
        inflight_cap=min(float(mns), kv_tokens / max(ctx, 1.0)),
        kv_capacity_tokens=kv_tokens,
        prefill_share=pre_s / (pre_s + dec_s))


def _layouts(model: Any, tp: int, allow: bool) -> list[tuple[int, int, int]]:
    """(tp, ep, attention-dp) layouts of an instance of `tp` GPUs: TP alone; for a MoE model
    also the experts spread over the tp GPUs (EP = TP), and attention data-parallel over
    all of them with TP 1 per rank and EP over all (how DeepSeek-class models are served)."""
    if not model.is_moe or not allow or tp == 1 or model.num_experts % tp:
        return [(tp, 1, 1)]
    return [(tp, 1, 1), (tp, tp, 1), (1, tp, tp)]


def enumerate_space(req: PlanRequest) -> Space:
    """Every candidate of the space, pruned analytically (see the module docstring)."""
    prompts, outputs = _lengths(req)
    s_mean, n_mean = float(prompts.mean()), float(outputs.mean())
    lam = req.planning_rate_req_s
    space = Space()
    for model_name in req.models:
        model = load_model(model_name)
        for hw in req.hardware:
            price = req.price_of(hw)
            for weights in req.weights:
                for gpus in req.tp:
                    for tp, ep, adp in _layouts(model, gpus, req.ep):
                        for engine in req.engines:
                            family = f"{model.name} on {hw}, {weights}, tp={tp}" + \
                                (f", attention-dp={adp}" if adp > 1 else "") + \
                                (f", ep={ep}" if ep > 1 else "") + \
                                (f", {engine}" if req.engines != ("vllm",) else "")
                            space.families.append(family)
                            _enumerate_family(req, space, family, model_name, hw, price,
                                              weights, tp, ep, prompts, outputs, s_mean,
                                              n_mean, lam, RooflineStepTime, little_in_system,
                                              little_kv_bytes, engine, adp)
    return space


def _enumerate_family(req: PlanRequest, space: Space, family: str, model_name: str, hw: str,
                      price: float, weights: str, tp: int, ep: int, prompts: np.ndarray,
                      outputs: np.ndarray, s_mean: float, n_mean: float, lam: float,
                      roofline: Any, little_in_system: Any, little_kv_bytes: Any,
                      engine: str = "vllm", attn_dp: int = 1) -> None:
    base = Scenario(model=model_name, hardware=hw, weights=weights, kv=req.kv, tp=tp, ep=ep,
                    attn_dp=attn_dp, all2all_backend=req.all2all_backend,
                    moe_backend=req.moe_backend,
                    activations=req.activations, prompt=req.prompt, output=req.output,
                    requests=req.requests,
                    rate_req_s=lam, slos=req.slos, seed=req.seed,
                    gpu_memory_utilization=req.gpu_memory_utilization, engine=engine)
    combos = [(m, b, c) for m in req.max_num_seqs for b in req.max_num_batched_tokens
              for c in req.chunked_prefill]

    def reject_all(reason: str) -> None:
        space.pruned.append((None, family, f"{reason} (all {len(combos)} batching settings)"))

    gpus = tp * attn_dp  # GPUs of one instance
    if gpus > MAX_GPUS_PER_REPLICA:
        reject_all(f"tp={tp}" + (f" x attention-dp={attn_dp}" if attn_dp > 1 else "")
                   + f" exceeds {MAX_GPUS_PER_REPLICA} GPUs per node")
        return
    try:
        sm = roofline.from_names(model=model_name, hardware=hw, weights=weights, kv=req.kv,
                                 activations=req.activations, tp=tp, ep=ep, attn_dp=attn_dp,
                                 ep_comm=req.all2all_backend, moe_backend=req.moe_backend,
                                 check_fit=False)
    except RidgelineError as exc:
        reject_all(str(exc))
        return
    if not sm.memory(req.gpu_memory_utilization).fits:
        reject_all("memory: " + sm.no_fit_message(req.gpu_memory_utilization))
        return
    for mns, mbt, chunked in combos:
        if mbt < mns:
            continue     # vLLM rejects it too (EngineConfig)
        sc = base.replace(max_num_seqs=mns, max_num_batched_tokens=mbt,
                          chunked_prefill=chunked)
        try:
            smc = sc.step_model()
            kv_tokens = sc.kv_capacity_tokens(smc)    # sized by the engine's own rule
        except RidgelineError as exc:
            space.pruned.append((None, family, str(exc)))
            continue
        if kv_tokens < sc.block_size:
            space.pruned.append((None, family, f"memory: no room for the KV cache with "
                                 f"max_num_batched_tokens={mbt}"))
            continue
        floor = _floors(smc, req, prompts, outputs, mbt, chunked)
        if floor:
            space.pruned.append((None, family, f"SLO floor: {floor}"))
            continue
        # max_num_seqs and max_num_batched_tokens are per attention rank.
        bd = _bounds(smc, req, s_mean, n_mean, mns * attn_dp, mbt * attn_dp, kv_tokens)
        n_min = max(1, math.ceil(lam / bd.mu_req_s - 1e-9))
        if n_min > req.max_replicas or n_min * gpus > req.max_gpus:
            space.pruned.append((None, family, f"throughput ceiling: needs >= {n_min} "
                                 f"replicas for {lam:g} req/s (ceiling {bd.mu_req_s:.3g} "
                                 f"req/s each), over --max-replicas/--max-gpus"))
            continue
        for n in range(n_min, n_min + req.extra_replicas + 1):
            if n > req.max_replicas or n * gpus > req.max_gpus:
                break
            shapes: list[tuple[int, tuple[int, int] | None]] = [(n, None)]
            if req.pd and n >= 2:
                p_star = n * bd.prefill_share
                for p in sorted({min(max(math.floor(p_star), 1), n - 1),
                                 min(max(math.ceil(p_star), 1), n - 1)}):
                    shapes.append((n, (p, n - p)))
            for n_inst, pd in shapes:
                cand = Candidate(sc.replace(replicas=n_inst if pd is None else 1, pd=pd),
                                 family, n_inst * gpus * price)
                reason = _little_reason(req, bd, lam, n_inst, pd, s_mean, n_mean, smc,
                                        little_in_system, little_kv_bytes)
                if reason:
                    space.pruned.append((cand, family, reason))
                else:
                    space.candidates.append(cand)
            if req.pd and n >= 2:
                _mixed_pd(req, space, family, sc, bd, n, price, s_mean, n_mean, lam)


def _mixed_pd(req: PlanRequest, space: Space, family: str, sc: Scenario, bd: _Bounds,
              n: int, price: float, s_mean: float, n_mean: float, lam: float) -> None:
    """Disaggregated candidates whose prefill pool runs at another TP than the decode pool
    (the family's): half and twice the family's TP, where --tp lists them. Within the GPUs
    of n colocated replicas, the fewest prefill workers whose throughput ceiling carries
    the rate (and one more), and as many decode workers as the rest of the GPUs hold.
    Each such pairing is a family of its own in the table
    (`... P/D prefill tp=4 + decode tp=8`)."""
    tp = sc.tp
    budget = n * tp
    for tp_p in (tp // 2, tp * 2):
        if tp_p < 1 or tp_p == tp or tp_p not in req.tp or tp_p > MAX_GPUS_PER_REPLICA:
            continue
        ep_p = sc.ep if tp_p % sc.ep == 0 else 1
        fam = family.replace(f", tp={tp}", f", P/D prefill tp={tp_p} + decode tp={tp}", 1)
        if fam not in space.families:
            space.families.append(fam)
        spec = f"tp={tp_p}" + (f",ep={ep_p}" if ep_p > 1 else "")
        try:
            sm_p = sc.replace(tp=tp_p, ep=ep_p).step_model()
        except RidgelineError as exc:
            space.pruned.append((None, fam, f"memory: prefill {spec}: {exc}"
                                 if "memory" in str(exc).lower() else str(exc)))
            continue
        bd_p = _bounds(sm_p, req, s_mean, n_mean, sc.max_num_seqs, sc.max_num_batched_tokens)
        p_min = max(1, math.ceil(lam / bd_p.prefill_mu_req_s - 1e-9))
        for p in (p_min, p_min + 1):   # the fewest that carry the rate, and one more
            d = (budget - p * tp_p) // tp
            if d < 1:
                space.pruned.append((None, fam, f"throughput ceiling: {p} prefill "
                                     f"worker{'s' if p > 1 else ''} of {tp_p} GPUs "
                                     f"leave{'' if p > 1 else 's'} no decode worker within "
                                     f"{budget} GPUs"))
                break
            scp = sc.replace(replicas=1, pd=(p, d), prefill_pool=f"workers={p},{spec}")
            cand = Candidate(scp, fam, (p * tp_p + d * tp) * price)
            cap = d * bd.decode_mu_req_s
            if lam > cap:
                space.pruned.append((cand, fam, f"throughput ceiling: {d} decode workers "
                                     f"carry <= {cap:.3g} req/s < {lam:g}"))
            else:
                space.candidates.append(cand)


def _little_reason(req: PlanRequest, bd: _Bounds, lam: float, n: int,
                   pd: tuple[int, int] | None, s_mean: float, n_mean: float, sm: Any,
                   little_in_system: Any, little_kv_bytes: Any) -> str | None:
    """The throughput ceiling and Little's law for one cluster shape."""
    if pd is not None:
        cap = min(pd[0] * bd.prefill_mu_req_s, pd[1] * bd.decode_mu_req_s)
        if lam > cap:
            return (f"throughput ceiling: P/D {pd[0]}:{pd[1]} carries <= {cap:.3g} req/s < "
                    f"{lam:g}")
        return None
    if lam > n * bd.mu_req_s:
        return f"throughput ceiling: {n} replicas carry <= {n * bd.mu_req_s:.3g} req/s < {lam:g}"
    lam_r = lam / n
    inflight = little_in_system(lam_r, bd.w_min_s)
    if inflight > bd.inflight_cap:
        ctx = s_mean + n_mean / 2
        kv = little_kv_bytes(lam_r, bd.w_min_s, ctx, sm.kv_bytes_per_token)
        return (f"Little's law: >= {inflight:.0f} requests in flight per replica "
                f"(KV {kv / 1e9:.1f} GB) > what the batch cap and KV cache hold "
                f"({bd.inflight_cap:.0f})")
    return None


__all__ = ["CEILING_SLACK", "Candidate", "PlanRequest", "Space", "enumerate_space"]
