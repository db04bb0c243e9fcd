"""Parallelism: tensor (TP), pipeline (PP), expert (EP) and data (DP) degrees.

A *replica* is one TP x PP group of GPUs holding a whole copy of the model; DP replicas
serve different requests. Within a pipeline stage the tp GPUs split every layer's heads and
matrices; with ep > 1 the MoE experts are spread over ep GPUs of that group (ep divides tp)
and tokens reach them by all-to-all.

>>> Parallelism(tp=2).gpus_per_replica
2
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

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def total_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def validate(self, model: ModelSpec) -> Parallelism:
        """Check the degrees against the model's shapes; return self."""
        for name in ("tp", "pp", "ep", "dp"):
            if getattr(self, name) < 1:
                raise RidgelineError(f"{name}: got {getattr(self, name)}; allowed: >= 1")
        if model.num_heads % self.tp:
            raise RidgelineError(f"tp: got {self.tp}; allowed: a divisor of the "
                                 f"{model.num_heads} attention heads of {model.name}")
        if self.pp > model.num_layers:
            raise RidgelineError(f"pp: got {self.pp}; allowed: <= {model.num_layers} layers")
        if self.ep > 1:
            if not model.is_moe:
                raise RidgelineError(f"ep: got {self.ep}; allowed: 1 ({model.name} has no "
                                     "experts)")
            if self.tp % self.ep or model.num_experts % self.ep:
                raise RidgelineError(f"ep: got {self.ep}; allowed: a divisor of tp={self.tp} "
                                     f"and of the {model.num_experts} experts")
        return self

    def describe(self) -> dict[str, int]:
        return {"tp": self.tp, "pp": self.pp, "ep": self.ep, "dp": self.dp}
