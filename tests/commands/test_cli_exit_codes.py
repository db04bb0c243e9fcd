"""The installed `ridgeline` command tells the truth: exit codes and error lines.

Every case runs the console script that pip installed, in a subprocess, as a user would
(not CliRunner, which skips `main()`). For bad input the contract is (docs/cli.md):
exit code 2, nothing on stdout, exactly one stderr line starting with `error:` that names
the option, and no traceback anywhere. Checks that fail exit 1, Ctrl-C 130, a bug 70.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

RIDGELINE = Path(sys.executable).parent / "ridgeline"


def run(*args: str, cwd: Path | None = None, timeout: float = 180,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(RIDGELINE), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, **(env or {})})


# (arguments, text the error line must contain: the option or field it names). "{d}" is
# the work folder (traces, bad model files), "{dir}" a folder, "{ro}" a path no one can
# create even as root (/proc refuses new files).
BAD_INPUT: list[Any] = [
    # usage errors: no command, unknown command/option, bad option values, missing args
    ((), "command"),
    (("estimat",), "estimat"),
    (("--bogus",), "--bogus"),
    (("estimate", "--bogus"), "--bogus"),
    (("estimate", "--tp", "0"), "--tp"),
    (("estimate", "--tp", "abc"), "--tp"),
    (("simulate", "--rate", "1", "-n", "0"), "--requests"),
    # a batch run past this machine's memory fails at once (10 M x 2,000 tokens: 1.2 TiB)
    (("simulate", "--rate", "1", "-n", "10000000", "--no-stream", "--output", "fixed:2000"),
     "--requests"),
    (("analyze",), "trace"),
    (("serve", "--port", "99999"), "--port"),
    (("theory", "bogus"), "bogus"),
    (("theory", "--bogus"), "--bogus"),
    # estimate: non-finite, negative, zero, out of range, too many points
    (("estimate", "-b", "nan"), "--batch"),
    (("estimate", "-b", "inf"), "--batch"),
    (("estimate", "-b", "-5"), "--batch"),
    (("estimate", "-b", "1:1e15:1"), "--batch"),
    (("estimate", "-p", "1:inf"), "--prompt"),
    (("estimate", "-o", "0:4"), "--output"),
    (("estimate", "-t", "nan"), "--context"),
    (("estimate", "-b", "1:1000:1", "-p", "1:5000:1"), "--batch"),
    (("estimate", "--compute-efficiency", "nan"), "--compute-efficiency"),
    (("estimate", "--bandwidth-efficiency", "0"), "--bandwidth-efficiency"),
    (("estimate", "--kernel-overhead-us", "-1"), "--kernel-overhead-us"),
    (("estimate", "--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization"),
    (("estimate", "--prefix", "-1"), "--prefix"),
    (("estimate", "-m", "nosuchmodel"), "model"),
    (("estimate", "-g", "tpu"), "hardware"),
    (("estimate", "--weights", "int2"), "weights"),
    pytest.param(("estimate", "-m", "{d}/list.json"), "model"),
    pytest.param(("estimate", "-m", "{d}/nan.json"), "hidden_size"),
    pytest.param(("estimate", "-m", "{d}/zero_heads.json"), "num_attention_heads"),
    # roofline, models, hardware
    (("roofline", "--m", "nan"), "--m"),
    (("roofline", "--k", "0"), "--k"),
    (("roofline", "--dtype", "fp64"), "--dtype"),
    (("models", "--bogus"), "--bogus"),
    (("hardware", "extra"), "extra"),
    # simulate
    (("simulate",), "--rate"),
    (("simulate", "--rate", "nan"), "--rate"),
    (("simulate", "--rate", "-1"), "--rate"),
    (("simulate", "--rate", "1", "--concurrency", "0"), "--concurrency"),
    (("simulate", "--rate", "1", "--trace", "{ro}/t.jsonl"), "--trace"),
    (("simulate", "--rate", "1", "--trace", "{dir}"), "--trace"),
    (("simulate", "--rate", "1", "--trace", "{d}/a.jsonl/t.jsonl"), "--trace"),
    (("simulate", "--rate", "1", "--timeline", "{ro}/t.csv"), "--timeline"),
    (("simulate", "--rate", "1", "--slo", "ttft_ms<"), "--slo"),
    (("simulate", "--rate", "1", "--slo", "ttft_ms:-5"), "--slo"),
    (("simulate", "--rate", "1", "--slo-attainment", "0"), "--slo-attainment"),
    (("simulate", "--rate", "1", "--prompt", "fixed:nan"), "--prompt"),
    (("simulate", "--rate", "1", "--arrival", "gamma:cv=-1"), "--arrival"),
    (("simulate", "--rate", "1", "--kv-transfer-latency-us", "-1"),
     "--kv-transfer-latency-us"),
    (("simulate", "--rate", "1", "--num-kv-blocks", "0"), "--num-kv-blocks"),
    (("simulate", "--rate", "1", "--max-num-seqs", "100000000"), "--max-num-seqs"),
    (("simulate", "--rate", "1", "--gpu-memory-utilization", "nan"),
     "--gpu-memory-utilization"),
    # serve (all refused before binding a port)
    (("serve", "--speed", "0"), "--speed"),
    (("serve", "--gpu-memory-utilization", "nan"), "--gpu-memory-utilization"),
    (("serve", "--overload-status", "500"), "--overload-status"),
    (("serve", "--header-timeout", "0"), "--header-timeout"),
    (("serve", "--max-num-seqs", "100000000"), "--max-num-seqs"),
    (("serve", "--max-model-len", "100000000"), "--max-model-len"),
    (("serve", "-m", "nosuchmodel"), "model"),
    # bench (all refused before a request is sent)
    (("bench", "--base-url", "notaurl"), "--base-url"),
    (("bench", "--base-url", "ftp://example.com"), "--base-url"),
    (("bench", "--base-url", "http://127.0.0.1:99999"), "--base-url"),
    (("bench", "--duration", "-3"), "--duration"),
    (("bench", "--target", "emulator", "-m", "nosuchmodel", "-n", "1",
      "--trace", "{d}/never.jsonl"), "model"),
    (("bench", "--target", "emulator", "--speed", "0"), "--speed"),
    (("bench", "--rate", "nan"), "--rate"),
    (("bench", "--concurrency", "0"), "--concurrency"),
    (("bench", "--trace", "{dir}"), "--trace"),
    (("bench", "--trace", "{ro}/t.jsonl"), "--trace"),
    (("bench", "--max-error-rate", "2"), "--max-error-rate"),
    (("bench", "--api", "grpc"), "--api"),
    (("bench", "--target", "cloud"), "--target"),
    (("bench", "--timeout", "0"), "--timeout"),
    (("bench", "--temperature", "nan"), "--temperature"),
    # analyze, compare, gate, validate
    (("analyze", "{d}/missing.jsonl"), "trace"),
    (("analyze", "{dir}"), "trace"),
    (("analyze", "{d}/a.jsonl", "--window", "5:1"), "--window"),
    (("analyze", "{d}/a.jsonl", "--slo", "bogus"), "--slo"),
    (("analyze", "{d}/a.jsonl", "--format", "bogus"), "--format"),
    (("analyze", "{d}/a.jsonl", "--select", "-1"), "--select"),
    (("compare", "{d}/a.jsonl"), "'b'"),
    (("compare", "{d}/a.jsonl", "{d}/a.jsonl", "--metric", "bogus"), "metric"),
    (("gate", "{d}/a.jsonl", "{d}/a.jsonl"), "--max-regression"),
    (("gate", "{d}/a.jsonl", "{d}/a.jsonl", "--max-regression", "bogus=5%"), "metric"),
    (("gate", "{d}/a.jsonl", "{d}/a.jsonl", "--max-regression", "tpot_p95=5%",
      "--summary-file", "{ro}/summary.md"), "--summary-file"),
    (("validate",), "trace"),
    (("validate", "{d}/missing.jsonl"), "trace"),
    (("validate", "{dir}"), "trace"),
    # demo
    (("demo", "--out-dir", "{ro}/demo"), "--out-dir"),
    (("demo", "--out-dir", "{d}/a.jsonl"), "--out-dir"),
    (("demo", "--bogus"), "--bogus"),
    # theory
    (("theory", "mm1", "--arrival-rate", "8", "--service-rate", "10", "--percentile", "150"),
     "--percentile"),
    (("theory", "mm1", "--arrival-rate", "12", "--service-rate", "10"), "--arrival-rate"),
    (("theory", "mmc", "--arrival-rate", "nan", "--service-rate", "1", "-c", "2"),
     "--arrival-rate"),
    (("theory", "mmc", "--arrival-rate", "8", "--service-rate", "10", "-c", "0"), "--servers"),
    (("theory", "samples", "--half-width", "0"), "--half-width"),
    (("theory", "samples", "--have", "0"), "--have"),
    (("theory", "amdahl", "--fraction", "2", "--speedup", "2"), "--fraction"),
    (("theory", "amdahl", "--speedup", "2"), "--fraction"),
    (("theory", "little", "--rate", "nan", "--latency-s", "1"), "--rate"),
    (("theory", "fanout", "-k", "0"), "--calls"),
    (("theory", "e2e", "--ttft-ms", "-1", "--tpot-ms", "1", "--output-tokens", "3"),
     "--ttft-ms"),
]


def _case_args(case: Any) -> tuple[str, ...]:
    return case.values[0] if hasattr(case, "values") else case[0]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two simulated traces (one slower), bad model files, an invalid trace."""
    d = tmp_path_factory.mktemp("cli")
    common = ("simulate", "--rate", "4", "-n", "300", "--prompt", "fixed:200", "--output",
              "fixed:100", "--seed", "1", "--json")
    with ThreadPoolExecutor(2) as pool:
        fast = pool.submit(run, *common, "--trace", str(d / "a.jsonl"))
        # Half the memory bandwidth: decode (memory-bound) steps take about twice as long.
        slow = pool.submit(run, *common, "--bandwidth-efficiency", "0.4",
                           "--trace", str(d / "slow.jsonl"))
        for proc in (fast.result(), slow.result()):
            assert proc.returncode == 0, proc.stderr
    (d / "dir").mkdir()
    (d / "list.json").write_text("[1, 2]")
    from ridgeline.specs import model_catalog

    cfg = {k: v for k, v in model_catalog()["llama-3.1-8b"].items() if not k.startswith("_")}
    (d / "nan.json").write_text(json.dumps({**cfg, "hidden_size": float("nan")}))
    (d / "zero_heads.json").write_text(json.dumps({**cfg, "num_attention_heads": 0}))
    lines = (d / "a.jsonl").read_text().splitlines()
    bad = json.loads(lines[1])
    bad["sent_s"] = bad["event_times_s"][-1] + 5.0  # sent after its last token arrived
    (d / "invalid.jsonl").write_text("\n".join([lines[0], json.dumps(bad), *lines[2:]]) + "\n")
    return d


