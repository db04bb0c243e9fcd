"""llama-server's LRU slot order followed from the client's side: calibrate's own
requests (calibrate/slot_state.py) and verify's chain across measured traces. Every expected
order is derived by hand from llama.cpp's rule (tools/server/server-context.cpp): the idle
slot with the smallest t_last_used wins, a tie (never used: -1) to the highest id; slots that
finish in one `update_slots` iteration are released in slot order."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from ridgeline.calibrate.engine import record_slot_order
from ridgeline.calibrate.slot_state import cross_check
from ridgeline.calibrate.verify import verify
from ridgeline.cli import app
from ridgeline.sim.calibrated_profile import CalibrationProfile, Scheduling
from ridgeline.sim.slots import replay_requests

T_GRAPH_S = {1: 0.011, 2: 0.012, 4: 0.014, 16: 0.026}     # smallest step 11 ms


def _profile(order: list[int] | None = None) -> CalibrationProfile:
    sch = Scheduling(preset="llama.cpp", max_num_seqs=4, max_num_batched_tokens=2048,
                     ubatch_tokens=16, prefill_own_graph=True, slot_graphs=True,
                     slot_order_after_calibration=order)
    return CalibrationProfile.from_table(list(T_GRAPH_S), list(T_GRAPH_S.values()),
                                         scheduling=sch, kv_capacity_tokens=4096)


def test_replay_pinned_unpinned_deferred_and_same_step() -> None:
    reqs = [(0.0, 1.0, 0),        # pinned to slot 0
            (0.1, 0.995, None),   # fresh LRU: slot 3 (0 busy; 1, 2, 3 never used: highest)
            (2.0, 3.0, None),     # idle 1, 2 never used: 2
            (2.5, 4.0, 2)]        # pinned to 2, busy: waits until 3.0, then holds it
    # Ends 0.995 and 1.0 are one step (tolerance 10 ms): released in slot order 0, 3.
    rep = replay_requests(reqs, 4, same_step_s=0.010)
    assert rep.order == [1, 0, 3, 2]
    assert rep.waited == 1 and rep.released == [0, 3, 2]
    # As two steps (no tolerance), slot 3 (ended first) is released before 0.
    assert replay_requests(reqs, 4, same_step_s=0.0).order == [1, 3, 0, 2]


def test_replay_releases_a_step_before_a_send_between_its_ends() -> None:
    # Two slots, fresh: a -> 1, b -> 0. Their ends 1.000 and 1.004 are one step; c, sent at
    # 1.002, reaches a server that has already released both (0 then 1): c gets 0.
    reqs = [(0.0, 1.0, None), (0.1, 1.004, None), (1.002, 2.0, None)]
    rep = replay_requests(reqs, 2, same_step_s=0.005)
    assert rep.order == [1, 0] and rep.waited == 0
    # Taken as separate steps, c would get slot 1 (the only idle one at 1.002).
    assert replay_requests(reqs, 2, same_step_s=0.0).order == [0, 1]


def test_replay_starts_from_a_given_order() -> None:
    # State [1, 3, 0, 2]; one request takes 1 and releases it: 3, 0, 2, then 1.
    assert replay_requests([(0.0, 1.0, None)], 4, [1, 3, 0, 2]).order == [3, 0, 2, 1]


def _write(path: Path, header: dict, recs: list[dict]) -> str:
    head = {"type": "header", "schema_version": 1, "source": "bench", **header}
    path.write_text("\n".join(json.dumps(x) for x in [head, *recs]) + "\n")
    return str(path)


def _req(rid: str, sent: float, end: float, out: int = 2) -> dict:
    ev = [sent + (end - sent) * (k + 1) / out for k in range(out)]
    return {"type": "request", "id": rid, "sent_s": sent, "event_times_s": ev, "end_s": end,
            "prompt_tokens": 4, "output_tokens": out, "status": "ok"}


def test_calibrate_records_the_order_its_requests_leave(tmp_path: Path) -> None:
    # decode-b2, pinned: warm-up "warmup-0" -> slot 0, then "0" -> 0 and "1" -> 1 ending in one
    # step (1 seen 2 ms first; tolerance = half of 11 ms): released 0, 1. Then the open-loop
    # probe (never pinned) takes LRU: 2, 3 never used -> 3. Order: 2, 0, 1, 3.
    dec = _write(tmp_path / "d.jsonl",
                 {"start_time_unix_s": 1000.0, "bench": {"warmup_requests_excluded": 1},
                  "load": {"pattern": "closed", "concurrency": 2}},
                 [_req("0", 0.0, 1.0), _req("1", 0.0, 0.998)])
    pre = _write(tmp_path / "p.jsonl", {"start_time_unix_s": 1010.0,
                                        "load": {"pattern": "closed", "concurrency": 1}},
                 [_req("0", 0.0, 0.5, out=1)])
    points = [SimpleNamespace(trace_path=dec, kind="decode", batch=2),
              SimpleNamespace(trace_path=pre, kind="open", batch=4)]
    prof = _profile()
    record_slot_order(prof, points, True, None)
    sch = prof.scheduling
    assert sch.slot_order_after_calibration == [2, 0, 1, 3]
    assert sch.slot_order_at_unix_s == pytest.approx(1010.5)
    assert "replayed from calibrate's 4 requests" in (sch.slot_order_provenance or "")
    # Unpinned: the warm-up takes 3 (fresh) and leaves; "0" -> 2, "1" -> 1 (never used,
    # highest first), released in one step as 1, 2; the open probe takes 0 (never used).
    prof2 = _profile()
    record_slot_order(prof2, points, False, None)
    assert prof2.scheduling.slot_order_after_calibration == [3, 1, 2, 0]
    # The order survives save/load.
    prof.save(tmp_path / "prof.json")
    back = CalibrationProfile.load(tmp_path / "prof.json")
    assert back.scheduling.slot_order_after_calibration == [2, 0, 1, 3]


def test_probes_that_are_pinned() -> None:
    from ridgeline.calibrate.slot_state import pin_of

    # Prefill probes too (short prompts would otherwise go by prompt similarity); the
    # open-loop probe is the one that exercises LRU.
    assert [pin_of(True, k, 3) for k in ("decode", "context", "prefill", "open")] == \
        [3, 3, 3, 0]
    assert pin_of(False, "decode", 3) == 0


def test_cross_check_against_get_slots() -> None:
    slots = [{"id": 0, "id_task": 5}, {"id": 1, "id_task": 6}, {"id": 2}, {"id": 3,
                                                                          "id_task": 9}]
    ok = cross_check([2, 0, 1, 3], [0, 1, 3], slots)
    assert "agrees" in ok and "matches" in ok
    bad = cross_check([2, 1, 0, 3], [0, 3], slots)       # the replay never used 1
    assert "DISAGREES" in bad
    assert "not cross-checked" in cross_check([0, 1, 2, 3], [], None)


def test_old_profile_without_an_order_loads(tmp_path: Path) -> None:
    d = _profile().model_dump(by_alias=True)
    for k in ("slot_order_after_calibration", "slot_order_at_unix_s", "slot_order_provenance"):
        del d["scheduling"][k]
    (tmp_path / "old.json").write_text(json.dumps(d))
    old = CalibrationProfile.load(tmp_path / "old.json")
    assert old.scheduling.slot_order_after_calibration is None
    d["scheduling"]["slot_order_after_calibration"] = [0, 1, 1, 3]
    (tmp_path / "bad.json").write_text(json.dumps(d))
    from ridgeline.errors import RidgelineError

    with pytest.raises(RidgelineError, match="slot_order_after_calibration"):
        CalibrationProfile.load(tmp_path / "bad.json")


def _poisson(rate: float) -> dict:
    return {"pattern": "poisson", "arrival": "poisson", "rate_req_s": rate}


def _two_traces(tmp_path: Path) -> tuple[str, str]:
    # Trace A (earlier): a0 sent 0 done 1, a1 sent 0.5 done 1.2 (two steps apart).
    a = _write(tmp_path / "a.jsonl", {"start_time_unix_s": 1000.0,
                                      "load": _poisson(1.0)},
               [_req("a0", 0.0, 1.0), _req("a1", 0.5, 1.2)])
    # Trace B (later): two requests decoding together; their slots decide the step's graphs.
    b = _write(tmp_path / "b.jsonl", {"start_time_unix_s": 2000.0,
                                      "load": _poisson(2.0)},
               [_req("b0", 0.0, 0.5, out=8), _req("b1", 0.0, 0.5, out=8)])
    return a, b


def test_verify_chains_the_order_across_traces(tmp_path: Path) -> None:
    a, b = _two_traces(tmp_path)
    prof = _profile([1, 3, 0, 2])
    # Given out of order: verify takes A (earlier start) first. From [1, 3, 0, 2]: a0 -> 1,
    # a1 -> 3; released 1 then 3: B starts from [0, 2, 1, 3], so b0 -> 0 and b1 -> 2, apart:
    # each decode step is two graphs, 2 x T(1) = 22 ms.
    rep = verify([b, a], prof)
    (sa, sb) = rep.slot_orders
    assert sa.point == "poisson 1 req/s" and sa.order == [1, 3, 0, 2]
    assert sa.source.startswith("after calibration")
    assert sb.point == "poisson 2 req/s" and sb.order == [0, 2, 1, 3]
    assert "after poisson 1 req/s" in sb.source
    tpot_b = next(r for r in rep.rows if r.point == "poisson 2 req/s" and r.metric == "tpot_p50")
    assert tpot_b.predicted == pytest.approx(2 * T_GRAPH_S[1] * 1e3, rel=1e-6)
    assert any("start times" in w for w in rep.warnings)
    # A restarted server: A from [3, 2, 1, 0] (a0 -> 3, a1 -> 2, released 3 then 2), so B
    # from [1, 0, 3, 2]: slots 1 and 0, adjacent: one graph, T(2) = 12 ms.
    fresh = verify([a, b], prof, start_slot_order="fresh")
    assert [s.order for s in fresh.slot_orders] == [[3, 2, 1, 0], [1, 0, 3, 2]]
    tpot_f = next(r for r in fresh.rows if r.point == "poisson 2 req/s"
                  and r.metric == "tpot_p50")
    assert tpot_f.predicted == pytest.approx(T_GRAPH_S[2] * 1e3, rel=1e-6)


def test_verify_command_slot_order_fresh_and_json(tmp_path: Path) -> None:
    a, b = _two_traces(tmp_path)
    _profile([1, 3, 0, 2]).save(tmp_path / "p.json")
    runner = CliRunner()
    res = runner.invoke(app, ["verify", "--calibration", str(tmp_path / "p.json"), a, b,
                              "--slot-order", "fresh", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [s["order"] for s in out["slot_orders"]] == [[3, 2, 1, 0], [1, 0, 3, 2]]
    assert out["slot_orders"][0]["source"].startswith("fresh server")
    res = runner.invoke(app, ["verify", "--calibration", str(tmp_path / "p.json"), a, b])
    assert res.exit_code == 0, res.output
    assert "poisson 1 req/s: slot order 1 3 0 2 (after calibration" in res.output
    assert "poisson 2 req/s: slot order 0 2 1 3 (after poisson 1 req/s" in res.output
    res = runner.invoke(app, ["verify", "--calibration", str(tmp_path / "p.json"), a,
                              "--slot-order", "0,1,1,3"])
    # (the console script turns this into one `error:` line and exit 2)
    assert "--slot-order" in str(res.exception) and "0..3 once" in str(res.exception)
