#!/usr/bin/env python3
"""Two ridge binaries on one benchmark, interleaved: A B, B A, A B, ... for ROUNDS rounds (the order
alternates so neither side always runs second), each run with --json. Rows are matched by
(benchmark, case, dtype); the table gives each side's median of its per-run medians, the new/old ratio
(B/A: < 1 means B is faster) and the self-noise of A (its odd rounds against its even rounds).

  tools/bench_ab.py OLD_RIDGE NEW_RIDGE [--rounds N] -- bench gemm --quick [more args]

Run it alone: ../shared/tools/quiet tools/bench_ab.py ... (the VM's speed moves by up to 2x for
seconds; interleaving and medians are how two binaries are compared on it).
"""
import argparse
import json
import math
import statistics
import subprocess
import sys


def run(binary, args):
    out = subprocess.run([binary, *args, "--json", "--no-progress"], check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        key = (r.get("benchmark", ""), json.dumps(r.get("case", {}), sort_keys=True), r.get("dtype", ""))
        rows[key] = r["median_ms"]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=4)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    args = argv[cut + 1:]
    if not args or a.rounds < 1:
        ap.error("give the benchmark after --, e.g. -- bench gemm --quick, and --rounds >= 1")
    runs = {"A": [], "B": []}
    for i in range(a.rounds):
        order = ("A", "B") if i % 2 == 0 else ("B", "A")
        for side in order:
            runs[side].append(run(a.old if side == "A" else a.new, args))
        print(f"round {i + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    keys = [k for k in runs["A"][0] if all(k in r for r in runs["A"] + runs["B"])]
    ratios = []
    print(f"# {' '.join(args)}: {a.rounds} rounds interleaved; A = {a.old}, B = {a.new}")
    print("| case | dtype | A median ms | B median ms | B/A | A odd/even |")
    print("|---|---|---|---|---|---|")
    for k in keys:
        ta = [r[k] for r in runs["A"]]
        tb = [r[k] for r in runs["B"]]
        ma, mb = statistics.median(ta), statistics.median(tb)
        noise = statistics.median(ta[0::2]) / statistics.median(ta[1::2]) if len(ta) > 1 else float("nan")
        ratios.append(mb / ma)
        case = ", ".join(f"{x}={y}" for x, y in json.loads(k[1]).items())
        print(f"| {case} | {k[2]} | {ma:.4g} | {mb:.4g} | {mb / ma:.3f} | {noise:.3f} |")
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\n{len(ratios)} rows: B/A geometric mean {geo:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")


if __name__ == "__main__":
    main()
