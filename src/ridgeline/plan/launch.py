"""The deployable answer of `ridgeline plan`: the serving engine's command line for a
configuration, with every setting the plan simulated spelled out.

vLLM (the engine the plan simulates by default): `vllm serve MODEL` with
`--tensor-parallel-size`, `--pipeline-parallel-size`, `--max-num-seqs`,
`--max-num-batched-tokens`, `--max-model-len` (the longest prompt + output the workload can
draw, or the model's context window when a length has no upper bound),
`--gpu-memory-utilization`, `--enable-prefix-caching` / `--no-enable-prefix-caching`,
`--no-enable-chunked-prefill` when chunked prefill is off, `--quantization fp8` for fp8
weights on a 16-bit checkpoint (vLLM quantizes it at load), `--kv-cache-dtype fp8` for an fp8
KV cache, `--enable-expert-parallel` for EP > 1. Replicas are one such server each (a comment
says how many, and that `--data-parallel-size` does the same on one node); a P/D split is a
prefill and a decode command joined by a KV connector, each with its pool's own layout and
batch limits. A pool with attention-DP ranks (tp=1, attention-dp=8: tp counts one rank's
GPUs) is vLLM's `--data-parallel-size 8` of `--tensor-parallel-size 1` ranks, each rank
scheduling the pool's per-rank batch limits; SGLang's `--dp-size 8 --enable-dp-attention`
inside `--tp-size 8`.

TensorRT-LLM (`engine="trtllm"`): `trtllm-serve MODEL` with `--tp_size`, `--pp_size`,
`--ep_size`, `--max_batch_size`, `--max_num_tokens`, `--max_seq_len`,
`--kv_cache_free_gpu_memory_fraction` (the fraction TensorRT-LLM's own sizing rule used when
the plan simulated its preset, else the plan's KV bytes as a share of what the weights and
workspace leave: not the same number as vLLM's --gpu-memory-utilization); chunked prefill,
block reuse, a capacity policy other than GUARANTEED_NO_EVICT and the KV dtype go in the YAML
file `--extra_llm_api_options` reads, printed beside the command. The batch limits are those
the plan simulated (the engine preset's where the plan left them at their defaults).

SGLang (`engine="sglang"`): `python -m sglang.launch_server --model-path MODEL` with
`--tp-size`, `--pp-size`, `--ep-size`, `--max-running-requests`, `--chunked-prefill-size`
(-1: off), `--context-length`, `--mem-fraction-static`, `--quantization`, `--kv-cache-dtype`,
`--disable-radix-cache` when prefix caching is off; `--mem-fraction-static` is the fraction
SGLang's own rule derived (ridgeline.perf.engine_memory) when the plan simulated its preset.

Attention data-parallel layouts (a MoE model's attention on attn_dp ranks, its experts over
ep GPUs): vLLM `--data-parallel-size N --enable-expert-parallel` (per-rank batch limits, EP =
DP x TP), SGLang `--tp-size GPUS --dp-size N --enable-dp-attention --ep-size EP`
(`--max-running-requests` for all ranks), TensorRT-LLM `--tp_size GPUS --enable_attention_dp
--ep_size EP`. A chosen EP dispatch/combine (`--all2all-backend`): vLLM's own flag, SGLang
`--moe-a2a-backend deepep --deepep-mode normal|low_latency` for the DeepEP ones;
TensorRT-LLM's launch line has no such flag (its default gathers, as priced by default).

>>> from ridgeline.sim.scenario import Scenario
>>> cmd = launch_commands(Scenario(tp=2, max_num_seqs=64, prompt="fixed:1000",
...                                output="fixed:200"))
>>> cmd.commands[0].argv[:5]
('vllm', 'serve', 'meta-llama/Llama-3.1-8B-Instruct', '--tensor-parallel-size', '2')
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from ridgeline.sim.scenario import Scenario
from ridgeline.specs import load_model
from ridgeline.specs.model import model_catalog
from ridgeline.specs.precision import resolve_model_precision
from ridgeline.workload.lengths import parse_lengths

ENGINES = ("vllm", "trtllm", "sglang")
GPUS_PER_NODE = 8
# weights vLLM / SGLang quantize at load from a 16-bit checkpoint
_ONLINE_QUANT = {"fp8": "fp8"}
_16BIT = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class LaunchCommand:
    """One engine command: what `count` instances of `role` each run."""

    role: str                      # "replica", "prefill" or "decode"
    count: int
    argv: tuple[str, ...]
    config_file: tuple[str, str] | None = None     # (file name, its text), trtllm's YAML
    gpus: int = 0                  # per instance (0: the launch's gpus_per_instance)

    @property
    def shell(self) -> str:
        return shlex.join(self.argv)

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "count": self.count, "argv": list(self.argv),
                "shell": self.shell, "gpus_per_instance": self.gpus or None,
                "config_file": ({"name": self.config_file[0], "text": self.config_file[1]}
                                if self.config_file else None)}


@dataclass(frozen=True)
class Launch:
    """Every command a configuration needs, and notes on what the flags cannot say."""

    engine: str
    commands: tuple[LaunchCommand, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    gpus_per_instance: int = 1

    @property
    def argv(self) -> tuple[str, ...]:
        return self.commands[0].argv

    @property
    def shell(self) -> str:
        return self.commands[0].shell

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "argv": list(self.argv), "shell": self.shell,
                "instances": sum(c.count for c in self.commands),
                "gpus_per_instance": self.gpus_per_instance,
                "commands": [c.to_dict() for c in self.commands], "notes": list(self.notes)}

    def text(self) -> str:
        """The commands as a shell script (comments say how many of each to run)."""
        lines: list[str] = []
        for c in self.commands:
            what = {"replica": "replica", "prefill": "prefill instance",
                    "decode": "decode instance"}[c.role]
            gpus = c.gpus or self.gpus_per_instance
            lines.append(f"# {c.count} {what}{'s' if c.count > 1 else ''} of {gpus} "
                         f"GPU{'s' if gpus > 1 else ''}"
                         + (f": run this on each of {c.count} GPU groups" if c.count > 1
                            else ""))
            if c.config_file:
                name, text = c.config_file
                lines.append(f"cat > {name} <<'EOF'\n{text.rstrip()}\nEOF")
            lines.append(c.shell)
        lines += [f"# {n}" for n in self.notes]
        return "\n".join(lines)


def model_id(model: str) -> str:
    """What the engine loads: the Hugging Face id a catalog entry was read from (its
    `_source`), else the name or path as given."""
    entry = model_catalog().get(model.lower())
    if entry is not None:
        m = re.search(r"config\.json of (\S+/\S+?)(?:\s|$|,)", str(entry.get("_source", "")))
        if m:
            return m.group(1)
    return model


def max_model_len(sc: Scenario) -> int:
    """The longest prompt + output the workload can draw; the model's context window when
    either length has no upper bound (or when the sum exceeds it)."""
    window = int(load_model(sc.model).max_position_embeddings or 0)
    p = parse_lengths(sc.prompt, "--prompt")
    o = parse_lengths(sc.output, "--output")
    longest = [_max_tokens(d) for d in (p, o)]
    if any(x is None for x in longest):
        return window
    total = int(sum(x for x in longest if x is not None)) + sc.prefix_tokens
    return min(total, window) if window else total


def _max_tokens(d: Any) -> int | None:
    """The largest length `d.sample` can return (rounded as it rounds; None: unbounded)."""
    import numpy as np

    top = (float(np.rint(d.params["value"])) if d.kind == "fixed" else
           float(np.rint(np.max(d.values))) if d.kind == "empirical" and d.values is not None
           else math.inf)
    if d.max_tokens is not None:
        top = min(top, float(d.max_tokens))
    return int(top) if math.isfinite(top) else None


def launch_commands(sc: Scenario) -> Launch:
    """The command line(s) that serve `sc` on its engine (vllm, trtllm or sglang)."""
    spec = load_model(sc.model)
    prec = resolve_model_precision(spec, sc.weights, sc.kv, sc.activations)
    model = model_id(sc.model)
    mml = max_model_len(sc)
    notes: list[str] = []
    quant = None
    if spec.quant is None and sc.weights not in (None, *_16BIT):
        quant = _ONLINE_QUANT.get(prec.weights)
        if quant is None:
            notes.append(f"{prec.weights} weights: serve a checkpoint already quantized to "
                         f"{prec.weights} (the engine reads its quantization_config) in place "
                         f"of {model}")
    kv_fp8 = prec.kv == "fp8"
    if prec.kv not in ("fp8", *_16BIT):
        notes.append(f"a {prec.kv} KV cache was planned; the engine may not offer it")
    engine = sc.engine if sc.engine in ENGINES else "vllm"
    build = {"vllm": _vllm, "trtllm": _trtllm, "sglang": _sglang}[engine]
    pools = sc.pools()
    if pools is None:
        commands: tuple[LaunchCommand, ...] = (
            build(sc, "replica", sc.replicas, model, mml, quant, kv_fp8),)
    else:   # each pool's command with its own layout and batch limits
        commands = tuple(
            replace(build(sc.pool_scenario(p), p.role, p.workers, model, mml, quant, kv_fp8),
                    gpus=p.gpus_per_worker) for p in pools)
        notes.append("P/D: a proxy sends each request to a prefill instance, then to a decode "
                     "instance that receives its KV cache (the simulation routes round-robin "
                     "within each pool)")
        if engine == "sglang":
            notes.append("SGLang P/D: the mini load balancer joins the pools "
                         "(python -m sglang.srt.disaggregation.mini_lb --prefill URL "
                         "--decode URL); --disaggregation-transfer-backend picks mooncake "
                         "or nixl")
    if pools is None and sc.replicas > 1:
        one_node = engine == "vllm" and sc.replicas * sc.tp * sc.pp <= GPUS_PER_NODE \
            and sc.attn_dp == 1
        notes.append(f"{sc.replicas} replicas behind a load balancer (the simulation routes "
                     "round-robin)" + (f"; on one node, `--data-parallel-size {sc.replicas}` "
                                       "in one command does the same" if one_node else ""))
    if sc.attn_dp > 1:
        notes.append(f"attention data-parallel: {sc.attn_dp} ranks of tp={sc.tp} in one "
                     f"instance of {sc.tp * sc.pp * sc.attn_dp} GPUs, experts over ep={sc.ep}; "
                     "batch limits are per rank")
    return Launch(engine, commands, tuple(notes), sc.tp * sc.pp * sc.attn_dp)


def _vllm(sc: Scenario, role: str, count: int, model: str, mml: int, quant: str | None,
          kv_fp8: bool) -> LaunchCommand:
    # attention-DP ranks: vLLM's data-parallel ranks of tp GPUs each, the MoE layers spread
    # over all of them (EP = DP x TP); each rank runs its own scheduler with these limits
    argv = ["vllm", "serve", model,
            "--tensor-parallel-size", str(sc.tp),
            "--pipeline-parallel-size", str(sc.pp),
            "--max-num-seqs", str(sc.max_num_seqs),
            "--max-num-batched-tokens", str(sc.max_num_batched_tokens),
            "--max-model-len", str(mml),
            "--gpu-memory-utilization", f"{sc.gpu_memory_utilization:g}",
            "--enable-prefix-caching" if sc.prefix_caching else "--no-enable-prefix-caching"]
    if not sc.chunked_prefill:
        argv.append("--no-enable-chunked-prefill")
    if quant:
        argv += ["--quantization", quant]
    if kv_fp8:
        argv += ["--kv-cache-dtype", "fp8"]
    if sc.attn_dp > 1:
        # vLLM: DP ranks of one MoE model form one instance; EP spans DP x TP.
        argv += ["--data-parallel-size", str(sc.attn_dp)]
    if sc.ep > 1:
        argv.append("--enable-expert-parallel")
        if sc.all2all_backend:
            argv += ["--all2all-backend", sc.all2all_backend]
    if sc.block_size != 16:
        argv += ["--block-size", str(sc.block_size)]
    if role != "replica":
        argv += ["--kv-transfer-config",
                 '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']
    return LaunchCommand(role, count, tuple(argv))


def _trtllm(sc: Scenario, role: str, count: int, model: str, mml: int, quant: str | None,
            kv_fp8: bool) -> LaunchCommand:
    name = f"extra-llm-api-{role}.yaml"
    cfg, fraction = _as_simulated(sc)
    argv = ["trtllm-serve", model, "--backend", "pytorch",
            # With attention DP, tp_size counts every GPU of the stage (one rank each) and
            # the batch limits are each rank's.
            "--tp_size", str(sc.tp * sc.attn_dp), "--pp_size", str(sc.pp),
            "--ep_size", str(sc.ep),
            "--max_batch_size", str(cfg.max_num_seqs // sc.attn_dp),
            "--max_num_tokens", str(cfg.max_num_batched_tokens // sc.attn_dp),
            "--max_seq_len", str(mml),
            "--kv_cache_free_gpu_memory_fraction", f"{fraction:.3f}",
            "--extra_llm_api_options", name]
    if sc.attn_dp > 1:
        argv.insert(argv.index("--ep_size"), "--enable_attention_dp")
    yaml = [f"enable_chunked_prefill: {str(cfg.chunked_prefill).lower()}",
            "kv_cache_config:",
            f"  enable_block_reuse: {str(cfg.enable_prefix_caching).lower()}"]
    if cfg.capacity_policy != "guaranteed_no_evict":
        yaml += ["scheduler_config:", f"  capacity_scheduler_policy: "
                 f"{cfg.capacity_policy.upper()}"]
    if kv_fp8:
        yaml.append("  dtype: fp8")
    if role != "replica":
        yaml += ["cache_transceiver_config:", "  backend: DEFAULT"]
    if quant:
        yaml += ["# fp8 weights: serve an fp8 checkpoint (TensorRT-LLM does not quantize "
                 "at load)"]
    return LaunchCommand(role, count, tuple(argv), (name, "\n".join(yaml) + "\n"))


def _as_simulated(sc: Scenario) -> tuple[Any, float]:
    """The engine config the plan simulated for `sc` and the engine's own KV fraction: the
    one its sizing rule used where `sc` runs that engine's preset (TensorRT-LLM's
    free_gpu_memory_fraction, SGLang's mem_fraction_static), else the plan's vLLM budget
    expressed in the engine's terms."""
    sm = sc.step_model()
    cfg = sc.engine_config(sm)
    memory = sc.kv_memory(sm)
    if memory is not None and memory.rule != "vllm":
        return cfg, memory.fraction
    if sc.engine == "trtllm" or cfg.kv_memory_rule == "trtllm":
        return cfg, trtllm_kv_fraction(sc)
    return cfg, sc.gpu_memory_utilization


