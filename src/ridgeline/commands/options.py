"""Command-line options shared by estimate, simulate and serve (defined once here).

Only typer and the standard library are imported: command modules must stay cheap to import.
"""

from __future__ import annotations

from typing import Annotated

import typer

ModelOpt = Annotated[
    str,
    typer.Option("--model", "-m", help="Catalog model name (see `ridgeline models`) or a path "
                 "to a Hugging Face config.json."),
]
HardwareOpt = Annotated[
    str,
    typer.Option("--hardware", "-g", help="Catalog GPU name (see `ridgeline hardware`) or a "
                 "path to a hardware JSON file."),
]
WeightsOpt = Annotated[
    str, typer.Option("--weights", help="Weight dtype: fp32, bf16, fp16, fp8, int8, int4, fp4.")
]
KvOpt = Annotated[
    str | None, typer.Option("--kv", help="KV-cache dtype (default: the weight dtype, or bf16 "
                             "for 4-bit weights).")
]
ActivationsOpt = Annotated[
    str, typer.Option("--activations", help="Activation/compute dtype: bf16, fp16, fp8, fp32.")
]
TpOpt = Annotated[int, typer.Option("--tp", min=1, help="Tensor-parallel degree.")]
PpOpt = Annotated[int, typer.Option("--pp", min=1, help="Pipeline-parallel degree.")]
EpOpt = Annotated[int, typer.Option("--ep", min=1, help="Expert-parallel degree (MoE).")]
DpOpt = Annotated[int, typer.Option("--dp", min=1, help="Data-parallel replicas.")]
ComputeEffOpt = Annotated[
    float | None,
    typer.Option("--compute-efficiency", help="Achieved/peak FLOP/s (default from hardware "
                 "file)."),
]
BandwidthEffOpt = Annotated[
    float | None,
    typer.Option("--bandwidth-efficiency", help="Achieved/peak memory bandwidth (default from "
                 "hardware file)."),
]
KernelOverheadOpt = Annotated[
    float | None,
    typer.Option("--kernel-overhead-us", help="Per-kernel launch/scheduling overhead in "
                 "microseconds (default from hardware file)."),
]
SloOpt = Annotated[
    list[str] | None,
    typer.Option("--slo", help="SLO bound on a per-request metric, e.g. ttft_ms<=500, "
                 "tpot_ms<=50, e2e_s<=20 (repeatable)."),
]
TraceOutOpt = Annotated[
    str | None, typer.Option("--trace", help="Write the per-request trace (JSONL) here.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed (runs are reproducible).")]
CalibrationOpt = Annotated[
    str | None,
    typer.Option("--calibration", help="A calibration profile (`ridgeline calibrate`): its "
                 "measured step times and scheduling replace the roofline model's."),
]
