"""Options of the engine what-ifs (speculative decoding, eager mode, CPU stages), shared by
estimate and simulate. See ridgeline.perf.whatif."""

from __future__ import annotations

from typing import Annotated, Any

import typer

SpecKOpt = Annotated[int, typer.Option(
    "--spec-k", min=0, max=64,
    help="What-if: speculative decoding with this draft length (0: off).")]
SpecAlphaOpt = Annotated[float, typer.Option(
    "--spec-alpha", help="What-if: per-token acceptance rate of speculative decoding (0..1).")]
SpecDraftOpt = Annotated[str | None, typer.Option(
    "--spec-draft-model", help="What-if: draft model (catalog name or config.json) whose k "
    "decode steps per round are charged (default: none, as n-gram speculation).")]
EagerOpt = Annotated[bool, typer.Option(
    "--enforce-eager", help="What-if: no CUDA graphs (per-kernel overhead x4; the hardware "
    "files assume graphs).")]
CpuTokenizeOpt = Annotated[float, typer.Option(
    "--cpu-tokenize-us-per-token", help="What-if: CPU tokenize cost per prompt token, serial "
    "with the engine loop.")]
CpuDetokenizeOpt = Annotated[float, typer.Option(
    "--cpu-detokenize-us-per-event", help="What-if: CPU detokenize cost per streamed output "
    "event, serial with the engine loop.")]


def whatif_from_options(spec_k: int, spec_alpha: float, spec_draft_model: str | None,
                        enforce_eager: bool, tokenize_us: float, detokenize_us: float) -> Any:
    """The validated `WhatIf`, or None when nothing is asked (so defaults stay untouched)."""
    from ridgeline.perf.whatif import WhatIf

    w = WhatIf(spec_k=spec_k, spec_alpha=spec_alpha, spec_draft_model=spec_draft_model,
               enforce_eager=enforce_eager, cpu_tokenize_us_per_token=tokenize_us,
               cpu_detokenize_us_per_event=detokenize_us).validate()
    return None if w.is_identity else w
