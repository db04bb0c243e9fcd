"""Mutation testing: do the tests notice when the code is wrong?

A small, dependency-free harness (ast-based). Each mutant changes one place in one source file:

    cmp       a comparison's boundary or sense: < <-> <=, > <-> >=, == <-> !=, is <-> is not,
              in <-> not in
    arith     + <-> -, * <-> /, // -> /, ** -> *, and the same for augmented assignments
    minmax    min <-> max (builtins and numpy's min/max/minimum/maximum/argmin/argmax)
    int       an integer constant n -> n + 1 (off by one)
    drop      a term of a + or - dropped (a + b -> a)
    negate    an if/while/ternary condition negated; and <-> or

It never edits the working tree: the repository (less .git and .venv) is copied once into a
temporary folder, each mutant is written into the copy, the tests mapped to the mutated module
(`TEST_MAP`) run there with the copy first on PYTHONPATH, and the original file is written back
in a `finally`. A mutant is *killed* when those tests fail (or time out: `--timeout-factor` x the
unmutated run), *survived* when they pass, *invalid* when the mutated file does not compile.

Message text, exceptions' arguments, annotations, asserts and `__all__` are not mutated (a
changed error message is not a wrong number).

Too slow for CI (one pytest run per mutant). Sample and budget it:

    nice .venv/bin/python tools/mutation/bench_mutation.py --sample 100 --seed 1 \
        --modules metrics perf sim advise plan --out tools/mutation/results/mutation.json

`--list` prints the mutation sites without running anything. `--rerun OLD.json` runs only the
survivors of an earlier run, found again in the current sources by file, kind, change and
source line (the nearest such site), to see which new tests kill them. Results (JSON) list every
mutant with its file, line, kind, the changed source line and the outcome; the survivors are
the ones to read.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = "src/ridgeline"

# Areas (the `--modules` names) -> source globs, relative to the repository root.
AREAS = {
    "metrics": ["src/ridgeline/metrics/*.py"],
    "perf": ["src/ridgeline/perf/*.py"],
    "sim": ["src/ridgeline/sim/*.py"],
    "advise": ["src/ridgeline/advise.py"],
    "plan": ["src/ridgeline/plan/*.py"],
    # the fit of real vLLM runs: the replay, its scores and fits, the kernel model's
    # vLLM scales, vLLM's KV accounting and the engine costs
    "vllm_fit": ["src/ridgeline/calibrate/engine_fit.py",
                 "src/ridgeline/calibrate/inference_perf_replay.py",
                 "src/ridgeline/calibrate/inference_perf.py",
                 "src/ridgeline/calibrate/engine_runs.py", "src/ridgeline/perf/kernels.py",
                 "src/ridgeline/perf/vllm_kv_log.py", "src/ridgeline/sim/engine_costs.py"],
    # the queueing and statistics formulas, the trace contract and its importers (real
    # peer exports), the workload generators
    "theory": ["src/ridgeline/theory/*.py"],
    "trace": ["src/ridgeline/trace/*.py", "src/ridgeline/trace/importers/*.py"],
    "workload": ["src/ridgeline/workload/*.py"],
    # bench's parsers and writers of what peers read or write: the SSE stream, token
    # counts, the summary, vLLM bench/AIPerf/GuideLLM result files and flags, exports
    "bench_peer": ["src/ridgeline/bench/sse.py", "src/ridgeline/bench/tokens.py",
                   "src/ridgeline/bench/summary.py", "src/ridgeline/bench/results_peer.py",
                   "src/ridgeline/bench/peer_flags.py", "src/ridgeline/bench/export.py",
                   "src/ridgeline/bench/vllm_flags.py", "src/ridgeline/bench/results_guidellm.py"],
    # model configs (every family, quantized checkpoints, fp4), dtypes and GPU files
    "specs": ["src/ridgeline/specs/model.py", "src/ridgeline/specs/quant.py",
              "src/ridgeline/specs/precision.py", "src/ridgeline/specs/hardware.py"],
    # the llama.cpp loop: step profile fit, slot model, verify's replay
    "llamacpp": ["src/ridgeline/calibrate/fit.py", "src/ridgeline/calibrate/verify.py",
                 "src/ridgeline/calibrate/real_loop.py", "src/ridgeline/calibrate/slot_state.py",
                 "src/ridgeline/calibrate/probe.py"],
    # the emulator's OpenAI/vLLM surface (protocol, responses, /metrics) and the UI's API
    "serve_ui": ["src/ridgeline/serve/protocol.py", "src/ridgeline/serve/responses.py",
                 "src/ridgeline/serve/prometheus.py", "src/ridgeline/ui/app.py"],
    # the load generator's core: the streaming client, schedules, the run loop
    "bench_core": ["src/ridgeline/bench/client.py", "src/ridgeline/bench/load.py",
                   "src/ridgeline/bench/load_loop.py", "src/ridgeline/bench/load_points.py"],
    # the report's pages and plots (what a user reads), from traces and estimates
    "report": ["src/ridgeline/report/*.py"],
    # bench's workloads: datasets, multi-turn sessions, replay files, sizes, rate sweeps
    "bench_workloads": ["src/ridgeline/bench/dataset.py", "src/ridgeline/bench/multiturn.py",
                        "src/ridgeline/bench/rate_sweep.py", "src/ridgeline/bench/sizes.py",
                        "src/ridgeline/bench/replay.py", "src/ridgeline/bench/prompts.py"],
    # the GPU telemetry sampler and the host's microbenchmarks
    "telemetry_host": ["src/ridgeline/bench/telemetry.py", "src/ridgeline/calibrate/host.py",
                       "src/ridgeline/calibrate/microbench.py"],
    # the real engine's tooling: GGUF headers, the llama-server launcher, scheduler presets
    "gguf_llama": ["src/ridgeline/calibrate/gguf_model.py",
                   "src/ridgeline/calibrate/llama_server.py",
                   "src/ridgeline/calibrate/presets.py"],
}

# Tests run against each area's mutants (fast, deterministic files); a file's own extras are
# added from FILE_TESTS. Chosen so one run takes seconds, not minutes.
AREA_TESTS = {
    "metrics": ["tests/metrics/test_metrics_hand.py", "tests/metrics/test_metrics_analysis_fast.py",
                "tests/metrics/test_metrics_select_block.py",
                "tests/metrics/test_metrics_stationary.py"],
    "perf": ["tests/perf/test_perf_estimate.py", "tests/perf/test_perf_fast_step.py",
             "tests/perf/test_roofline_step.py", "tests/perf/test_seed_examples.py",
             "tests/theory/test_seed_examples_serving.py", "tests/specs/test_specs.py",
             "tests/perf/test_whatif.py",
             "tests/perf/test_perf_hand.py"],
    "sim": ["tests/sim/test_engine.py", "tests/sim/test_event_loop.py",
            "tests/sim/test_scenario.py"],
    "advise": ["tests/test_advise.py"],
    "plan": ["tests/plan/test_plan.py", "tests/plan/test_plan_recheck.py",
             "tests/plan/test_plan_cli.py",
             "tests/plan/test_plan_rules.py"],
    "vllm_fit": ["tests/calibrate/test_vllm_replay.py", "tests/perf/test_perf_kernels.py",
                 "tests/calibrate/test_calibrate_fit.py", "tests/perf/test_vllm_kv_log.py"],
    "theory": ["tests/theory/test_theory_queueing.py", "tests/theory/test_theory_stats.py",
               "tests/theory/test_theory_block_bootstrap.py",
               "tests/theory/test_seed_examples_serving.py"],
    "trace": ["tests/trace/test_trace_validator.py", "tests/trace/test_importers.py",
              "tests/trace/test_trace_reader.py", "tests/trace/test_trace_reader_fast.py"],
    "workload": ["tests/workload/test_workload_arrivals.py",
                 "tests/workload/test_workload_lengths.py",
                 "tests/workload/test_workload_streams.py",
                 "tests/workload/test_timed_trace_reader.py"],
    "bench_peer": ["tests/bench/test_bench_client.py"],
    "specs": ["tests/specs/test_specs.py", "tests/specs/test_model_families.py",
              "tests/specs/test_specs_validation.py"],
    "llamacpp": ["tests/calibrate/test_calibrate_fit.py",
                 "tests/calibrate/test_calibrate_load_steps.py",
                 "tests/calibrate/test_calibrate_openloop.py", "tests/calibrate/test_slot_chain.py",
                 "tests/calibrate/test_calibrate_llama.py",
                 "tests/calibrate/test_calibrate_probe_samples.py"],
    "serve_ui": ["tests/serve/test_serve_protocol.py", "tests/serve/test_serve_vllm_compat.py"],
    "bench_core": ["tests/bench/test_bench_client.py", "tests/bench/test_bench_load.py"],
    "report": ["tests/report/test_report_plots.py", "tests/report/test_report_cli.py"],
    "bench_workloads": ["tests/bench/test_bench_workloads.py",
                        "tests/bench/test_bench_rate_sweep.py",
                        "tests/bench/test_bench_cache.py"],
    "telemetry_host": ["tests/bench/test_bench_telemetry.py",
                       "tests/calibrate/test_calibrate_host.py"],
    "gguf_llama": ["tests/calibrate/test_llama_server_tooling.py",
                   "tests/calibrate/test_calibrate_llama.py",
                   "tests/calibrate/test_calibrate_sched.py", "tests/sim/test_llama_slots.py"],
}
FILE_TESTS = {
    # The simulated rate sweep is the UI's /api/simulate.
    "src/ridgeline/report/sweep.py": ["tests/ui/test_ui_api.py"],
    # Datasets (ShareGPT, JSONL, sonnet) are read by bench's load tests and vLLM's flags.
    "src/ridgeline/bench/dataset.py": ["tests/bench/test_bench_load.py",
                                       "tests/bench/test_bench_vllm_flags.py"],
    "src/ridgeline/sim/core.py": ["tests/sim/test_sim_core.py"],
    # The Python engine is the C core's reference: its tests compare the two bit for bit.
    "src/ridgeline/sim/scheduler.py": ["tests/sim/test_sim_core.py", "tests/sim/test_window_kv.py"],
    "src/ridgeline/sim/step_timing.py": ["tests/sim/test_sim_core.py",
                                         "tests/sim/test_event_loop.py"],
    "src/ridgeline/sim/fast_forward.py": ["tests/sim/test_sim_core.py",
                                          "tests/sim/test_event_loop.py"],
    "src/ridgeline/sim/kv_cache.py": ["tests/sim/test_sim_core.py",
                                      "tests/bench/test_bench_cache.py"],
    "src/ridgeline/sim/event_loop.py": ["tests/sim/test_sim_core.py"],
    "src/ridgeline/sim/fleet.py": ["tests/sim/test_fleet.py"],
    # Windowed models take the kernel rows' other work-variable branch.
    # The kernel model's own tests (measured kernel times) are in test_perf_kernels.py.
    "src/ridgeline/perf/kernels.py": ["tests/sim/test_window_kv.py",
                                      "tests/perf/test_perf_kernels.py"],
    # Sliding windows, qk-norm, MoE experts and EP all-to-all have their by-hand tests there.
    "src/ridgeline/perf/window.py": ["tests/sim/test_window_kv.py",
                                     "tests/specs/test_model_families.py",
                                     "tests/perf/test_op_table_hand.py"],
    "src/ridgeline/perf/ops.py": ["tests/specs/test_model_families.py",
                                  "tests/sim/test_window_kv.py",
                                  "tests/perf/test_op_table_hand.py"],
    "src/ridgeline/sim/cluster.py": ["tests/sim/test_fleet.py", "tests/commands/test_sim_cli.py"],
    "src/ridgeline/metrics/sketch.py": ["tests/sim/test_fleet.py"],
    "src/ridgeline/metrics/streaming.py": ["tests/sim/test_fleet.py"],
    "src/ridgeline/metrics/select.py": ["tests/metrics/test_metrics_analysis_speed.py"],
    "src/ridgeline/metrics/distribution.py": ["tests/metrics/test_metrics_analysis_speed.py"],
    "src/ridgeline/metrics/slo.py": ["tests/test_advise.py"],
    "src/ridgeline/perf/whatif.py": ["tests/test_advise.py", "tests/sim/test_scenario.py"],
    "src/ridgeline/metrics/compare.py": ["tests/commands/test_analyze_cli.py"],
    "src/ridgeline/metrics/gate.py": ["tests/commands/test_analyze_cli.py"],
    "src/ridgeline/metrics/telemetry.py": ["tests/bench/test_bench_telemetry.py"],
    # Peers' exports, real ones included; bench's own results path reads them too.
    "src/ridgeline/trace/importers/aiperf.py": ["tests/trace/test_importers_real.py"],
    "src/ridgeline/trace/importers/guidellm.py": ["tests/trace/test_importers_real.py"],
    "src/ridgeline/trace/importers/llmperf.py": ["tests/trace/test_importers_real.py"],
    "src/ridgeline/trace/importers/vllm.py": ["tests/trace/test_importers_real.py",
                                             "tests/bench/test_bench_results.py"],
    "src/ridgeline/trace/importers/_common.py": ["tests/trace/test_importers_real.py"],
    "src/ridgeline/trace/importers/__init__.py": ["tests/trace/test_importers_real.py",
                                                 "tests/trace/test_trace_export.py"],
    "src/ridgeline/trace/reader.py": ["tests/trace/test_trace_reader_compiled.py"],
    "src/ridgeline/trace/table.py": ["tests/trace/test_trace_reader_compiled.py"],
    "src/ridgeline/trace/writer.py": ["tests/trace/test_trace_export.py"],
    # The simulator draws its arrivals here; its tests pin the closed forms by hand.
    "src/ridgeline/workload/arrivals.py": ["tests/bench/test_bench_workloads.py"],
    "src/ridgeline/workload/think.py": ["tests/bench/test_bench_workloads.py"],
    "src/ridgeline/workload/spec_syntax.py": ["tests/bench/test_bench_workloads.py"],
    "src/ridgeline/workload/timed_trace_reader.py": ["tests/sim/test_fleet.py"],
    # vLLM's --result-dir/--result-filename path goes through results_peer too.
    "src/ridgeline/bench/results_peer.py": ["tests/bench/test_bench_results.py",
                                            "tests/bench/test_bench_vllm_flags.py",
                                            "tests/bench/test_bench_peer_outputs.py"],
    "src/ridgeline/bench/peer_flags.py": ["tests/bench/test_bench_vllm_flags.py",
                                          "tests/bench/test_bench_peer_outputs.py",
                                          "tests/bench/test_bench_peer_command_lines.py"],
    "src/ridgeline/bench/vllm_flags.py": ["tests/bench/test_bench_peer_outputs.py"],
    "src/ridgeline/bench/results_guidellm.py": ["tests/bench/test_bench_peer_outputs.py",
                                                "tests/bench/test_bench_peer_command_lines.py"],
    # the rate sweep's table rows are checked in test_bench_cli.py
    "src/ridgeline/bench/summary.py": ["tests/bench/test_bench_load.py",
                                       "tests/commands/test_bench_cli.py"],
    "src/ridgeline/bench/export.py": ["tests/trace/test_trace_export.py",
                                      "tests/bench/test_bench_results.py"],
    "src/ridgeline/bench/tokens.py": ["tests/bench/test_bench_tokenizer.py"],
    "src/ridgeline/serve/protocol.py": ["tests/serve/test_serve_limits.py"],
    "src/ridgeline/ui/app.py": ["tests/ui/test_ui_api.py", "tests/ui/test_ui_limits.py"],
    # --non-streaming and the cached-prompt count are tested against the emulator there
    "src/ridgeline/bench/client.py": ["tests/bench/test_bench_vllm_flags.py",
                                      "tests/bench/test_bench_cache.py"],
    # the command's load points (one --concurrency, a list, a rate sweep)
    "src/ridgeline/bench/load_points.py": ["tests/commands/test_bench_cli.py"],
}

SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
            ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
            ast.In: ast.NotIn, ast.NotIn: ast.In}
SWAP_ARITH = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
              ast.FloorDiv: ast.Div, ast.Pow: ast.Mult}
SWAP_NAME = {"min": "max", "max": "min", "minimum": "maximum", "maximum": "minimum",
             "argmin": "argmax", "argmax": "argmin", "nanmin": "nanmax", "nanmax": "nanmin",
             "fmin": "fmax", "fmax": "fmin"}


@dataclass
class Mutant:
    file: str
    index: int          # ordinal of the node in ast.walk order
    kind: str
    line: int
    detail: str         # what changed
    col: int = -1       # column of the node (tells sites of one line apart)
    outcome: str = ""   # killed | survived | timeout (counts as killed) | invalid | skipped
    seconds: float = 0.0
    source_line: str = ""


def _text_only(n: ast.AST) -> bool:
    """`__all__ = ...`, `SomeError(...)`, `if TYPE_CHECKING:`."""
    if isinstance(n, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
    if isinstance(n, ast.Call):
        return isinstance(n.func, ast.Name) and n.func.id.endswith("Error")
    if isinstance(n, ast.If):
        return isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"
    return False


def _excluded(tree: ast.AST) -> set[int]:
    """ids of nodes whose mutation would only change text, types or checks, not numbers."""
    out: set[int] = set()

    def mark(n: ast.AST | None) -> None:
        if n is not None:
            out.update(id(x) for x in ast.walk(n))

    for n in ast.walk(tree):
        if isinstance(n, (ast.JoinedStr, ast.Raise, ast.Assert)):
            mark(n)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mark(n.returns)
            for a in [*n.args.args, *n.args.kwonlyargs, *n.args.posonlyargs,
                      n.args.vararg, n.args.kwarg]:
                if a is not None:
                    mark(a.annotation)
        elif isinstance(n, ast.AnnAssign):
            mark(n.annotation)
        elif _text_only(n):
            mark(n)
    return out


def _sites(tree: ast.AST) -> list[tuple[int, str, int, str, int]]:
    """(walk index, kind, line, detail, column) of every mutation this tree allows."""
    skip = _excluded(tree)
    out = []
    for i, n in enumerate(ast.walk(tree)):
        if id(n) in skip:
            continue
        line = getattr(n, "lineno", 0)
        col = getattr(n, "col_offset", -1)
        if isinstance(n, ast.Compare):
            for j, op in enumerate(n.ops):
                if type(op) in SWAP_CMP:
                    out.append((i, f"cmp:{j}", line,
                                f"{type(op).__name__} -> {SWAP_CMP[type(op)].__name__}", col))
        elif isinstance(n, ast.BinOp) and type(n.op) in SWAP_ARITH:
            out.append((i, "arith", line,
                        f"{type(n.op).__name__} -> {SWAP_ARITH[type(n.op)].__name__}", col))
            if isinstance(n.op, (ast.Add, ast.Sub)):
                out.append((i, "drop:right", line, f"a {type(n.op).__name__} b -> a", col))
        elif isinstance(n, ast.AugAssign) and type(n.op) in SWAP_ARITH:
            out.append((i, "arith", line,
                        f"{type(n.op).__name__}= -> {SWAP_ARITH[type(n.op)].__name__}=", col))
        elif isinstance(n, ast.Call):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else None
            if name in SWAP_NAME and (isinstance(f, ast.Attribute) or name in ("min", "max")):
                out.append((i, "minmax", line, f"{name} -> {SWAP_NAME[name]}", col))
        elif isinstance(n, ast.Constant) and type(n.value) is int:
            out.append((i, "int", line, f"{n.value} -> {n.value + 1}", col))
        elif isinstance(n, (ast.If, ast.While, ast.IfExp)):
            out.append((i, "negate", line, "condition -> not condition", col))
        elif isinstance(n, ast.BoolOp):
            out.append((i, "boolop", line,
                        "and -> or" if isinstance(n.op, ast.And) else "or -> and", col))
    return out


def _apply(tree: ast.AST, index: int, kind: str) -> ast.AST:
    """A copy of `tree` with mutation `kind` applied at walk ordinal `index`."""
    t = copy.deepcopy(tree)
    nodes = list(ast.walk(t))
    n = nodes[index]
    if kind.startswith("cmp:"):
        j = int(kind.split(":")[1])
        n.ops[j] = SWAP_CMP[type(n.ops[j])]()
    elif kind == "arith":
        n.op = SWAP_ARITH[type(n.op)]()
    elif kind == "drop:right":
        for parent in nodes:      # replace the BinOp by its left operand in its parent
            for field, value in ast.iter_fields(parent):
                if value is n:
                    setattr(parent, field, n.left)
                elif isinstance(value, list):
                    for k, v in enumerate(value):
                        if v is n:
                            value[k] = n.left
    elif kind == "minmax":
        if isinstance(n.func, ast.Name):
            n.func.id = SWAP_NAME[n.func.id]
        else:
            n.func.attr = SWAP_NAME[n.func.attr]
    elif kind == "int":
        n.value = n.value + 1
    elif kind == "negate":
        n.test = ast.UnaryOp(op=ast.Not(), operand=n.test)
    elif kind == "boolop":
        n.op = ast.Or() if isinstance(n.op, ast.And) else ast.And()
    return ast.fix_missing_locations(t)


def _files(areas: list[str]) -> list[tuple[str, str]]:
    """(area, file) of each file once: a file two areas name (perf/kernels.py is in perf and
    vllm_fit) belongs to the first of `areas` that names it."""
    out, seen = [], set()
    for a in areas:
        for g in AREAS[a]:
            for p in sorted(ROOT.glob(g)):
                rel = str(p.relative_to(ROOT))
                if (p.name != "__init__.py" or p.stat().st_size > 2000) and rel not in seen:
                    seen.add(rel)
                    out.append((a, rel))
    return out


def _tests_for(root: Path, area: str, rel: str) -> list[str]:
    tests = list(AREA_TESTS[area]) + FILE_TESTS.get(rel, [])
    return [t for t in dict.fromkeys(tests) if (root / t).is_file()]


def _run_tests(copy_root: Path, tests: list[str], timeout_s: float,
               tail: list[str] | None = None) -> tuple[str, float]:
    # A marker every child inherits: a server started in its own session (outside the
    # group) by a mutant that breaks its stop() is found by it and killed too.
    marker = f"{os.getpid()}-{time.monotonic_ns()}"
    env = dict(os.environ, PYTHONPATH=str(copy_root / "src"), PYTHONDONTWRITEBYTECODE="1",
               RIDGELINE_MUTANT_RUN=marker)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
           "-p", "no:randomly", *tests]
    t0 = time.monotonic()
    # Its own process group: a mutant that hangs or breaks a fixture's teardown leaves the
    # servers its tests started (the scripted server, an emulator); the group goes with it.
    proc = subprocess.Popen(cmd, cwd=copy_root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _kill_marked(marker)
        proc.communicate()
        return "timeout", time.monotonic() - t0
    _kill_group(proc)
    _kill_marked(marker)
    if tail is not None:
        tail += out.decode(errors="replace").splitlines()[-15:]
    return ("survived" if proc.returncode == 0 else "killed"), time.monotonic() - t0


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(proc.pid, signal.SIGKILL)


def _kill_marked(marker: str) -> None:
    """SIGKILL every process whose environment carries this run's marker (Linux /proc)."""
    needle = f"RIDGELINE_MUTANT_RUN={marker}".encode()
    for env_file in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError, ValueError):
            if needle in env_file.read_bytes().split(b"\0"):
                os.kill(int(env_file.parent.name), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", nargs="+", default=list(AREAS), choices=list(AREAS))
    ap.add_argument("--sample", type=int, default=100, help="mutants to run (0: all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout-factor", type=float, default=4.0)
    ap.add_argument("--out", default="tools/mutation/results/mutation.json")
    ap.add_argument("--list", action="store_true", help="print the sites, run nothing")
    ap.add_argument("--rerun", help="an earlier results JSON: rerun only its survivors "
                    "(and mutants it skipped) in --modules")
    ap.add_argument("--rerun-outcomes", default="survived,skipped",
                    help="which outcomes of --rerun's file to run again")
    args = ap.parse_args(argv)
    # Started in the background by a shell, this process inherits SIGINT ignored, and so
    # would every test's child (test_fleet's Ctrl-C test then fails): restore a handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    files = _files(args.modules)
    trees = {rel: ast.parse((ROOT / rel).read_text(encoding="utf-8")) for _, rel in files}
    area_of = {rel: a for a, rel in files}
    pool = [Mutant(rel, i, k, line, d, col=c) for _, rel in files
            for i, k, line, d, c in _sites(trees[rel])]
    per_area = {a: sum(1 for m in pool if area_of[m.file] == a) for a in args.modules}
    print(f"{len(pool)} mutation sites in {len(files)} files: {per_area}", flush=True)
    if args.list:
        for m in pool:
            print(f"{m.file}:{m.line} {m.kind} {m.detail}")
        return 0
    for m in pool:
        lines = (ROOT / m.file).read_text(encoding="utf-8").splitlines()
        m.source_line = lines[m.line - 1].strip() if 0 < m.line <= len(lines) else ""
    rng = random.Random(args.seed)
    # Sample evenly over areas (each gets its share of the budget), then at random within.
    chosen: list[Mutant] = []
    if args.rerun:
        old = json.loads(Path(args.rerun).read_text(encoding="utf-8"))
        for o in old["mutants"]:
            if o["outcome"] not in args.rerun_outcomes.split(",") or o["file"] not in area_of:
                continue
            same = [m for m in pool if (m.file, m.kind, m.detail, m.source_line) ==
                    (o["file"], o["kind"], o["detail"], o["source_line"])]
            if same:
                chosen.append(min(same, key=lambda m: (m.col != o.get("col", m.col),
                                                       abs(m.line - o["line"]))))
            else:
                print(f"gone: {o['file']}:{o['line']} {o['source_line'][:60]}", flush=True)
    elif args.sample and args.sample < len(pool):
        quota = {a: args.sample // len(args.modules) for a in args.modules}
        for a in args.modules[: args.sample % len(args.modules)]:
            quota[a] += 1
        for a in args.modules:
            cands = [m for m in pool if area_of[m.file] == a]
            chosen += rng.sample(cands, min(quota[a], len(cands)))
    else:
        chosen = pool
    chosen.sort(key=lambda m: (m.file, m.line))

    tmp = Path(tempfile.mkdtemp(prefix="ridgeline-mut-"))
    try:
        copy_root = tmp / "repo"
        shutil.copytree(ROOT, copy_root, ignore=shutil.ignore_patterns(
            ".git", ".venv", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache"))
        env = dict(os.environ, PYTHONPATH=str(copy_root / "src"))
        probe = "import ridgeline; print(ridgeline.__file__)"
        where = subprocess.run([sys.executable, "-c", probe], cwd=copy_root, env=env,
                               capture_output=True, text=True).stdout
        if not where.startswith(str(copy_root)):   # the mutants must be what the tests import
            print(f"the copy is not imported (ridgeline from {where.strip()!r})", flush=True)
            return 1
        baseline: dict[tuple[str, ...], float] = {}
        t_start = time.monotonic()
        for n, m in enumerate(chosen, 1):
            tests = _tests_for(copy_root, area_of[m.file], m.file)
            key = tuple(tests)
            if key not in baseline:
                out_tail: list[str] = []
                outcome, secs = _run_tests(copy_root, tests, 1800, out_tail)
                baseline[key] = secs if outcome == "survived" else math.nan
                if outcome != "survived":
                    print(f"baseline fails for {tests}: its mutants are skipped", flush=True)
                    print("\n".join(out_tail), flush=True)
            if math.isnan(baseline[key]):
                m.outcome = "skipped"
                continue
            target = copy_root / m.file
            original = target.read_text(encoding="utf-8")
            try:
                mutated = ast.unparse(_apply(trees[m.file], m.index, m.kind))
                try:
                    compile(mutated, m.file, "exec")
                except SyntaxError:
                    m.outcome = "invalid"
                    continue
                target.write_text(mutated, encoding="utf-8")
                m.outcome, m.seconds = _run_tests(
                    copy_root, tests, max(30.0, args.timeout_factor * baseline[key]))
            finally:
                target.write_text(original, encoding="utf-8")
            print(f"[{n}/{len(chosen)} {time.monotonic() - t_start:.0f}s] {m.outcome:8s} "
                  f"{m.file}:{m.line} {m.kind} {m.detail} | {m.source_line[:70]}", flush=True)
            _write(args, pool, per_area, chosen, area_of)   # after each: a crash keeps them
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(_write(args, pool, per_area, chosen, area_of), indent=1))
    return 0


def _write(args: argparse.Namespace, pool: list[Mutant], per_area: dict[str, int],
           chosen: list[Mutant], area_of: dict[str, str]) -> dict[str, dict[str, int]]:
    summary: dict[str, dict[str, int]] = {}
    for m in chosen:
        if m.outcome:
            s = summary.setdefault(area_of[m.file], {})
            s[m.outcome] = s.get(m.outcome, 0) + 1
    result = {"sites": len(pool), "sites_per_area": per_area, "sampled": len(chosen),
              "seed": args.seed, "modules": args.modules, "rerun_of": args.rerun,
              "summary": summary, "mutants": [asdict(m) for m in chosen]}
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
