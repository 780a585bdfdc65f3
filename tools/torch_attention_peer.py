#!/usr/bin/env python3
"""PyTorch's CPU scaled_dot_product_attention as a peer for `ridge bench attention`.

Runs the same shape with the same thread count and prints one JSON line:
  {"torch": "<version>", "median_ms": {"forward": ..., "backward": ..., "forward+backward": ...}}
or {"error": "..."} (exit 3) when torch is not installed. Timings are medians of --iters calls after
--warmup untimed calls; backward is timed alone, from a saved forward graph (retain_graph).

Masked rows (--seqlens, --window-left/--window-right, --softcap) are run the way a PyTorch user
without flash-attn would: sdpa with the equivalent explicit boolean mask (varlen: the sequences padded
to the longest, padded query rows let see key 0 so no row is empty), the math backend materialising
the scores (the softcap applied to them), or flex_attention (compiled; varlen as packed documents, a
block mask and a score_mod for the softcap) where this torch has it.
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
    ap.add_argument("--backend", choices=["flash", "math", "flex"], default="flash",
                    help="flash: F.scaled_dot_product_attention (PyTorch picks its CPU flash kernel); "
                         "math: PyTorch's materialised math backend, aten._scaled_dot_product_attention_math "
                         "(masked rows: the scores materialised in plain torch ops); "
                         "flex: torch.compile(flex_attention) with a block mask")
    ap.add_argument("--seqlens", default="",
                    help="varlen: comma-separated sequence lengths (--batch and --seq are then ignored)")
    ap.add_argument("--window-left", type=int, default=-1)
    ap.add_argument("--window-right", type=int, default=-1)
    ap.add_argument("--softcap", type=float, default=0.0)
    a = ap.parse_args()
    masked = bool(a.seqlens) or a.window_left >= 0 or a.window_right >= 0 or a.softcap > 0
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # torch absent or broken: say so, the benchmark row reports it
        print(json.dumps({"error": f"PyTorch absent ({type(e).__name__}); scripts/setup-torch installs it"}))
        return 3
    torch.set_num_threads(a.threads)
    if masked:
        return run_masked(a, torch, F)
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

    return report(a, torch, q, k, v, do, lambda: sdpa(q, k, v, **kw))


def report(a, torch, q, k, v, do, fwd_graph):
    """Times a.passes of fwd_graph (q, k, v requiring grad) and prints the JSON line."""

    def fwd():
        with torch.no_grad():
            return fwd_graph()

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
    for p in filter(None, a.passes.split(",")):
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


def run_masked(a, torch, F):
    dt = torch.float32 if a.dtype == "fp32" else torch.bfloat16
    g = torch.Generator().manual_seed(0)
    lens = [int(x) for x in a.seqlens.split(",")] if a.seqlens else [a.seq] * a.batch
    left, right = a.window_left, (0 if a.causal else a.window_right)
    group = a.heads // a.kv_heads
    scale = a.head_dim ** -0.5

    def visible(i, j):  # i, j: index tensors of one sequence (n_q == n_k: the diagonal is j == i)
        ok = (j >= 0) & (i >= 0)  # out of place: flex_attention's mask_mod is traced through vmap
        if left >= 0:
            ok = ok & (j >= i - left)
        if right >= 0:
            ok = ok & (j <= i + right)
        return ok

    if a.backend == "flex":
        # Packed documents, one batch row: the layout flex_attention's document masking uses.
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        except Exception as e:
            print(json.dumps({"error": f"flex_attention absent in torch {torch.__version__} ({type(e).__name__})"}))
            return 3
        total = sum(lens)
        doc = torch.cat([torch.full((n,), x, dtype=torch.int32) for x, n in enumerate(lens)])

        def mask_mod(b, h, qi, kj):
            return (doc[qi] == doc[kj]) & visible(qi, kj)

        def score_mod(s, b, h, qi, kj):
            return a.softcap * torch.tanh(s / a.softcap)

        block = create_block_mask(mask_mod, 1, None, total, total, device="cpu")
        shape_q, shape_k = (1, a.heads, total, a.head_dim), (1, a.kv_heads, total, a.head_dim)
        q, k, v, do = (torch.randn(s, generator=g).to(dt) for s in (shape_q, shape_k, shape_k, shape_q))
        # FlexAttention has no backward on CPU (torch 2.15 refuses it): its forward only.
        a.passes = ",".join(p for p in a.passes.split(",") if p == "forward")
        flex = torch.compile(flex_attention, dynamic=False)
        kw = {"block_mask": block, "scale": scale, "enable_gqa": group > 1}
        if a.softcap > 0:
            kw["score_mod"] = score_mod
        return report(a, torch, q, k, v, do, lambda: flex(q, k, v, **kw))

    # Padded: every sequence in a row of the longest one's length.
    B, L = len(lens), max(lens)
    idx = torch.arange(L)
    mask = torch.zeros((B, 1, L, L), dtype=torch.bool)
    for b, n in enumerate(lens):
        real = (idx[:, None] < n) & (idx[None, :] < n) & visible(idx[:, None], idx[None, :])
        mask[b, 0] = real
        mask[b, 0, n:, 0] = True  # a padded query row sees key 0: no empty row, no NaN
    shape_q, shape_k = (B, a.heads, L, a.head_dim), (B, a.kv_heads, L, a.head_dim)
    q, k, v, do = (torch.randn(s, generator=g).to(dt) for s in (shape_q, shape_k, shape_k, shape_q))
    for t in (q, k, v):
        t.requires_grad_(True)
    if a.backend == "flash":
        if a.softcap > 0:
            print(json.dumps({"error": "scaled_dot_product_attention has no softcap"}))
            return 3
        kw = {"attn_mask": mask, "scale": scale}
        if group > 1:
            kw["enable_gqa"] = True
        return report(a, torch, q, k, v, do, lambda: F.scaled_dot_product_attention(q, k, v, **kw))

    def math():
        kk = k.repeat_interleave(group, dim=1) if group > 1 else k
        vv = v.repeat_interleave(group, dim=1) if group > 1 else v
        s = (q @ kk.transpose(-2, -1)) * scale
        if a.softcap > 0:
            s = a.softcap * torch.tanh(s / a.softcap)
        s = s.masked_fill(~mask, float("-inf"))
        return torch.softmax(s, dim=-1) @ vv

    return report(a, torch, q, k, v, do, math)


if __name__ == "__main__":
    sys.exit(main())