@pytest.fixture(scope="module")
def bad_input_results(work: Path) -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
    """Every BAD_INPUT case, run once, four at a time (start-up dominates each case)."""
    subs = {"{d}": str(work), "{dir}": str(work / "dir"), "{ro}": "/proc/ridgeline-nope"}

    def expand(args: tuple[str, ...]) -> tuple[str, ...]:
        out = []
        for a in args:
            for k, v in subs.items():
                a = a.replace(k, v)
            out.append(a)
        return tuple(out)

    cases = [_case_args(c) for c in BAD_INPUT]
    with ThreadPoolExecutor(4) as pool:
        procs = list(pool.map(lambda a: run(*expand(a), cwd=work), cases))
    return dict(zip(cases, procs, strict=True))


def test_table_is_big_and_covers_every_command() -> None:
    cases = [_case_args(c) for c in BAD_INPUT]
    assert len(cases) >= 60 and len(set(cases)) == len(cases)
    commands = {a[0] for a in cases if a}
    assert commands >= {"demo", "models", "hardware", "estimate", "roofline", "simulate",
                        "serve", "bench", "analyze", "compare", "gate", "validate", "theory"}
    theory = {a[1] for a in cases if a[:1] == ("theory",) and len(a) > 1}
    assert theory >= {"mm1", "mmc", "samples", "amdahl", "little", "fanout", "e2e"}


