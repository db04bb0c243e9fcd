"""`ridgeline simulate --workload FILE`: a load test's own config simulated as it would run.

Through the installed command, with configs written here: an inference-perf config of two
stages (requests per stage = int(rate x duration), stage boundaries, the shared-prefix
cycling seen through the prefix cache's hit tokens, counted by hand), a `vllm bench serve`
command line (lengths within vLLM's range, the rate and the burstiness's gap spread, a
closed loop from --max-concurrency), a vllm result JSON, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

CLI = str(Path(sys.executable).parent / "ridgeline")
DATA = Path(__file__).parents[1] / "data"

INFERENCE_PERF = """\
load:
  type: constant
  stages:
  - rate: 2
    duration: 5
  - rate: 4
    duration: 3.5
api:
  type: completion
  streaming: true
server:
  type: vllm
  model_name: meta-llama/Llama-3.1-8B-Instruct
  base_url: http://0.0.0.0:8000
  ignore_eos: true
data:
  type: shared_prefix
  shared_prefix:
    num_groups: 2
    num_prompts_per_group: 3
    system_prompt_len: 200
    question_len: 50
    output_len: 20
"""


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "simulate", *args], capture_output=True, text=True,
                          timeout=300)


def _sim(tmp_path: Path, *args: str) -> tuple[dict, list[dict], dict, str]:
    trace = tmp_path / "t.jsonl"
    r = _run(*args, "--json", "--trace", str(trace))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    reqs = sorted((x for x in lines if x["type"] == "request"), key=lambda x: x["scheduled_s"])
    return lines[0], reqs, json.loads(r.stdout), r.stderr


def test_inference_perf_two_stages_and_prefix_cycling(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(INFERENCE_PERF)
    header, reqs, out, err = _sim(tmp_path, "--workload", str(cfg))
    # stage 1: int(2 x 5) = 10 requests in (0, 5] s; stage 2: int(4 x 3.5) = 14 in (5, 8.5]
    t = np.array([r["scheduled_s"] for r in reqs])
    assert len(reqs) == 24
    assert int(np.sum(t <= 5.0 + 1e-9)) == 10 and int(np.sum(t > 5.0 + 1e-9)) == 14
    assert t.max() == pytest.approx(8.5, abs=1e-6)
    assert {r["prompt_tokens"] for r in reqs} == {250} and {r["output_tokens"]
                                                             for r in reqs} == {20}
    # 2 x 3 = 6 distinct prompts sent in turn: the first 6 requests miss the prefix cache,
    # the other 18 find their prompt's 15 full 16-token blocks (240 of 250 tokens)
    assert header["dataset"]["prefix_groups"] == 6
    stats = out["simulation"]["engine_stats"][0]
    assert stats["prefix_cache_hits_tokens_total"] == (24 - 6) * (250 // 16) * 16
    wl = out["workload"]
    assert [s["requests"] for s in wl["stages"]] == [10, 14]
    assert wl["num_groups"] == 2 and wl["num_prompts_per_group"] == 3
    said = [x for x in err.splitlines() if x.startswith("workload:")]
    assert len(said) == 2 and "2 req/s x 5 s (10 requests)" in said[0] and "cycled" in said[1]


def test_inference_perf_random_data(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("load:\n  type: poisson\n  stages:\n  - rate: 20\n    duration: 10\n"
                   "data:\n  type: random\n  input_distribution:\n    min: 100\n    max: 300\n"
                   "    mean: 200\n    std: 50\n  output_distribution:\n    min: 10\n"
                   "    max: 10\n    mean: 10\n    std: 0\n")
    _, reqs, _, _ = _sim(tmp_path, "--workload", str(cfg))
    p = np.array([r["prompt_tokens"] for r in reqs])
    assert len(reqs) == 200 and p.min() >= 100 and p.max() <= 300
    assert abs(p.mean() - 200) < 4 * 50 / np.sqrt(200)
    assert {r["output_tokens"] for r in reqs} == {10}


VLLM = ("vllm bench serve --backend vllm --model meta-llama/Llama-3.1-8B-Instruct "
        "--dataset-name random --random-input-len 300 --random-output-len 40 "
        "--random-range-ratio 0.5 --num-prompts 400 --request-rate 8 --burstiness 4 "
        "--seed 3 --ignore-eos")


def _check_vllm_random(reqs: list[dict]) -> None:
    p = np.array([r["prompt_tokens"] for r in reqs])
    o = np.array([r["output_tokens"] for r in reqs])
    assert len(reqs) == 400
    # vLLM's range: uniform on [floor(L (1 - r)), ceil(L (1 + r))]
    assert p.min() >= 150 and p.max() <= 450 and o.min() >= 20 and o.max() <= 60
    assert abs(p.mean() - 300) < 4 * (300 / np.sqrt(3)) / np.sqrt(400)
    t = np.array([r["scheduled_s"] for r in reqs])
    gaps = np.diff(t)
    # rate 8 req/s; burstiness 4 = gamma gaps of shape 4: coefficient of variation 1/2
    assert abs(1.0 / gaps.mean() - 8.0) < 8.0 * 4 * 0.5 / np.sqrt(399)
    assert abs(gaps.std() / gaps.mean() - 0.5) < 0.1


def test_vllm_command_line(tmp_path: Path) -> None:
    header, reqs, out, err = _sim(tmp_path, "--workload", VLLM)
    _check_vllm_random(reqs)
    assert header["load"]["arrival"] == "gamma" and header["load"]["rate_req_s"] == 8.0
    assert out["workload"]["random_input_len"] == 300
    assert "8 req/s" in err and "burstiness 4" in err


def test_vllm_command_in_a_file(tmp_path: Path) -> None:
    f = tmp_path / "run.sh"
    f.write_text("#!/bin/sh\n" + VLLM.replace(" --dataset-name", " \\\n  --dataset-name") + "\n")
    _, reqs, _, _ = _sim(tmp_path, "--workload", str(f))
    _check_vllm_random(reqs)


def test_vllm_max_concurrency_is_a_closed_loop(tmp_path: Path) -> None:
    header, reqs, _, _ = _sim(tmp_path, "--workload",
                              "vllm bench serve --random-input-len 64 --random-output-len 8 "
                              "--num-prompts 50 --max-concurrency 4 --random-prefix-len 32")
    assert header["load"]["pattern"] == "closed-loop" and header["load"]["concurrency"] == 4
    # the prefix is added to every prompt, as vLLM's random dataset does
    assert {r["prompt_tokens"] for r in reqs} == {96} and len(reqs) == 50
    assert header["dataset"]["prefix_groups"] == 1


def test_vllm_result_json(tmp_path: Path) -> None:
    data = json.loads((DATA / "vllm_detailed.json").read_text())
    _, reqs, _, _ = _sim(tmp_path, "--workload", str(DATA / "vllm_detailed.json"))
    assert [r["prompt_tokens"] for r in reqs] == data["input_lens"]
    assert [r["output_tokens"] for r in reqs] == [max(x, 1) for x in data["output_lens"]]
    starts = np.array(data["start_times"])
    assert np.allclose([r["scheduled_s"] for r in reqs], starts - starts.min())


@pytest.mark.parametrize("body, needle", [
    (INFERENCE_PERF.replace("rate: 4", "rate: fast"), "load.stages[1].rate: got 'fast'"),
    (INFERENCE_PERF.replace("type: shared_prefix", "type: sharegpt"),
     "data.type: got 'sharegpt'; allowed: shared_prefix, random"),
    (INFERENCE_PERF.replace("question_len: 50", "question_len: -3"),
     "data.shared_prefix.question_len: got -3"),
    ("load: 3\n", "load: got 3"),
])
def test_bad_config_one_line(tmp_path: Path, body: str, needle: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(body)
    r = _run("--workload", str(f))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --workload:"), r.stderr
    assert str(f) in lines[0] and needle in lines[0], lines[0]


def test_workload_refuses_the_flags_it_sets(tmp_path: Path) -> None:
    r = _run("--workload", VLLM, "--rate", "3")
    assert r.returncode == 2 and "without --rate" in r.stderr
    r = _run("--workload", VLLM.replace("--request-rate 8", "--request-rate -1"))
    assert r.returncode == 2 and "--request-rate: got -1" in r.stderr
    for cmd, needle in (("vllm bench serve --num-prompts", "expected one argument"),
                        ("vllm bench serve --model 'x", "No closing quotation"),
                        ("vllm bench serve --dataset-name sonnet", "allowed: random, sharegpt")):
        r = _run("--workload", cmd)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr


def test_aiperf_export_inputs_as_sent(tmp_path: Path) -> None:
    # the profiling records with both lengths, read here with json (warm-up and the errored
    # request without lengths left out)
    rows = [json.loads(x) for x in (DATA / "aiperf_profile_export.jsonl").read_text()
            .splitlines()]
    kept = [r for r in rows if r["metadata"]["benchmark_phase"] == "profiling"
            and "input_sequence_length" in r["metrics"]]
    t0 = min(r["metadata"]["request_start_ns"] for r in kept)
    _, reqs, out, err = _sim(tmp_path, "--workload", str(DATA / "aiperf_profile_export.jsonl"))
    assert [r["prompt_tokens"] for r in reqs] == [
        r["metrics"]["input_sequence_length"]["value"] for r in kept]
    assert [r["output_tokens"] for r in reqs] == [
        r["metrics"]["output_sequence_length"]["value"] for r in kept]
    assert np.allclose([r["scheduled_s"] for r in reqs],
                       [(r["metadata"]["request_start_ns"] - t0) / 1e9 for r in kept])
    assert out["workload"]["skipped_requests"] == 1 and "1 without lengths left out" in err


def test_guidellm_benchmarks_inputs_as_sent(tmp_path: Path) -> None:
    b = json.loads((DATA / "guidellm_benchmarks.json").read_text())["benchmarks"][0]
    sent = sorted(b["requests"]["successful"] + b["requests"]["errored"],
                  key=lambda r: r["info"]["timings"]["request_start"])
    _, reqs, _, _ = _sim(tmp_path, "--workload", str(DATA / "guidellm_benchmarks.json"))
    assert [r["prompt_tokens"] for r in reqs] == [r["input_metrics"]["total_tokens"]
                                                  for r in sent]
    # the errored request generated nothing: asked as one token
    assert [r["output_tokens"] for r in reqs] == [
        max(r["output_metrics"]["total_tokens"] or 0, 1) for r in sent]
    t = [r["info"]["timings"]["request_start"] for r in sent]
    assert np.allclose([r["scheduled_s"] for r in reqs], np.array(t) - t[0])


def test_vllm_sharegpt_closed_loop_takes_the_file_lengths(tmp_path: Path) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import bpe_openai

        enc = bpe_openai.get_encoding("cl100k_base")
    want = []
    for conv in json.loads((DATA / "traces" / "sharegpt.json").read_text()):
        t = conv["conversations"]
        for k in range(len(t) - 1):
            if t[k]["from"] == "human" and t[k + 1]["from"] == "gpt":
                want.append(len(enc.encode_ordinary(t[k]["value"])))
                break
    header, reqs, _, _ = _sim(
        tmp_path, "--workload", "vllm bench serve --dataset-name sharegpt --dataset-path "
        f"{DATA / 'traces' / 'sharegpt.json'} --num-prompts 10 --max-concurrency 2")
    assert header["load"]["pattern"] == "closed-loop" and header["load"]["concurrency"] == 2
    assert sorted(r["prompt_tokens"] for r in reqs) == sorted(want[:10])


SHARED = Path(__import__("os").environ.get("RIDGELINE_SHARED_DATA")
              or Path(__file__).resolve().parents[2].parent / "shared" / "data")
RUNS = SHARED / "vllm-inference-perf" / "experiments"


@pytest.mark.skipif(not RUNS.is_dir(), reason="shared data not present")
def test_a_real_inference_perf_run_folder(tmp_path: Path) -> None:
    """A measured run's folder: the config inference-perf dumped (results/config.yaml), its
    stage counts compared with the stage metrics files' own request counts."""
    run = sorted(p for p in RUNS.iterdir() if (p / "results" / "config.yaml").is_file())[0]
    r = _run("--workload", str(run), "-n", "50", "--json")
    assert r.returncode == 0, r.stderr
    wl = json.loads(r.stdout)["workload"]
    for k, stage in enumerate(wl["stages"]):
        f = run / "results" / f"stage_{k}_lifecycle_metrics.json"
        if f.is_file():
            measured = json.loads(f.read_text())
            sent = measured["successes"]["count"] + measured.get("failures", {}).get("count", 0)
            assert stage["requests"] == sent
