"""Measure, on one CUDA GPU, the kernel costs that the vLLM replay fit cannot tell apart.

The replay of the real vLLM runs (benchmarks/accuracy/fit_vllm_kernel_scales.py) fits three scales
that act on the same steps: the kernel floors under CUDA graphs (`vllm.floor_scale` x the
Vidur-fitted floors), the small all-reduce latency and grouped-query decode attention's share
of HBM bandwidth. Its leave-one-model-out folds slide along a ridge between them
(docs/BENCHMARKS.md). A direct measurement of any one pins
the others. One Hopper GPU measures two of them; the all-reduce needs two GPUs and is skipped
on one:

- **floors**: small kernels timed as Vidur timed them (CUDA events around one launch), back to
  back in eager mode, and replayed from a CUDA graph, as vLLM runs decode steps. The graph's
  per-kernel time over the isolated one is the measured `floor_scale`.
- **GEMM**: bf16 (and fp8 where `torch._scaled_mm` runs) on the layer shapes of the four
  replayed models at their TP degree, m from 1 to 8192; weights rotate through copies larger
  than L2, so each launch reads its weights from HBM, as a serving step does.
- **attention**: `scaled_dot_product_attention` decode (one query per sequence, GQA by
  `enable_gqa`) and causal prefill, per query heads per KV head; decode as a share of HBM
  bandwidth, prefill in TFLOP/s.

Run on the GPU machine (torch, nothing else: ridgeline itself need not be installed there):

    python3 benchmarks/accuracy/gpu_kernel_probe.py --out "$OUT"

It writes gemm.csv, attention.csv, floors.csv and summary.json to --out (each flushed as it
goes) and prints the summary. `--summarize DIR` recomputes the summary from the CSVs on any
machine. Sized for about 2 minutes on an H200 (an estimate; see docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HARDWARE_DIR = ROOT / "src" / "ridgeline" / "specs" / "data" / "hardware"
KERNELS_JSON = ROOT / "src" / "ridgeline" / "specs" / "data" / "kernels.json"

# torch.cuda.get_device_name() substrings -> catalog GPU (datasheet peaks come from its JSON).
DEVICE_NAMES = (("H200", "h200"), ("H100 PCIe", "h100-pcie"), ("H100", "h100-sxm"),
                ("A100-SXM4-40GB", "a100-40gb"), ("A100", "a100-80gb"), ("L40S", "l40s"),
                ("B200", "b200"), ("H20", "h20"))

# Per-GPU GEMM shapes (n, k) of the replayed models' layers at the TP they ran with
# (shared/data/vllm-inference-perf: Llama-2-7B TP1, Llama-2-70B TP4, CodeLlama-34B TP2,
# Mixtral-8x7B TP2, d_head 128). Named model/layer so a row says where it comes from.
GEMM_SHAPES: tuple[tuple[str, int, int], ...] = (
    ("llama-2-7b-tp1/qkv", 3 * 4096, 4096),
    ("llama-2-7b-tp1/o", 4096, 4096),
    ("llama-2-7b-tp1/gate_up", 2 * 11008, 4096),
    ("llama-2-7b-tp1/down", 4096, 11008),
    ("llama-2-70b-tp4/qkv", (64 + 2 * 8) * 128 // 4, 8192),
    ("llama-2-70b-tp4/o", 8192, 8192 // 4),
    ("llama-2-70b-tp4/gate_up", 2 * 28672 // 4, 8192),
    ("llama-2-70b-tp4/down", 8192, 28672 // 4),
    ("codellama-34b-tp2/qkv", (64 + 2 * 8) * 128 // 2, 8192),
    ("codellama-34b-tp2/o", 8192, 8192 // 2),
    ("codellama-34b-tp2/gate_up", 2 * 22016 // 2, 8192),
    ("codellama-34b-tp2/down", 8192, 22016 // 2),
    ("mixtral-8x7b-tp2/qkv", (32 + 2 * 8) * 128 // 2, 4096),
    ("mixtral-8x7b-tp2/o", 4096, 4096 // 2),
    ("mixtral-8x7b-tp2/expert_gate_up", 2 * 14336 // 2, 4096),
    ("mixtral-8x7b-tp2/expert_down", 4096, 14336 // 2),
)
GEMM_M = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)

# Decode attention: (query heads, KV heads) per GPU of the replayed models: Llama-2-7B (MHA),
# Mixtral TP2 (4 per KV head), CodeLlama-34B TP2 / Llama-2-70B TP4 (8 per KV head).
DECODE_HEADS = ((32, 32), (16, 4), (32, 4))
DECODE_BATCH = (1, 8, 32, 128)
DECODE_CONTEXT = (512, 2048, 8192)
PREFILL_HEADS = ((32, 32), (32, 4))
PREFILL_LEN = (512, 1024, 2048, 4096, 8192)
HEAD_DIM = 128

# Bytes a kernel's inputs must exceed, over all rotated copies, to be read from HBM each
# launch rather than from L2 (H100/H200 L2 is 50-60 MB).
L2_EVICT_BYTES = 128 * 2**20
GRAPH_TARGET_US = 2000.0  # work captured per CUDA graph, so a replay dwarfs its launch
FLOOR_CHAIN = 256  # small kernels per chain when timing floors
# A decode attention row counts toward the bandwidth summary when its KV read is this large:
# smaller reads sit on the kernel's floor, not on HBM.
DECODE_SUMMARY_MIN_BYTES = 64 * 2**20


# --- timing --------------------------------------------------------------------------------

class Timer:
    """CUDA-event timing of a callable, replayed from a CUDA graph where capture works."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def _events(self) -> tuple[Any, Any]:
        ev = self.torch.cuda.Event
        return ev(enable_timing=True), ev(enable_timing=True)

    def once_us(self, fn: Callable[[int], Any], warmup: int = 3, samples: int = 21) -> float:
        """Median time of one launch between two events, synchronised each time (Vidur's way)."""
        for i in range(warmup):
            fn(i)
        self.torch.cuda.synchronize()
        out = []
        for i in range(samples):
            a, b = self._events()
            a.record()
            fn(i)
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) * 1e3)
        return statistics.median(out)

    def chain_us(self, fn: Callable[[int], Any], reps: int, samples: int = 5) -> float:
        """Per-launch time of `reps` launches back to back in eager mode (CPU launch included)."""
        for i in range(3):
            fn(i)
        self.torch.cuda.synchronize()
        out = []
        for _ in range(samples):
            a, b = self._events()
            a.record()
            for i in range(reps):
                fn(i)
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) * 1e3 / reps)
        return statistics.median(out)

    def graph_us(self, fn: Callable[[int], Any], reps: int, samples: int = 5) -> float | None:
        """Per-launch time of `reps` launches replayed from one CUDA graph (None: no capture)."""
        torch = self.torch
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for i in range(3):
                    fn(i)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(reps):
                    fn(i)
        except RuntimeError as exc:
            print(f"  graph capture failed ({str(exc).splitlines()[0][:80]}); eager instead",
                  file=sys.stderr)
            return None
        graph.replay()
        torch.cuda.synchronize()
        out = []
        for _ in range(samples):
            a, b = self._events()
            a.record()
            graph.replay()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) * 1e3 / reps)
        del graph
        return statistics.median(out)

    def best_us(self, fn: Callable[[int], Any]) -> tuple[float, str]:
        """Graph-replayed time per launch (eager chain if capture fails), reps sized to ~2 ms."""
        single = self.once_us(fn, warmup=2, samples=3)
        reps = int(min(200, max(4, GRAPH_TARGET_US / max(single, 1e-3))))
        t = self.graph_us(fn, reps)
        if t is not None:
            return t, "graph"
        return self.chain_us(fn, reps), "eager"