def trtllm_kv_fraction(sc: Scenario) -> float:
    """TensorRT-LLM sizes its KV cache as a fraction of the memory left after the weights
    and workspace; the plan's KV budget is gpu_memory_utilization x capacity less those:
    the same bytes as that fraction (rounded down to 0.001, so the engine holds no more)."""
    mem = sc.step_model().memory(sc.gpu_memory_utilization)
    free = (mem.capacity_bytes - mem.weight_bytes - mem.workspace_bytes - mem.reserve_bytes
            - mem.state_bytes)
    return math.floor(1000.0 * max(mem.kv_budget_bytes, 0.0) / free) / 1000.0 \
        if free > 0 else 0.0


def _sglang(sc: Scenario, role: str, count: int, model: str, mml: int, quant: str | None,
            kv_fp8: bool) -> LaunchCommand:
    cfg, fraction = _as_simulated(sc)
    argv = ["python", "-m", "sglang.launch_server", "--model-path", model,
            # SGLang: --tp-size counts the instance's GPUs; with DP attention each of
            # --dp-size ranks runs attention on tp/dp of them (the request limit is all ranks').
            "--tp-size", str(sc.tp * sc.attn_dp), "--pp-size", str(sc.pp),
            "--max-running-requests", str(cfg.max_num_seqs),
            "--chunked-prefill-size",
            str(cfg.max_num_batched_tokens) if cfg.chunked_prefill else "-1",
            "--context-length", str(mml),
            "--mem-fraction-static", f"{fraction:g}"]
    if sc.attn_dp > 1:
        argv += ["--dp-size", str(sc.attn_dp), "--enable-dp-attention"]
    if sc.ep > 1:
        argv += ["--ep-size", str(sc.ep)]
        if sc.all2all_backend.startswith("deepep_"):
            # SGLang names DeepEP's high-throughput kernels its "normal" mode.
            mode = "low_latency" if sc.all2all_backend == "deepep_low_latency" else "normal"
            argv += ["--moe-a2a-backend", "deepep", "--deepep-mode", mode]
    if sc.moe_backend in ("triton", "flashinfer_trtllm"):
        # SGLang's own runner names; marlin is vLLM's kernel, not a SGLang runner backend.
        argv += ["--moe-runner-backend", sc.moe_backend]
    if not sc.prefix_caching:
        argv.append("--disable-radix-cache")
    if quant:
        argv += ["--quantization", quant]
    if kv_fp8:
        argv += ["--kv-cache-dtype", "fp8_e4m3"]
    if role != "replica":
        argv += ["--disaggregation-mode", role]
    return LaunchCommand(role, count, tuple(argv))


__all__ = ["ENGINES", "Launch", "LaunchCommand", "launch_commands", "max_model_len",
           "model_id"]
