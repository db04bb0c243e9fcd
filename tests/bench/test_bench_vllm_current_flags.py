"""Every option of the current `vllm bench serve --help` (tests/data/vllm_bench_serve/
flags.txt, copied from vLLM's argument parser, source named there) is accepted by
`ridgeline bench`, or dropped with a note saying why, or refused with an error saying why;
so is every `--dataset-name` choice."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.bench.peer_flags import VLLM_DATASETS, VLLM_DATASETS_REFUSED, normalize_argv
from ridgeline.bench.vllm_flags import FLAGS
from ridgeline.errors import RidgelineError

BIN = Path(sys.executable).with_name("ridgeline")
RIDGELINE = str(BIN) if BIN.exists() else shutil.which("ridgeline") or "ridgeline"
LISTING = Path(__file__).parents[1] / "data" / "vllm_bench_serve" / "flags.txt"
LINES = [ln.strip() for ln in LISTING.read_text().splitlines()]
CURRENT = [ln for ln in LINES if ln.startswith("--")]
DATASETS = next(ln for ln in LINES if ln.startswith("dataset-name:")).split()[1:]


def test_the_listing_is_vllms_whole_parser() -> None:
    assert len(CURRENT) == len(set(CURRENT)) >= 80 and "--goodput" in CURRENT
    assert "--common-prefix-len" in CURRENT and "txt-slices" in DATASETS


@pytest.mark.parametrize("flag", CURRENT)
def test_every_current_flag_has_an_outcome(flag: str) -> None:
    row = FLAGS.get(flag)
    assert row is not None, f"{flag}: vLLM has it, ridgeline's table does not"
    args = [flag] if row.nargs == 0 else [flag, "1"]
    if row.status == "refused":
        with pytest.raises(RidgelineError, match=flag) as err:
            normalize_argv(args)
        assert row.reason and row.reason in str(err.value)
    elif row.status == "ignored":
        argv, notes = normalize_argv(args)
        assert flag not in argv
        assert any(flag in n and row.reason in n for n in notes), notes
    else:
        argv, _ = normalize_argv(args)
        assert any(a.split("=", 1)[0] == flag for a in argv), argv


@pytest.mark.parametrize("name", DATASETS)
def test_every_dataset_name_is_taken_or_refused_with_a_reason(name: str,
                                                               tmp_path: Path) -> None:
    if name in VLLM_DATASETS:
        return  # run by the peers' command-line tests against `ridgeline serve`
    assert name in VLLM_DATASETS_REFUSED, name
    proc = subprocess.run([RIDGELINE, "bench", "--dataset-name", name, "--base-url",
                           "http://127.0.0.1:9"], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and name in errors[0]
    assert VLLM_DATASETS_REFUSED[name] in errors[0]
    assert list(tmp_path.iterdir()) == []


def test_common_prefix_len_is_vllms_shared_prefix(tmp_path: Path) -> None:
    """vLLM's random dataset: every prompt is the shared prefix (32 tokens) followed by its
    own random part (64): 96 prompt tokens, the emulator's usage says."""
    proc = subprocess.run([RIDGELINE, "bench", "--target", "emulator", "--dataset-name",
                           "random", "--random-input-len", "64", "--random-output-len", "4",
                           "--num-prompts", "4", "--common-prefix-len", "32", "--trace",
                           "t.jsonl", "--format", "vllm", "--no-progress"],
                          capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(ln) for ln in (tmp_path / "t.jsonl").open()]
    assert rows[0]["dataset"]["prefix_tokens"] == 32
    reqs = [r for r in rows if r.get("type") == "request"]
    assert len(reqs) == 4 and all(r["prompt_tokens"] == 96 for r in reqs)
