#!/usr/bin/env python3
"""The remote backend's table from bench/run_remote.sh's results (standard library only).

  bench/report_remote.py RESULTS_DIR [SERVER_DEVICE]

Rows: mlp_step/128 through the server against the local CPU (all repeats of both rounds, median;
target remote/local <= 1.3), small ops per op as the client sees them (target <= 5 us), a 64 MB
upload in GB/s (target >= 1) into new server memory and into memory the server used before (a
server whose session holds 1 GiB, so that its upload cache evicts), and the same upload repeated
(cache hit) as a share of each (target <= 5 %).
"""
import json
import pathlib
import statistics
import sys

UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def samples(path, name):
    """Seconds per iteration of every repeat of benchmark `name` in a Google Benchmark JSON."""
    try:
        entries = json.loads(pathlib.Path(path).read_text())["benchmarks"]
    except (OSError, ValueError, KeyError):
        return []
    out = []
    for e in entries:
        if e.get("run_type") != "iteration" or not e.get("run_name", e["name"]).startswith(name):
            continue
        if e.get("error_occurred"):
            print(f"{name}: {e.get('error_message')}", file=sys.stderr)
            continue
        out.append(e["real_time"] * UNIT[e["time_unit"]])
    return out


def main():
    out = pathlib.Path(sys.argv[1])
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    rows = []
    local = samples(out / "mlp_cpu_1.json", "mlp_step/128") + samples(out / "mlp_cpu_2.json", "mlp_step/128")
    remote = samples(out / "mlp_remote_1.json", "mlp_step/128") + samples(out / "mlp_remote_2.json", "mlp_step/128")
    if local and remote:
        l, r = statistics.median(local), statistics.median(remote)
        rows.append((f"mlp_step/128 remote vs local {device}", f"{r * 1e3:.3f} ms", f"{l * 1e3:.3f} ms",
                     f"{r / l:.2f}x", "<= 1.3x"))
    ops_r = samples(out / "remote.json", "small_ops_remote/10000")
    ops_l = samples(out / "remote.json", "small_ops_local/10000")
    if ops_r and ops_l:
        r, l = statistics.median(ops_r) / 1e4, statistics.median(ops_l) / 1e4
        rows.append(("small op (16 f32 add), per op", f"{r * 1e6:.2f} us", f"{l * 1e6:.2f} us",
                     f"{r / l:.2f}x", "<= 5 us"))
    again = samples(out / "remote.json", "upload_repeated/64")
    for name, label in (("remote.json", "upload 64 MB, new server memory"),
                        ("remote_reused.json", "upload 64 MB, server memory reused")):
        up = samples(out / name, "upload/64")
        if not up:
            continue
        u = statistics.median(up)
        rows.append((label, f"{u * 1e3:.2f} ms", "", f"{64 * 2**20 / u / 1e9:.2f} GB/s", ">= 1 GB/s"))
        if again:
            a = statistics.median(again)
            rows.append(("  again (cache hit), share of that", f"{a * 1e3:.2f} ms", f"{u * 1e3:.2f} ms",
                         f"{100 * a / u:.1f} %", "<= 5 %"))
    header = ("workload", "remote", "reference", "ratio", "target")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(5)]
    for r in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
