"""Each input is read by one reader that checks its whole grammar (docs/cli.md, "Readers"):
the failure classes found by an unseen set of hostile inputs, each through the installed
`ridgeline` as a user runs it. Bad input is exit 2, nothing on stdout, one `error:` line
on stderr naming the field, no traceback, never exit 70, and well under 20 s.

The files are written here by hand from the documented formats (a profile from its
schema's own example table, probe traces as `calibrate engine` writes them), not taken
from ridgeline's output, so a reader that accepts them cannot pass by agreeing with itself.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
# "Well under 20 s" as CPU seconds of the command (this box is shared: wall time measures
# the neighbours); a hang or a bomb shows as either.
LIMIT_CPU_S = 10.0


def run(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    """The installed command's result and the CPU seconds it used (wait4's rusage)."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        proc = subprocess.Popen([RIDGELINE, *args], stdout=fo, stderr=fe,
                                stdin=subprocess.DEVNULL)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read().decode(errors="replace"), fe.read().decode(errors="replace")
    return (subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
            usage.ru_utime + usage.ru_stime)


def _profile() -> dict[str, Any]:
    return {"kind": "ridgeline-calibration", "schema_version": 1,
            "tokens": [1, 8, 64, 512], "step_s": [0.01, 0.012, 0.03, 0.2],
            "kv_bytes_per_token": 131072, "kv_capacity_tokens": 100000,
            "scheduling": {"preset": "vllm", "max_num_seqs": 64}}


def _probe_header(**over: Any) -> dict[str, Any]:
    return {"type": "header", "schema_version": 1, "source": "bench", "model": "fake",
            "engine": "fake", "load": {"pattern": "closed", "concurrency": 2},
            "calibration_probe": {"kind": "decode", "batch": 2, "label": "decode-b2"},
            **over}


def _probe_records(n: int = 6, batch: int = 2, step_s: float = 0.02
                   ) -> list[dict[str, Any]]:
    """`batch` streams in lockstep, 10 tokens `step_s` apart (a decode probe at B)."""
    out, t = [], 0.0
    for i in range(n):
        ev = [round(t + 0.05 + step_s * k, 6) for k in range(10)]
        out.append({"type": "request", "id": f"r{i}", "sent_s": t, "event_times_s": ev,
                    "end_s": ev[-1], "prompt_tokens": 32, "output_tokens": 10,
                    "status": "ok"})
        if i % batch == batch - 1:
            t = ev[-1] + 0.01
    return out


