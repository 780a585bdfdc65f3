#!/usr/bin/env python3
"""PyTorch's CPU scaled_dot_product_attention as a peer for `ridge bench attention`.

Runs the same shape with the same thread count and prints one JSON line:
  {"torch": "<version>", "median_ms": {"forward": ..., "backward": ..., "forward+backward": ...}}
or {"error": "..."} (exit 3) when torch is not installed. Timings are medians of --iters calls after
--warmup untimed calls; backward is timed alone, from a saved forward graph (retain_graph).
"""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--head-dim", type=int, required=True)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--passes", default="forward,backward")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--backend", choices=["flash", "math"], default="flash",
                    help="flash: F.scaled_dot_product_attention (PyTorch picks its CPU flash kernel); "
                         "math: PyTorch's materialised math backend, aten._scaled_dot_product_attention_math")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # torch absent or broken: say so, the benchmark row reports it
        print(json.dumps({"error": f"PyTorch absent ({type(e).__name__}); scripts/setup-torch installs it"}))
        return 3
    torch.set_num_threads(a.threads)
    dt = torch.float32 if a.dtype == "fp32" else torch.bfloat16
    g = torch.Generator().manual_seed(0)
    shape_q = (a.batch, a.heads, a.seq, a.head_dim)
    shape_k = (a.batch, a.kv_heads, a.seq, a.head_dim)
    q = torch.randn(shape_q, generator=g).to(dt).requires_grad_(True)
    k = torch.randn(shape_k, generator=g).to(dt).requires_grad_(True)
    v = torch.randn(shape_k, generator=g).to(dt).requires_grad_(True)
    do = torch.randn(shape_q, generator=g).to(dt)
    kw = {"is_causal": a.causal}
    if a.kv_heads != a.heads:
        kw["enable_gqa"] = True

    if a.backend == "math":
        def sdpa(*args, **kwargs):
            return torch.ops.aten._scaled_dot_product_attention_math(*args, **kwargs)[0]
    else:
        sdpa = F.scaled_dot_product_attention

    def fwd():
        with torch.no_grad():
            return sdpa(q, k, v, **kw)

    def fwd_graph():
        return sdpa(q, k, v, **kw)

    def timed(fn, setup=None):
        for _ in range(a.warmup):
            arg = setup() if setup else None
            fn(arg)
        ts = []
        for _ in range(max(1, a.iters)):
            arg = setup() if setup else None
            t0 = time.perf_counter()
            fn(arg)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e3

    out = {}
    for p in a.passes.split(","):
        if p == "forward":
            out[p] = timed(lambda _: fwd())
        elif p == "backward":
            def setup():
                q.grad = k.grad = v.grad = None
                return fwd_graph()
            out[p] = timed(lambda o: torch.autograd.backward(o, do), setup)
        elif p == "forward+backward":
            def both(_):
                q.grad = k.grad = v.grad = None
                torch.autograd.backward(fwd_graph(), do)
            out[p] = timed(both)
        else:
            print(json.dumps({"error": f"unknown pass {p}"}))
            return 2
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "median_ms": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
