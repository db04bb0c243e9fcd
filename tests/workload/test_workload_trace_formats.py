"""The public trace formats replayed through the installed `ridgeline simulate --arrival
replay:path=FILE`: Azure LLM inference 2023/2024, Vidur's full and length-only CSVs,
BurstGPT, Mooncake (hash_ids as prefix groups) and ShareGPT. Each sample in
tests/data/traces/ (README there) is read back here with csv/json on its own, and the
simulated trace's prompt/output lengths are compared with the file's: count, mean, max and
the sorted values. Bad rows: one `error:` line naming file, line and field, exit 2."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

CLI = str(Path(sys.executable).parent / "ridgeline")
TRACES = Path(__file__).parents[1] / "data" / "traces"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "simulate", *args], capture_output=True, text=True,
                          timeout=300)


def _simulated(tmp_path: Path, *args: str) -> tuple[dict, np.ndarray, np.ndarray, dict]:
    trace = tmp_path / "t.jsonl"
    r = _run(*args, "--json", "--trace", str(trace))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    reqs = [x for x in lines if x["type"] == "request"]
    return (lines[0], np.array([q["prompt_tokens"] for q in reqs]),
            np.array([q["output_tokens"] for q in reqs]), json.loads(r.stdout))


def _csv_lengths(name: str, p_col: str, o_col: str) -> tuple[np.ndarray, np.ndarray]:
    with (TRACES / name).open(newline="") as f:
        rows = list(csv.DictReader(f))
    return (np.array([int(r[p_col]) for r in rows]), np.array([int(r[o_col]) for r in rows]))


def _check(file_p: np.ndarray, file_o: np.ndarray, sim_p: np.ndarray, sim_o: np.ndarray
           ) -> None:
    # a zero-token response (a failed request in the traces) is asked as one token
    file_o = np.maximum(file_o, 1)
    for f, s in ((file_p, sim_p), (file_o, sim_o)):
        assert s.size == f.size
        assert s.mean() == pytest.approx(f.mean(), rel=1e-12)
        assert s.max() == f.max()
        assert np.array_equal(np.sort(s), np.sort(f))


@pytest.mark.parametrize("name", ["azure_conv_2023.csv", "azure_code_2024.csv"])
def test_azure_lengths_and_datetime_arrivals(tmp_path: Path, name: str) -> None:
    p, o = _csv_lengths(name, "ContextTokens", "GeneratedTokens")
    header, sp, so, _ = _simulated(tmp_path, "--arrival", f"replay:path={TRACES / name}",
                                   "-n", str(p.size))
    assert header["dataset"]["replay_format"] == "azure"
    _check(p, o, sp, so)
    # arrivals: the datetimes' seconds after the first row, 7 fractional digits read whole
    with (TRACES / name).open() as f:
        stamps = [r["TIMESTAMP"] for r in csv.DictReader(f)]

    def secs(s: str) -> float:
        hms, frac = s.split(" ")[1].split(".")
        h, m, sec = (int(x) for x in hms.split(":"))
        return h * 3600 + m * 60 + sec + int(frac) / 10 ** len(frac)

    want = np.sort(np.array([secs(s) for s in stamps]))
    want -= want[0]
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()[1:]]
    got = np.sort(np.array([x["scheduled_s"] for x in lines if x["type"] == "request"]))
    assert np.allclose(got, want, atol=1e-5)


def test_azure_timestamp_is_no_longer_refused(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.0180360,100,10\n2023-11-16 18:15:47.5180360,50,5\n")
    header, sp, _, _ = _simulated(tmp_path, "--arrival", f"replay:path={f}", "-n", "2")
    assert header["load"]["replay_format"] == "azure" and sorted(sp.tolist()) == [50, 100]


def test_vidur_full_trace(tmp_path: Path) -> None:
    p, o = _csv_lengths("vidur_splitwise_conv.csv", "num_prefill_tokens", "num_decode_tokens")
    header, sp, so, _ = _simulated(
        tmp_path, "--arrival", f"replay:path={TRACES / 'vidur_splitwise_conv.csv'}",
        "-n", str(p.size))
    assert header["dataset"]["replay_format"] == "vidur"
    _check(p, o, sp, so)


def test_vidur_lengths_take_the_rate(tmp_path: Path) -> None:
    name = "vidur_arxiv_lengths.csv"
    p, o = _csv_lengths(name, "num_prefill_tokens", "num_decode_tokens")
    header, sp, so, _ = _simulated(tmp_path, "--arrival", f"replay:path={TRACES / name}",
                                   "--rate", "4", "-n", str(p.size))
    assert header["load"]["rate_req_s"] == 4.0
    _check(p, o, sp, so)
    r = _run("--arrival", f"replay:path={TRACES / name}", "-n", "5")
    assert r.returncode == 2 and "--rate" in r.stderr and "Traceback" not in r.stderr


def test_burstgpt_zero_responses_stated(tmp_path: Path) -> None:
    p, o = _csv_lengths("burstgpt.csv", "Request tokens", "Response tokens")
    header, sp, so, _ = _simulated(tmp_path, "--arrival",
                                   f"replay:path={TRACES / 'burstgpt.csv'}", "-n", str(p.size))
    zeros = int((o == 0).sum())
    assert zeros == 3 and header["dataset"]["zero_output_as_one"] == zeros
    _check(p, o, sp, so)


def _mooncake_rows() -> list[dict]:
    return [json.loads(x) for x in (TRACES / "mooncake.jsonl").read_text().splitlines()]


def test_mooncake_lengths_and_prefix_hits(tmp_path: Path) -> None:
    rows = _mooncake_rows()
    p = np.array([r["input_length"] for r in rows])
    o = np.array([r["output_length"] for r in rows])
    header, sp, so, out = _simulated(tmp_path, "--arrival",
                                     f"replay:path={TRACES / 'mooncake.jsonl'}",
                                     "-n", str(len(rows)))
    _check(p, o, sp, so)
    # the groups: requests sharing a leading run of hash ids, computed here from the ids
    runs = []
    for i, r in enumerate(rows):
        best = 0
        for j, s in enumerate(rows):
            if i != j:
                k = 0
                while k < min(len(r["hash_ids"]), len(s["hash_ids"])) and \
                        r["hash_ids"][k] == s["hash_ids"][k]:
                    k += 1
                best = max(best, k)
        runs.append(tuple(r["hash_ids"][:best]))
    assert header["dataset"]["prefix_groups"] == len({x for x in runs if x})
    # the prefix cache hit some of those shared blocks (and none without caching)
    hits = out["simulation"]["engine_stats"][0]["prefix_cache_hits_tokens_total"]
    assert hits > 0
    _, _, _, off = _simulated(tmp_path, "--arrival", f"replay:path={TRACES / 'mooncake.jsonl'}",
                              "-n", str(len(rows)), "--no-prefix-caching")
    assert off["simulation"]["engine_stats"][0]["prefix_cache_hits_tokens_total"] == 0


def _cl100k(name: str = "cl100k_base"):
    import warnings

    with warnings.catch_warnings():  # the package uses a deprecated importlib API
        warnings.simplefilter("ignore", DeprecationWarning)
        import bpe_openai

        return bpe_openai.get_encoding(name)


def _sharegpt_pairs() -> list[tuple[str, str]]:
    pairs = []
    for conv in json.loads((TRACES / "sharegpt.json").read_text()):
        t = conv["conversations"]
        for k in range(len(t) - 1):
            if t[k]["from"] == "human" and t[k + 1]["from"] == "gpt":
                pairs.append((t[k]["value"], t[k + 1]["value"]))
                break
    return pairs


def test_sharegpt_first_turn_pair_cl100k(tmp_path: Path) -> None:
    enc = _cl100k()
    pairs = _sharegpt_pairs()
    p = np.array([len(enc.encode_ordinary(a)) for a, _ in pairs])
    o = np.array([len(enc.encode_ordinary(b)) for _, b in pairs])
    header, sp, so, _ = _simulated(tmp_path, "--arrival",
                                   f"replay:path={TRACES / 'sharegpt.json'}", "--rate", "5",
                                   "-n", str(len(pairs)))
    assert len(pairs) == 12          # two of the 14 conversations have no human/gpt pair
    assert header["load"]["replay_arrivals"] == "poisson"
    _check(p, o, sp, so)


def test_format_override(tmp_path: Path) -> None:
    # sniffing reads the first line: a blank one hides the format, format= names it
    f = tmp_path / "s.json"
    f.write_text("\n" + (TRACES / "sharegpt.json").read_text())
    r = _run("--arrival", f"replay:path={f}", "--rate", "2", "-n", "3")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    header, sp, _, _ = _simulated(tmp_path, "--arrival", f"replay:path={f},format=sharegpt",
                                  "--rate", "2", "-n", "3")
    assert header["dataset"]["replay_format"] == "sharegpt" and sp.size == 3
    r = _run("--arrival", f"replay:path={f},format=csv", "-n", "2")
    assert r.returncode == 2 and "format: got 'csv'; allowed:" in r.stderr


@pytest.mark.parametrize("body, needle", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0180360,5,1\n"
     "2023-11-16 xx,5,1\n", "line 3: TIMESTAMP: got '2023-11-16 xx'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,-4,1\n",
     "line 2: ContextTokens: got '-4'"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n1.0,12\n", "line 2: fields: got 2"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\nnan,12,3\n", "line 2: arrived_at"),
])
def test_bad_rows_one_line(tmp_path: Path, body: str, needle: str) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(body)
    r = _run("--arrival", f"replay:path={f}", "-n", "1")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], r.stderr
    assert str(f) in lines[0]


def test_bad_sharegpt_one_line(tmp_path: Path) -> None:
    f = tmp_path / "s.json"
    f.write_text('[\n{"conversations": [{"from": "human", "value": "hi"}, '
                 '{"from": "gpt", "value": "yo"}]},\n{"conversations": 7}\n]')
    r = _run("--arrival", f"replay:path={f}", "--rate", "1", "-n", "1")
    assert r.returncode == 2 and "line 3: conversations: got 7" in r.stderr, r.stderr
    f.write_text('[{"conversations": []}, {"conv')
    r = _run("--arrival", f"replay:path={f}", "--rate", "1", "-n", "1")
    assert r.returncode == 2 and "not valid JSON" in r.stderr and "Traceback" not in r.stderr


def test_sharegpt_streamed_across_reads(tmp_path: Path, monkeypatch) -> None:
    """Items cut by the 1 MiB read boundary are joined (the reader never loads the whole
    file): a small read size forces many cuts."""
    from ridgeline.workload import trace_formats
    from ridgeline.workload.timed_trace_reader import read_timed_trace

    monkeypatch.setattr(trace_formats, "_READ_CHARS", 7)
    tr = read_timed_trace(str(TRACES / "sharegpt.json"), fmt="sharegpt")
    enc = _cl100k()
    assert tr.prompt_tokens.tolist() == [len(enc.encode_ordinary(a))
                                         for a, _ in _sharegpt_pairs()]


def test_bench_replay_refuses_an_untimed_file() -> None:
    r = subprocess.run([CLI, "bench", "--replay", str(TRACES / "sharegpt.json"), "--base-url",
                        "http://127.0.0.1:9", "-n", "3"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "has no timestamps" in r.stderr, r.stderr


def test_sharegpt_tokenizer_option(tmp_path: Path) -> None:
    enc = _cl100k("o200k_base")
    pairs = _sharegpt_pairs()
    p = np.array([len(enc.encode_ordinary(a)) for a, _ in pairs])
    o = np.array([len(enc.encode_ordinary(b)) for _, b in pairs])
    assert not np.array_equal(p, [len(_cl100k().encode_ordinary(a)) for a, _ in pairs])
    _, sp, so, _ = _simulated(
        tmp_path, "--arrival", f"replay:path={TRACES / 'sharegpt.json'},"
        "tokenizer=tiktoken:o200k_base", "--rate", "5", "-n", str(len(pairs)))
    _check(p, o, sp, so)


def test_vidur_arrival_trace_times_only(tmp_path: Path) -> None:
    # Vidur's arrival traces: an `arrival_time` column of dates and times (here with a UTC
    # offset and a Z); the lengths come from --prompt / --output
    f = tmp_path / "arrivals.csv"
    f.write_text("arrival_time,func\n2021-01-31 00:00:01.5+00:00,a\n"
                 "2021-01-31 01:00:00.25+01:00,b\n2021-01-31T00:00:03Z,c\n")
    header, sp, so, _ = _simulated(tmp_path, "--arrival", f"replay:path={f}", "-n", "3",
                                   "--prompt", "fixed:40", "--output", "fixed:5")
    assert header["load"]["replay_format"] == "vidur-arrivals"
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()[1:]]
    got = sorted(x["scheduled_s"] for x in lines if x["type"] == "request")
    # 00:00:01.5, 00:00:00.25 (01:00 at +01:00) and 00:00:03 UTC, from the first
    assert np.allclose(got, [0.0, 1.25, 2.75], atol=1e-6)
    assert set(sp.tolist()) == {40} and set(so.tolist()) == {5}
