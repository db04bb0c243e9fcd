"""Parallelism: tensor (TP), pipeline (PP), expert (EP), attention data (attention-DP) and
replica data (DP) degrees.

An *engine instance* is tp x pp x attn_dp GPUs serving one stream of steps. Within a pipeline
stage the tp GPUs of an attention rank split every layer's heads and matrices. With
attn_dp > 1 the instance has attn_dp attention ranks, each holding a full copy of the
attention, dense-MLP and shared-expert weights (split tp ways) and caching its own
sequences; the MoE layers run over all tp x attn_dp GPUs with the experts spread over ep of
them (ep divides tp x attn_dp and the expert count; what is left, tp x attn_dp / ep, splits
each expert's matrices). Tokens reach their experts by an all-to-all dispatch and come back
by an all-to-all combine in every MoE layer, so all ranks step in lockstep. DP replicas are
independent instances serving different requests.

>>> Parallelism(tp=2).gpus_per_replica
2
>>> Parallelism(tp=1, ep=8, attn_dp=8).gpus_per_replica
8
>>> Parallelism(tp=2, ep=8, attn_dp=4).moe_tp
1
"""

from __future__ import annotations

from dataclasses import dataclass

from ridgeline.errors import RidgelineError
from ridgeline.specs.model import ModelSpec


@dataclass(frozen=True)
class Parallelism:
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    attn_dp: int = 1
    # The expert-parallel dispatch/combine (perf/comm.py EP_BACKENDS); "": the engine's own.
    ep_comm: str = ""

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one engine instance: tp x pp x attn_dp."""
        return self.tp * self.pp * self.attn_dp

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_replica * self.dp

    @property
    def moe_tp(self) -> int:
        """How many ways each expert's matrices are split: the tp x attn_dp GPUs of a stage
        over the ep groups the experts are spread across."""
        return max(1, self.tp * self.attn_dp // self.ep)

    def validate(self, model: ModelSpec) -> Parallelism:
        """Check the degrees against the model's shapes; return self."""
        for name in ("tp", "pp", "ep", "dp", "attn_dp"):
            if getattr(self, name) < 1:
                flag = "attention-dp" if name == "attn_dp" else name
                raise RidgelineError(f"{flag}: got {getattr(self, name)}; allowed: >= 1")
        if model.num_heads % self.tp:
            raise RidgelineError(f"tp: got {self.tp}; allowed: a divisor of the "
                                 f"{model.num_heads} attention heads of {model.name}")
        if self.pp > model.num_layers:
            raise RidgelineError(f"pp: got {self.pp}; allowed: <= {model.num_layers} layers")
        if self.attn_dp > 1 and not model.is_moe:
            raise RidgelineError(f"attention-dp: got {self.attn_dp}; allowed: 1 ({model.name} "
                                 "has no experts; independent replicas are --dp)")
        if self.ep > 1:
            if not model.is_moe:
                raise RidgelineError(f"ep: got {self.ep}; allowed: 1 ({model.name} has no "
                                     "experts)")
            group = self.tp * self.attn_dp
            if group % self.ep or model.num_experts % self.ep:
                raise RidgelineError(
                    f"ep: got {self.ep}; allowed: a divisor of tp x attention-dp = {group} "
                    f"and of the {model.num_experts} experts")
        return self

    def describe(self) -> dict[str, int]:
        return {"tp": self.tp, "pp": self.pp, "ep": self.ep, "dp": self.dp,
                "attn_dp": self.attn_dp, "gpus_per_instance": self.gpus_per_replica}


@dataclass(frozen=True)
class Layout:
    """The parallel layout the engine flags ask for: per-instance degrees and replicas."""

    tp: int
    ep: int
    attn_dp: int
    replicas: int


def resolve_layout(model: ModelSpec, tp: int = 1, ep: int = 1, dp: int = 1,
                   attention_dp: int = 1, data_parallel_size: int | None = None,
                   enable_expert_parallel: bool = False,
                   enable_dp_attention: bool = False) -> Layout:
    """Read the layout from ridgeline's and the engines' flags, spelled as each engine does:

    - ridgeline: `--attention-dp N` ranks of `--tp` each, experts over `--ep`; `--dp` replicas;
    - vLLM: `--data-parallel-size N` on a MoE model is N attention ranks in one instance
      whose MoE layers span N x tp GPUs, as experts (EP = N x tp) with
      `--enable-expert-parallel`, else split N x tp ways; on a dense model N replicas;
      `--enable-expert-parallel` alone spreads the experts over the tp GPUs;
    - SGLang: `--enable-dp-attention --dp N --tp T`: T GPUs in all, N attention ranks of
      T/N each (`--ep-size` spreads the experts).

    >>> from ridgeline.specs import load_model
    >>> resolve_layout(load_model("deepseek-v3"), data_parallel_size=8,
    ...                enable_expert_parallel=True)
    Layout(tp=1, ep=8, attn_dp=8, replicas=1)
    >>> resolve_layout(load_model("deepseek-v3"), tp=8, dp=8, enable_dp_attention=True)
    Layout(tp=1, ep=1, attn_dp=8, replicas=1)
    >>> resolve_layout(load_model("llama-3.1-8b"), data_parallel_size=4)
    Layout(tp=1, ep=1, attn_dp=1, replicas=4)
    """
    given = [name for name, on in (("--attention-dp", attention_dp > 1),
                                   ("--data-parallel-size", data_parallel_size is not None),
                                   ("--enable-dp-attention", enable_dp_attention)) if on]
    if len(given) > 1:
        raise RidgelineError(f"{given[1]}: got it with {given[0]}; allowed: one way to ask "
                             "for attention data-parallel ranks")
    replicas, attn_dp = dp, attention_dp
    if enable_dp_attention:
        if not model.is_moe:
            raise RidgelineError(f"--enable-dp-attention: got it for {model.name}; allowed: "
                                 "a MoE model (a dense model's data parallelism is --dp "
                                 "replicas)")
        if tp % dp:
            raise RidgelineError(f"--dp: got {dp} with --enable-dp-attention; allowed: a "
                                 f"divisor of --tp {tp} (SGLang: tp GPUs in all, tp/dp per "
                                 "attention rank)")
        tp, attn_dp, replicas = tp // dp, dp, 1
    if data_parallel_size is not None:
        if model.is_moe:
            attn_dp = data_parallel_size
        else:
            replicas = dp * data_parallel_size
    if enable_expert_parallel:
        if not model.is_moe:
            raise RidgelineError(f"--enable-expert-parallel: got it for {model.name}; "
                                 "allowed: a MoE model")
        if ep not in (1, tp * attn_dp):
            raise RidgelineError(f"--ep: got {ep} with --enable-expert-parallel; allowed: "
                                 f"{tp * attn_dp} (vLLM's EP size is DP x TP) or leave it out")
        ep = tp * attn_dp
    return Layout(tp=tp, ep=ep, attn_dp=attn_dp, replicas=replicas)
