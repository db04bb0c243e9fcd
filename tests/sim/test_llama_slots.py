"""llama-server's slot choice and graph split (sim/slots.py), against cases derived by hand
from llama.cpp's source (0.3.36's vendored tree, commit 0c1e570):

- `get_available_slot` (tools/server/server-context.cpp): the idle slot with the smallest
  t_last_used, scanning 0..N-1 with `<=` (a tie goes to the highest id); t_last_used = -1
  until `server_slot::release` stamps it;
- `split_equal(n_ubatch, sequential=true)` (src/llama-batch.cpp): a ubatch is the first unused
  token's sequence plus each later sequence whose id is the last taken + 1, k tokens each
  (k = min(shortest left, max(1, n_ubatch // sequences))).
"""

from __future__ import annotations

import pytest

from ridgeline.sim.calibrated_profile import CalibrationProfile, Scheduling
from ridgeline.sim.engine import Engine, EngineRequest
from ridgeline.sim.slots import SlotTable, split_equal_sequential


def test_fresh_server_hands_out_the_highest_slot_first() -> None:
    t = SlotTable(8)
    assert [t.acquire(f"r{i}") for i in range(8)] == [7, 6, 5, 4, 3, 2, 1, 0]
    with pytest.raises(RuntimeError):
        t.acquire("r8")


def test_never_used_slots_come_before_released_ones() -> None:
    # r0..r2 -> 7, 6, 5; r1 leaves (6); r3 takes 4 (t_last_used -1 < 6's stamp), not 6.
    t = SlotTable(8)
    for k in ("r0", "r1", "r2"):
        t.acquire(k)
    t.release_all(["r1"])
    assert t.acquire("r3") == 4
    # Decodes of r0 (7), r2 (5), r3 (4): runs {4, 5} and {7}: two graphs.
    assert t.graphs(["r0", "r2", "r3"], [], 512) == [2, 1]


def test_out_of_order_finishes_leave_a_permuted_cycle() -> None:
    # -np 4, all used once: r0..r3 -> 3, 2, 1, 0. They finish r2 (slot 1), r0 (3), r3 (0),
    # r1 (2), one per step: the LRU order is now 1, 3, 0, 2.
    t = SlotTable(4)
    for i in range(4):
        t.acquire(f"r{i}")
    for k in ("r2", "r0", "r3", "r1"):
        t.release_all([k])
    # Two requests in flight, each finishing before the next arrives, the last two together:
    # a -> 1, b -> 3; a leaves, c -> 0; b leaves, d -> 2; c and d leave in one step (slot 0
    # stamped before 2). The order is 1, 3, 0, 2 again: the permutation persists, and every
    # pair sits in two runs, two graphs, though a fresh server would put two in one run.
    for rnd in range(3):
        a, b = t.acquire(f"a{rnd}"), t.acquire(f"b{rnd}")
        g1 = t.graphs([f"a{rnd}", f"b{rnd}"], [], 512)
        t.release_all([f"a{rnd}"])
        c = t.acquire(f"c{rnd}")
        g2 = t.graphs([f"b{rnd}", f"c{rnd}"], [], 512)
        t.release_all([f"b{rnd}"])
        d = t.acquire(f"d{rnd}")
        g3 = t.graphs([f"c{rnd}", f"d{rnd}"], [], 512)
        t.release_all([f"c{rnd}", f"d{rnd}"])
        assert (a, b, c, d) == (1, 3, 0, 2), rnd
        assert g1 == g2 == g3 == [1, 1], rnd
    fresh = SlotTable(4)
    assert fresh.graphs(["x", "y"], [], 512) == [2]      # slots 3, 2: one run


def test_same_step_releases_go_in_slot_order() -> None:
    # r0..r3 -> 3, 2, 1, 0; r0 (3) and r3 (0) leave in one step: 0 is stamped first, so the
    # next request gets 0, then 3.
    t = SlotTable(4)
    for i in range(4):
        t.acquire(f"r{i}")
    t.release_all(["r0", "r3"])
    assert (t.acquire("a"), t.acquire("b")) == (0, 3)


@pytest.mark.parametrize(("batch", "n_ubatch", "graphs"), [
    ([(0, 1), (1, 1), (2, 1)], 512, [3]),                  # one run
    ([(0, 1), (2, 1), (4, 1)], 512, [1, 1, 1]),            # three runs
    ([(0, 1), (1, 1), (3, 1), (4, 1)], 512, [2, 2]),
    ([(0, 1), (1, 1), (2, 128)], 512, [3, 127]),           # the prompt's 1st token rides
    ([(0, 1), (2, 1), (1, 10)], 512, [2, 1, 9]),           # prompt between two decodes
    ([(5, 128), (6, 128)], 512, [256]),                    # prompts in adjacent slots
    ([(3, 128), (6, 128)], 512, [128, 128]),
    ([(4, 600)], 512, [512, 88]),                          # the ubatch limit
    ([(0, 300), (1, 300), (2, 300)], 512, [510, 390]),     # 170 each, then the 130 left
    ([(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)], 2, [3, 2]),  # more sequences than n_ubatch
    ([], 512, []),
])
def test_split_equal_sequential(batch: list[tuple[int, int]], n_ubatch: int,
                                graphs: list[int]) -> None:
    assert split_equal_sequential(batch, n_ubatch) == graphs