def copies_for(nbytes: int) -> int:
    """Rotated copies so the copies together exceed L2 (each launch then reads HBM)."""
    return max(1, min(16, math.ceil(L2_EVICT_BYTES / max(nbytes, 1))))


# --- measurements --------------------------------------------------------------------------

class CsvSink:
    """Rows written and flushed one by one, so a killed run keeps what it measured."""

    def __init__(self, path: Path, fields: list[str]) -> None:
        self.fh = path.open("w", newline="")
        self.writer = csv.DictWriter(self.fh, fieldnames=fields)
        self.writer.writeheader()
        self.fh.flush()

    def write(self, row: dict[str, Any]) -> None:
        self.writer.writerow(row)
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


GEMM_FIELDS = ["shape", "dtype", "m", "n", "k", "time_us", "tflops", "mode", "copies"]
ATTN_FIELDS = ["phase", "batch", "context", "q_heads", "kv_heads", "head_dim", "time_us",
               "kv_bytes", "flops", "mode"]
FLOOR_FIELDS = ["kernel", "isolated_us", "eager_chain_us", "graph_us"]


def fp8_matmul(torch: Any) -> Callable[[Any, Any], Any] | None:
    """A per-tensor-scaled fp8 e4m3 GEMM, or None where this torch/GPU has none."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return None
    one = torch.ones((), device="cuda", dtype=torch.float32)

    def mm(a: Any, w_t: Any) -> Any:
        return torch._scaled_mm(a, w_t.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    try:
        a = torch.zeros((16, 64), device="cuda").to(torch.float8_e4m3fn)
        w = torch.zeros((32, 64), device="cuda").to(torch.float8_e4m3fn)
        mm(a, w)
        torch.cuda.synchronize()
    except (RuntimeError, TypeError) as exc:
        print(f"fp8 GEMM unavailable: {str(exc).splitlines()[0][:100]}", file=sys.stderr)
        return None
    return mm


def gemm_call(torch: Any, a: Any, ws: list[Any],
              fp8: Callable[[Any, Any], Any] | None) -> Callable[[int], Any]:
    """Launch i multiplies the activations by weight copy i mod len(ws) (x W^T, W stored [n, k])."""
    if fp8 is not None:
        a8 = a.to(torch.float8_e4m3fn)
        return lambda i: fp8(a8, ws[i % len(ws)])
    return lambda i: torch.matmul(a, ws[i % len(ws)].t())


def measure_gemm(torch: Any, timer: Timer, sink: CsvSink, dtypes: Iterable[str],
                 ms: Iterable[int]) -> None:
    fp8 = fp8_matmul(torch) if "fp8" in dtypes else None
    for dtype in dtypes:
        if dtype == "fp8" and fp8 is None:
            continue
        elem = 1 if dtype == "fp8" else 2
        for name, n, k in GEMM_SHAPES:
            n_copies = copies_for(n * k * elem)
            # weights stored [n, k] (row-major, as checkpoints are)
            ws = [torch.randn((n, k), device="cuda", dtype=torch.bfloat16) * 0.02
                  for _ in range(n_copies)]
            if dtype == "fp8":
                ws = [w.to(torch.float8_e4m3fn) for w in ws]
            for m in ms:
                a = torch.randn((m, k), device="cuda", dtype=torch.bfloat16)
                fn = gemm_call(torch, a, ws, fp8 if dtype == "fp8" else None)
                try:
                    t, mode = timer.best_us(fn)
                except RuntimeError as exc:  # e.g. an fp8 GEMM's shape rule
                    print(f"  {name} {dtype} m={m}: {str(exc).splitlines()[0][:100]}",
                          file=sys.stderr)
                    continue
                sink.write({"shape": name, "dtype": dtype, "m": m, "n": n, "k": k,
                            "time_us": round(t, 3), "tflops": round(2 * m * n * k / t / 1e6, 2),
                            "mode": mode, "copies": n_copies})
            del ws
            torch.cuda.empty_cache()
        print(f"  gemm {dtype}: done", file=sys.stderr)


def measure_attention(torch: Any, timer: Timer, sink: CsvSink) -> None:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    bf16 = torch.bfloat16
    for hq, hkv in DECODE_HEADS:
        for b in DECODE_BATCH:
            for ctx in DECODE_CONTEXT:
                kv_bytes = 2 * b * hkv * ctx * HEAD_DIM * 2
                n_copies = copies_for(kv_bytes)
                kvs = [(torch.randn((b, hkv, ctx, HEAD_DIM), device="cuda", dtype=bf16),
                        torch.randn((b, hkv, ctx, HEAD_DIM), device="cuda", dtype=bf16))
                       for _ in range(n_copies)]
                q = torch.randn((b, hq, 1, HEAD_DIM), device="cuda", dtype=bf16)

                def fn(i: int, q: Any = q, kvs: Any = kvs, gqa: bool = hq != hkv) -> Any:
                    k, v = kvs[i % len(kvs)]
                    return sdpa(q, k, v, enable_gqa=gqa)

                t, mode = timer.best_us(fn)
                sink.write({"phase": "decode", "batch": b, "context": ctx, "q_heads": hq,
                            "kv_heads": hkv, "head_dim": HEAD_DIM, "time_us": round(t, 3),
                            "kv_bytes": kv_bytes, "flops": 4 * b * hq * ctx * HEAD_DIM,
                            "mode": mode})
                del kvs
        torch.cuda.empty_cache()
    for hq, hkv in PREFILL_HEADS:
        for length in PREFILL_LEN:
            q = torch.randn((1, hq, length, HEAD_DIM), device="cuda", dtype=bf16)
            k = torch.randn((1, hkv, length, HEAD_DIM), device="cuda", dtype=bf16)
            v = torch.randn((1, hkv, length, HEAD_DIM), device="cuda", dtype=bf16)

            def pf(i: int, q: Any = q, k: Any = k, v: Any = v, gqa: bool = hq != hkv) -> Any:
                return sdpa(q, k, v, is_causal=True, enable_gqa=gqa)

            t, mode = timer.best_us(pf)
            pairs = length * (length + 1) // 2
            sink.write({"phase": "prefill", "batch": 1, "context": length, "q_heads": hq,
                        "kv_heads": hkv, "head_dim": HEAD_DIM, "time_us": round(t, 3),
                        "kv_bytes": 2 * hkv * length * HEAD_DIM * 2,
                        "flops": 4 * pairs * hq * HEAD_DIM, "mode": mode})
    print("  attention: done", file=sys.stderr)


def measure_floors(torch: Any, timer: Timer, sink: CsvSink) -> None:
    """Tiny kernels: their time is the floor, whatever the kernel does."""
    bf16 = torch.bfloat16
    x = torch.randn((4096,), device="cuda", dtype=bf16)
    a = torch.randn((1, 512), device="cuda", dtype=bf16)
    w = torch.randn((512, 512), device="cuda", dtype=bf16)
    s = torch.randn((8, 512), device="cuda", dtype=bf16)
    kernels: dict[str, Callable[[int], Any]] = {
        "gemm": lambda i: torch.matmul(a, w),
        "add": lambda i: x.add_(1.0),
        "softmax": lambda i: torch.softmax(s, dim=-1),
    }
    for name, fn in kernels.items():
        graph = timer.graph_us(fn, FLOOR_CHAIN)
        sink.write({"kernel": name, "isolated_us": round(timer.once_us(fn, samples=201), 3),
                    "eager_chain_us": round(timer.chain_us(fn, FLOOR_CHAIN), 3),
                    "graph_us": "" if graph is None else round(graph, 3)})
    print("  floors: done", file=sys.stderr)


# --- summary (pure Python: runs anywhere on the CSVs) --------------------------------------

def read_rows(path: Path) -> list[dict[str, Any]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def catalog_peaks(hardware: str) -> dict[str, float]:
    spec = json.loads((HARDWARE_DIR / f"{hardware}.json").read_text())
    return {"bandwidth_bytes_s": float(spec["memory_bandwidth_bytes_s"]),
            **{f"flops_{d}": float(v) for d, v in spec["peak_flops"].items()}}


def fitted_constants() -> dict[str, float]:
    """What the replay fit and the Vidur fit ship, to set the measurement beside."""
    k = json.loads(KERNELS_JSON.read_text())
    h100 = k["profiles"]["h100"]
    return {"gemm_floor_us": float(h100["gemm"]["floor_us"]),
            "gemm_compute_efficiency": float(h100["gemm"]["compute_efficiency"]),
            "floor_scale": float(k["vllm"]["floor_scale"]["value"]),
            "decode_bandwidth_efficiency":
                float(k["attention"]["attention_decode"]["bandwidth_efficiency"]),
            # grouped-query decode in vLLM's steps as a share of the measured kernel's
            # bandwidth (the older catalog held it as a share of the carried A100 fit)
            "grouped_scale": float(k["vllm"].get("measured_decode_grouped_scale",
                                                 k["vllm"].get("attention_decode_grouped_scale",
                                                               {"value": 1.0}))["value"])}


def summarize(out: Path, hardware: str) -> dict[str, Any]:
    """The figures the fits need, from whichever CSVs exist under `out`."""
    peaks = catalog_peaks(hardware)
    summary: dict[str, Any] = {"hardware": hardware, "fitted": fitted_constants()}
    if (out / "floors.csv").exists():
        rows = [r for r in read_rows(out / "floors.csv") if r["graph_us"] != ""]
        ratios = {r["kernel"]: float(r["graph_us"]) / float(r["isolated_us"]) for r in rows}
        summary["floors"] = {
            "per_kernel": {r["kernel"]: {k: float(r[k]) for k in FLOOR_FIELDS[1:]} for r in rows},
            "graph_over_isolated": ratios,
            "measured_floor_scale": statistics.median(ratios.values()) if ratios else None,
        }
    if (out / "gemm.csv").exists():
        rows = read_rows(out / "gemm.csv")
        by_dtype: dict[str, dict[str, Any]] = {}
        for dtype in sorted({r["dtype"] for r in rows}):
            mine = [r for r in rows if r["dtype"] == dtype]
            peak = peaks[f"flops_{dtype}"]
            eff_by_m = {}
            for m in sorted({int(r["m"]) for r in mine}):
                effs = [float(r["tflops"]) * 1e12 / peak for r in mine if int(r["m"]) == m]
                eff_by_m[m] = round(statistics.median(effs), 4)
            # small m is bandwidth-bound: the share of HBM bandwidth that reads the weights
            bw = [(int(r["n"]) * int(r["k"]) * (1 if dtype == "fp8" else 2)
                   + int(r["m"]) * (int(r["k"]) + int(r["n"])) * 2)
                  / (float(r["time_us"]) * 1e-6) / peaks["bandwidth_bytes_s"]
                  for r in mine if int(r["m"]) <= 16]
            by_dtype[dtype] = {"compute_efficiency_by_m": eff_by_m,
                               "large_m_compute_efficiency": max(eff_by_m.values()),
                               "small_m_bandwidth_efficiency":
                                   round(statistics.median(bw), 4) if bw else None}
        summary["gemm"] = by_dtype
        if "fp8" in by_dtype and "bf16" in by_dtype:
            summary["gemm"]["fp8_over_bf16_large_m_efficiency"] = round(
                by_dtype["fp8"]["large_m_compute_efficiency"]
                / by_dtype["bf16"]["large_m_compute_efficiency"], 4)
    if (out / "attention.csv").exists():
        rows = read_rows(out / "attention.csv")
        decode: dict[str, list[float]] = {}
        for r in rows:
            if r["phase"] != "decode" or int(r["kv_bytes"]) < DECODE_SUMMARY_MIN_BYTES:
                continue
            group = int(r["q_heads"]) // int(r["kv_heads"])
            decode.setdefault(f"q_per_kv_{group}", []).append(
                int(r["kv_bytes"]) / (float(r["time_us"]) * 1e-6) / peaks["bandwidth_bytes_s"])
        decode_eff = {g: round(statistics.median(v), 4) for g, v in decode.items()}
        prefill = {f"{r['q_heads']}/{r['kv_heads']}@{r['context']}":
                   round(int(r["flops"]) / (float(r["time_us"]) * 1e-6) / 1e12, 1)
                   for r in rows if r["phase"] == "prefill"}
        summary["attention"] = {"decode_bandwidth_efficiency": decode_eff,
                                "prefill_tflops": prefill}
        mha = decode_eff.get("q_per_kv_1")
        if mha:
            summary["attention"]["grouped_over_mha"] = {
                g: round(v / mha, 4) for g, v in decode_eff.items() if g != "q_per_kv_1"}
    return summary


def hardware_of(device_name: str) -> str:
    for needle, name in DEVICE_NAMES:
        if needle in device_name:
            return name
    raise SystemExit(f"gpu_kernel_probe: device {device_name!r} is not a catalog GPU; "
                     f"pass --hardware with one of {sorted({n for _, n in DEVICE_NAMES})}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("gpu_probe"),
                    help="folder for gemm.csv, attention.csv, floors.csv, summary.json")
    ap.add_argument("--parts", default="floors,attention,gemm",
                    help="comma list of floors, attention, gemm (this order runs cheapest first)")
    ap.add_argument("--dtypes", default="bf16,fp8", help="GEMM dtypes: bf16, fp8")
    ap.add_argument("--hardware", help="catalog GPU for the peaks (default: from the device name)")
    ap.add_argument("--summarize", type=Path, metavar="DIR",
                    help="only recompute the summary from DIR's CSVs (no GPU needed)")
    ap.add_argument("--list-shapes", action="store_true",
                    help="print the probed GEMM shapes (name, n, k) as JSON and exit")
    args = ap.parse_args(argv)
    if args.list_shapes:
        print(json.dumps([list(s) for s in GEMM_SHAPES]))
        return 0
    if args.summarize is not None:
        if not args.hardware:
            raise SystemExit("gpu_kernel_probe: --summarize needs --hardware (e.g. h200)")
        print(json.dumps(summarize(args.summarize, args.hardware), indent=1))
        return 0
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - {"floors", "attention", "gemm"})
    if unknown:
        raise SystemExit(f"gpu_kernel_probe: --parts: unknown {unknown}; allowed: floors, "
                         "attention, gemm")
    try:
        import torch
    except ImportError:
        raise SystemExit("gpu_kernel_probe: needs torch with CUDA; --summarize DIR runs "
                         "without it") from None
    if not torch.cuda.is_available():
        raise SystemExit("gpu_kernel_probe: no CUDA device (torch.cuda.is_available() is False)")
    name = torch.cuda.get_device_name(0)
    hardware = args.hardware or hardware_of(name)
    args.out.mkdir(parents=True, exist_ok=True)
    info = {"device": name, "hardware": hardware, "torch": torch.__version__,
            "cuda": torch.version.cuda, "gpus": torch.cuda.device_count(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "all_reduce": "skipped: needs 2 GPUs" if torch.cuda.device_count() < 2
            else "skipped: not implemented in this probe"}
    print(json.dumps(info), file=sys.stderr)
    torch.manual_seed(0)
    timer = Timer(torch)
    t0 = time.perf_counter()
    for part in parts:
        if part == "floors":
            sink = CsvSink(args.out / "floors.csv", FLOOR_FIELDS)
            measure_floors(torch, timer, sink)
        elif part == "attention":
            sink = CsvSink(args.out / "attention.csv", ATTN_FIELDS)
            measure_attention(torch, timer, sink)
        else:
            sink = CsvSink(args.out / "gemm.csv", GEMM_FIELDS)
            measure_gemm(torch, timer, sink, [d.strip() for d in args.dtypes.split(",")],
                         GEMM_M)
        sink.close()
        print(f"  {part}: {time.perf_counter() - t0:.0f} s so far", file=sys.stderr)
    summary = {"run": info, **summarize(args.out, hardware)}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
