"""What the peers' users read: vLLM's printed result block, the vLLM flag table, GuideLLM's
and AIPerf's option values as ridgeline's, GuideLLM's weighted statistics; and the SLOs a
bench run was measured against travelling in its trace header to `advise`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from ridgeline.bench.peer_flags import guidellm_data, normal_lengths, normalize_argv
from ridgeline.bench.results_guidellm import weighted_stats
from ridgeline.bench.results_peer import vllm_result_block
from ridgeline.bench.vllm_flags import FLAGS
from ridgeline.errors import RidgelineError

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


def _result() -> dict:
    return {"completed": 98, "failed": 2, "max_concurrency": 8, "request_rate": 4.0,
            "duration": 24.5, "total_input_tokens": 10000, "total_output_tokens": 5000,
            "request_throughput": 4.0, "request_goodput": 3.5, "output_throughput": 204.08,
            "max_output_tokens_per_s": 260.0, "max_concurrent_requests": 7,
            "total_token_throughput": 612.24, "mean_ttft_ms": 50.0, "median_ttft_ms": 45.0,
            "p99_ttft_ms": 120.5, "mean_tpot_ms": 10.0, "median_tpot_ms": 9.5,
            "p99_tpot_ms": 15.25, "mean_itl_ms": 9.0, "median_itl_ms": 8.0,
            "p99_itl_ms": 30.0, "mean_e2el_ms": 900.0, "median_e2el_ms": 850.0,
            "p99_e2el_ms": 1500.0}


def test_vllm_result_block_is_vllms_layout() -> None:
    # Written out by hand from vLLM's print statements: "{:<40} {:<10}" rows, 50-wide rules.
    expected = [
        "============ Serving Benchmark Result ============",
        "Successful requests:                     98        ",
        "Failed requests:                         2         ",
        "Maximum request concurrency:             8         ",
        "Request rate configured (RPS):           4.00      ",
        "Benchmark duration (s):                  24.50     ",
        "Total input tokens:                      10000     ",
        "Total generated tokens:                  5000      ",
        "Request throughput (req/s):              4.00      ",
        "Request goodput (req/s):                 3.50      ",
        "Output token throughput (tok/s):         204.08    ",
        "Peak output token throughput (tok/s):    260.00    ",
        "Peak concurrent requests:                7.00      ",
        "Total Token throughput (tok/s):          612.24    ",
        "---------------Time to First Token----------------",
        "Mean TTFT (ms):                          50.00     ",
        "Median TTFT (ms):                        45.00     ",
        "P99 TTFT (ms):                           120.50    ",
        "-----Time per Output Token (excl. 1st token)------",
        "Mean TPOT (ms):                          10.00     ",
        "Median TPOT (ms):                        9.50      ",
        "P99 TPOT (ms):                           15.25     ",
        "---------------Inter-token Latency----------------",
        "Mean ITL (ms):                           9.00      ",
        "Median ITL (ms):                         8.00      ",
        "P99 ITL (ms):                            30.00     ",
        "==================================================",
    ]
    assert vllm_result_block(_result(), (99.0,), None, goodput=True) == expected
    # e2el only when asked (vLLM's default --percentile-metrics is ttft,tpot,itl)
    lines = vllm_result_block(_result(), (99.0,), ("e2el",))
    assert "----------------End-to-end Latency----------------" in lines
    assert "Mean E2EL (ms):                          900.00    " in lines
    assert not any("TTFT" in ln for ln in lines)


def _bench_params() -> set[str]:
    from ridgeline.commands import bench

    app = typer.Typer()
    bench.register(app)
    cmd = typer.main.get_command(app)
    names: set[str] = set()
    for p in cmd.params:  # type: ignore[attr-defined]
        names.update(p.opts)
        names.update(p.secondary_opts)
    return names


def test_the_vllm_flag_table_matches_the_command() -> None:
    """An accepted flag is an option of `ridgeline bench`; an ignored or refused one is not
    (it is handled before parsing, with its reason)."""
    names = _bench_params()
    for flag in FLAGS.values():
        if flag.status == "accepted":
            assert flag.name in names, flag.name
        else:
            assert flag.name not in names or flag.name == "--profile", flag.name
            assert flag.reason, flag.name
    assert FLAGS["--goodput"].nargs == "+" and FLAGS["--metadata"].nargs == "*"


@pytest.mark.parametrize("flag", [f.name for f in FLAGS.values() if f.status == "refused"])
def test_refused_vllm_flags_say_why(flag: str) -> None:
    args = [flag] if FLAGS[flag].nargs == 0 else [flag, "1"]
    with pytest.raises(RidgelineError, match=flag):
        normalize_argv(args)


def test_refused_flag_through_the_command(tmp_path: Path) -> None:
    out = subprocess.run([RIDGELINE, "bench", "--use-beam-search", "--base-url",
                          "http://127.0.0.1:9"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert out.returncode == 2
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "--use-beam-search" in errors[0] and "beam search" in errors[0]
    assert list(tmp_path.iterdir()) == []  # a refused run writes nothing


def test_guidellm_data_forms() -> None:
    assert guidellm_data("prompt_tokens=256,output_tokens=128") == (
        "synthetic", "fixed:256", "fixed:128", 0, 0)
    assert guidellm_data('{"prompt_tokens": 100, "prompt_tokens_stdev": 10, '
                         '"prompt_tokens_min": 50, "output_tokens": 20}') == (
        "synthetic", "normal:mean=100,std=10,min=50", "fixed:20", 0, 0)
    assert guidellm_data("prompt_tokens=64,output_tokens=8,prefix_tokens=32,prefix_count=4"
                         )[3:] == (4, 32)
    for bad in ("prompt_tokens=abc", "colour=3", "output_tokens=5", "some/hub-dataset"):
        with pytest.raises(RidgelineError, match="--data"):
            guidellm_data(bad)
    assert normal_lengths(100, 0) == "fixed:100"


def test_guidellm_weighted_percentiles_by_hand() -> None:
    # values 10, 20, 30 with weights 1, 1, 2: CDF 0.25, 0.5, 1.0 (no interpolation)
    s = weighted_stats([30.0, 10.0, 20.0], [2.0, 1.0, 1.0])
    assert s["mean"] == pytest.approx((10 + 20 + 60) / 4)
    assert s["percentiles"]["p25"] == 10.0 and s["percentiles"]["p50"] == 20.0
    assert s["percentiles"]["p75"] == 30.0 and s["median"] == 20.0
    assert s["min"] == 10.0 and s["max"] == 30.0 and s["count"] == 3


def test_header_slos_reach_advise(tmp_path: Path) -> None:
    """A run measured against ttft_ms:100 is advised against 100 ms, not the default."""
    from ridgeline.advise import advise

    trace = tmp_path / "t.jsonl"
    recs = [{"type": "request", "id": str(i), "sent_s": i * 0.1,
             "event_times_s": [i * 0.1 + 0.3, i * 0.1 + 0.31], "end_s": i * 0.1 + 0.31,
             "prompt_tokens": 10, "output_tokens": 2, "status": "ok"} for i in range(30)]
    header = {"type": "header", "source": "bench", "slos": ["ttft_ms:100"]}
    trace.write_text("\n".join(json.dumps(x) for x in [header, *recs]) + "\n")
    adv = advise(str(trace))
    assert adv.budgets_ms["ttft"] == pytest.approx(100.0)
    assert "No symptom found" not in adv.markdown()  # TTFT 300 ms misses the 100 ms SLO
    # an explicit --slo still wins; a trace without the field keeps the default
    assert advise(str(trace), slos=["ttft_ms:500"]).budgets_ms["ttft"] == pytest.approx(500)
    header.pop("slos")
    trace.write_text("\n".join(json.dumps(x) for x in [header, *recs]) + "\n")
    assert advise(str(trace)).budgets_ms["ttft"] == pytest.approx(1000.0)


def test_format_vllm_prints_only_vllms_block_and_the_slos_go_in_the_header(
        tmp_path: Path) -> None:
    out = subprocess.run([RIDGELINE, "bench", "--target", "emulator", "--speed", "50",
                          "-n", "4", "-c", "2", "--prompt", "32", "--output", "8",
                          "--goodput", "ttft:500", "tpot:50", "--format", "vllm",
                          "--trace", "t.jsonl", "--no-progress"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert lines[-1] == "=" * 50 and "Successful requests:" in lines[1]
    assert "Request goodput (req/s):" in out.stdout
    header = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])
    assert header["slos"] == ["ttft_ms:500", "tpot_ms:50"]
    # the emulator runs on no GPU: no NVML line about it
    assert "pynvml" not in out.stderr and "GPU telemetry" not in out.stderr


def test_prespawned_emulator_is_used_only_for_the_same_server(monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """The emulator started from the raw command line serves the run only when the parsed
    options ask for the same server; otherwise it is stopped and a new one started."""
    import atexit

    from ridgeline.commands import bench_run as command

    class Fake:
        def __init__(self, kwargs: dict) -> None:
            self.kwargs, self.stopped = kwargs, False

        def stop(self) -> None:
            self.stopped = True

    monkeypatch.setattr(command, "_spawn", Fake)
    monkeypatch.setattr(atexit, "register", lambda fn: None)
    monkeypatch.setattr(command, "_EARLY", [])
    command.prespawn(["--target", "emulator", "-m", "qwen3-8b", "--speed=4", "-n", "3"])
    (kw, early), = command._EARLY
    assert kw == {"model": "qwen3-8b", "hardware": "h100-sxm", "speed": 4.0, "extra_args": []}

    class Args:
        target, model, hardware, speed, emulator_arg, calibration = \
            "emulator", "qwen3-8b", "h100-sxm", 4.0, None, None

    assert command._spawn_emulator(Args()) is early and not early.stopped  # type: ignore
    command.prespawn(["--target", "emulator", "--speed", "4"])
    _, other = command._EARLY[0]
    fresh = command._spawn_emulator(Args())  # type: ignore[arg-type]
    assert other.stopped and fresh is not other and fresh.kwargs["model"] == "qwen3-8b"
    command._EARLY.clear()
    command.prespawn(["--target", "url", "-m", "x"])  # not the emulator: nothing started
    command.prespawn(["--target", "emulator", "--served-model-name", "y"])
    assert command._EARLY == []


@pytest.mark.parametrize(("args", "field"), [
    (["--target", "http://127.0.0.1:9", "--base-url", "http://127.0.0.1:10"], "--base-url"),
    (["--url", "127.0.0.1:9", "--port", "10"], "--host/--port"),
    (["--target", "ftp://x"], "--target"),
    (["--target", "emulator", "--url", "127.0.0.1:9"], "--url"),
    (["--endpoint-type", "embeddings"], "--endpoint-type"),
    (["--data", "prompt_tokens=8", "--synthetic-input-tokens-mean", "8"], "--data"),
    (["--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "1",
      "--ramp-up-end-rps", "2"], "--ramp-up-strategy"),
    (["--rate-type", "bursty"], "--rate-type"),
    (["--format", "html"], "--format"),
])
def test_conflicting_peer_flags_are_one_line_errors(args: list[str], field: str,
                                                    tmp_path: Path) -> None:
    out = subprocess.run([RIDGELINE, "bench", *args], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and field in errors[0], out.stderr
    assert list(tmp_path.iterdir()) == []
