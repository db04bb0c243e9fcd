"""Hostile inputs generated from each reader's schema (hypothesis): valid documents are read,
and every mutation of one (an unknown key at each nesting level, a value of the wrong type,
NaN, infinity, a negative or huge number where the schema bounds it, a future schema
version, repeated request ids, a truncated or corrupt gzip) is one RidgelineError line that
names the field, never another exception (which the command line would report as an
internal error, exit 70). Readers are called in-process; a few examples go through the
installed command.
"""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ridgeline.errors import RidgelineError
from ridgeline.inputs import CappedInput
from ridgeline.sim.calibrated_profile import (
    MAX_BLOCK_SIZE_TOKENS,
    MAX_NUM_SEQS,
    CalibrationProfile,
    Scheduling,
)
from ridgeline.sim.engine_costs import EngineCostsFile, load_engine_costs
from ridgeline.specs.hardware import (
    HardwareFile,
    check_hardware_file,
    hardware_catalog,
    load_hardware,
)
from ridgeline.trace.reader import read_trace
from ridgeline.workload.arrivals import ARRIVAL_KEYS, parse_arrival
from ridgeline.workload.lengths import LENGTH_KEYS, parse_lengths

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
FAST = settings(max_examples=30, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# Keys no schema here has (a misspelling of a real one, or junk).
unknown_keys = st.sampled_from(["bacth", "max_num_seq", "stepS", "x", "ToKeNs", "_extra",
                                "per_pair", "schema"])
# Values that no numeric field with a stated range takes.
bad_numbers = st.sampled_from([math.nan, math.inf, -math.inf, -1, -1e-9, 1e300, 10**40,
                               "1", "fast", [1], {"v": 1}, True, None])


def _one_line(exc: RidgelineError) -> str:
    text = str(exc)
    assert "\n" not in text and text, text
    return text


# ---- calibration profile ---------------------------------------------------------------


@st.composite
def profiles(draw: Any) -> dict[str, Any]:
    """A valid profile document: an ascending table of 2..6 token counts, step times in
    range, scheduling fields within their bounds, a residual."""
    tokens = sorted(draw(st.sets(st.integers(1, 100_000), min_size=2, max_size=6)))
    steps = [draw(st.floats(1e-6, 10.0)) for _ in tokens]
    seqs = draw(st.integers(1, MAX_NUM_SEQS))
    return {
        "kind": "ridgeline-calibration", "schema_version": 1, "tokens": tokens,
        "step_s": steps, "per_pair_s": draw(st.floats(0, 1e-3)),
        "kv_bytes_per_token": draw(st.floats(0, 1e6)),
        "kv_capacity_tokens": draw(st.integers(1, 10**9)),
        "scheduling": {"preset": "vllm", "max_num_seqs": seqs,
                       "max_num_batched_tokens": draw(st.integers(1, 100_000)),
                       "block_size_tokens": draw(st.integers(1, MAX_BLOCK_SIZE_TOKENS)),
                       "chunked_prefill": draw(st.booleans())},
        "residuals": [{"point": "decode-b1", "tokens": tokens[0], "pairs": 10.0,
                       "measured_s": steps[0], "fitted_s": steps[0], "samples": 3}],
        "provenance": {"engine": "vllm", "model": "m", "created_unix_s": 1.7e9},
    }


# Numeric fields of the profile with a stated range: where a bad number goes.
PROFILE_NUMBERS = [("per_pair_s",), ("kv_bytes_per_token",), ("kv_capacity_tokens",),
                   ("step_s", 0), ("tokens", 1), ("scheduling", "max_num_seqs"),
                   ("scheduling", "max_num_batched_tokens"),
                   ("scheduling", "block_size_tokens"), ("residuals", 0, "measured_s"),
                   ("residuals", 0, "tokens"), ("provenance", "created_unix_s"),
                   ("schema_version",)]
# Objects of the profile that refuse keys they do not know (provenance is a free record).
PROFILE_OBJECTS = [(), ("scheduling",), ("residuals", 0)]


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _read_profile(doc: dict[str, Any]) -> CalibrationProfile:
    # Through JSON text as a file is read: NaN and infinity as Python's json writes them.
    return CalibrationProfile.read(json.loads(json.dumps(doc)), "--calibration: p.json")


@FAST
@given(profiles())
def test_a_valid_profile_is_read(doc: dict[str, Any]) -> None:
    prof = _read_profile(doc)
    assert prof.tokens == doc["tokens"] and prof.scheduling.max_num_seqs == \
        doc["scheduling"]["max_num_seqs"]


@FAST
@given(profiles(), st.sampled_from(PROFILE_OBJECTS), unknown_keys)
def test_an_unknown_profile_key_at_any_level_is_named(doc, where, key) -> None:
    _at(doc, where)[key] = 1
    with pytest.raises(RidgelineError) as err:
        _read_profile(doc)
    path = ".".join(str(p) for p in (*where, key))
    assert f"{path}: unknown field; allowed: " in _one_line(err.value)


@FAST
@given(profiles(), st.sampled_from(PROFILE_NUMBERS), bad_numbers)
def test_a_bad_number_in_a_profile_is_named(doc, where, value) -> None:
    _at(doc, where[:-1])[where[-1]] = value
    if where == ("schema_version",) and value is True:
        value = 2  # True is 1 to json: a future version instead
        doc["schema_version"] = 2
    with pytest.raises(RidgelineError) as err:
        _read_profile(doc)
    assert str(where[0]) in _one_line(err.value)


@FAST
@given(profiles(), st.integers(2, 10**6))
def test_a_future_profile_version_is_refused(doc, version) -> None:
    doc["schema_version"] = version
    with pytest.raises(RidgelineError, match="schema_version: got"):
        _read_profile(doc)


@settings(max_examples=3, deadline=None)
@given(profiles(), st.sampled_from(PROFILE_OBJECTS), unknown_keys)
def test_the_installed_command_refuses_a_mutated_profile(doc, where, key) -> None:
    _at(doc, where)[key] = 1
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "p.json"
        p.write_text(json.dumps(doc))
        proc = subprocess.run([RIDGELINE, "estimate", "--calibration", str(p)],
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: ") and "unknown field" in line


# ---- engine costs file -----------------------------------------------------------------


@st.composite
def engine_docs(draw: Any) -> dict[str, Any]:
    secs = st.floats(0, 60)
    return {"engine": "vllm", "costs": {
        "request_overhead_s": {"value": draw(secs), "unit": "s"},
        "request_overhead_steps": {"value": draw(st.floats(0, 1000)), "unit": "steps"},
        "step_overhead_s": {"value": draw(secs), "unit": "s",
                            "cv_fold_values": {"a": draw(secs)}}},
            "provenance": {"date": "2026-12-07", "cv_ape": {"ttft": draw(st.floats(0, 1))}}}


ENGINE_OBJECTS = [(), ("costs",), ("costs", "request_overhead_s"),
                  ("costs", "step_overhead_s")]
ENGINE_NUMBERS = [("costs", "request_overhead_s", "value"),
                  ("costs", "request_overhead_steps", "value"),
                  ("costs", "step_overhead_s", "cv_fold_values", "a"),
                  ("provenance", "cv_ape", "ttft")]


def _load_engine(doc: dict[str, Any], tmp: Path) -> Any:
    p = tmp / "e.json"
    p.write_text(json.dumps(doc))
    return load_engine_costs(str(p))


@FAST
@given(engine_docs())
def test_a_valid_engine_costs_file_is_read(tmp_path, doc) -> None:
    costs = _load_engine(doc, tmp_path)
    assert costs.request_overhead_s == doc["costs"]["request_overhead_s"]["value"]
    assert EngineCostsFile.model_validate(doc).costs.step_overhead_s.unit == "s"


@FAST
@given(engine_docs(), st.sampled_from(ENGINE_OBJECTS), unknown_keys)
def test_an_unknown_engine_costs_key_is_named(tmp_path, doc, where, key) -> None:
    _at(doc, where)[key] = 1
    with pytest.raises(RidgelineError) as err:
        _load_engine(doc, tmp_path)
    assert f"{'.'.join((*where, key))}: unknown field" in _one_line(err.value)


@FAST
@given(engine_docs(), st.sampled_from(ENGINE_NUMBERS), bad_numbers)
def test_a_bad_engine_cost_is_named(tmp_path, doc, where, value) -> None:
    _at(doc, where[:-1])[where[-1]] = value
    with pytest.raises(RidgelineError) as err:
        _load_engine(doc, tmp_path)
    assert ".".join(where[:2]) in _one_line(err.value)


# ---- the UI's request bodies -----------------------------------------------------------


@pytest.fixture(scope="module")
def ui() -> Any:
    from starlette.testclient import TestClient

    from ridgeline.ui.app import create_app

    return TestClient(create_app())


@FAST
@given(st.sampled_from(["/api/estimate", "/api/simulate"]),
       st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1,
               max_size=12).filter(lambda k: k not in {
                   "model", "config", "config_name", "hardware", "weights", "kv",
                   "activations", "tp", "pp", "ep", "batch", "prompt", "output", "rates",
                   "requests", "seed", "slos", "engine_costs"}))
def test_an_unknown_ui_field_is_a_400_naming_it(ui, path, key) -> None:
    r = ui.post(path, json={key: 1})
    assert r.status_code == 400
    assert r.json()["error"].startswith(f"request: {key}: unknown field; allowed: ")


@FAST
@given(st.sampled_from(["batch", "prompt", "output", "tp", "pp", "ep"]), bad_numbers)
def test_a_bad_ui_number_is_a_400_never_a_500(ui, name, value) -> None:
    if value is None:
        value = -5  # null is "the default" for an optional field
    r = ui.post("/api/estimate", content=json.dumps({name: value}).encode(),
                headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text[:200]
    assert name in r.json()["error"]


# ---- arrival and length specs ----------------------------------------------------------


@FAST
@given(st.sampled_from(sorted(ARRIVAL_KEYS)), st.data())
def test_an_arrival_key_its_kind_does_not_take_is_refused(kind, data) -> None:
    taken = {k for keys in ARRIVAL_KEYS.values() for k in keys}
    others = [*sorted(taken - set(ARRIVAL_KEYS[kind]) - {"value"}), "bogus"]
    key = data.draw(st.sampled_from(others))
    with pytest.raises(RidgelineError) as err:
        parse_arrival(f"{kind}:{key}=3", 2.0)
    assert f"{kind} does not take {key}=" in _one_line(err.value)


@FAST
@given(st.sampled_from(sorted(LENGTH_KEYS)), st.data())
def test_a_length_key_its_kind_does_not_take_is_refused(kind, data) -> None:
    taken = {k for keys in LENGTH_KEYS.values() for k in keys}
    others = [*sorted(taken - set(LENGTH_KEYS[kind]) - {"value"}), "bogus"]
    key = data.draw(st.sampled_from(others))
    with pytest.raises(RidgelineError) as err:
        parse_lengths(f"{kind}:{key}=3", "--prompt")
    assert f"{kind} does not take {key}=" in _one_line(err.value)


# ---- traces: duplicated ids, non-finite times, wrong types, gzip -----------------------


@st.composite
def traces(draw: Any) -> list[dict[str, Any]]:
    n = draw(st.integers(2, 12))
    recs = []
    for i in range(n):
        sent = draw(st.floats(0, 100))
        gaps = draw(st.lists(st.floats(1e-4, 1.0), min_size=1, max_size=5))
        ev = [sent + sum(gaps[:k + 1]) for k in range(len(gaps))]
        recs.append({"type": "request", "id": f"r{i}", "sent_s": sent,
                     "event_times_s": ev, "end_s": ev[-1], "prompt_tokens": 10,
                     "output_tokens": len(ev), "status": "ok"})
    return recs


def _trace_bytes(recs: list[dict[str, Any]]) -> bytes:
    head = {"type": "header", "schema_version": 1, "source": "test"}
    foot = {"type": "footer", "requests_written": len(recs), "end_time_s": 1e3}
    return ("\n".join(json.dumps(x) for x in [head, *recs, foot]) + "\n").encode()


@FAST
@given(traces(), st.booleans())
def test_a_valid_trace_is_read_plain_or_gzip(tmp_path, recs, gz) -> None:
    p = tmp_path / ("t.jsonl.gz" if gz else "t.jsonl")
    data = _trace_bytes(recs)
    p.write_bytes(gzip.compress(data) if gz else data)
    assert read_trace(p).ids == [r["id"] for r in recs]


@FAST
@given(traces(), st.data())
def test_a_mutated_trace_is_one_error_line(tmp_path, recs, data) -> None:
    i = data.draw(st.integers(0, len(recs) - 1))
    how = data.draw(st.sampled_from(["dup", "nan", "str", "list", "neg_tokens"]))
    if how == "dup":
        recs[i]["id"] = recs[(i + 1) % len(recs)]["id"]
    elif how == "nan":
        recs[i]["event_times_s"][0] = math.nan
    elif how == "str":
        recs[i]["sent_s"] = "noon"
    elif how == "list":
        recs[i]["prompt_tokens"] = [10]
    else:
        recs[i]["output_tokens"] = -3
    p = tmp_path / "t.jsonl"
    p.write_bytes(_trace_bytes(recs))
    with pytest.raises(RidgelineError) as err:
        read_trace(p)
    _one_line(err.value)


@FAST
@given(traces(), st.data())
def test_a_truncated_or_corrupt_gzip_is_one_error_line(tmp_path, recs, data) -> None:
    gz = bytearray(gzip.compress(_trace_bytes(recs)))
    if data.draw(st.booleans()):
        gz = gz[:data.draw(st.integers(1, len(gz) - 1))]
    else:  # one byte of the compressed body (past the 10-byte header) changed
        at = data.draw(st.integers(10, len(gz) - 9))
        gz[at] ^= data.draw(st.integers(1, 255))
    p = tmp_path / "t.jsonl.gz"
    p.write_bytes(bytes(gz))
    with pytest.raises(RidgelineError) as err:
        read_trace(p)
    assert "gzip" in _one_line(err.value) or "line" in str(err.value)


@FAST
@given(st.integers(1, 64), st.integers(1, 3), st.booleans())
def test_a_line_past_its_cap_is_refused_plain_or_gzip(tmp_path, kib, extra, gz) -> None:
    """The line cap, small here (64 MiB in use), whatever the blocks' sizes."""
    data = b"x" * (kib * 1024 + extra)
    p = tmp_path / "line.txt"
    p.write_bytes(gzip.compress(data) if gz else data)
    raw = gzip.open(p, "rb") if gz else open(p, "rb")  # noqa: SIM115 - closed by CappedInput
    with pytest.raises(RidgelineError, match=r"a line longer than"), \
            CappedInput(raw, "line.txt", "trace", compressed=gz,
                        max_line_bytes=kib * 1024) as fh:
        while fh.read(4096):
            pass


def test_a_gzip_bomb_stops_at_the_stated_cap(tmp_path) -> None:
    p = tmp_path / "b.gz"
    p.write_bytes(gzip.compress(b"\n" * (3 << 20)))
    with pytest.raises(RidgelineError) as err, \
            CappedInput(gzip.open(p, "rb"), "b.gz", "trace", compressed=True,
                        max_bytes=2 << 20) as fh:
        fh.read()
    assert _one_line(err.value) == ("trace: 'b.gz': decompressed size exceeds 2 MiB; "
                                    "allowed: at most that")


def test_schema_classes_forbid_unknown_fields() -> None:
    """Every schema here refuses what it does not know (provenance records excepted)."""
    for model in (CalibrationProfile, Scheduling, EngineCostsFile, HardwareFile):
        assert model.model_config.get("extra") == "forbid", model


# ---- hardware files --------------------------------------------------------------------


def test_every_catalog_gpu_passes_the_user_file_schema() -> None:
    """A catalog entry copied to a file is a valid user file (a catalog field the schema
    lacks would be refused in users' copies: add it to `HardwareFile`)."""
    for name, entry in hardware_catalog().items():
        check_hardware_file(entry, name)


HW_NUMBERS = [("memory_bandwidth_bytes_s",), ("memory_bytes",),
              ("interconnect_bandwidth_bytes_s",), ("compute_efficiency",),
              ("bandwidth_efficiency",), ("kernel_overhead_us",), ("interconnect_latency_s",),
              ("peak_flops", "bf16")]


@FAST
@given(st.sampled_from(sorted(hardware_catalog())), st.sampled_from(HW_NUMBERS),
       bad_numbers.filter(lambda v: v is not None),
       unknown_keys.filter(lambda k: not k.startswith("_")),  # "_" keys are notes
       st.booleans())
def test_a_mutated_hardware_file_is_named(tmp_path, gpu, where, value, key, unknown) -> None:
    doc = json.loads(json.dumps(hardware_catalog()[gpu]))
    if unknown:
        doc[key] = 1
    else:
        _at(doc, where[:-1])[where[-1]] = value
    p = tmp_path / "hw.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(RidgelineError) as err:
        load_hardware(str(p))
    assert (f"{key}: unknown field" if unknown else where[0]) in _one_line(err.value)


# ---- replay files (Mooncake JSONL) -----------------------------------------------------


@st.composite
def mooncake_rows(draw: Any) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 6))
    return [{"timestamp": draw(st.integers(0, 10**9)), "input_length": draw(st.integers(0, 4096)),
             "output_length": draw(st.integers(0, 4096)), "hash_ids": [i]} for i in range(n)]


def _read_mooncake(rows: list[dict[str, Any]], tmp: Path) -> Any:
    from ridgeline.workload.timed_trace_reader import read_timed_trace

    p = tmp / "m.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return read_timed_trace(str(p))


@FAST
@given(mooncake_rows(), st.data())
def test_a_mutated_mooncake_record_is_named(tmp_path, rows, data) -> None:
    assert len(_read_mooncake(rows, tmp_path).times_s) == len(rows)
    i = data.draw(st.integers(0, len(rows) - 1))
    if data.draw(st.booleans()):
        key = data.draw(unknown_keys)
        rows[i][key] = 1
        expect = f"{key}: unknown field"
    else:
        key = data.draw(st.sampled_from(["timestamp", "input_length", "output_length"]))
        rows[i][key] = data.draw(st.sampled_from([-1, 1e300, "5", True, [1], 2.5]))
        if key == "timestamp" and rows[i][key] == 2.5:
            rows[i][key] = -2.5  # a fractional millisecond is a time; a negative is not
        expect = key
    with pytest.raises(RidgelineError) as err:
        _read_mooncake(rows, tmp_path)
    assert expect in _one_line(err.value)
