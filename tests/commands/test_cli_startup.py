"""What a command builds and imports before it runs (start-up is part of every command's
wall time; `simulate` of 100k requests is timed as a whole command): the click
tree of the invoked command's module only, with the same command in it, and no module the
command does not use."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from ridgeline import cli


def _commands(app: typer.Typer) -> dict[str, object]:
    return dict(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_the_command_map_names_every_registered_command() -> None:
    """`COMMANDS` (name -> module) against a full registration: a command added to a module
    without its name here would still run (the full app), but slower; one named here that
    its module does not register would be a dead entry."""
    full = _commands(cli.app)
    assert set(cli.COMMANDS) == set(full)
    for name, module in cli.COMMANDS.items():
        lean = _commands(cli.app_for([name, "--help"]))
        assert name in lean
        # exactly the commands of that module
        assert set(lean) == {n for n, m in cli.COMMANDS.items() if m == module}


def _param(p: object) -> tuple:
    return tuple(str(getattr(p, k, None)) for k in ("name", "opts", "secondary_opts",
                                                    "default", "required", "type",
                                                    "multiple", "nargs"))


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_a_lean_app_holds_the_same_command(name: str) -> None:
    """Same options (names, types, defaults), help and sub-commands as in the full app."""
    full = typer.main.get_command(cli.app)
    lean = typer.main.get_command(cli.app_for([name]))
    a, b = full.commands[name], lean.commands[name]  # type: ignore[attr-defined]
    ctx_a = typer.Context(full, info_name="ridgeline")
    ctx_b = typer.Context(lean, info_name="ridgeline")
    assert a.get_help(typer.Context(a, parent=ctx_a, info_name=name)) == \
        b.get_help(typer.Context(b, parent=ctx_b, info_name=name))
    assert [_param(p) for p in a.params] == [_param(p) for p in b.params]
    assert sorted(getattr(a, "commands", {})) == sorted(getattr(b, "commands", {}))


def test_anything_else_gets_the_full_app() -> None:
    for argv in ([], ["--help"], ["--version"], ["simulat"], ["-x", "simulate"]):
        assert cli.app_for(argv) is cli.app


def test_the_root_options_stay_on_a_lean_app() -> None:
    assert cli.run(["simulate", "--help"]) == 0
    lean = typer.main.get_command(cli.app_for(["simulate"]))
    assert [p.name for p in lean.params] == [p.name for p in typer.main.get_command(
        cli.app).params]


def test_simulate_imports_no_module_it_does_not_use() -> None:
    """A batch `simulate` loads neither the streamed fleet nor the calibration profile
    (pydantic models) nor the replay-file readers (msgspec, the peer-tool importers) nor
    another command's machinery; it still runs and prints."""
    code = ("import sys; from ridgeline import cli\n"
            "code = cli.run(['simulate', '--rate', '5', '--requests', '50', '--prompt',"
            " 'fixed:100', '--output', 'fixed:10', '--json'])\n"
            "print('MODULES', ' '.join(sorted(sys.modules)))\n"
            "sys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '"finished": 50' in proc.stdout
    loaded = set(proc.stdout.rsplit("MODULES ", 1)[1].split())
    assert "ridgeline.sim.event_loop" in loaded and "ridgeline.metrics.analysis" in loaded
    for heavy in ("ridgeline.sim.fleet", "ridgeline.sim.calibrated_profile",
                  "ridgeline.metrics.streaming", "ridgeline.workload.timed_trace_reader",
                  "ridgeline.trace.importers", "ridgeline.bench.client", "matplotlib",
                  "aiohttp", "ray"):
        assert heavy not in loaded, heavy


def test_a_profile_is_still_recognised_without_an_eager_import() -> None:
    """`is_calibrated` looks the profile class up only once its module is loaded (a profile
    cannot exist before): a profile is one, the roofline is not, and the profile's engine
    scheduling replaces the command's."""
    from ridgeline.perf.step_time import LinearStepTime
    from ridgeline.sim.calibrated_profile import CalibrationProfile
    from ridgeline.sim.engine import EngineConfig
    from ridgeline.sim.step_model import engine_config_for, is_calibrated

    prof = CalibrationProfile.from_table(tokens=[1, 2, 4], step_s=[0.01, 0.02, 0.04])
    assert is_calibrated(prof) and not is_calibrated(LinearStepTime(base_s=0.01))
    cfg = EngineConfig(max_num_seqs=7, num_kv_blocks=123)
    assert engine_config_for(LinearStepTime(base_s=0.01), cfg) is cfg
    assert engine_config_for(prof, cfg) is not cfg


def test_serve_builds_its_engine_without_the_simulation_run_modules() -> None:
    """`serve` builds its emulated engine from a `Scenario`; the event loop, the sweep and the
    analysis that running a scenario needs stay unloaded (they cost its start-up ~10%)."""
    code = ("import sys\n"
            "from ridgeline.commands import serve\n"
            "built, _ = serve._build_engine('llama-3.1-8b', 'h100-sxm', None, 'vllm', True,"
            " {'tp': 1}, {'max_num_seqs': 8, 'max_num_batched_tokens': 2048,"
            " 'block_size_tokens': 16, 'enable_prefix_caching': True,"
            " 'chunked_prefill': True}, (8, 2048, 16, True))\n"
            "print('KV', built.kv_capacity_tokens > 0)\n"
            "print('MODULES', ' '.join(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "KV True" in proc.stdout
    loaded = set(proc.stdout.rsplit("MODULES ", 1)[1].split())
    assert "ridgeline.sim.scenario" in loaded
    for run_half in ("ridgeline.sim.scenario_run", "ridgeline.sim.event_loop",
                     "ridgeline.sim.sweep", "ridgeline.metrics.analysis"):
        assert run_half not in loaded, run_half
