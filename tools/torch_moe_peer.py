#!/usr/bin/env python3
"""PyTorch peer for `ridge bench moe`: an MoE layer's expert GEMMs as PyTorch eager runs them in the
Hugging Face Mixtral block, a Python loop over the experts, one set of matmuls per expert:

    for e in experts:  rows of e (a slice, as the tokens sit sorted by expert)
        forward:   h = x_e @ w13_e.T ; y = a_e @ w2_e.T
        backward:  da = dy_e @ w2_e ; dx = dh_e @ w13_e ; dw2_e = dy_e.T @ a_e ; dw13_e = dh_e.T @ x_e

the same products `ridge bench moe` times through the grouped GEMMs (and its own dense loop), over the same
rows per expert (--counts), in the same dtype (fp32, or bf16 operands with PyTorch's bf16 matmul output),
at the same thread count. HF's block also gathers the rows (index_select) and scatters the weighted
results (index_add_) per expert; ridge's permute and combine are outside the bench's timing, so the peer
leaves them out too: only the GEMMs are compared.

    tools/torch_moe_peer.py --counts 512,498,... --d-model 2048 --d-expert 1408 --dtype bf16 \\
        --passes forward,backward --threads 2 --warmup 1 --iters 5 --rounds 3

Prints one JSON line: {"torch": "2.x", "forward": {"median_ms", "min_ms", "max_ms"}, "backward": {...}}
(each pass's median over rounds of the per-round median), or {"error": "..."} (exit 3) without torch.
"""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", required=True, help="rows per expert, comma-separated")
    ap.add_argument("--d-model", type=int, required=True)
    ap.add_argument("--d-expert", type=int, required=True)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--passes", default="forward,backward")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    try:
        counts = [int(c) for c in a.counts.split(",")]
    except ValueError:
        print(json.dumps({"error": f"--counts: '{a.counts}' is not a comma list of row counts"}))
        return 2
    passes = a.passes.split(",")
    for p in passes:
        if p not in ("forward", "backward"):
            print(json.dumps({"error": f"--passes: '{p}' is not forward or backward"}))
            return 2
    try:
        import torch
    except Exception as e:  # torch absent or broken: the benchmark row says so
        print(json.dumps({"error": f"PyTorch absent ({type(e).__name__})"}))
        return 3
    torch.set_num_threads(a.threads)
    dt = torch.float32 if a.dtype == "fp32" else torch.bfloat16
    d, de, n = a.d_model, a.d_expert, sum(counts)
    g = torch.Generator().manual_seed(1)

    def rand(*shape):
        return (torch.rand(*shape, generator=g) - 0.5).to(dt)

    x, act, h, y = rand(n, d), rand(n, de), rand(n, 2 * de), rand(n, d)
    w13 = [rand(2 * de, d) for _ in counts]
    w2 = [rand(d, de) for _ in counts]
    offsets = [0]
    for c in counts:
        offsets.append(offsets[-1] + c)
    # The expert weight gradients accumulate in fp32, as ridge's K-grouped GEMM writes them.
    backward_too = "backward" in passes
    dw13 = [torch.zeros(2 * de, d) for _ in counts] if backward_too else []
    dw2 = [torch.zeros(d, de) for _ in counts] if backward_too else []

    def forward():
        for e, c in enumerate(counts):
            if c == 0:
                continue
            s = slice(offsets[e], offsets[e + 1])
            torch.matmul(x[s], w13[e].t())
            torch.matmul(act[s], w2[e].t())

    def backward():
        for e, c in enumerate(counts):
            if c == 0:
                continue
            s = slice(offsets[e], offsets[e + 1])
            torch.matmul(y[s], w2[e])
            torch.matmul(h[s], w13[e])
            dw2[e] += torch.matmul(y[s].t(), act[s]).float()
            dw13[e] += torch.matmul(h[s].t(), x[s]).float()

    fns = {"forward": forward, "backward": backward}
    per_round = {p: [] for p in passes}
    for _ in range(max(1, a.rounds)):
        for p in passes:
            for _ in range(a.warmup):
                fns[p]()
            ts = []
            for _ in range(max(1, a.iters)):
                t0 = time.perf_counter()
                fns[p]()
                ts.append((time.perf_counter() - t0) * 1e3)
            per_round[p].append(statistics.median(ts))
    out = {"torch": torch.__version__}
    for p, ms in per_round.items():
        out[p] = {"median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
