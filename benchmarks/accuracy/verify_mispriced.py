"""Does `verify` name the component that was mispriced? The emulator (whose timing is the
simulator's) serves a known calibration profile under a closed loop; the measured trace is
then verified against the same profile, and against copies with the decode steps (token
counts up to 16: the decode batches here) or the prefill steps (256 tokens and up: the
prompts) priced 1.3x, and with the same profile replaying the measured send times (open
loop) rather than the users. Prints and writes the named component, its size and the table.

    .venv/bin/python benchmarks/accuracy/verify_mispriced.py \
        --out benchmarks/results/verify_mispriced.json          (~40 s)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ridgeline.sim.calibrated_profile import CalibrationProfile, Scheduling

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
STEP_S = [0.010, 0.0105, 0.011, 0.012, 0.014, 0.016, 0.020, 0.025, 0.030, 0.050, 0.090, 0.170]


def profile(path: Path, decode: float = 1.0, prefill: float = 1.0) -> Path:
    steps = [t * (decode if n <= 16 else 1.0) * (prefill if n >= 256 else 1.0)
             for n, t in zip(TOKENS, STEP_S, strict=True)]
    CalibrationProfile.from_table(
        TOKENS, steps, kv_capacity_tokens=200_000,
        scheduling=Scheduling(preset="vllm", max_num_seqs=16, max_num_batched_tokens=2048),
    ).save(path)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        trace = d / "run.jsonl"
        t0 = time.time()
        r = subprocess.run([RIDGELINE, "bench", "--target", "emulator", "--calibration",
                            str(profile(d / "true.json")), "--concurrency", str(args.users),
                            "--requests", str(args.requests), "--prompt", "fixed:512",
                            "--output", "fixed:64", "--trace", str(trace), "--seed", "1"],
                           capture_output=True, text=True)
        if r.returncode:
            print(r.stderr, file=sys.stderr)
            return 1
        same = profile(d / "same.json")
        # The last case replays the measured send times (open loop): the emulator and the
        # simulator then see the same arrivals, up to the client-to-server transfer.
        cases = {"same profile": (same, []),
                 "decode x1.3": (profile(d / "decode.json", decode=1.3), []),
                 "prefill x1.3": (profile(d / "prefill.json", prefill=1.3), []),
                 "same profile, open-loop replay": (same, ["--open-loop"])}
        out = {"date": time.strftime("%Y-%m-%d"), "workload": {
            "users": args.users, "requests": args.requests, "prompt_tokens": 512,
            "output_tokens": 64}, "cases": {}}
        for name, (prof, extra) in cases.items():
            v = subprocess.run([RIDGELINE, "verify", str(trace), "--calibration", str(prof),
                                "--json", *extra], capture_output=True, text=True)
            if v.returncode:
                print(v.stderr, file=sys.stderr)
                return 1
            rep = json.loads(v.stdout)
            dec = rep["decomposition"][0]
            out["cases"][name] = {"replay": rep["replay"][0], "culprit": dec["culprit"],
                                  "culprit_relative": dec["culprit_relative"],
                                  "sentence": dec["sentence"],
                                  "components": dec["components"],
                                  "decode_step_predicted_ms": dec["decode_step_predicted_ms"],
                                  "decode_step_measured_ms": dec["decode_step_measured_ms"],
                                  "sources_measured": dec["sources"]["measured"]}
            print(f"{name}: {dec['sentence']}")
        out["wall_s"] = round(time.time() - t0, 1)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