def _write_trace(path: Path, header: dict[str, Any], recs: list[Any]) -> None:
    lines = [json.dumps(header)] + [r if isinstance(r, str) else json.dumps(r) for r in recs]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("readers")
    (d / "prof_future.json").write_text(json.dumps({**_profile(), "schema_version": 2}))
    bad = _profile()
    bad["scheduling"]["bacth"] = 8
    (d / "prof_sched_unknown.json").write_text(json.dumps(bad))
    engine = {"engine": "vllm", "costs": {
        "request_overhead_s": {"value": 0.005, "unit": "s"},
        "request_overhead_steps": {"value": 1.0, "unit": "steps"},
        "step_overhead_s": {"value": 0.0, "unit": "s", "per_tokne": 1}}}
    (d / "engine_unknown.json").write_text(json.dumps(engine))
    # a trace of this run's own making, for verify and report
    sim = subprocess.run([RIDGELINE, "simulate", "--rate", "4", "-n", "40", "--prompt",
                          "fixed:100", "--output", "fixed:20", "--seed", "2", "--trace",
                          str(d / "good.jsonl"), "--json"], capture_output=True, text=True)
    assert sim.returncode == 0, sim.stderr
    lines = (d / "good.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    (d / "dup_ids.jsonl").write_text("\n".join([lines[0], *[json.dumps(rec)] * 3,
                                                lines[-1]]) + "\n")
    # probe traces: a good one and its broken twins
    _write_trace(d / "probe_good.jsonl", _probe_header(), _probe_records())
    recs = _probe_records()
    recs[0]["event_times_s"][3] = float("nan")
    _write_trace(d / "probe_nan.jsonl", _probe_header(), recs)
    recs = _probe_records()
    recs[0]["event_times_s"] = [-5.0, *recs[0]["event_times_s"][1:]]
    recs[0]["sent_s"] = -6.0
    _write_trace(d / "probe_negative.jsonl", _probe_header(), recs)
    recs = _probe_records()
    for r in recs:
        r["id"] = "same"
    _write_trace(d / "probe_dup.jsonl", _probe_header(), recs)
    recs = _probe_records()
    recs[0]["prompt_tokens"] = "thirty-two"
    _write_trace(d / "probe_str.jsonl", _probe_header(), recs)
    _write_trace(d / "probe_batch_word.jsonl", _probe_header(calibration_probe={
        "kind": "decode", "batch": "eight", "label": "b8"}), _probe_records())
    # compressed traces: corrupt, truncated, and a small file that is one enormous line
    gz = gzip.compress((d / "good.jsonl").read_bytes())
    (d / "corrupt.jsonl.gz").write_bytes(gz[:20] + b"\x00garbage" * 10 + gz[100:])
    (d / "truncated.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = co.compress(lines[0].encode() + b'\n{"type":"request","id":"')
    block = b"a" * (1 << 20)
    for _ in range(300):
        bomb += co.compress(block)
    (d / "bomb.jsonl.gz").write_bytes(bomb + co.compress(b'"}\n') + co.flush())
    assert (d / "bomb.jsonl.gz").stat().st_size < 1 << 20
    return d


# (arguments, text the error line must contain); "{d}" is the files' folder.
CASES: list[tuple[tuple[str, ...], str]] = [
    # a profile from a newer ridgeline, a misspelt scheduling field: refused by every
    # command that takes a profile, naming the field's path
    *[((*c, "--calibration", "{d}/prof_future.json"), "schema_version") for c in (
        ("simulate", "--rate", "2", "-n", "10"), ("estimate",), ("serve", "--port", "0"),
        ("verify", "{d}/good.jsonl"))],
    *[((*c, "--calibration", "{d}/prof_sched_unknown.json"),
       "scheduling.bacth: unknown field")
      for c in (("simulate", "--rate", "2", "-n", "10"), ("estimate",),
                ("serve", "--port", "0"), ("verify", "{d}/good.jsonl"))],
    (("estimate", "--engine", "{d}/engine_unknown.json"),
     "costs.step_overhead_s.per_tokne: unknown field"),
    # an arrival parameter its kind does not take
    (("simulate", "--rate", "2", "-n", "10", "--arrival", "diurnal:peak=5,trough=1,rate=3"),
     "diurnal does not take rate="),
    (("simulate", "-n", "10", "--arrival", "ramp:start=1,end=2,rate=3"), "rate="),
    (("simulate", "--rate", "2", "-n", "10", "--prompt", "lognormal:mean=5,median=3,sigma=1"),
     "not both"),
    # traces given to other commands: the trace reader's rules
    (("report", "{d}/dup_ids.jsonl", "--out", "{d}/r.html"), "field 'id'"),
    (("simulate", "-n", "2", "--arrival", "replay:path={d}/dup_ids.jsonl"), "field 'id'"),
    *[(("calibrate", "fit", "{d}/" + name, "{d}/probe_good.jsonl", "--out", "{d}/fit.json"),
       field) for name, field in (("probe_nan.jsonl", "NaN"),
                                  ("probe_negative.jsonl", "sent_s"),
                                  ("probe_dup.jsonl", "field 'id'"),
                                  ("probe_str.jsonl", "prompt_tokens"),
                                  ("probe_batch_word.jsonl", "calibration_probe.batch"))],
    (("calibrate", "fit", "{d}/probe_good.jsonl", "--out", "{d}/fit.json"),
     "at least 2"),
    # compressed input
    (("analyze", "{d}/corrupt.jsonl.gz"), "gzip data is corrupt"),
    (("analyze", "{d}/truncated.jsonl.gz"), "ends early"),
    (("report", "{d}/bomb.jsonl.gz", "--out", "{d}/b.html"), "longer than 64 MiB"),
    # sizes in combination, comma lists element by element
    (("plan", "--rate", "5", "--slo", "ttft_ms:1000", "--extra-replicas", "1000000",
      "--max-replicas", "1000000", "--max-gpus", "100000000"), "simulated requests"),
    (("plan", "--rate", "5", "--slo", "ttft_ms:1000", "--max-replicas", "1000000",
      "--max-gpus", "100000000"), "engine instances"),
    (("plan", "--rate", "5", "--slo", "ttft_ms:1000", "--weights", "bf16,int3"), "'int3'"),
]


@pytest.fixture(scope="module")
def results(files: Path) -> dict[tuple[str, ...], tuple[subprocess.CompletedProcess[str],
                                                        float]]:
    def one(args: tuple[str, ...]) -> tuple[subprocess.CompletedProcess[str], float]:
        return run(*(a.replace("{d}", str(files)) for a in args))

    with ThreadPoolExecutor(3) as pool:
        got = list(pool.map(one, [c[0] for c in CASES]))
    return dict(zip([c[0] for c in CASES], got, strict=True))


@pytest.mark.parametrize(("args", "names"), CASES, ids=[" ".join(c[0])[:70] for c in CASES])
def test_bad_input_is_one_error_line_exit_2_in_time(results, args, names) -> None:
    proc, cpu_s = results[args]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.returncode == 2, proc.stderr[-500:]
    assert proc.stdout == ""
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert names in errors[0], errors[0]
    assert cpu_s < LIMIT_CPU_S, cpu_s


def test_the_good_twins_are_read(files: Path) -> None:
    """The broken files above differ from these by the one field: these are accepted."""
    good = files / "prof_good.json"
    good.write_text(json.dumps(_profile()))
    proc, _ = run("estimate", "--calibration", str(good), "--json")
    assert proc.returncode == 0, proc.stderr
    two = files / "probe_b4.jsonl"
    recs = _probe_records(8, batch=4, step_s=0.03)
    _write_trace(two, _probe_header(load={"pattern": "closed", "concurrency": 4},
                                    calibration_probe={"kind": "decode", "batch": 4,
                                                       "label": "decode-b4"}), recs)
    proc, _ = run("calibrate", "fit", str(files / "probe_good.jsonl"), str(two), "--out",
                  str(files / "fit.json"))
    assert proc.returncode == 0, proc.stderr
    proc, _ = run("analyze", str(files / "good.jsonl"))
    assert proc.returncode == 0, proc.stderr
    (files / "good.jsonl.gz").write_bytes(gzip.compress((files / "good.jsonl").read_bytes()))
    for cmd in ("analyze", "advise"):  # advise opened a .gz as text: an internal error
        proc, _ = run(cmd, str(files / "good.jsonl.gz"))
        assert proc.returncode == 0, proc.stderr


# ---- the UI server, through the installed `ridgeline ui` ----------------------------------


@pytest.fixture(scope="module")
def ui_port():
    proc = subprocess.Popen([RIDGELINE, "ui", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # "ridgeline ui: http://127.0.0.1:PORT/ ..."
        assert "http://" in line, line
        port = int(line.split("http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _post(port: int, path: str, body: bytes, chunked: bool = False) -> tuple[int, bytes]:
    """A raw HTTP/1.1 POST (the whole body sent, as a client would), then the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        if chunked:
            s.sendall((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
            step = 1 << 20
            for i in range(0, len(body), step):
                part = body[i:i + step]
                s.sendall(b"%x\r\n" % len(part) + part + b"\r\n")
            s.sendall(b"0\r\n\r\n")
        else:
            s.sendall((head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        got = b""
        while b"\r\n\r\n" not in got or len(got) < got.index(b"\r\n\r\n") + 20:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    status = int(got.split(b" ", 2)[1])
    return status, got.split(b"\r\n\r\n", 1)[1]


@pytest.mark.parametrize("chunked", [False, True])
def test_ui_answers_413_to_a_20_mb_body(ui_port, chunked) -> None:
    body = b'{"batch": 8' + b" " * (20 << 20) + b"}"
    status, answer = _post(ui_port, "/api/estimate", body, chunked)
    assert status == 413, answer[:200]


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/api/estimate", {"bacth": 8}, "bacth"),
    ("/api/simulate", {"rates": [1], "requests": 10, "bogus": True}, "bogus"),
    ("/api/simulate", {"batch": 8}, "batch"),  # an estimate field, not a simulate one
])
def test_ui_refuses_unknown_fields_naming_them(ui_port, path, body, field) -> None:
    status, answer = _post(ui_port, path, json.dumps(body).encode())
    assert status == 400, answer[:200]
    msg = json.loads(answer)["error"]
    assert msg.startswith(f"request: {field}: unknown field; allowed: ") and "\n" not in msg


def test_no_internal_error_anywhere_in_this_file_set(files: Path) -> None:
    """No crash report was written by the cases above (exit 70 writes one)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ridgeline"
    recent = [p for p in cache.glob("crash-*.txt")
              if p.stat().st_mtime > files.stat().st_mtime] if cache.is_dir() else []
    texts = [p.read_text(errors="replace") for p in recent]
    assert not [t for t in texts if str(files) in t], texts[:1]