@pytest.mark.parametrize(("args", "names"), BAD_INPUT, ids=lambda v: " ".join(v)
                         if isinstance(v, tuple) else None)
def test_bad_input_is_one_error_line_and_exit_2(
        bad_input_results: dict[tuple[str, ...], subprocess.CompletedProcess[str]],
        args: tuple[str, ...], names: str) -> None:
    proc = bad_input_results[args]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert names in errors[0], errors[0]


# ---- exit codes of checks, interrupts and bugs ------------------------------------------


def test_gate_passes_0_and_fails_1_on_real_traces(work: Path) -> None:
    a, slow = str(work / "a.jsonl"), str(work / "slow.jsonl")
    same = run("gate", a, a, "--max-regression", "tpot_p95=5%")
    assert same.returncode == 0, same.stdout + same.stderr
    faster = run("gate", slow, a, "--max-regression", "tpot_p95=5%")
    assert faster.returncode == 0, faster.stdout + faster.stderr
    regressed = run("gate", a, slow, "--max-regression", "tpot_p95=5%",
                    "--summary-file", str(work / "summary.md"))
    assert regressed.returncode == 1, regressed.stdout + regressed.stderr
    assert "FAIL" in regressed.stdout and "Traceback" not in regressed.stderr
    assert "FAIL" in (work / "summary.md").read_text()


def test_validate_exits_1_on_an_invalid_trace(work: Path) -> None:
    ok = run("validate", str(work / "a.jsonl"))
    assert ok.returncode == 0, ok.stderr
    bad = run("validate", str(work / "invalid.jsonl"))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "INVALID" in bad.stdout and "Traceback" not in bad.stderr


