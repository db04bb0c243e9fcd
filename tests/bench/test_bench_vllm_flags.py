"""`ridgeline bench` as a drop-in for `vllm bench serve`: vLLM's command line, run through the
console script against `ridgeline serve`, writes vLLM's result file where vLLM writes it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ridgeline.bench.dataset import parse_dataset, sonnet_requests
from ridgeline.bench.peer_flags import backend_api, normalize_argv, random_lengths
from ridgeline.errors import RidgelineError
from ridgeline.serve.launcher import EmulatorProcess
from ridgeline.workload.lengths import parse_lengths

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    # the project's launcher: a free port without a race, health-checked, killed on stop
    with EmulatorProcess(command=[RIDGELINE, "serve", "--model", "llama-3.1-8b", "--port", "0",
                                  "--speed", "20"]) as emu:
        yield emu.base_url


def _bench(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([RIDGELINE, "bench", *args, "--no-server-metrics"], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


VLLM_LINE = ["--backend", "openai", "--dataset-name", "random", "--random-input-len", "64",
             "--random-output-len", "16", "--num-prompts", "20", "--request-rate", "inf",
             "--max-concurrency", "4", "--ignore-eos", "--percentile-metrics",
             "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99", "--save-result"]


def test_vllm_command_line_writes_vllms_file(server: str, tmp_path: Path) -> None:
    out = _bench([*VLLM_LINE, "--result-dir", "D", "--result-filename", "F.json",
                  "--metadata", "k=v", "tp=2", "--base-url", server, "--model",
                  "llama-3.1-8b", "--trace", "t.jsonl"], tmp_path)
    assert out.returncode == 0, out.stderr
    res = json.loads((tmp_path / "D" / "F.json").read_text())
    # vLLM's setup keys, then its metadata at top level, in vLLM's order
    keys = list(res)
    assert keys[:10] == ["date", "endpoint_type", "backend", "label", "model_id",
                         "tokenizer_id", "num_prompts", "k", "tp", "request_rate"]
    assert res["k"] == "v" and res["tp"] == "2" and res["backend"] == "openai"
    assert res["request_rate"] == "inf" and res["max_concurrency"] == 4
    assert res["completed"] == 20 and res["failed"] == 0 and res["num_prompts"] == 20
    for m in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p50", "p99"):
            assert f"{stat}_{m}_ms" in res, (stat, m)
    assert "p90_ttft_ms" not in res
    # --ignore-eos: every output reaches --random-output-len; the prompts are 64 tokens
    assert res["output_lens"] == [16] * 20
    assert res["total_output_tokens"] == 320
    assert res["input_lens"] == [64] * 20
    # --request-rate inf with --max-concurrency 4: never more than 4 in flight, and 4 reached
    assert res["max_concurrent_requests"] == 4
    e2e = np.asarray(res["latencies"]) * 1e3
    assert res["mean_e2el_ms"] == pytest.approx(e2e.mean())
    assert res["p99_e2el_ms"] == pytest.approx(np.percentile(e2e, 99))
    assert len(res["queue_times"]) == 20


def test_bare_save_result_uses_vllms_file_name_and_appends(server: str, tmp_path: Path
                                                           ) -> None:
    args = ["--backend", "vllm", "--dataset-name", "random", "--random-input-len", "16",
            "--random-output-len", "4", "--num-prompts", "6", "--request-rate", "inf",
            "--max-concurrency", "2", "--base-url", server, "--percentile-metrics", "ttft",
            "--trace", "t.jsonl"]
    out = _bench([*args, "--save-result"], tmp_path)
    assert out.returncode == 0, out.stderr
    # vLLM: {label or backend}-{request_rate}qps-concurrency{N}-{model}-{date}.json, cwd
    names = sorted(p.name for p in tmp_path.glob("*.json"))
    assert len(names) == 1 and names[0].startswith("vllm-infqps-concurrency2-llama-3.1-8b-")
    res = json.loads((tmp_path / names[0]).read_text())
    assert "mean_ttft_ms" in res and "mean_tpot_ms" not in res  # --percentile-metrics ttft
    for _ in range(2):
        out = _bench([*args, "--append-result", "--result-filename", "all.json"], tmp_path)
        assert out.returncode == 0, out.stderr
    lines = (tmp_path / "all.json").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["completed"] == 6 for x in lines)


def test_vllm_header_and_chat_backend(server: str, tmp_path: Path) -> None:
    out = _bench(["--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
                  "--dataset-name", "random", "--random-input-len", "16",
                  "--random-output-len", "4", "--num-prompts", "3", "--host", "127.0.0.1",
                  "--port", server.rsplit(":", 1)[1], "--header", "x-a=1", "x-b=2",
                  "--ready-check-timeout-sec", "5", "--trace", "t.jsonl"], tmp_path)
    assert out.returncode == 0, out.stderr
    header = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])
    assert header["engine_config"]["api"] == "chat"


@pytest.mark.parametrize(("args", "field"), [
    (["--backend", "tgi"], "--backend"),
    (["--dataset-name", "burstgpt"], "--dataset-name"),
    (["--dataset-name", "random", "--dataset-path", "x.json"], "--dataset-path"),
    (["--percentile-metrics", "ttft,goodness"], "--percentile-metrics"),
    (["--metadata", "novalue"], "--metadata"),
    (["--random-range-ratio", "1.5", "--dataset-name", "random"], "--random-range-ratio"),
    (["--profile"], "--profile"),
    (["--goodput", "speed:3"], "--goodput"),
])
def test_bad_vllm_flags_are_one_line_errors(args: list[str], field: str, tmp_path: Path
                                            ) -> None:
    out = _bench([*args, "--base-url", "http://127.0.0.1:9"], tmp_path)
    assert out.returncode == 2
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and field in errors[0], out.stderr


def test_normalize_argv_shapes() -> None:
    def argv(args: list[str]) -> list[str]:
        return normalize_argv(args)[0]

    assert argv(["--header", "a=1", "b=2", "-n", "3"]) == [
        "--header", "a=1", "--header", "b=2", "-n", "3"]
    # vLLM's --goodput is nargs "+": every KEY:VALUE word after one flag is a goodput SLO
    assert argv(["--goodput", "ttft:500", "tpot:50", "-n", "3"]) == [
        "--goodput", "ttft:500", "--goodput", "tpot:50", "-n", "3"]
    assert argv(["--save-result"]) == ["--save-result=vllm", "--vllm-result-naming"]
    assert argv(["--save-result", "aiperf-csv"]) == ["--save-result", "aiperf-csv"]
    assert argv(["--profile", "poisson", "--rate", "2"]) == [
        "--rate-type", "poisson", "--rate", "2"]
    # an ignored flag goes with its value, and says so
    out, notes = normalize_argv(["--tokenizer-mode", "slow", "--trust-remote-code", "-n", "3"])
    assert out == ["-n", "3"] and len(notes) == 2 and notes[0].startswith("--tokenizer-mode")
    with pytest.raises(RidgelineError, match="--profile"):
        normalize_argv(["--profile", "--rate", "2"])


def test_backend_and_lengths() -> None:
    assert backend_api("openai", None) == "completions"
    assert backend_api("openai", "/v1/chat/completions") == "chat"
    assert backend_api(None, None) is None
    with pytest.raises(RidgelineError):
        backend_api("openai-audio", None)
    # vLLM: uniform on [floor(L(1-r)), ceil(L(1+r))]
    assert random_lengths(10, 0.25) == "uniform:min=7,max=13"
    assert random_lengths(10, 0.0) == "fixed:10"


def test_sonnet_shares_its_first_lines(tmp_path: Path) -> None:
    poem = tmp_path / "sonnet.txt"
    lines = [f"line {i} of the poem with some words in it\n" for i in range(40)]
    poem.write_text("".join(lines))
    spec = parse_dataset(f"sonnet:path={poem},input=200,prefix=80")
    reqs = sonnet_requests(spec, 5, parse_lengths("fixed:9"), np.random.default_rng(0))
    # ~11 tokens per line by chars/4 (44 chars), base prompt ~14: 4 prefix lines, 17 in all
    head = "Pick as many lines as you can from these poem lines:\n" + "".join(lines[:6])
    assert all(r.prompt.startswith(head[: reqs[0].tag_at]) for r in reqs)
    assert reqs[0].prompt[: reqs[0].tag_at].count("\n") - 1 == round((80 - 14) / 11)
    assert all(r.prompt.count("\n") - 1 == round((200 - 14) / 11) for r in reqs)
    assert [r.max_tokens for r in reqs] == [9] * 5
    assert len({r.prompt for r in reqs}) == 5


def test_guidellm_constant_profile(server: str, tmp_path: Path) -> None:
    out = _bench(["--profile", "constant", "--rate", "40", "--requests", "4", "--base-url",
                  server, "--prompt", "8", "--output", "2", "--trace", "t.jsonl"], tmp_path)
    assert out.returncode == 0, out.stderr
    load = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])["load"]
    assert load["arrival"] == "constant" and load["rate_req_s"] == 40


def test_run_plan_is_the_commands_library_call(server: str, tmp_path: Path) -> None:
    """The orchestration as one call: a plan of two points, two traces, a knee."""
    from ridgeline.bench.client import EndpointConfig
    from ridgeline.bench.load import LoadSpec
    from ridgeline.bench.load_points import BenchPlan, SessionHooks, run_plan, sweep_points
    from ridgeline.bench.single_run import BenchConfig
    from ridgeline.workload.lengths import parse_lengths

    seen: list[str] = []
    run = BenchConfig(endpoint=EndpointConfig(server, "llama-3.1-8b", ignore_eos=True),
                      load=LoadSpec(concurrency=1, arrival=None, requests=4),
                      trace_path=str(tmp_path / "t.jsonl"), prompt=parse_lengths("fixed:16"),
                      output=parse_lengths("fixed:4"))
    plan = BenchPlan(run=run, points=sweep_points([], [1, 2], rate_sweep=False))
    out = run_plan(plan, SessionHooks(on_point=lambda p, path: seen.append(path)))
    assert [p.point.label for p in out.points] == ["concurrency=1", "concurrency=2"]
    assert seen == [str(tmp_path / "t.concurrency-1.jsonl"),
                    str(tmp_path / "t.concurrency-2.jsonl")]
    assert all(p.book["statuses"] == {"ok": 4} for p in out.points) and out.exit_code == 0
    assert out.knee in (0, None)  # never the range's last point


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_non_streaming_mode(server: str, tmp_path: Path, api: str) -> None:
    out = _bench(["--base-url", server, "--api", api, "--non-streaming", "--requests", "3",
                  "--prompt", "16", "--output", "5", "--ignore-eos", "--trace", "t.jsonl",
                  "--json"], tmp_path)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert lines[0]["engine_config"]["stream"] is False
    recs = [x for x in lines if x.get("type") == "request"]
    assert len(recs) == 3
    for r in recs:  # one answer = one event carrying every token; TTFT = E2E
        assert r["status"] == "ok" and len(r["event_times_s"]) == 1
        assert r["output_tokens"] == 5 and r["event_tokens"] == [5]
        assert r["event_times_s"][0] == pytest.approx(r["end_s"])


def test_request_cancellation(server: str, tmp_path: Path) -> None:
    """AIPerf's request cancellation: about half the requests cut 50 ms after sending."""
    out = _bench(["--base-url", server, "--requests", "16", "--concurrency", "4",
                  "--prompt", "16", "--output", "400", "--ignore-eos",
                  "--request-cancellation-rate", "50", "--request-cancellation-delay", "0.05",
                  "--trace", "t.jsonl"], tmp_path)
    assert out.returncode == 0, out.stderr
    recs = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()
            if '"type":"request"' in x]
    cut = [r for r in recs if r.get("error_kind") == "cancelled"]
    full = [r for r in recs if r["status"] == "ok"]
    assert len(cut) + len(full) == 16 and 2 <= len(cut) <= 14
    for r in cut:  # cut at the delay, keeping what had arrived
        assert r["status"] == "cutoff"
        assert 0.045 <= r["end_s"] - r["sent_s"] < 0.05 + 0.5  # the timer starts at send
        assert len(r.get("event_times_s") or []) < 400
    assert all(r["output_tokens"] == 400 for r in full)
