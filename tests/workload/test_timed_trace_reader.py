"""Replay files (BurstGPT, Mooncake): the bounds a real trace must pass, at their edges."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ridgeline.errors import RidgelineError
from ridgeline.workload.timed_trace_reader import MAX_SPEEDUP, MIN_SPEEDUP, read_timed_trace


def _mooncake(tmp_path: Path, rows: list[dict[str, object]]) -> str:
    p = tmp_path / "trace.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


def test_speedup_bounds_are_inclusive(tmp_path: Path) -> None:
    path = _mooncake(tmp_path, [{"timestamp": 0, "input_length": 5, "output_length": 2},
                                {"timestamp": 2000, "input_length": 7, "output_length": 3}])
    # 2 s between the rows, divided by the speedup
    for speedup in (MIN_SPEEDUP, MAX_SPEEDUP):
        t = read_timed_trace(path, speedup=speedup)
        assert t.times_s.tolist() == pytest.approx([0.0, 2.0 / speedup])
    for speedup in (MIN_SPEEDUP / 2, MAX_SPEEDUP * 2):
        with pytest.raises(RidgelineError, match="speedup="):
            read_timed_trace(path, speedup=speedup)


def test_hash_ids_one_per_512_token_block_with_slack(tmp_path: Path) -> None:
    # Mooncake's hash_ids name a prompt's 512-token blocks: a 1,000-token prompt has
    # ceil(1000 / 512) = 2; the reader allows 1000 // 512 + 2 = 3 (a partial block either
    # end) and refuses a fourth.
    ok = _mooncake(tmp_path, [{"timestamp": 0, "input_length": 1000, "output_length": 2,
                               "hash_ids": [1, 2, 3]}])
    assert read_timed_trace(ok).hash_ids == [(1, 2, 3)]
    bad = _mooncake(tmp_path, [{"timestamp": 0, "input_length": 1000, "output_length": 2,
                                "hash_ids": [1, 2, 3, 4]}])
    with pytest.raises(RidgelineError, match="at most 3 integer block ids"):
        read_timed_trace(bad)
    # no hash_ids (or an empty list) is no reuse information, not an error
    none = _mooncake(tmp_path, [{"timestamp": 0, "input_length": 10, "output_length": 2}])
    assert read_timed_trace(none).hash_ids == [()]
    assert np.array_equal(read_timed_trace(none).prompt_tokens, [10])