T_GRAPH_S = {1: 0.011, 2: 0.012, 3: 0.020, 4: 0.014, 8: 0.018, 16: 0.026}


def _profile(slot_graphs: bool) -> CalibrationProfile:
    # A one-graph table that is not linear, so that splitting a step differently changes
    # its sum (T(1) + T(4) != T(2) + T(3)).
    toks = list(T_GRAPH_S)
    sch = Scheduling(preset="llama.cpp", max_num_seqs=4, max_num_batched_tokens=2048,
                     ubatch_tokens=16, prefill_own_graph=True, slot_graphs=slot_graphs)
    return CalibrationProfile.from_table(toks, [T_GRAPH_S[n] for n in toks],
                                         scheduling=sch, kv_capacity_tokens=4096)


def test_engine_times_each_step_by_its_slot_graphs() -> None:
    t = T_GRAPH_S
    prof = _profile(True)
    eng = Engine(prof.engine_config(), prof)
    eng.add_request(EngineRequest("A", prompt_tokens=4, output_tokens=2))
    eng.add_request(EngineRequest("B", prompt_tokens=4, output_tokens=6))
    durs = []
    now = 0.0

    def step() -> None:
        nonlocal now
        r = eng.step(now)
        durs.append(r.duration_s)
        now += r.duration_s

    step()          # A -> slot 3, B -> slot 2: adjacent prompts, one graph of 8 tokens
    step()          # decodes in 2, 3: one graph of 2; A finishes (releases 3)
    eng.add_request(EngineRequest("C", prompt_tokens=4, output_tokens=3))
    step()          # C -> slot 1 (never used): batch [B@2, C@1 x4]: graphs [1], [4]
    eng.add_request(EngineRequest("D", prompt_tokens=4, output_tokens=3))
    step()          # D -> slot 0: batch [C@1, B@2, D@0 x4]: graphs [2], [4]
    step()          # decodes in 0, 1, 2: one graph of 3; C finishes (releases 1)
    slots = eng.scheduler.slots
    assert slots is not None
    assert {k.request_id: v for k, v in slots.table.slot_of.items()} == {
        "B": 2, "C": 1, "D": 0}
    step()          # decodes of D@0 and B@2: two runs, two graphs of 1
    assert durs == pytest.approx([t[8], t[2], t[1] + t[4], t[2] + t[4], t[3], 2 * t[1]])
    assert {k.request_id: v for k, v in slots.table.slot_of.items()} == {"B": 2, "D": 0}
    # The same steps without the slot model: one decode graph, prompts apart.
    plain = _profile(False)
    eng2 = Engine(plain.engine_config(), plain)
    assert eng2.scheduler.slots is None
    eng2.add_request(EngineRequest("A", prompt_tokens=4, output_tokens=2))
    eng2.add_request(EngineRequest("B", prompt_tokens=4, output_tokens=6))
    r = eng2.step(0.0)
    assert r.duration_s == pytest.approx(t[8])


def test_unified_kv_preset_keeps_one_graph() -> None:
    from ridgeline.calibrate.presets import preset_scheduling

    per_slot = preset_scheduling("llama.cpp", 8)
    unified = preset_scheduling("llama.cpp", 8, kv_unified=True)
    assert per_slot.slot_graphs and per_slot.prefill_own_graph
    assert not unified.slot_graphs and not unified.prefill_own_graph
    assert not preset_scheduling("llama.cpp", 1).slot_graphs     # one slot: one stream
    assert not preset_scheduling("vllm", 8).slot_graphs


def test_lru_rule_predicts_a_real_servers_choices() -> None:
    # The slot events of a real llama-server 0.3.36 run (-np 8, -sps default, the
    # unseen 12-layer model): 50 requests pinned by id, then 240 chosen by LRU (probes, a
    # closed loop at C = 3, two Poisson points). Given the logged releases, the table picks
    # every one of the 240 as the server did.
    from pathlib import Path

    from ridgeline.sim.slots import check_log

    log = (Path(__file__).parents[1] / "data" / "llama_server_slot_events.log").read_text()
    right, total, order = check_log(log.splitlines(), 8)
    assert (right, total) == (240, 240)
    assert sorted(order) == list(range(8)) and order != [7, 6, 5, 4, 3, 2, 1, 0]
    # The state a later point meets: just before the 100th request got its slot.
    _, _, early = check_log(log.splitlines(), 8, stop_before=100)
    assert sorted(early) == list(range(8))


def test_a_server_with_history_starts_from_its_order() -> None:
    from ridgeline.errors import RidgelineError

    t = SlotTable(4, lru_order=[1, 3, 0, 2])
    assert [t.acquire(k) for k in "abcd"] == [1, 3, 0, 2]
    with pytest.raises(ValueError):
        SlotTable(4, lru_order=[1, 3, 0])
    prof = _profile(True)
    eng = Engine(prof.engine_config(), prof.with_slot_order([1, 3, 0, 2]))
    eng.add_request(EngineRequest("A", prompt_tokens=4, output_tokens=4))
    eng.add_request(EngineRequest("B", prompt_tokens=4, output_tokens=4))
    assert eng.step(0.0).duration_s == pytest.approx(2 * T_GRAPH_S[4])  # slots 1, 3: apart
    assert eng.step(1.0).duration_s == pytest.approx(2 * T_GRAPH_S[1])
    with pytest.raises(RidgelineError, match="--slot-order"):
        prof.with_slot_order([0, 1, 2])
