"""A second set of hostile inputs against the installed `ridgeline`.

Every case runs the console script in its own process group, under an address-space limit
(RLIMIT_AS, default 3 GiB) and a 10 s timeout, and is classified:

- traceback:  "Traceback" anywhere in stdout/stderr;
- exit70:     an internal error (a bug) where bad input was given;
- exit0:      bad input accepted (exit 0) where an `error:` line is due;
- contract:   exit 2 but not exactly one `error:` line on stderr and nothing on stdout,
              or an exit code the contract does not know (docs/cli.md);
- hang:       still running after the timeout (the process group is killed);
- memory:     a peak resident set over 2 GiB (wait4's ru_maxrss), MemoryError, or killed
              by a signal (the limit was hit);
- overwritten: an input file's bytes changed;
- http500 / http-hang / http-noanswer / server-died: the emulator's (`serve`) and the UI's
              (`ui`) HTTP API, through raw sockets;
- ctrl-c:     SIGINT to each long command: exit 130 within 2 s, its child processes gone.

Cases marked "odd" are odd but valid input: they must not crash, hang or blow up, and may
exit 0 (a negative send time on a trace's own clock, a gzip'd trace, vLLM's `--request-rate
inf`, an SLO limit of -0, fields ridgeline does not read such as torch_dtype). Run:

    .venv/bin/python tools/hostile_inputs/hostile_inputs.py   # everything (~3-5 min, 2 cores)
    .venv/bin/python tools/hostile_inputs/hostile_inputs.py --only cli --jobs 3
    .venv/bin/python tools/hostile_inputs/hostile_inputs.py --only ctrlc

The tally (and every failing case) is printed; `--json FILE` saves each case's result.
The table of the last run is in docs/BENCHMARKS.md ("Hostile inputs, second set").
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ridgeline.ray_stop import descendants  # the /proc walk the library stops Ray with

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
TIMEOUT_S = 10.0
LIMIT_BYTES = 3 << 30
PEAK_BYTES = 2 << 30
RO = "/proc/ridgeline-nope"   # a path no one can create, even root
# bench cases talk to one `ridgeline serve` started for them (starting an emulator per case
# took ~9 s of the 10 on a loaded 2-core box)
URL = ["http://127.0.0.1:9"]


@dataclass
class Case:
    id: str
    args: list[str]
    odd: bool = False            # odd but valid: exit 0 is fine
    stdin: bytes | None = None


@dataclass
class Result:
    id: str
    args: list[str]
    rc: int | None
    wall_s: float
    peak_bytes: int
    klass: str                   # "ok" or the failure class
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# ---- the hostile files --------------------------------------------------------------------


def _write(d: Path, name: str, data: str | bytes) -> None:
    p = d / name
    if isinstance(data, bytes):
        p.write_bytes(data)
    else:
        p.write_text(data, encoding="utf-8")


def build_files(d: Path) -> None:
    """The files the cases read, in `d` (a valid trace, profile, configs and their broken
    twins)."""
    sim = subprocess.run([RIDGELINE, "simulate", "--rate", "5", "-n", "60", "--prompt",
                          "fixed:100", "--output", "fixed:20", "--seed", "3", "--trace",
                          str(d / "good.jsonl"), "--json"], capture_output=True, text=True)
    assert sim.returncode == 0, sim.stderr
    lines = (d / "good.jsonl").read_text().splitlines()
    head, reqs, foot = lines[0], lines[1:-1], lines[-1]
    rec = json.loads(reqs[0])

    def trace(name: str, records: list[Any], header: str = head, footer: str | None = foot,
              sep: str = "\n") -> None:
        body = [header, *[r if isinstance(r, str) else json.dumps(r) for r in records]]
        if footer is not None:
            body.append(footer)
        _write(d, name, sep.join(body) + sep)

    # traces
    trace("t_dup_ids.jsonl", [rec, rec, rec])
    trace("t_unicode_id.jsonl", [{**rec, "id": "\u202e\u0000\ud7ff\U0001f600" * 50}])
    trace("t_huge_time.jsonl", [{**rec, "end_s": 1e308}])
    trace("t_neg_time.jsonl", [{**rec, "sent_s": -1e9, "scheduled_s": -1e9}])
    trace("t_out_of_order.jsonl", [{**rec, "event_times_s": rec["event_times_s"][::-1]}])
    trace("t_huge_tokens.jsonl", [{**rec, "prompt_tokens": 10**30}])
    trace("t_float_tokens.jsonl", [{**rec, "output_tokens": 2.5}])
    trace("t_str_times.jsonl", [{**rec, "event_times_s": "0.1,0.2"}])
    trace("t_nan_time.jsonl", [json.dumps(rec).replace(f'"end_s":{rec["end_s"]}', '"end_s":NaN')
                               .replace(f'"end_s": {rec["end_s"]}', '"end_s": NaN')])
    trace("t_many_events.jsonl", [{**rec, "event_times_s": [0.5] * 200_000,
                                   "output_tokens": 200_000}])
    trace("t_crlf.jsonl", reqs, sep="\r\n")
    _write(d, "t_bom.jsonl", "\ufeff" + "\n".join(lines) + "\n")
    _write(d, "t_empty.jsonl", "")
    _write(d, "t_blank_lines.jsonl", "\n\n\n   \n")
    trace("t_no_header.jsonl", reqs, header=reqs[0])
    trace("t_header_array.jsonl", reqs, header="[1,2,3]")
    trace("t_header_wrong_version.jsonl", reqs,
          header=json.dumps({**json.loads(head), "schema_version": 999}))
    trace("t_garbage_line.jsonl", [*reqs[:5], "{{{{not json", *reqs[5:]])
    trace("t_deep_line.jsonl", [*reqs[:2], "[" * 50_000 + "]" * 50_000])
    trace("t_bigint_line.jsonl", [*reqs[:2], '{"type":"request","id":"x","sent_s":'
                                  + "9" * 5000 + "}"])
    trace("t_type_int.jsonl", [{**rec, "type": 7}])
    trace("t_status_odd.jsonl", [{**rec, "status": {"a": 1}}])
    trace("t_all_rejected.jsonl", [{**r, "status": "rejected", "event_times_s": [],
                                    "output_tokens": 0} for r in map(json.loads, reqs)])
    _write(d, "t_only_footer.jsonl", foot + "\n")
    _write(d, "t_binary.jsonl", os.urandom(8192))
    _write(d, "t_utf16.jsonl", "\n".join(lines).encode("utf-16"))
    _write(d, "t_latin1.jsonl", "\n".join(lines).replace('"0"', '"caf\xe9"', 1)
           .encode("latin-1"))
    _write(d, "t_gzip.jsonl.gz", gzip.compress(("\n".join(lines) + "\n").encode()))
    _write(d, "t_gzip_named.jsonl", gzip.compress(("\n".join(lines) + "\n").encode()))
    _write(d, "t_long_line.jsonl", head + "\n" + '{"type":"request","id":"' + "a" * 30_000_000
           + '"}\n')
    _write(d, "t_trunc.jsonl", "\n".join(lines)[: len("\n".join(lines)) // 2])
    os.mkfifo(d / "fifo.jsonl")
    (d / "adir.jsonl").mkdir()
    os.symlink(d / "loop_a", d / "loop_b")
    os.symlink(d / "loop_b", d / "loop_a")
    os.symlink(d / "nowhere", d / "dangling.jsonl")
    _write(d, "noperm.jsonl", "\n".join(lines) + "\n")
    os.chmod(d / "noperm.jsonl", 0)
    # peer exports (AIPerf, GuideLLM, vLLM) from the good trace, then broken
    for to in ("aiperf", "guidellm", "vllm"):
        subprocess.run([RIDGELINE, "export", str(d / "good.jsonl"), "--to", to, "--out",
                        str(d / f"peer.{to}.json")], check=True, capture_output=True)
    vllm = json.loads((d / "peer.vllm.json").read_text())
    _write(d, "p_vllm_list.json", json.dumps([vllm]))
    _write(d, "p_vllm_ttfts_str.json", json.dumps({**vllm, "ttfts": "fast"}))
    _write(d, "p_vllm_short.json", json.dumps({**vllm, "ttfts": vllm["ttfts"][:3]}))
    _write(d, "p_vllm_nan.json", json.dumps({**vllm, "ttfts": [float("nan")] * len(
        vllm["ttfts"])}))
    _write(d, "p_vllm_neg.json", json.dumps({**vllm, "itls": [[-5.0]] * len(vllm["itls"])}))
    _write(d, "p_vllm_nested.json", json.dumps({**vllm, "itls": [[[1]]] * len(vllm["itls"])}))
    _write(d, "p_vllm_empty.json", "{}")
    gl = json.loads((d / "peer.guidellm.json").read_text())
    _write(d, "p_guidellm_bench_obj.json", json.dumps({**gl, "benchmarks": {"a": 1}}))
    _write(d, "p_guidellm_no_requests.json", json.dumps(
        {**gl, "benchmarks": [{"config": {}, "requests": None}]}))
    g2 = json.loads(json.dumps(gl))
    for r in g2["benchmarks"][0]["requests"]["successful"]:
        r["info"]["timings"]["request_start"] = "yesterday"
    _write(d, "p_guidellm_str_time.json", json.dumps(g2))
    ai = (d / "peer.aiperf.json").read_text().splitlines()
    a0 = json.loads(ai[0])
    a0["metrics"]["time_to_first_token"] = {"value": "x", "unit": "ms"}
    _write(d, "p_aiperf_str.jsonl", "\n".join([json.dumps(a0), *ai[1:]]) + "\n")
    a1 = json.loads(ai[0])
    a1["metadata"]["request_start_ns"] = 10**40
    _write(d, "p_aiperf_huge_ns.jsonl", "\n".join([json.dumps(a1), *ai[1:]]) + "\n")
    a2 = json.loads(ai[0])
    a2["metrics"] = [1, 2]
    _write(d, "p_aiperf_metrics_list.jsonl", "\n".join([json.dumps(a2), *ai[1:]]) + "\n")
    _write(d, "p_aiperf_scalar.jsonl", "1\n2\n3\n")
    # calibration profiles
    from ridgeline.sim.calibrated_profile import CalibrationProfile

    good = json.loads(CalibrationProfile.from_table(
        [1, 8, 64, 512], [0.01, 0.012, 0.03, 0.2], kv_bytes_per_token=131072,
        kv_capacity_tokens=100000).model_dump_json(by_alias=True))
    _write(d, "prof.json", json.dumps(good))

    def prof(name: str, path: list[Any], value: Any) -> None:
        obj = json.loads(json.dumps(good))
        node = obj
        for k in path[:-1]:
            node = node[k]
        if value is _DELETE:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
        _write(d, name, json.dumps(obj))

    prof("c_tokens_unsorted.json", ["tokens"], [512, 1, 64, 8])
    prof("c_tokens_dup.json", ["tokens"], [1, 1, 1, 1])
    prof("c_tokens_neg.json", ["tokens"], [-1, 8, 64, 512])
    prof("c_tokens_float.json", ["tokens"], [1.5, 8, 64, 512])
    prof("c_len_mismatch.json", ["step_s"], [0.01, 0.02])
    prof("c_step_str.json", ["step_s"], ["a", "b", "c", "d"])
    prof("c_step_zero.json", ["step_s"], [0, 0, 0, 0])
    prof("c_step_decreasing.json", ["step_s"], [0.2, 0.03, 0.012, 0.01])
    prof("c_tokens_huge.json", ["tokens"], [1, 8, 64, 10**20])
    prof("c_no_tokens.json", ["tokens"], _DELETE)
    prof("c_sched_str.json", ["scheduling"], "vllm")
    prof("c_kvcap_huge.json", ["kv_capacity_tokens"], 10**30)
    prof("c_kvcap_float.json", ["kv_capacity_tokens"], 1e5 + 0.5)
    prof("c_mnbt_zero.json", ["scheduling", "max_num_batched_tokens"], 0)
    prof("c_version.json", ["schema_version"], "two")
    # the readers' grammar: a later schema, an unknown field inside an object
    prof("c_future.json", ["schema_version"], 2)
    prof("c_sched_unknown.json", ["scheduling", "bacth"], 8)
    prof("c_residual_unknown.json", ["residuals"], [{"point": "p", "tokens": 1, "pairs": 0.0,
                                                    "measured_s": 0.01, "fitted_s": 0.01,
                                                    "sampels": 3}])
    prof("c_extra_nested.json", ["provenance"], {"x": [[[[[[1]]]]]] * 1000})
    _write(d, "c_array.json", "[]")
    _write(d, "c_null.json", "null")
    _write(d, "c_bom.json", "\ufeff" + json.dumps(good))
    _write(d, "c_crlf.json", json.dumps(good, indent=1).replace("\n", "\r\n"))
    # model configs (HF config.json)
    from ridgeline.specs import model_catalog

    cfg = {k: v for k, v in model_catalog()["llama-3.1-8b"].items() if not k.startswith("_")}
    mix = {k: v for k, v in model_catalog()["mixtral-8x7b"].items() if not k.startswith("_")} \
        if "mixtral-8x7b" in model_catalog() else cfg

    def model(name: str, **over: Any) -> None:
        obj = {**cfg}
        for k, v in over.items():
            if v is _DELETE:
                obj.pop(k, None)
            else:
                obj[k] = v
        _write(d, name, json.dumps(obj))

    model("m_heads_nodiv.json", num_attention_heads=7)
    model("m_kv_heads_nodiv.json", num_key_value_heads=5)
    model("m_kv_heads_more.json", num_key_value_heads=64)
    model("m_hidden_neg.json", hidden_size=-4096)
    model("m_hidden_str.json", hidden_size="4096")
    model("m_hidden_float.json", hidden_size=4096.5)
    model("m_layers_zero.json", num_hidden_layers=0)
    model("m_layers_huge.json", num_hidden_layers=10**12)
    model("m_vocab_neg.json", vocab_size=-1)
    model("m_vocab_huge.json", vocab_size=10**300)
    model("m_inter_nan.json", intermediate_size=float("nan"))
    model("m_ctx_zero.json", max_position_embeddings=0)
    model("m_ctx_neg.json", max_position_embeddings=-5)
    model("m_head_dim_zero.json", head_dim=0)
    model("m_no_hidden.json", hidden_size=_DELETE)
    model("m_text_config_str.json", text_config="garbage", hidden_size=_DELETE)
    model("m_text_config_list.json", text_config=[1, 2], model_type="llava")
    model("m_text_config_deep.json", model_type="llava", hidden_size=_DELETE,
          text_config={"text_config": {"text_config": {"hidden_size": "x"}}})
    model("m_quant_str.json", quantization_config="fp8")
    model("m_quant_bits.json", quantization_config={"quant_method": "awq", "bits": -3})
    model("m_quant_method.json", quantization_config={"quant_method": ["fp8"]})
    model("m_quant_groups.json", quantization_config={"quant_method": "gptq", "bits": 4,
                                                      "group_size": 0})
    model("m_dtype.json", torch_dtype="float1024")
    model("m_layer_types.json", layer_types="sliding", sliding_window=4096)
    model("m_window_neg.json", sliding_window=-1, layer_types=["sliding_attention"] * 32)
    model("m_rope_str.json", rope_scaling="yes")
    if mix is not cfg:
        _write(d, "m_experts_zero.json", json.dumps({**mix, "num_local_experts": 0}))
        _write(d, "m_topk_more.json", json.dumps({**mix, "num_experts_per_tok": 99}))
    _write(d, "m_array.json", "[]")
    _write(d, "m_deep.json", '{"a":' * 100_000 + "1" + "}" * 100_000)
    # hardware files
    from ridgeline.specs import hardware_catalog

    hw = {k: v for k, v in hardware_catalog()["h100-sxm"].items() if not k.startswith("_")}
    for name, over in {"h_bw_zero": {"memory_bandwidth_bytes_s": 0},
                       "h_mem_str": {"memory_bytes": "80GB"},
                       "h_flops_neg": {"peak_flops": {**hw["peak_flops"], "bf16": -1}},
                       "h_flops_list": {"peak_flops": [1, 2]},
                       "h_eff_big": {"compute_efficiency": 7},
                       "h_overhead_nan": {"kernel_overhead_us": float("nan")},
                       "h_mem_huge": {"memory_bytes": 10**40}}.items():
        _write(d, f"{name}.json", json.dumps({**hw, **over}))
    # engine costs files (--engine FILE)
    eng = json.loads((Path(__file__).resolve().parents[2] / "src/ridgeline/specs/data/engines"
                      / "vllm.json").read_text())

    def engine(name: str, key: str, value: Any) -> None:
        obj = json.loads(json.dumps(eng))
        if value is _DELETE:
            obj["costs"].pop(key)
        else:
            obj["costs"][key] = value
        _write(d, name, json.dumps(obj))

    engine("e_nan.json", "request_overhead_s", {"value": float("nan"), "unit": "s"})
    engine("e_neg.json", "request_overhead_s", {"value": -1.0, "unit": "s"})
    engine("e_missing.json", "request_overhead_s", _DELETE)
    engine("e_str.json", "step_overhead_s", {"value": "fast", "unit": "s"})
    engine("e_huge.json", "request_overhead_steps", {"value": 1e300, "unit": "steps"})
    engine("e_unit.json", "request_overhead_s", {"value": 5.5, "unit": "ms"})
    _write(d, "e_costs_list.json", json.dumps({**eng, "costs": [1, 2]}))
    _write(d, "e_empty.json", "{}")
    # replay files
    head_csv = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    _write(d, "r_header_only.csv", head_csv)
    _write(d, "r_cols_missing.csv", "Timestamp,Model\n0,a\n1,a\n")
    _write(d, "r_unsorted.csv", head_csv + "5,a,10,2,12,x\n1,a,10,2,12,x\n3,a,10,2,12,x\n")
    _write(d, "r_huge_time.csv", head_csv + "0,a,10,2,12,x\n1e300,a,10,2,12,x\n")
    _write(d, "r_float_tokens.csv", head_csv + "0,a,10.5,2,12,x\n1,a,10,2,12,x\n")
    _write(d, "r_neg_tokens.csv", head_csv + "0,a,-10,2,12,x\n1,a,10,2,12,x\n")
    _write(d, "r_word_tokens.csv", head_csv + "0,a,ten,2,12,x\n1,a,10,2,12,x\n")
    _write(d, "r_crlf.csv", (head_csv + "0,a,10,2,12,x\n1,a,10,2,12,x\n").replace("\n", "\r\n"))
    _write(d, "r_ragged.csv", head_csv + "0,a,10\n1,a,10,2,12,x,extra,extra\n")
    _write(d, "r_quote.csv", head_csv + '"0,a,10,2,12,x\n1,a,10,2,12,x\n')
    _write(d, "r_bom.csv", "\ufeff" + head_csv + "0,a,10,2,12,x\n1,a,10,2,12,x\n")
    mrec = {"timestamp": 0, "input_length": 10, "output_length": 2}
    _write(d, "r_mooncake_hash_str.jsonl", json.dumps({**mrec, "hash_ids": "abc"}) + "\n")
    _write(d, "r_mooncake_hash_many.jsonl", json.dumps(
        {**mrec, "hash_ids": list(range(100_000))}) + "\n")
    _write(d, "r_mooncake_hash_neg.jsonl", json.dumps({**mrec, "hash_ids": [-1, 10**30]}) + "\n")
    _write(d, "r_mooncake_ts_str.jsonl", json.dumps({**mrec, "timestamp": "noon"}) + "\n")
    _write(d, "r_mooncake_missing.jsonl", json.dumps({"timestamp": 0}) + "\n")
    _write(d, "r_mooncake_array.jsonl", "[1,2,3]\n")
    _write(d, "r_mooncake_out_neg.jsonl", json.dumps({**mrec, "output_length": -2}) + "\n")
    _write(d, "r_secs_words.txt", "0\nsoon\n2\n")
    _write(d, "r_secs_huge.txt", "0\n1e20\n")
    _write(d, "r_secs_empty.txt", "")
    # length lists for empirical:
    _write(d, "l_neg.txt", "-5\n10\n")
    _write(d, "l_float.txt", "1.5\n2.5\n")
    _write(d, "l_huge.txt", "1e30\n")
    _write(d, "l_words.txt", "ten\n")
    _write(d, "l_empty.txt", "")
    # datasets for bench
    _write(d, "ds_sharegpt_obj.json", json.dumps({"conversations": "nope"}))
    _write(d, "ds_sharegpt_bad.json", json.dumps([{"conversations": [{"from": 1, "value": None}]}]
                                                 * 3))
    _write(d, "ds_custom_bad.jsonl", '{"prompt": 5}\n{"prompt": null}\n')
    # tokenizer files (serve --tokenizer)
    _write(d, "tok_garbage.json", '{"model": {"type": "BPE", "vocab": 5}}')
    _write(d, "tok_array.json", "[1,2,3]")
    _write(d, "tok_trunc.json", '{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0')
    _write(d, "tok_deep.json", "[" * 100_000 + "]" * 100_000)
    (d / "tok_dir").mkdir()
    _write(d / "tok_dir", "tokenizer.json", "not json at all")
    _write(d / "tok_dir", "tokenizer_config.json", '{"chat_template": "{% for %}"}')
    # timelines (report --timeline, plot timeline)
    _write(d, "tl_words.csv", "start_s,end_s,kind\nzero,one,decode\n")
    _write(d, "tl_reversed.csv", "start_s,end_s,kind\n5,1,decode\n")
    _write(d, "tl_empty.csv", "")
    # probe traces for `calibrate fit` (the trace reader's rules, then the probe schema)
    probe_head = {"type": "header", "schema_version": 1, "source": "bench",
                  "load": {"pattern": "closed", "concurrency": 2},
                  "calibration_probe": {"kind": "decode", "batch": 2, "label": "decode-b2"}}

    def probe(name: str, mutate: Any = None, head: dict[str, Any] | None = None) -> None:
        recs, t = [], 0.0
        for i in range(6):
            ev = [round(t + 0.05 + 0.02 * k, 6) for k in range(10)]
            recs.append({"type": "request", "id": f"r{i}", "sent_s": t, "event_times_s": ev,
                         "end_s": ev[-1], "prompt_tokens": 32, "output_tokens": 10,
                         "status": "ok"})
            t = ev[-1] + 0.01 if i % 2 else t
        if mutate is not None:
            mutate(recs)
        _write(d, name, "\n".join(json.dumps(x) for x in [head or probe_head, *recs]) + "\n")

    probe("pr_good.jsonl")
    probe("pr_nan.jsonl", lambda r: r[0]["event_times_s"].__setitem__(2, float("nan")))
    probe("pr_neg.jsonl", lambda r: r[0].update(sent_s=-6.0, event_times_s=[-5.0, -4.0]))
    probe("pr_dup.jsonl", lambda r: [x.update(id="same") for x in r])
    probe("pr_str.jsonl", lambda r: r[0].update(prompt_tokens="thirty-two"))
    probe("pr_batch_word.jsonl", head={**probe_head, "calibration_probe": {
        "kind": "decode", "batch": "eight", "label": "b8"}})
    # compressed traces: corrupt, truncated, a small file that is one enormous line
    gz = gzip.compress(("\n".join(lines) + "\n").encode())
    _write(d, "t_corrupt.jsonl.gz", gz[:20] + b"\x00garbage" * 10 + gz[100:])
    _write(d, "t_truncated.jsonl.gz", gz[: len(gz) // 2])
    import zlib

    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = co.compress(head.encode() + b'\n{"type":"request","id":"')
    for _ in range(512):
        bomb += co.compress(b"a" * (1 << 20))
    _write(d, "t_bomb_line.jsonl.gz", bomb + co.compress(b'"}\n') + co.flush())
    # a victim HTML, a victim profile
    _write(d, "victim.html", "<html>precious</html>")


_DELETE = object()


# ---- the CLI cases ------------------------------------------------------------------------


def cli_cases(d: Path) -> list[Case]:
    f = lambda name: str(d / name)  # noqa: E731
    o = lambda name: str(d / "out" / name)  # noqa: E731
    good, prof = f("good.jsonl"), f("prof.json")
    sim = ["simulate", "--rate", "2", "-n", "20"]
    cases: list[Case] = []

    def add(cid: str, *args: str, odd: bool = False, stdin: bytes | None = None) -> None:
        cases.append(Case(cid, list(args), odd, stdin))

    # analyze / validate / report / advise / export on hostile traces
    for name, odd in (("t_dup_ids.jsonl", True), ("t_unicode_id.jsonl", True),
                      ("t_huge_time.jsonl", False), ("t_neg_time.jsonl", True),
                      ("t_out_of_order.jsonl", False), ("t_huge_tokens.jsonl", False),
                      ("t_float_tokens.jsonl", False), ("t_str_times.jsonl", False),
                      ("t_nan_time.jsonl", False), ("t_many_events.jsonl", True),
                      ("t_crlf.jsonl", True), ("t_bom.jsonl", True), ("t_empty.jsonl", False),
                      ("t_blank_lines.jsonl", False), ("t_no_header.jsonl", True),
                      ("t_header_array.jsonl", False), ("t_header_wrong_version.jsonl", False),
                      ("t_garbage_line.jsonl", False), ("t_deep_line.jsonl", False),
                      ("t_bigint_line.jsonl", False), ("t_type_int.jsonl", False),
                      ("t_status_odd.jsonl", False), ("t_all_rejected.jsonl", True),
                      ("t_only_footer.jsonl", False), ("t_binary.jsonl", False),
                      ("t_utf16.jsonl", False), ("t_latin1.jsonl", False),
                      ("t_gzip.jsonl.gz", True), ("t_gzip_named.jsonl", False),
                      ("t_long_line.jsonl", False), ("t_trunc.jsonl", True),
                      ("fifo.jsonl", False), ("adir.jsonl", False), ("loop_a", False),
                      ("dangling.jsonl", False), ("noperm.jsonl", os.geteuid() == 0)):
        add(f"analyze {name}", "analyze", f(name), odd=odd)
    for name in ("t_out_of_order.jsonl", "t_nan_time.jsonl", "t_empty.jsonl",
                 "t_gzip_named.jsonl"):
        add(f"validate {name}", "validate", f(name), odd=True)  # exit 1: invalid
    for name in ("t_huge_time.jsonl", "t_str_times.jsonl", "t_all_rejected.jsonl",
                 "t_deep_line.jsonl", "t_binary.jsonl", "t_many_events.jsonl"):
        add(f"report {name}", "report", f(name), "--out", o(f"r-{name}.html"),
            odd=name in ("t_many_events.jsonl",))
    for name in ("t_huge_time.jsonl", "t_all_rejected.jsonl", "t_header_array.jsonl"):
        add(f"advise {name}", "advise", f(name), odd=name == "t_all_rejected.jsonl")
    for name in ("t_huge_tokens.jsonl", "t_utf16.jsonl"):
        add(f"export {name}", "export", f(name), "--to", "csv", "--out", o(f"{name}.csv"))
    add("compare huge vs good", "compare", f("t_huge_time.jsonl"), good)
    add("gate nan", "gate", f("t_nan_time.jsonl"), good, "--max-regression", "ttft_p50=5%")
    add("plot cdf binary", "plot", "cdf", f("t_binary.jsonl"), "--out", o("c.png"))
    # peer exports
    for name in ("p_vllm_list.json", "p_vllm_ttfts_str.json", "p_vllm_short.json",
                 "p_vllm_nan.json", "p_vllm_neg.json", "p_vllm_nested.json",
                 "p_vllm_empty.json", "p_guidellm_bench_obj.json",
                 "p_guidellm_no_requests.json", "p_guidellm_str_time.json",
                 "p_aiperf_str.jsonl", "p_aiperf_huge_ns.jsonl", "p_aiperf_metrics_list.jsonl",
                 "p_aiperf_scalar.jsonl"):
        add(f"analyze {name}", "analyze", f(name))
    add("analyze --format vllm on aiperf", "analyze", f("peer.aiperf.json"), "--format", "vllm")
    add("analyze --format guidellm on ridgeline", "analyze", good, "--format", "guidellm")
    add("verify vllm nested", "verify", f("p_vllm_nested.json"), "--calibration", prof)
    # export: outputs equal to inputs, bad targets
    add("export out=in", "export", good, "--to", "csv", "--out", good)
    add("export out=in via link", "export", f("t_dup_ids.jsonl"), "--to", "aiperf", "--out",
        f("t_dup_ids.jsonl"))
    add("export --to bogus", "export", good, "--to", "xlsx", "--out", o("x.xlsx"))
    add("export --out dir", "export", good, "--to", "csv", "--out", str(d))
    add("export --out ro", "export", good, "--to", "csv", "--out", f"{RO}/x.csv")
    add("export --out /dev/full", "export", good, "--to", "csv", "--out", "/dev/full")
    # calibration profiles
    for name in ("c_tokens_unsorted.json", "c_tokens_dup.json", "c_tokens_neg.json",
                 "c_tokens_float.json", "c_len_mismatch.json", "c_step_str.json",
                 "c_step_zero.json", "c_tokens_huge.json", "c_no_tokens.json",
                 "c_sched_str.json", "c_kvcap_huge.json", "c_kvcap_float.json",
                 "c_mnbt_zero.json", "c_version.json", "c_array.json", "c_null.json"):
        add(f"estimate --calibration {name}", "estimate", "--calibration", f(name))
    for name in ("c_step_decreasing.json", "c_extra_nested.json", "c_bom.json",
                 "c_crlf.json"):
        add(f"simulate --calibration {name}", *sim, "--calibration", f(name), odd=True)
    add("serve --calibration c_step_zero", "serve", "--port", "0", "--calibration",
        f("c_step_zero.json"))
    add("verify bad profile", "verify", good, "--calibration", f("c_len_mismatch.json"))
    add("verify profile=trace", "verify", good, "--calibration", good)
    # model configs
    for name in ("m_heads_nodiv.json", "m_kv_heads_nodiv.json", "m_kv_heads_more.json",
                 "m_hidden_neg.json", "m_hidden_str.json", "m_hidden_float.json",
                 "m_layers_zero.json", "m_layers_huge.json", "m_vocab_neg.json",
                 "m_vocab_huge.json", "m_inter_nan.json", "m_ctx_zero.json",
                 "m_ctx_neg.json", "m_head_dim_zero.json", "m_no_hidden.json",
                 "m_text_config_str.json", "m_text_config_list.json",
                 "m_text_config_deep.json", "m_quant_str.json", "m_quant_bits.json",
                 "m_quant_method.json", "m_quant_groups.json", "m_dtype.json",
                 "m_layer_types.json", "m_window_neg.json", "m_rope_str.json",
                 "m_array.json", "m_deep.json", "m_experts_zero.json", "m_topk_more.json"):
        if (d / name).exists():
            # torch_dtype and rope_scaling are not read (ignored as unknown fields are);
            # a GPTQ/AWQ group_size 0 means per channel
            add(f"estimate -m {name}", "estimate", "-m", f(name),
                odd=name in ("m_dtype.json", "m_rope_str.json", "m_quant_groups.json"))
    add("simulate -m m_layers_huge", *sim, "-m", f("m_layers_huge.json"))
    add("serve -m m_heads_nodiv", "serve", "--port", "0", "-m", f("m_heads_nodiv.json"))
    add("plan -m m_vocab_huge", "plan", "-m", f("m_vocab_huge.json"), "--rate", "1", "--slo",
        "ttft_ms:1000")
    add("estimate -m fifo", "estimate", "-m", f("fifo.jsonl"))
    add("estimate -m dir without config", "estimate", "-m", str(d / "adir.jsonl"))
    # hardware files
    for name in ("h_bw_zero", "h_mem_str", "h_flops_neg", "h_flops_list", "h_eff_big",
                 "h_overhead_nan", "h_mem_huge"):
        add(f"estimate -g {name}", "estimate", "-g", f(f"{name}.json"))
    # engine costs files
    for name in ("e_nan", "e_neg", "e_missing", "e_str", "e_huge", "e_unit", "e_costs_list",
                 "e_empty"):
        add(f"simulate --engine {name}", *sim, "--engine", f(f"{name}.json"))
    add("simulate --engine dir", *sim, "--engine", str(d))
    add("simulate --engine bogus", *sim, "--engine", "sglang")
    # replay files
    for name in ("r_header_only.csv", "r_cols_missing.csv", "r_huge_time.csv",
                 "r_float_tokens.csv", "r_neg_tokens.csv", "r_word_tokens.csv",
                 "r_ragged.csv", "r_quote.csv", "r_mooncake_hash_str.jsonl",
                 "r_mooncake_hash_neg.jsonl", "r_mooncake_ts_str.jsonl",
                 "r_mooncake_missing.jsonl", "r_mooncake_array.jsonl",
                 "r_mooncake_out_neg.jsonl", "r_secs_words.txt", "r_secs_huge.txt",
                 "r_secs_empty.txt", "t_gzip.jsonl.gz"):
        add(f"simulate replay {name}", "simulate", "-n", "5", "--arrival",
            f"replay:path={f(name)}")
    for name in ("r_unsorted.csv", "r_crlf.csv", "r_bom.csv", "r_mooncake_hash_many.jsonl"):
        add(f"simulate replay {name}", "simulate", "-n", "5", "--arrival",
            f"replay:path={f(name)}", odd=True)
    add("simulate replay speed 0", "simulate", "-n", "5", "--arrival",
        f"replay:path={f('r_crlf.csv')},speedup=0")
    add("simulate replay speed nan", "simulate", "-n", "5", "--arrival",
        f"replay:path={f('r_crlf.csv')},speedup=nan")
    add("simulate replay missing path", "simulate", "-n", "5", "--arrival", "replay:")
    add("simulate replay trace=replay", "simulate", "-n", "5", "--arrival",
        f"replay:path={f('r_crlf.csv')}", "--trace", f("r_crlf.csv"))
    add("bench replay hash_str", "bench", "--base-url", URL[0], "-n", "1", "--replay",
        f("r_mooncake_hash_str.jsonl"))
    add("bench replay-speed -1", "bench", "--base-url", URL[0], "-n", "1", "--replay",
        f("r_crlf.csv"), "--replay-speed", "-1")
    # length specs
    for name in ("l_neg.txt", "l_float.txt", "l_huge.txt", "l_words.txt", "l_empty.txt"):
        add(f"simulate empirical {name}", *sim, "--prompt", f"empirical:{f(name)}")
    for spec in ("fixed:0", "fixed:-1", "fixed:1e308", "fixed:2**63", "uniform:10:5",
                 "uniform:5", "normal:mean=10,std=-1", "lognormal:mean=nan,sigma=1",
                 "lognormal:mean=5,sigma=0", "exponential:mean=0", "zipf:1", "fixed:",
                 "fixed:1,2", "fixed:10:20:30", "lognormal:mean=5,sigma=1,max=-1"):
        add(f"simulate --prompt {spec}", *sim, "--prompt", spec,
            odd=spec in ("lognormal:mean=5,sigma=0",))
    # arrival specs
    for spec in ("poisson:rate=0", "poisson:rate=-1", "gamma:cv=0", "gamma:cv=inf",
                 "gamma:cv=1,rate=nan", "constant:rate=1e308", "diurnal:peak=1,trough=10",
                 "diurnal:peak=10,trough=-1", "diurnal:peak=10,trough=1,period=0",
                 "diurnal:peak=10,trough=1,period=inf", "diurnal:peak=10,trough=1,phase=nan",
                 "diurnal:", "bursty:on=1", "poisson:rate=1,rate=2", "gamma:cv=1,bogus=3",
                 "", "diurnal:peak=1e-300,trough=1e-300"):
        add(f"simulate --arrival {spec!r}", "simulate", "-n", "20", "--rate", "2", "--arrival",
            spec)
    # numeric flags at 0, -1, nan, inf, 1e308, 2**63
    for flag in ("--rate", "--requests", "--concurrency", "--max-num-seqs",
                 "--max-num-batched-tokens", "--block-size", "--replicas", "--workers",
                 "--think-time", "--prefix-tokens", "--exact-max", "--sketch-error",
                 "--kv-transfer-latency-us"):
        for v in ("-1", "nan", "1e308", str(2**63)):
            base = [a for a in sim if a not in ("--rate", "2")] if flag == "--rate" else sim
            base = base if flag != "--requests" else ["simulate", "--rate", "2"]
            add(f"simulate {flag} {v}", *base, flag, v)
    for flag, vals in (("--tp", ("-1", str(2**63))), ("--batch", ("0", "1e308")),
                       ("--prompt", ("-1", "2**63")), ("--output", ("nan",)),
                       ("--context", ("1e308",)), ("--prefix", ("1e308",))):
        for v in vals:
            add(f"estimate {flag} {v}", "estimate", flag, v)
    for flag, v in (("--speed", "inf"), ("--speed", "1e308"), ("--max-waiting", "-1"),
                    ("--retry-after", "nan"), ("--shutdown-grace", "-1"),
                    ("--default-max-tokens", "0"), ("--block-size", "0"),
                    ("--max-num-batched-tokens", str(2**63)), ("--port", "-1"),
                    ("--host", "999.1.1.1"), ("--eos-lengths", "nan"),
                    ("--header-timeout", "inf")):
        add(f"serve {flag} {v}", "serve", "--port", "0", flag, v)
    for flag, v in (("--rate", "inf"), ("--requests", "-1"), ("--duration", "nan"),
                    ("--timeout", "1e308"), ("--grace", "-1"), ("--num-warmups", "-1"),
                    ("--concurrency", str(2**63)), ("--max-tokens-bogus", "1"),
                    ("--top-p", "nan"), ("--request-cancellation-rate", "2"),
                    ("--telemetry-interval-ms", "0"), ("--stall-timeout", "-5"),
                    ("--multi-turn", "0"), ("--random-range-ratio", "-1"),
                    ("--workers", "0"), ("--burstiness", "0")):
        # vLLM's `--request-rate inf` is all at once; a cancellation rate is in percent
        add(f"bench {flag} {v}", "bench", "--base-url", URL[0], "-n", "1", flag, v,
            odd=(flag, v) in (("--rate", "inf"), ("--request-cancellation-rate", "2")))
    for flag, v in (("--rate", "0"), ("--headroom", "-1"), ("--price", "nan"),
                    ("--max-gpus", "0"), ("--goodput-target", "2"), ("--requests", "1e308"),
                    ("--tp", "0,1"), ("--verify-requests", "-1"), ("--max-replicas", "inf")):
        base = ["plan", "--rate", "5", "--slo", "ttft_ms:1000"]
        if flag == "--rate":
            base = ["plan", "--slo", "ttft_ms:1000"]
        add(f"plan {flag} {v}", *base, flag, v)
    add("plan --plot same as model", "plan", "--rate", "5", "--slo", "ttft_ms:1000", "-m",
        f("m_heads_nodiv.json"), "--plot", f("m_heads_nodiv.json"))
    for flag, v in (("--prefill-tokens", "-1"), ("--rounds", "0"), ("--max-batch", "nan"),
                    ("--slots", "1e308"), ("--timeout", "0"), ("--open-rate", "inf")):
        add(f"calibrate engine {flag} {v}", "calibrate", "engine", "--base-url",
            "http://127.0.0.1:9", flag, v)
    add("calibrate engine url garbage", "calibrate", "engine", "--base-url", "http://[::1")
    add("calibrate fit out=in", "calibrate", "fit", good, "--out", good)
    add("calibrate fit aiperf garbage", "calibrate", "fit", f("p_aiperf_scalar.jsonl"),
        "--out", o("f.json"))
    add("calibrate fit fifo", "calibrate", "fit", f("fifo.jsonl"), "--out", o("f.json"))
    add("calibrate fit --engine on trace", "calibrate", "fit", "--engine", "vllm", good,
        "--out", o("e.json"))
    add("calibrate host --out dir", "calibrate", "host", "--quick", "--out", str(d))
    add("calibrate host --out=in", "calibrate", "host", "--quick", "--out", prof,
        "--config", prof)
    # --slo strings
    for slo in ("ttft_ms:", ":500", "ttft_ms:abc", "ttft_ms:1e400", "ttft_ms:-0",
                "bogus_ms:5", "ttft_ms>=5", "ttft_ms:5:6", "decode_rate_tok_s:nan",
                "ttft_ms<=inf", "ttft_ms\u2264500", "TTFT_MS:5"):
        # -0 is the limit 0 (allowed: >= 0); >= is the operator form of an odd but valid SLO
        add(f"analyze --slo {slo!r}", "analyze", good, "--slo", slo,
            odd=slo in ("TTFT_MS:5", "ttft_ms:-0", "ttft_ms>=5"))
    add("analyze --window huge", "analyze", good, "--window", "0:1e308")
    add("analyze --select nan", "analyze", good, "--select", "nan")
    add("analyze --summary-file = trace", "analyze", good, "--summary-file", good)
    add("analyze --metric bogus", "analyze", good, "--max-regression", "x")
    # --metadata / --header / --extra-body
    for flag, v in (("--metadata", "noequals"), ("--metadata", "=v"), ("--header", "NoColon"),
                    ("--header", "X: a\r\nInjected: 1"), ("--header", ": empty"),
                    ("--extra-body", "{not json"), ("--extra-body", "[1,2]"),
                    ("--extra-body", '{"a":' * 2000 + "1" + "}" * 2000),
                    ("--extra-body", '{"stream": "yes"}')):
        add(f"bench {flag} {v[:20]!r}", "bench", "--base-url", URL[0], "-n", "1", flag, v)
    add("bench --dataset sharegpt obj", "bench", "--base-url", URL[0], "-n", "1",
        "--dataset", f"sharegpt:path={f('ds_sharegpt_obj.json')}")
    add("bench --dataset sharegpt bad", "bench", "--base-url", URL[0], "-n", "1",
        "--dataset", f"sharegpt:path={f('ds_sharegpt_bad.json')}")
    add("bench --dataset-name custom bad", "bench", "--base-url", URL[0], "-n", "1",
        "--dataset-name", "custom", "--dataset-path", f("ds_custom_bad.jsonl"))
    add("bench --result-dir file", "bench", "--base-url", URL[0], "-n", "1",
        "--save-result", "--result-dir", good)
    add("bench --trace = --replay link", "bench", "--base-url", URL[0], "-n", "1",
        "--replay", f("r_crlf.csv"), "--trace", f("r_crlf.csv"))
    add("bench --tokenizer garbage", "bench", "--base-url", URL[0], "-n", "1",
        "--tokenizer", f("tok_garbage.json"))
    # serve --tokenizer garbage
    for name in ("tok_garbage.json", "tok_array.json", "tok_trunc.json", "tok_deep.json",
                 "tok_dir", "fifo.jsonl", "good.jsonl"):
        add(f"serve --tokenizer {name}", "serve", "--port", "0", "--tokenizer", f(name))
    # timelines
    for name in ("tl_words.csv", "tl_reversed.csv", "tl_empty.csv"):
        add(f"plot timeline {name}", "plot", "timeline", f(name), "--out", o(f"{name}.png"))
    add("report --timeline binary", "report", good, "--timeline", f("t_binary.jsonl"),
        "--out", o("tl.html"))
    # outputs
    add("report --out = input", "report", good, "--out", good)
    add("report --out victim via ./", "report", f("victim.html"), "--out",
        str(d / "." / "victim.html"))
    add("simulate --trace /dev/full", *sim, "--trace", "/dev/full")
    add("simulate --trace = --timeline", *sim, "--trace", o("same.jsonl"), "--timeline",
        o("same.jsonl"))
    add("simulate --trace empty", *sim, "--trace", "")
    add("simulate --report ro", *sim, "--report", f"{RO}/r.html")
    add("demo --out-dir /dev/null", "demo", "--out-dir", "/dev/null")
    add("plot roofline --out no ext", "plot", "roofline", "--out", o("noext"))
    add("plot roofline --out .exe", "plot", "roofline", "--out", o("x.exe"))
    # theory extremes
    for args in (("theory", "mm1", "--arrival-rate", "1e-320", "--service-rate", "1"),
                 ("theory", "mmc", "--arrival-rate", "1", "--service-rate", "1e-320", "-c",
                  "2"),
                 ("theory", "samples", "--half-width", "1e-308"),
                 ("theory", "fanout", "-k", str(2**63)),
                 ("theory", "little", "--rate", "1e308", "--latency-s", "1e308")):
        add(" ".join(args), *args, odd=True)
    # the readers' grammar: every command taking the input, the field's path named
    sim2 = ["simulate", "--rate", "2", "-n", "10"]
    for name in ("c_future.json", "c_sched_unknown.json", "c_residual_unknown.json"):
        for cmd in (sim2, ["estimate"], ["serve", "--port", "0"], ["verify", good]):
            add(f"{cmd[0]} --calibration {name}", *cmd, "--calibration", f(name))
    add("simulate --arrival diurnal rate=", *sim2, "--arrival",
        "diurnal:peak=5,trough=1,rate=3")
    add("simulate --prompt mean and median", *sim2, "--prompt",
        "lognormal:mean=5,median=3,sigma=1")
    add("report t_dup_ids.jsonl", "report", f("t_dup_ids.jsonl"), "--out", o("dup.html"))
    for name in ("pr_nan.jsonl", "pr_neg.jsonl", "pr_dup.jsonl", "pr_str.jsonl",
                 "pr_batch_word.jsonl"):
        add(f"calibrate fit {name}", "calibrate", "fit", f(name), f("pr_good.jsonl"), "--out",
            o(f"fit-{name}.json"))
    add("calibrate fit one token count", "calibrate", "fit", f("pr_good.jsonl"), "--out",
        o("fit-one.json"))
    for name in ("t_corrupt.jsonl.gz", "t_truncated.jsonl.gz", "t_bomb_line.jsonl.gz"):
        add(f"analyze {name}", "analyze", f(name))
        add(f"report {name}", "report", f(name), "--out", o(f"r-{name}.html"))
    plan5 = ["plan", "--rate", "5", "--slo", "ttft_ms:1000"]
    add("plan --extra-replicas 1e6", *plan5, "--extra-replicas", "1000000", "--max-replicas",
        "1000000", "--max-gpus", "100000000")
    add("plan --weights bf16,int3", *plan5, "--weights", "bf16,int3")
    add("plan -g h100-sxm,tpu9", *plan5, "-g", "h100-sxm,tpu9")
    # stdin and arguments
    add("analyze -", "analyze", "-", stdin=b"\x00\x01garbage")
    add("analyze empty path", "analyze", "")
    add("analyze NUL in path", "analyze", "a\x01b")
    add("analyze very long path", "analyze", "x" * 5000)
    return cases


# ---- running a CLI case --------------------------------------------------------------------


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def _digest(paths: list[Path]) -> dict[str, str]:
    out = {}
    for p in paths:
        try:
            if p.is_file() and not p.is_fifo():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        except OSError:
            pass
    return out


def _inputs_of(case: Case, d: Path) -> list[Path]:
    out = []
    for a in case.args:
        for part in a.replace("=", ",").replace(":", ",").split(","):
            if part.startswith(str(d)) and "/out/" not in part:
                out.append(Path(part))
    return out


def _spawn(args: list[str], fin: Any, fout: Any, ferr: Any, cwd: Path) -> int:
    """Start the console script in its own session (a timeout kills its whole group)."""
    if any("\x00" in a for a in args):
        raise ValueError("embedded null byte")
    pid = os.fork()
    if pid == 0:  # the child: only async-signal-safe work until exec
        try:
            os.setsid()
            os.dup2(fin.fileno(), 0)
            os.dup2(fout.fileno(), 1)
            os.dup2(ferr.fileno(), 2)
            os.chdir(cwd)
            _limit()
            os.execv(RIDGELINE, [RIDGELINE, *args])
        finally:
            os._exit(127)
    return pid


def run_case(case: Case, d: Path) -> Result:
    inputs = _inputs_of(case, d)
    before = _digest(inputs)
    with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as fout, \
            tempfile.TemporaryFile() as ferr:
        fin.write(case.stdin or b"")
        fin.seek(0)
        t0 = time.monotonic()
        try:
            # Not Popen: it would reap the child itself; wait4 gives this child's peak RSS.
            pid = _spawn(case.args, fin, fout, ferr, d / "out")
        except (ValueError, OSError) as exc:  # a NUL in an argument: no process at all
            return Result(case.id, case.args, None, 0.0, 0, "ok", f"not started: {exc}")
        timed_out = False
        while True:
            got, status, ru = os.wait4(pid, os.WNOHANG)
            if got:
                break
            if time.monotonic() - t0 > TIMEOUT_S:
                timed_out = True
                os.killpg(pid, signal.SIGKILL)
                _, status, ru = os.wait4(pid, 0)
                break
            time.sleep(0.02)
        wall = time.monotonic() - t0
        fout.seek(0)
        ferr.seek(0)
        out_b, err_b = fout.read(), ferr.read()
    peak = int(ru.ru_maxrss * 1024)
    rc = os.waitstatus_to_exitcode(status)
    out, err = out_b.decode(errors="replace"), err_b.decode(errors="replace")
    after = _digest(inputs)
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    klass, detail = "ok", ""
    if timed_out:
        klass, detail = "hang", f"running after {TIMEOUT_S:g} s"
    elif "Traceback" in out + err:
        klass, detail = "traceback", err[-300:]
    elif "MemoryError" in err or (rc is not None and rc < 0) or peak > PEAK_BYTES:
        klass, detail = "memory", f"rc {rc}, peak {peak / 2**30:.2f} GiB; {err[-200:]}"
    elif rc == 70:
        klass, detail = "exit70", err[-300:]
    elif before != after:
        klass, detail = "overwritten", ", ".join(sorted(k for k in before
                                                        if before[k] != after.get(k)))
    elif rc == 0 and not case.odd:
        klass, detail = "exit0", (out + err)[-200:]
    elif rc == 2 and (len(errors) != 1 or out.strip()):
        klass, detail = "contract", err[-300:]
    elif rc not in (0, 1, 2, 3):
        klass, detail = "contract", f"exit {rc}: {err[-200:]}"
    line = errors[0] if errors else ""
    return Result(case.id, case.args, rc, wall, peak, klass, detail or line)


def run_cli(d: Path, jobs: int, only: str | None) -> list[Result]:
    server, port = _start(["serve", "--port", "0", "--speed", "100"])
    URL[0] = f"http://127.0.0.1:{port}"
    try:
        return _run_cli(d, jobs, only)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _run_cli(d: Path, jobs: int, only: str | None) -> list[Result]:
    cases = cli_cases(d)
    if only:
        cases = [c for c in cases if only in c.id]
    ids = [c.id for c in cases]
    dup = [k for k, v in Counter(ids).items() if v > 1]
    assert not dup, f"duplicate case ids: {dup}"
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda c: run_case(c, d), cases))


# ---- the HTTP API (serve, ui) through raw sockets -------------------------------------------


def _start(args: list[str]) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([RIDGELINE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_limit)
    deadline = time.monotonic() + 60
    port = None
    while time.monotonic() < deadline and port is None:
        line = proc.stdout.readline()  # both print their address on stdout
        if not line:
            if proc.poll() is not None:
                raise RuntimeError(f"{args[0]} did not start: {proc.stderr.read()[-500:]}")
            continue
        if "http://" in line:
            port = int(line.split("http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    assert port is not None
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)


def _post(path: str, body: bytes, ctype: str = "application/json",
          extra: bytes = b"") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {ctype}"
            f"\r\nContent-Length: {len(body)}\r\n").encode() + extra + b"\r\n" + body


def _exchange(port: int, raw: bytes, wait_s: float = TIMEOUT_S,
              pause_s: float = 0.0) -> tuple[int | None, bytes, float, str]:
    """(status, response, seconds, problem): send `raw` and read until the server closes."""
    t0 = time.monotonic()
    got = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
            if pause_s:  # the headers and a byte of the body, a pause, then the rest
                cut = raw.index(b"\r\n\r\n") + 5
                sock.sendall(raw[:cut])
                time.sleep(pause_s)
                sock.sendall(raw[cut:])
            else:
                sock.sendall(raw)
            sock.settimeout(wait_s)
            try:
                while chunk := sock.recv(65536):
                    got += chunk
                    if len(got) > 50 << 20:
                        break
            except TimeoutError:
                return None, got, time.monotonic() - t0, "hang"
            except ConnectionResetError:
                pass
    except (ConnectionRefusedError, BrokenPipeError, ConnectionResetError) as exc:
        if not got:
            return None, got, time.monotonic() - t0, f"noanswer ({type(exc).__name__})"
    status = None
    if got.startswith(b"HTTP/1."):
        with contextlib.suppress(IndexError, ValueError):
            status = int(got.split(b" ", 2)[1])
    return status, got, time.monotonic() - t0, "" if status is not None else "noanswer"


def _chat(**over: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 4, **over}).encode()


def _comp(**over: Any) -> bytes:
    return json.dumps({"model": "m", "prompt": "hi", "max_tokens": 4, **over}).encode()


def http_cases() -> dict[str, list[tuple[str, bytes, dict[str, Any]]]]:
    """Per server, (id, raw request, options): options may allow a closed connection
    (slow headers) or set a pause in the middle of the request."""
    deep = b"[" * 100_000 + b"]" * 100_000
    chat, comp = "/v1/chat/completions", "/v1/completions"
    serve: list[tuple[str, bytes, dict[str, Any]]] = [
        ("chat not json", _post(chat, b"{nope"), {}),
        ("chat deep", _post(chat, deep), {}),
        ("chat array", _post(chat, b"[1]"), {}),
        ("chat messages str", _post(chat, _chat(messages="hi")), {}),
        ("chat messages empty", _post(chat, _chat(messages=[])), {}),
        ("chat content int", _post(chat, _chat(messages=[{"role": "user", "content": 5}])),
         {}),
        ("chat n 10**9", _post(chat, _chat(n=10**9)), {}),
        ("chat n -1", _post(chat, _chat(n=-1)), {}),
        ("chat n 0", _post(chat, _chat(n=0)), {}),
        ("chat top_logprobs 10**6", _post(chat, _chat(logprobs=True, top_logprobs=10**6)), {}),
        ("chat top_logprobs -1", _post(chat, _chat(logprobs=True, top_logprobs=-1)), {}),
        ("chat max_tokens 2**63", _post(chat, _chat(max_tokens=2**63)), {}),
        ("chat max_tokens -5", _post(chat, _chat(max_tokens=-5)), {}),
        ("chat max_completion 10**30", _post(chat, _chat(max_completion_tokens=10**30)), {}),
        ("chat stop 10k strings", _post(chat, _chat(stop=["x"] * 10_000)), {}),
        ("chat stop empty string", _post(chat, _chat(stop=[""])), {}),
        ("chat stop huge", _post(chat, _chat(stop="a" * 1_000_000)), {}),
        ("chat min_tokens > max", _post(chat, _chat(min_tokens=100, max_tokens=2)), {}),
        ("chat min_tokens 10**12", _post(chat, _chat(min_tokens=10**12, max_tokens=None)), {}),
        ("chat temperature nan", _post(chat, _chat().replace(b'"max_tokens": 4',
                                                              b'"temperature": NaN')), {}),
        ("chat stream_options str", _post(chat, _chat(stream=True, stream_options="yes")), {}),
        ("chat n 16 logprobs stream", _post(chat, _chat(n=64, logprobs=True, top_logprobs=20,
                                                        stream=True, max_tokens=64)), {}),
        ("chat ridgeline prompt_tokens 10**12",
         _post(chat, _chat(ridgeline={"prompt_tokens": 10**12})), {}),
        ("chat ridgeline prompt_tokens 2**63", _post(chat, _chat(ridgeline={
            "prompt_tokens": 2**63})), {}),
        ("chat huge content", _post(chat, _chat(messages=[{"role": "user",
                                                           "content": "a b " * 500_000}])), {}),
        ("chat content parts garbage", _post(chat, _chat(messages=[{
            "role": "user", "content": [{"type": "image_url"}, 5]}])), {}),
        ("chat wrong content-type", _post(chat, _chat(), ctype="text/plain"), {}),
        ("chat utf16 body", _post(chat, _chat().decode().encode("utf-16")), {}),
        ("chat invalid utf8", _post(chat, b'{"messages": [{"role": "user", "content": "\xff"}]}'),
         {}),
        ("comp prompt ids huge", _post(comp, _comp(prompt=[2**40] * 5)), {}),
        ("comp prompt ids neg", _post(comp, _comp(prompt=[-1, -2])), {}),
        ("comp prompt nested empty", _post(comp, _comp(prompt=[[]])), {}),
        ("comp prompt list of 1000", _post(comp, _comp(prompt=["a"] * 1000)), {}),
        ("comp logprobs 10**9", _post(comp, _comp(logprobs=10**9)), {}),
        ("comp logprobs -1", _post(comp, _comp(logprobs=-1)), {}),
        ("comp echo n logprobs", _post(comp, _comp(echo=True, n=128, logprobs=5,
                                                   max_tokens=128)), {}),
        ("comp max_tokens 10**7", _post(comp, _comp(max_tokens=10**7)), {}),
        ("comp best_of str", _post(comp, _comp(best_of="two")), {}),
        ("tokenize huge", _post("/tokenize", json.dumps({"prompt": "word " * 1_000_000})
                                .encode()), {}),
        ("tokenize messages garbage", _post("/tokenize", b'{"messages": 5}'), {}),
        ("tokenize deep", _post("/tokenize", deep), {}),
        ("detokenize huge ids", _post("/detokenize", json.dumps({"tokens": [2**62] * 10})
                                      .encode()), {}),
        ("detokenize str", _post("/detokenize", b'{"tokens": "abc"}'), {}),
        ("content-length lies short", _post(chat, _chat())[:-10], {"closed_ok": True}),
        ("content-length huge", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: 99999999999999\r\n\r\n{}", {"closed_ok": True}),
        ("content-length negative", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: -5\r\n\r\n{}", {"closed_ok": True}),
        ("chunked garbage", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", {"closed_ok": True}),
        ("slow header", b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow", {"closed_ok": True}),
        ("header 100 KB", b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000
         + b"\r\nConnection: close\r\n\r\n", {"closed_ok": True}),
        ("bad method", b"BREW /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
         {}),
        ("path traversal", b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close"
         b"\r\n\r\n", {}),
        ("not http", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(200),
         {"closed_ok": True}),
        ("body 20 MB", _post(chat, b" " * (20 << 20)), {"closed_ok": True}),
        ("slow body", _post(chat, _chat()), {"pause_s": 3.0, "closed_ok": True}),
    ]
    api_e, api_s = "/api/estimate", "/api/simulate"
    ui: list[tuple[str, bytes, dict[str, Any]]] = [
        ("estimate weights bogus", _post(api_e, b'{"weights": "int2"}'), {}),
        ("estimate kv bogus", _post(api_e, b'{"kv": "fp3"}'), {}),
        ("estimate activations obj", _post(api_e, b'{"activations": {"a": 1}}'), {}),
        ("estimate tp 3 (heads do not divide)", _post(api_e, b'{"tp": 3}'), {}),
        ("estimate tp 1024", _post(api_e, b'{"tp": 1024}'), {}),
        ("estimate ep 7", _post(api_e, b'{"ep": 7}'), {}),
        ("estimate pp 1000", _post(api_e, b'{"pp": 1000}'), {}),
        ("estimate batch str huge", _post(api_e, b'{"batch": "' + b"9" * 5000 + b'"}'), {}),
        ("estimate batch -0.0", _post(api_e, b'{"batch": -0.0}'), {}),
        ("estimate prompt 10**7 output 10**7", _post(api_e, b'{"prompt": 10000000, '
                                                     b'"output": 10000000}'), {}),
        ("estimate config heads nodiv", _post(api_e, json.dumps({"config": {
            "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 7,
            "num_hidden_layers": 2, "intermediate_size": 100, "vocab_size": 100}}).encode()),
         {}),
        ("estimate config text_config garbage", _post(api_e, json.dumps({"config": {
            "model_type": "llava", "text_config": [1, 2]}}).encode()), {}),
        ("estimate config quant garbage", _post(api_e, json.dumps({"config": {
            "model_type": "llama", "hidden_size": 64, "num_attention_heads": 8,
            "num_hidden_layers": 2, "intermediate_size": 100, "vocab_size": 100,
            "quantization_config": {"quant_method": "awq", "bits": "four"}}}).encode()), {}),
        ("estimate config layers 10**9", _post(api_e, json.dumps({"config": {
            "model_type": "llama", "hidden_size": 64, "num_attention_heads": 8,
            "num_hidden_layers": 10**9, "intermediate_size": 100, "vocab_size": 100}}).encode()),
         {}),
        ("estimate config empty", _post(api_e, b'{"config": {}}'), {}),
        ("estimate config_name obj", _post(api_e, b'{"config": {"model_type": "llama"}, '
                                           b'"config_name": {"a": 1}}'), {}),
        ("estimate model path", _post(api_e, b'{"model": "../../etc/passwd"}'), {}),
        ("estimate model int", _post(api_e, b'{"model": 5}'), {}),
        ("estimate nan literal", _post(api_e, b'{"batch": NaN}'), {}),
        ("estimate dup keys", _post(api_e, b'{"batch": 1, "batch": "x"}'), {}),
        ("estimate unknown field", _post(api_e, b'{"bacth": 8}'), {}),
        ("estimate batch as text", _post(api_e, b'{"batch": "8"}'), {}),
        ("simulate unknown field", _post(api_s, b'{"rates": [1], "requests": 10, "bogus": 1}'),
         {}),
        ("ui body 20 MB", _post(api_e, b'{"batch": 8' + b" " * (20 << 20) + b"}"), {}),
        ("estimate utf16", _post(api_e, '{"batch": 8}'.encode("utf-16")), {}),
        ("simulate rates obj", _post(api_s, b'{"rates": {"a": 1}}'), {}),
        ("simulate rates empty", _post(api_s, b'{"rates": []}'), {}),
        ("simulate requests 0", _post(api_s, b'{"requests": 0}'), {}),
        ("simulate prompt fixed:0", _post(api_s, b'{"prompt": "fixed:0", "requests": 10, '
                                          b'"rates": [1]}'), {}),
        ("simulate prompt garbage", _post(api_s, b'{"prompt": "zipf:7", "requests": 10, '
                                          b'"rates": [1]}'), {}),
        ("simulate output uniform reversed", _post(api_s, b'{"output": "uniform:10:5", '
                                                   b'"requests": 10, "rates": [1]}'), {}),
        ("simulate prompt 10M tokens", _post(api_s, b'{"prompt": "fixed:10000000", '
                                             b'"requests": 10, "rates": [1]}'), {}),
        ("simulate slos bad metric", _post(api_s, b'{"slos": ["bogus_ms:5"], "requests": 10,'
                                           b' "rates": [1]}'), {}),
        ("simulate slos nan", _post(api_s, b'{"slos": ["ttft_ms:nan"], "requests": 10, '
                                    b'"rates": [1]}'), {}),
        ("simulate weights fp4 model", _post(api_s, b'{"weights": "fp4", "requests": 10, '
                                             b'"rates": [1]}'), {}),
        ("simulate too big for gpu", _post(api_s, b'{"model": "llama-3.1-405b", "hardware": '
                                           b'"l4", "requests": 10, "rates": [1]}'), {}),
        ("simulate seed float", _post(api_s, b'{"seed": 1.5, "requests": 10, "rates": [1]}'),
         {}),
        ("simulate rates 1e-300", _post(api_s, b'{"rates": [1e-300], "requests": 10}'), {}),
        ("catalog POST", _post("/api/catalog", b"{}"), {}),
        ("estimate GET", b"GET /api/estimate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
         {}),
        ("static traversal", b"GET /static/..%2f..%2fapp.py HTTP/1.1\r\nHost: x\r\n"
         b"Connection: close\r\n\r\n", {}),
        ("ui content-length negative", b"POST /api/estimate HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: -1\r\n\r\n{}", {"closed_ok": True}),
        ("ui chunked 3 MB", b"POST /api/estimate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(b"100000\r\n" + b" " * 0x100000
                                                           + b"\r\n" for _ in range(3))
         + b"0\r\n\r\n", {"closed_ok": True}),
        ("ui slow body", _post(api_e, b'{"batch": 8}'), {"pause_s": 3.0, "closed_ok": True}),
        ("ui header 100 KB", b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000
         + b"\r\nConnection: close\r\n\r\n", {"closed_ok": True}),
    ]
    return {"serve": serve, "ui": ui}


def run_http(only: str | None) -> list[Result]:
    results: list[Result] = []
    for server, cases in http_cases().items():
        if only and only not in ("http", server):
            continue
        args = (["serve", "--port", "0", "--header-timeout", "2", "--max-model-len", "32768"]
                if server == "serve" else ["ui", "--port", "0", "--header-timeout", "2"])
        proc, port = _start(args)
        try:
            for cid, raw, opts in cases:
                status, got, wall, problem = _exchange(port, raw,
                                                       pause_s=opts.get("pause_s", 0.0))
                klass, detail = "ok", got[:200].decode(errors="replace").split("\r\n")[0]
                if problem == "hang":
                    klass, detail = "http-hang", f"no end after {TIMEOUT_S:g} s"
                elif status is not None and status >= 500 and status != 503:
                    klass, detail = "http500", got[-300:].decode(errors="replace")
                elif status is None and not opts.get("closed_ok"):
                    klass, detail = "http-noanswer", problem
                elif proc.poll() is not None:
                    klass, detail = "server-died", proc.stderr.read()[-300:]
                results.append(Result(f"{server} {cid}", [server, cid], status, wall, 0,
                                      klass, detail, {"section": "http"}))
                if proc.poll() is not None:
                    break
            # still alive and answering after all that
            status, _, wall, problem = _exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\n"
                                                 b"Connection: close\r\n\r\n" if server ==
                                                 "serve" else b"GET / HTTP/1.1\r\nHost: x\r\n"
                                                 b"Connection: close\r\n\r\n")
            results.append(Result(f"{server} still answers", [server], status, wall, 0,
                                  "ok" if status == 200 else "server-died", problem,
                                  {"section": "http"}))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    return results


# ---- Ctrl-C of every long command -----------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def ctrl_c_cases(d: Path) -> list[tuple[str, list[str], float]]:
    """(id, args, seconds to let it work before SIGINT)."""
    long = str(d / "long.jsonl")
    if not Path(long).exists():
        subprocess.run([RIDGELINE, "simulate", "--rate", "200", "-n", "120000", "--prompt",
                        "fixed:100", "--output", "fixed:50", "--trace", long, "--json"],
                       check=True, capture_output=True)
    prof = str(d / "prof.json")
    out = str(d / "out")
    big = ["--rate", "1000", "-n", "3000000", "--replicas", "4"]
    return [
        ("simulate", ["simulate", "--rate", "50", "-n", "400000", "--step-by-step"], 4),
        ("simulate --workers", ["simulate", *big, "--workers", "2", "--trace",
                                f"{out}/w.jsonl"], 6),
        ("simulate --stream --workers", ["simulate", *big, "--stream", "--workers", "2"], 6),
        ("simulate --ray local", ["simulate", *big, "--ray", "local"], 15),
        ("plan", ["plan", "--rate", "9", "--slo", "ttft_ms:1000", "-g", "l40s,h100-sxm"], 6),
        ("plan --workers", ["plan", "--rate", "9", "--slo", "ttft_ms:1000", "-g",
                            "l40s,h100-sxm", "--workers", "2"], 8),
        ("report", ["report", long, "--out", f"{out}/long.html"], 30),
        ("verify", ["verify", long, "--calibration", prof], 30),
        ("calibrate fit", ["calibrate", "fit", long, "--out", f"{out}/fit.json"], 30),
        ("calibrate host", ["calibrate", "host", "--quick", "--out", f"{out}/host.json"], 4),
        ("calibrate engine", ["calibrate", "engine", "--base-url", URL[0], "--out",
                              f"{out}/eng.json", "--rounds", "50"], 8),
        ("bench", ["bench", "--target", "emulator", "-n", "100000", "--rate", "50", "--trace",
                   f"{out}/b.jsonl", "--grace", "0"], 8),
        ("serve", ["serve", "--port", "0"], 4),
        ("ui", ["ui", "--port", "0"], 4),
        ("analyze", ["analyze", long], 30),
    ]


_BY_CPU = {"report", "verify", "calibrate fit", "analyze"}


def _cpu_s(pid: int) -> float:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def run_ctrl_c(d: Path, only: str | None) -> list[Result]:
    server, port = _start(["serve", "--port", "0"])  # calibrate engine probes it
    URL[0] = f"http://127.0.0.1:{port}"
    try:
        return _run_ctrl_c(d, only)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _run_ctrl_c(d: Path, only: str | None) -> list[Result]:
    results = []
    for cid, args, wait_s in ctrl_c_cases(d):
        if only and only not in ("ctrlc",) and only not in cid:
            continue
        proc = subprocess.Popen([RIDGELINE, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=d / "out")
        # Fast commands: signalled once they have worked 1.5 CPU-s (past start-up), as the
        # test does; the others after `wait_s` of wall time.
        t_start = time.monotonic()
        while proc.poll() is None and time.monotonic() - t_start < wait_s:
            if cid in _BY_CPU and _cpu_s(proc.pid) >= 1.5:
                break
            time.sleep(0.05)
        if proc.poll() is not None:
            _, err = proc.communicate()
            results.append(Result(f"ctrl-c {cid}", args, proc.returncode, 0.0, 0, "ctrl-c",
                                  f"ended before the signal: {err[-200:]}",
                                  {"section": "ctrl-c"}))
            continue
        kids = descendants(proc.pid)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        wall = time.monotonic() - t0
        time.sleep(0.5)
        left = [k for k in kids if _alive(k)]
        for k in left:  # do not leave them to the machine
            with contextlib.suppress(OSError):
                os.kill(k, signal.SIGKILL)
        ok = proc.returncode == 130 and wall <= 2.0 and not left and "Traceback" not in err
        results.append(Result(f"ctrl-c {cid}", args, proc.returncode, wall, 0,
                              "ok" if ok else "ctrl-c",
                              f"exit {proc.returncode} in {wall:.2f} s, {len(kids)} children, "
                              f"{len(left)} left; {err.strip().splitlines()[-1:] or ''}",
                              {"children": len(kids), "left": len(left),
                               "section": "ctrl-c"}))
    return results


# ---- main --------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="cli, http, serve, ui, ctrlc, or a case-id substring")
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--json", help="write every case's result here")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    opts = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="ridgeline-hostile-"))
    (d / "out").mkdir()
    build_files(d)
    sections = {"cli", "http", "serve", "ui", "ctrlc"}
    results: list[Result] = []
    t0 = time.monotonic()
    only = opts.only
    if only is None or only not in sections - {"cli"}:
        results += run_cli(d, opts.jobs, None if only in (None, "cli") else only)
    if only in (None, "http", "serve", "ui"):
        results += run_http(only)
    if only in (None, "ctrlc") or (only and only not in sections and only.startswith("ctrl")):
        results += run_ctrl_c(d, only)
    tally = Counter(r.klass for r in results)
    kinds = Counter(r.extra.get("section", "cli") for r in results)
    print(f"{len(results)} cases in {time.monotonic() - t0:.0f} s ("
          + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ")")
    print("tally: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    slow = max((r for r in results if not r.id.startswith("ctrl-c")), key=lambda r: r.wall_s,
               default=None)
    if slow:
        print(f"slowest: {slow.id} {slow.wall_s:.1f} s; peak RSS "
              f"{max(r.peak_bytes for r in results) / 2**20:,.0f} MiB")
    for r in results:
        if r.klass != "ok":
            print(f"  [{r.klass}] {r.id}: rc {r.rc}, {r.wall_s:.1f} s: "
                  f"{' '.join(r.detail.split())[:300]}")
    for r in results:
        if r.id.startswith("ctrl-c") and r.klass == "ok":
            print(f"  [ok] {r.id}: {r.detail}")
    if opts.json:
        Path(opts.json).write_text(json.dumps([r.__dict__ for r in results], indent=1))
    if not opts.keep:
        os.chmod(d / "noperm.jsonl", 0o600)
        subprocess.run(["rm", "-rf", str(d)], check=False)
    else:
        print(f"work folder: {d}")
    return 0 if set(tally) <= {"ok"} else 1


if __name__ == "__main__":
    sys.exit(main())
