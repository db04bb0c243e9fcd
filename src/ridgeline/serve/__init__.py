"""The emulator: `ridgeline serve`, an OpenAI-compatible server with the simulator's timing.

The same engine as `ridgeline simulate` (ridgeline.sim.engine), driven by the wall clock
(driver.py), timed by the same step-time model (the roofline perf model), behind the
OpenAI API (app.py, protocol.py, responses.py), with vLLM-named Prometheus metrics
(prometheus.py). Use it to test load generators, gateways, autoscalers and dashboards
without a GPU, and as ground truth for `ridgeline bench`.

    ridgeline serve --model llama-3.1-8b --hardware h100-sxm --port 8000 --speed 1

From Python (a subprocess on 127.0.0.1, a free port, health-checked):

    from ridgeline.serve.launcher import EmulatorProcess
    with EmulatorProcess(model="llama-3.1-8b", hardware="h100-sxm", speed=1.0) as emu:
        emu.base_url        # "http://127.0.0.1:<port>"

In-process (tests): `create_app(engine, make_request, EmulatorConfig(...))` plus
`launcher.running_server(app)` (async) or `launcher.running_in_thread(app)` (sync).

Request extensions: `ignore_eos`, `min_tokens` (vLLM's); a completions `prompt` given as
token ids counts as its length; `"ridgeline": {"prompt_tokens": N}` sets the prompt length.
Output text is deterministic filler, one cl100k token per word.
"""

# The package's public modules (imported one by one, so importing the package stays cheap).
__all__ = [
    "app",
    "driver",
    "embeddings",
    "factory",
    "failures",
    "fixed_timing",
    "header_timeout",
    "launcher",
    "lora",
    "modes",
    "prometheus",
    "prompt_blocks",
    "protocol",
    "responses",
    "structured",
    "tokenizer",
]