class _Always500(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # /v1/models works: the server is up
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
        self._send(200, body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self._send(500, json.dumps({"error": {"message": "boom"}}))

    def _send(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_bench_exits_1_when_every_request_fails(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Always500)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        # Neither --requests nor --duration: the stated default bound, said up front.
        proc = run("bench", "--base-url", url, "--trace", str(tmp_path / "t.jsonl"),
                   "--no-progress", timeout=120)
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"bench: {url} model m: 100 requests; trace" in proc.stderr.splitlines()[0]
    records = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    failed = [r for r in records if r["type"] == "request"]
    assert len(failed) == 100 and all(r["status"] != "ok" for r in failed)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_ctrl_c_exits_130_with_one_short_line(tmp_path: Path) -> None:
    proc = subprocess.Popen([str(RIDGELINE), "simulate", "--rate", "50", "-n", "400000",
                             "--step-by-step"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # Interrupt once it is simulating (past imports), not while Python starts up.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if not Path("/proc").is_dir():
                time.sleep(5)
                break
            if _cpu_seconds(proc.pid) > 2.0:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "simulate ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and out == ""
    # One line on the interrupt; before it, only the progress lines of a log (stderr is a
    # pipe: one every few seconds).
    lines = err.strip().splitlines()
    assert lines[-1] == "interrupted"
    assert all(ln.startswith("simulate: simulating ") for ln in lines[:-1]), err


def test_an_internal_error_is_one_line_and_a_report_file(tmp_path: Path) -> None:
    # A command that fails with a bug, run through the real entry point (main()).
    code = ("import sys; from ridgeline import cli\n"
            "@cli.app.command('boom')\n"
            "def boom() -> None:\n"
            "    raise ZeroDivisionError('a bug')\n"
            "sys.argv = ['ridgeline', 'boom']; cli.main()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert proc.returncode == 70
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: internal error: ZeroDivisionError: a bug (full report "
                           "written to ")
    report = Path(line.rsplit("written to ", 1)[1].rstrip(")"))
    assert report.parent == tmp_path / "ridgeline"
    assert "Traceback" in report.read_text() and "a bug" in report.read_text()


def test_help_has_no_emoji_and_examples_are_shell_safe() -> None:
    for cmd in ("estimate", "simulate", "bench", "analyze", "serve"):
        proc = run(cmd, "--help")
        assert proc.returncode == 0 and proc.stderr == ""
        text = proc.stdout
        assert "🅱" not in text and all(ord(ch) < 0x1F000 for ch in text)
        assert "ms<=" not in text and "ms>=" not in text  # `<` is a shell redirection
    assert "a:b:step" in run("estimate", "--help").stdout


def test_shell_safe_slo_means_at_most(work: Path) -> None:
    a = str(work / "a.jsonl")
    colon = json.loads(run("analyze", a, "--slo", "ttft_ms:50", "--json").stdout)
    op = json.loads(run("analyze", a, "--slo", "ttft_ms<=50", "--json").stdout)
    assert colon["goodput"] == op["goodput"]
    assert colon["goodput"]["slos"] == ["ttft_ms<=50"]


def test_theory_mmc_with_a_billion_servers_is_instant() -> None:
    t0 = time.monotonic()
    proc = run("theory", "mmc", "--arrival-rate", "8", "--service-rate", "10", "-c",
               "1000000000", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["P(wait) (Erlang C)"] == 0.0
    assert time.monotonic() - t0 < 30  # start-up included; was minutes


@pytest.mark.parametrize(("command", "forced"), [("simulate", True), ("calibrate", False)])
def test_blas_runs_one_thread_except_for_calibrate(command, forced):
    # An idle BLAS pool's spinning threads took a core from the single-threaded simulator
    # (a 1,000-replica run: 19.8 -> 8.2 CPU-s); calibrate measures the BLAS peak with all.
    pytest.importorskip("threadpoolctl")
    code = (f"import sys; sys.argv = ['ridgeline', {command!r}]; import ridgeline.cli, os; "
            "import numpy; from threadpoolctl import threadpool_info; "
            "print(os.environ.get('OPENBLAS_NUM_THREADS'), "
            "[i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'])")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout.split(maxsplit=1)
    if forced:
        assert out[0] == "1" and out[1].strip() == "[1]", out
    else:
        assert out[0] == "None", out


# ---- hostile files, sizes and outputs, one row per failure class -----------------------
#
# Every case runs the installed command under a 2 GiB address-space limit and a timeout, so
# a memory blow-up or a hang fails the test instead of the machine. "{h}" is the folder of
# hostile files built below; the error line must name the given text (file, field, option).

MEMORY_LIMIT_BYTES = 2 << 30
HOSTILE_TIMEOUT_S = 60


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def run_limited(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(RIDGELINE), *args], capture_output=True, text=True,
                          timeout=HOSTILE_TIMEOUT_S, cwd=cwd, preexec_fn=_limit_memory,
                          stdin=subprocess.DEVNULL, env={**os.environ})


_HOSTILE_PROFILE_FIELDS: dict[str, tuple[list[str], Any]] = {
    "kv_nan": (["kv_bytes_per_token"], float("nan")),
    "kv_neg": (["kv_bytes_per_token"], -5),
    "kv_inf": (["kv_bytes_per_token"], float("inf")),
    "block0": (["scheduling", "block_size_tokens"], 0),
    "ubatch_neg": (["scheduling", "ubatch_tokens"], -5),
    "seqs0": (["scheduling", "max_num_seqs"], 0),
    "step_huge": (["step_s"], [1e308, 1e308, 1e308, 1e308]),
    "single": (["tokens"], [1]),
    "created_nan": (["provenance", "created_unix_s"], float("nan")),
}

HOSTILE: list[Any] = [
    # hostile input accepted silently (exit 0, garbage out): profiles, replays, reports
    (("estimate", "--calibration", "{h}/kv_nan.json"), "kv_bytes_per_token"),
    (("estimate", "--calibration", "{h}/kv_neg.json"), "kv_bytes_per_token"),
    (("estimate", "--calibration", "{h}/kv_inf.json"), "kv_bytes_per_token"),
    (("simulate", "--rate", "1", "-n", "20", "--calibration", "{h}/block0.json"),
     "block_size_tokens"),
    (("estimate", "--calibration", "{h}/ubatch_neg.json"), "ubatch_tokens"),
    (("simulate", "--rate", "1", "-n", "20", "--calibration", "{h}/seqs0.json"),
     "max_num_seqs"),
    (("estimate", "--calibration", "{h}/step_huge.json"), "step_s"),
    (("estimate", "--calibration", "{h}/single.json"), "tokens"),
    (("simulate", "--rate", "1", "-n", "2", "--arrival", "replay:path={h}/nan.csv"),
     "Timestamp"),
    (("simulate", "-n", "2", "--arrival", "replay:path={h}/neg.csv"), "Timestamp"),
    (("simulate", "-n", "2", "--arrival", "replay:path={h}/secs_inf.txt"), "secs_inf.txt"),
    (("report", "{h}/header_only.jsonl", "--out", "{h}/r.html"), "no requests"),
    (("report", "{h}/all_failed.jsonl", "--out", "{h}/r.html"), "none of its"),
    (("plot", "cdf", "{h}/all_failed.jsonl", "--out", "{h}/c.png"), "none of its"),
    (("calibrate", "fit", "{h}/all_failed.jsonl", "--out", "{h}/f.json"), "no usable"),
    # exit 70 where a one-line exit 2 is due
    (("simulate", "-n", "2", "--arrival", "replay:path={h}/binary.csv"), "binary"),
    (("bench", "--target", "emulator", "-n", "1", "--replay", "{h}/utf16.csv"), "UTF-16"),
    (("bench", "--target", "emulator", "-n", "1", "--replay", "{h}/inf_tokens.csv"),
     "Request tokens"),
    (("plot", "roofline", "--out", "{dir}", "-b", "8"), "--out"),
    (("plot", "roofline", "--out", "{ro}/r.png"), "--out"),
    (("plot", "roofline", "-b", "1e300", "--out", "{h}/r.png"), "--batch"),
    (("report", "{h}/deep.json", "--out", "{h}/r.html"), "deep.json"),
    (("calibrate", "fit", "{h}/deep.json", "--out", "{h}/f.json"), "nested"),
    (("simulate", "--rate", "1", "-n", "100", "--pd", "100000000:100000000"), "--pd"),
    (("estimate", "--calibration", "{h}/created_nan.json"), "created_unix_s"),
    (("estimate", "--calibration", "{h}/deep.json"), "nested"),
    # memory blow-ups
    (("simulate", "--rate", "1", "-n", "1000000000"), "--requests"),
    (("simulate", "--rate", "1", "-n", "1000000000", "--stream", "--workers", "2"),
     "--requests"),
    (("simulate", "--rate", "1", "-n", "100", "--replicas", "1000000000"), "--replicas"),
    (("estimate", "--calibration", "/dev/zero"), "/dev/zero"),
    (("plot", "timeline", "/dev/zero", "--out", "{h}/t.png"), "/dev/zero"),
    (("analyze", "{h}/fifo"), "FIFO"),
    # hangs
    (("simulate", "-n", "20", "--arrival", "diurnal:peak=10,trough=1,phase=-1e308"),
     "phase"),
    (("simulate", "-n", "20", "--arrival", "diurnal:peak=10,trough=1,period=1e-300"),
     "period"),
    (("simulate", "-n", "20", "--arrival", "diurnal:peak=1e300,trough=1"), "peak"),
    (("simulate", "-n", "20", "--rate", "1", "--arrival", "gamma:cv=1e-300"), "cv"),
    # data lost: an output equal to an input (even through a link) is refused
    (("report", "{h}/victim.html", "--out", "{h}/victim.html"), "--out"),
    (("simulate", "--rate", "1", "-n", "5", "--calibration", "{h}/good.json", "--trace",
      "{h}/good.json"), "--trace"),
    (("simulate", "--rate", "1", "-n", "5", "--calibration", "{h}/good.json", "--trace",
      "{h}/link.json"), "--trace"),
    (("calibrate", "fit", "{h}/probe.jsonl", "--out", "{h}/probe.jsonl"), "--out"),
    (("bench", "--target", "emulator", "--replay", "{h}/ok.jsonl", "--trace",
      "{h}/ok.jsonl"), "--trace"),
    (("simulate", "--rate", "1", "-n", "5", "--arrival", "replay:path={h}/ok.jsonl",
      "--trace", "{h}/ok.jsonl"), "--trace"),
    # checks after the work
    (("calibrate", "host", "--quick", "--out", "{ro}/h.json"), "--out"),
    (("report", "{h}/probe.jsonl", "--out", "{ro}/r.html"), "--out"),
    (("calibrate", "fit", "{h}/probe.jsonl", "--out", "{ro}/f.json"), "--out"),
    # huge inputs built in memory, lengths past the context, a profile's absurd numbers
    (("bench", "--target", "emulator", "-n", "1", "--prompt", "fixed:2000000000"),
     "--prompt"),
    (("bench", "--target", "emulator", "-n", "1", "--prompt", "fixed:1000000"),
     "context window"),
    (("bench", "--target", "emulator", "-n", "1", "--replay", "{h}/huge.jsonl"),
     "input_length"),
    (("calibrate", "engine", "--base-url", "http://127.0.0.1:9", "--prefill-tokens",
      "2000000000"), "--prefill-tokens"),
    (("bench", "--target", "emulator", "--replay", "{h}/gap.csv"), "--replay-speed"),
    # the second hostile set (tools/hostile_inputs/hostile_inputs.py): one case per failure class
    # a trace line nested past the parser, a status of the wrong type, a later schema
    (("analyze", "{h}/deep_line.jsonl"), "line 3"),
    (("analyze", "{h}/status_dict.jsonl"), "status"),
    (("analyze", "{h}/schema_999.jsonl"), "schema_version"),
    # peer exports of the wrong shape
    (("analyze", "{h}/aiperf_metrics_list.jsonl"), "metrics"),
    (("analyze", "{h}/vllm_ttfts_str.json"), "ttfts"),
    # engine costs files: NaN, a missing fitted cost, the wrong unit
    (("simulate", "--rate", "1", "-n", "5", "--engine", "{h}/engine_nan.json"),
     "request_overhead_s"),
    (("simulate", "--rate", "1", "-n", "5", "--engine", "{h}/engine_missing.json"),
     "missing"),
    (("simulate", "--rate", "1", "-n", "5", "--engine", "{h}/engine_ms.json"), "unit"),
    # ... and a provenance the assumptions print: a text APE, a count for the runs' list
    # (both crashed the printing), not an object
    (("estimate", "-b", "1", "--engine", "{h}/engine_cv_text.json"), "provenance.cv_ape"),
    (("simulate", "--rate", "1", "-n", "5", "--engine", "{h}/engine_runs_int.json"),
     "provenance.runs"),
    (("estimate", "-b", "1", "--engine", "{h}/engine_prov_str.json"), "provenance"),
    # model configs: fields of the wrong type that were ignored
    (("estimate", "-m", "{h}/text_config_list.json"), "text_config"),
    (("estimate", "-m", "{h}/layer_types_str.json"), "layer_types"),
    # specs: fractional empirical lengths, a key given twice
    (("simulate", "--rate", "1", "-n", "5", "--prompt", "empirical:{h}/lengths_float.txt"),
     "whole"),
    (("simulate", "--rate", "1", "-n", "5", "--arrival", "gamma:cv=1,cv=2"), "twice"),
    # outputs: export over its input, two outputs in one file
    (("export", "{h}/probe.jsonl", "--to", "csv", "--out", "{h}/probe.jsonl"), "--out"),
    (("simulate", "--rate", "1", "-n", "5", "--trace", "{h}/same.jsonl", "--timeline",
      "{h}/./same.jsonl"), "--timeline"),
    # numbers: an integer past 1e15 on an option without a bound, nan on a float without
    # a range check, a path longer than any file name
    (("simulate", "--rate", "1", "-n", "5", "--workers", "9223372036854775808"), "--workers"),
    (("bench", "--base-url", "http://127.0.0.1:9", "-n", "1", "--top-p", "nan"), "--top-p"),
    (("analyze", "x" * 5000), "File name too long"),
    # URLs, headers and JSON options
    (("calibrate", "engine", "--base-url", "http://[::1"), "--base-url"),
    (("bench", "--base-url", "http://127.0.0.1:9", "-n", "1", "--extra-body",
      '{"a":' * 3000 + "1" + "}" * 3000), "--extra-body"),
    (("bench", "--base-url", "http://127.0.0.1:9", "-n", "1", "--header",
      "X: a\r\nInjected: 1"), "--header"),
]


def _hostile_files(d: Path, trace: Path) -> None:
    """The files the HOSTILE cases read (a good profile and its broken twins, replays)."""
    from ridgeline.sim.calibrated_profile import CalibrationProfile

    good = json.loads(CalibrationProfile.from_table(
        [1, 8, 64, 512], [0.01, 0.012, 0.03, 0.2], kv_bytes_per_token=131072,
        kv_capacity_tokens=100000).model_dump_json(by_alias=True))
    (d / "good.json").write_text(json.dumps(good))
    (d / "link.json").symlink_to(d / "good.json")
    for name, (where, value) in _HOSTILE_PROFILE_FIELDS.items():
        obj = json.loads(json.dumps(good))
        node = obj
        for key in where[:-1]:
            node = node[key]
        node[where[-1]] = value
        (d / f"{name}.json").write_text(json.dumps(obj))  # NaN/Infinity as Python writes
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    head = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    (d / "nan.csv").write_text(head + "nan,a,10,2,12,x\n1,a,10,2,12,x\n")
    (d / "neg.csv").write_text(head + "-5,a,10,2,12,x\n1,a,10,2,12,x\n")
    (d / "inf_tokens.csv").write_text(head + "0,a,inf,2,12,x\n1,a,10,2,12,x\n")
    (d / "gap.csv").write_text(head + "0,a,10,2,12,x\n3600000,a,10,2,12,x\n")
    (d / "utf16.csv").write_text(head + "0,a,10,2,12,x\n", encoding="utf-16")
    (d / "binary.csv").write_bytes(bytes(range(256)) * 16)
    (d / "secs_inf.txt").write_text("0\ninf\n1\n")
    rec = {"timestamp": 0, "input_length": 10, "output_length": 2}
    (d / "ok.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps(
        {**rec, "timestamp": 500}) + "\n")
    (d / "huge.jsonl").write_text(json.dumps({**rec, "input_length": 2_000_000_000}) + "\n")
    lines = trace.read_text().splitlines()
    (d / "header_only.jsonl").write_text(lines[0] + "\n")
    failed = [lines[0]]
    for line in lines[1:]:
        r = json.loads(line)
        if r.get("type") == "request":
            r.update(status="error", event_times_s=[], output_tokens=0, error="boom")
        failed.append(json.dumps(r))
    (d / "all_failed.jsonl").write_text("\n".join(failed) + "\n")
    (d / "probe.jsonl").write_text(trace.read_text())
    (d / "victim.html").write_text("<html>precious</html>")
    os.mkfifo(d / "fifo")
    # the second hostile set's files
    head, first = lines[0], lines[1]
    (d / "deep_line.jsonl").write_text("\n".join([head, first, "[" * 50_000 + "]" * 50_000])
                                       + "\n")
    (d / "status_dict.jsonl").write_text("\n".join(
        [head, json.dumps({**json.loads(first), "status": {"a": 1}})]) + "\n")
    (d / "schema_999.jsonl").write_text("\n".join(
        [json.dumps({**json.loads(head), "schema_version": 999}), first]) + "\n")
    subprocess.run([str(RIDGELINE), "export", str(trace), "--to", "aiperf", "--out",
                    str(d / "peer_aiperf.jsonl")], check=True, capture_output=True)
    subprocess.run([str(RIDGELINE), "export", str(trace), "--to", "vllm", "--out",
                    str(d / "peer_vllm.json")], check=True, capture_output=True)
    rows = (d / "peer_aiperf.jsonl").read_text().splitlines()
    (d / "aiperf_metrics_list.jsonl").write_text("\n".join(
        [json.dumps({**json.loads(rows[0]), "metrics": [1, 2]}), *rows[1:]]) + "\n")
    vllm = json.loads((d / "peer_vllm.json").read_text())
    (d / "vllm_ttfts_str.json").write_text(json.dumps({**vllm, "ttfts": "fast"}))
    from ridgeline.specs import model_catalog

    engine = {"engine": "vllm", "costs": {"request_overhead_s": {"value": 0.005, "unit": "s"},
                                          "request_overhead_steps": {"value": 1.0,
                                                                     "unit": "steps"},
                                          "step_overhead_s": {"value": 0.0, "unit": "s"}}}
    for name, cost in (("engine_nan", {"value": float("nan"), "unit": "s"}),
                       ("engine_ms", {"value": 5.5, "unit": "ms"}), ("engine_missing", None)):
        costs = {**engine["costs"], "request_overhead_s": cost}
        if cost is None:
            del costs["request_overhead_s"]
        (d / f"{name}.json").write_text(json.dumps({**engine, "costs": costs}))
    for name, prov in (("engine_cv_text", {"date": "2026-12-03", "cv_ape": {"itl": "5%"}}),
                       ("engine_runs_int", {"date": "2026-12-03", "runs": 16}),
                       ("engine_prov_str", "fitted by hand")):
        (d / f"{name}.json").write_text(json.dumps({**engine, "provenance": prov}))
    cfg = {k: v for k, v in model_catalog()["llama-3.1-8b"].items() if not k.startswith("_")}
    (d / "text_config_list.json").write_text(json.dumps({**cfg, "text_config": [1, 2]}))
    (d / "layer_types_str.json").write_text(json.dumps(
        {**cfg, "sliding_window": 4096, "layer_types": "sliding"}))
    (d / "lengths_float.txt").write_text("1.5\n2.5\n")


@pytest.fixture(scope="module")
def hostile_results(work: Path) -> tuple[Path, dict[tuple[str, ...], Any]]:
    """Every HOSTILE case, run once, three at a time, with the inputs' bytes before."""
    h = work / "hostile"
    h.mkdir()
    _hostile_files(h, work / "a.jsonl")
    subs = {"{h}": str(h), "{dir}": str(work / "dir"), "{ro}": "/proc/ridgeline-nope"}
    before = {p.name: p.read_bytes() for p in h.iterdir() if p.is_file() and not p.is_symlink()
              and p.name != "fifo"}

    def one(args: tuple[str, ...]) -> Any:
        expanded = []
        for a in args:
            for k, v in subs.items():
                a = a.replace(k, v)
            expanded.append(a)
        t0 = time.monotonic()
        try:
            proc = run_limited(*expanded, cwd=h)
        except subprocess.TimeoutExpired:
            return None, time.monotonic() - t0
        return proc, time.monotonic() - t0

    cases = [_case_args(c) for c in HOSTILE]
    with ThreadPoolExecutor(3) as pool:
        results = dict(zip(cases, pool.map(one, cases), strict=True))
    after = {name: (h / name).read_bytes() for name in before}
    changed = sorted(name for name in before if before[name] != after[name])
    return h, {"results": results, "changed": changed}


def test_hostile_table_covers_every_row_of_issue_23() -> None:
    cases = [_case_args(c) for c in HOSTILE]
    assert len(cases) >= 65 and len(set(cases)) == len(cases)
    commands = {a[0] for a in cases}
    assert commands >= {"estimate", "simulate", "bench", "report", "plot", "calibrate",
                        "analyze", "export"}


@pytest.mark.parametrize(("args", "names"), HOSTILE, ids=lambda v: " ".join(v)[:80]
                         if isinstance(v, tuple) else None)
def test_hostile_input_is_one_error_line_exit_2_in_bounded_time_and_memory(
        hostile_results: tuple[Path, dict[str, Any]], args: tuple[str, ...],
        names: str) -> None:
    proc, _wall_s = hostile_results[1]["results"][args]
    assert proc is not None, f"hung: still running after {HOSTILE_TIMEOUT_S} s"
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "MemoryError" not in proc.stderr, proc.stderr  # past the 2 GiB limit
    assert proc.returncode == 2, proc.stderr[-500:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert names in errors[0], errors[0]


def test_no_hostile_case_overwrote_an_input(
        hostile_results: tuple[Path, dict[str, Any]]) -> None:
    assert hostile_results[1]["changed"] == []


# ---- Ctrl-C of every long command (`plan` has its own test) -------------------


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _interrupt(proc: subprocess.Popen) -> tuple[str, float]:
    """Send SIGINT (as a terminal's Ctrl-C does) and wait: (stderr, seconds to exit)."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return err, time.monotonic() - t0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def long_trace(work: Path) -> Path:
    """A trace long enough that report, verify and calibrate fit are still busy after a
    couple of CPU seconds (120,000 requests: at 40,000 verify and report finished in ~1.6
    CPU-s, so a Ctrl-C at 1.5 could land in the interpreter's exit and kill it by signal)."""
    path = work / "long.jsonl"
    proc = run("simulate", "--rate", "200", "-n", "120000", "--prompt", "fixed:100",
               "--output", "fixed:50", "--trace", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    return path


def _parts_bytes(trace: str) -> int:
    """Bytes the shards have written so far: after a Ctrl-C they are appended to the
    trace (~1 GB/s here, stopped 1 s after the signal: test_fleet's append_parts tests), so
    the signal is sent after ~20 MB, a copy that ends well within the budget."""
    total = 0
    for part in Path(trace).parent.glob(Path(trace).name + ".part*"):
        with contextlib.suppress(OSError):
            total += part.stat().st_size
    return total


@pytest.mark.parametrize("kind", ["report", "verify", "calibrate fit", "calibrate host",
                                  "simulate --workers"])
def test_ctrl_c_of_a_long_command_exits_130_and_stops_its_children(
        kind: str, work: Path, long_trace: Path) -> None:
    profile = work / "ctrlc-profile.json"
    if not profile.exists():
        from ridgeline.sim.calibrated_profile import CalibrationProfile

        CalibrationProfile.from_table([1, 8, 64, 512], [0.01, 0.012, 0.03, 0.2]).save(profile)
    out = work / f"ctrlc-{kind.split()[0]}"
    args = {"report": ["report", str(long_trace), "--out", f"{out}.html"],
            "verify": ["verify", str(long_trace), "--calibration", str(profile)],
            "calibrate fit": ["calibrate", "fit", str(long_trace), "--out", f"{out}.json"],
            # a GEMM held the main thread (and the Ctrl-C) for 4 s; now measured in a thread
            "calibrate host": ["calibrate", "host", "--quick", "--out", f"{out}.json"],
            "simulate --workers": ["simulate", "--rate", "1000", "-n", "3000000", "--workers",
                                   "2", "--replicas", "4", "--trace", f"{out}.jsonl"]}[kind]
    proc = subprocess.Popen([str(RIDGELINE), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        # calibrate host: into its GEMM sweep (the long uninterruptible calls)
        cpu_s = 6.0 if kind == "calibrate host" else 1.5
        while time.monotonic() < deadline and proc.poll() is None and (
                _cpu_seconds(proc.pid) < cpu_s if kind != "simulate --workers"
                else _parts_bytes(f"{out}.jsonl") < 20e6):
            time.sleep(0.05)
        assert proc.poll() is None, f"{kind} ended before it could be interrupted"
        kids = _children(proc.pid)
        err, waited_s = _interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    # docs/cli.md: within 2 s (measured 0.2-0.8 s; --workers --trace held a Ctrl-C for a
    # chunk's JSON, 2-3.4 s on a loaded box)
    assert waited_s <= 2.0, f"{kind}: exit 130 took {waited_s:.2f} s"
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "interrupted"
    time.sleep(0.5)
    assert not [k for k in kids if _alive(k)], "a child process outlived Ctrl-C"
    if kind == "simulate --workers":   # the partial trace says so in its footer
        footer = json.loads(Path(f"{out}.jsonl").read_text().splitlines()[-1])
        assert footer["type"] == "footer" and footer["interrupted"] is True
    else:  # nothing half-written
        assert not Path(f"{out}.html").exists() and not Path(f"{out}.json").exists()


@pytest.mark.parametrize("args", [
    ["simulate", "--rate", "5", "-n", "100", "--arrival",
     "diurnal:peak=10,trough=1,period=1e-300"],
    ["plan", "--model", "llama-3.1-8b", "--hardware", "l40s", "--rate", "9", "--slo",
     "ttft_ms:1000", "-n", "1000000000"],
])
def test_an_error_inside_the_progress_bar_is_still_the_only_line(args: list[str]) -> None:
    # Raised while the (transient) progress bar is up: off a terminal the bar is off, so
    # stderr is the one error line and nothing before it.
    proc = subprocess.run([str(RIDGELINE), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, repr(proc.stderr)


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, forked by any of its threads (Ray's raylet forks its
    workers from other threads than the main one)."""
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = [int(x) for x in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
            except OSError:
                continue
            out += kids
            stack += kids
    return out


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_ctrl_c_of_simulate_on_ray_exits_130_within_2_s_and_leaves_no_ray_process(
        tmp_path: Path) -> None:
    # ray.shutdown() waits on each of its processes in turn and its exit hook sleeps 0.5 s:
    # 2.8-2.9 s on the loaded box; killed instead, and the interpreter's teardown skipped.
    pytest.importorskip("ray")
    proc = subprocess.Popen([str(RIDGELINE), "simulate", "--rate", "1000", "-n", "3000000",
                             "--replicas", "4", "--ray", "local"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        ray_kids: list[int] = []
        while time.monotonic() < deadline and proc.poll() is None:
            ray_kids = [k for k in _descendants(proc.pid) if _alive(k)
                        and b"ray::" in _cmdline(k)]
            with contextlib.suppress(OSError):  # a worker may end between the two reads
                if ray_kids and sum(_cpu_seconds(k) for k in ray_kids) > 1.0:
                    break  # the shards are simulating
            time.sleep(0.2)
        assert proc.poll() is None and ray_kids, "the Ray shards never started"
        everything = _descendants(proc.pid)
        err, waited_s = _interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert waited_s <= 2.0, f"exit 130 took {waited_s:.2f} s"
    time.sleep(0.5)
    left = [k for k in everything if _alive(k)]
    for k in left:
        with contextlib.suppress(OSError):
            os.kill(k, signal.SIGKILL)
    assert not left, f"{len(left)} Ray processes outlived Ctrl-C"
