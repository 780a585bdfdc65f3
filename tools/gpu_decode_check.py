#!/usr/bin/env python3
"""Holds `ridge roofline decode` against decoding on a real GPU (issue 22, item 7: "show it for h100").

On a machine with torch + CUDA: the CS336 model (pre-norm RMSNorm, RoPE on adjacent pairs, SwiGLU,
untied head) in bf16 with random weights and a preallocated bf16 KV cache, one decode step per
sequence of the batch at a context, timed with CUDA events, eager and replayed as a CUDA graph (a
decode step is hundreds of small kernels: eager PyTorch is launch-bound, the graph shows what the
memory allows). The predictions are `ridge roofline decode ... --json` computed beforehand (the
ridge binary need not run on the GPU machine): --predictions FILE holds {"SIZE B C": tokens_per_s}.
Prints one JSON line per case and a table: measured tokens/s, the bound, measured / bound.
Exits 3 without CUDA.

    tools/gpu_decode_check.py --write-predictions P.json [--ridge build/release/ridge] [--hw h100]  # here
    tools/gpu_decode_check.py --predictions P.json [--out FILE]                                    # on the GPU"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ridge_checkpoint as rc  # noqa: E402  (the sizes and defaults of bench/shapes/model-sizes.json)

# The dense CS336 sizes of bench/shapes/model-sizes.json from small up (tiny is too small to say anything here;
# the moe- sizes need the MoE block this check does not build).
SIZES = [name for name, s in rc.sizes_table()["sizes"].items() if name != "tiny" and "num_experts" not in s]


def build(torch, size, vocab, ctx_max, batch):
    cfg = rc.preset(size, vocab, ctx_max)
    D, F, L, H = cfg["d_model"], cfg["d_ff"], cfg["num_layers"], cfg["num_heads"]
    eps, theta = rc.rms_norm_eps(cfg), cfg["rope_theta"]
    dh = D // H
    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def w(o, i):
        return (torch.randn(o, i, device=dev, generator=g) / math.sqrt(i)).to(dt)

    layers = [dict(qkv=w(3 * D, D), o=w(D, D), w13=w(2 * F, D), w2=w(D, F)) for _ in range(L)]
    emb, head = w(vocab, D), w(vocab, D)
    K = [torch.randn(batch, H, ctx_max, dh, device=dev, dtype=dt) for _ in range(L)]
    V = [torch.randn(batch, H, ctx_max, dh, device=dev, dtype=dt) for _ in range(L)]
    inv = theta ** (-torch.arange(0, dh, 2, device=dev, dtype=torch.float32) / dh)

    def rms(x):
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(dt)

    def rope(x, pos):  # x [B, H, 1, dh], adjacent pairs
        ang = pos.float()[:, None, None, None] * inv
        c, s = torch.cos(ang), torch.sin(ang)
        x0, x1 = x[..., 0::2].float(), x[..., 1::2].float()
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2).to(dt)

    def step(tok, pos, ctx):  # one token per sequence at position pos (the cache holds ctx keys after it)
        x = emb[tok]  # [B, D]
        B = x.shape[0]
        for l, p in enumerate(layers):
            q, k, v = (rms(x) @ p["qkv"].T).split(D, -1)
            q = rope(q.view(B, H, 1, dh), pos)
            k = rope(k.view(B, H, 1, dh), pos)
            K[l][:, :, ctx - 1:ctx] = k
            V[l][:, :, ctx - 1:ctx] = v.view(B, H, 1, dh)
            o = torch.nn.functional.scaled_dot_product_attention(q, K[l][:, :, :ctx], V[l][:, :, :ctx])
            x = x + o.reshape(B, D) @ p["o"].T
            a, b = (rms(x) @ p["w13"].T).split(F, -1)
            x = x + (torch.nn.functional.silu(a) * b) @ p["w2"].T
        return rms(x) @ head.T

    return step


def time_ms(torch, fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / iters


CASES = [(size, B, C) for size in SIZES for B, C in [(1, 1024), (16, 1024), (64, 1024), (1, 4096)]
         if not (size in ("xl", "2.7B") and B == 64)]


def write_predictions(path, ridge, hw):
    import subprocess
    pred = {}
    for size, B, C in CASES:
        out = subprocess.run([ridge, "roofline", "decode", "--size", size, "--vocab", "10000", "--context", "4096",
                              "--batch", str(B), "--context-length", str(C), "--weights", "bf16", "--embedding",
                              "bf16", "--hw", hw, "--json"], capture_output=True, text=True, check=True).stdout
        pred[f"{size} {B} {C}"] = json.loads(out)["decode"]["tokens_per_s"]
    with open(path, "w") as f:
        json.dump(pred, f, indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--predictions")
    ap.add_argument("--write-predictions", metavar="FILE", help="compute the bounds with --ridge and stop")
    ap.add_argument("--ridge", default="build/release/ridge")
    ap.add_argument("--hw", default="h100")
    ap.add_argument("--out", help="write the JSON lines here too")
    a = ap.parse_args()
    if a.write_predictions:
        return write_predictions(a.write_predictions, a.ridge, a.hw)
    if not a.predictions:
        ap.error("give --predictions FILE (written by --write-predictions) or --write-predictions FILE")
    from gpu_model_check import cuda_torch

    torch = cuda_torch("gpu_decode_check")
    if torch is None:
        return 3
    pred = json.load(open(a.predictions))
    out = []
    with torch.inference_mode():
        for key, bound in pred.items():
            size, B, C = key.split()
            B, C = int(B), int(C)
            step = build(torch, size, 10000, C, B)
            tok = torch.zeros(B, dtype=torch.long, device="cuda")
            pos = torch.full((B,), C - 1, dtype=torch.long, device="cuda")
            eager = time_ms(torch, lambda: step(tok, pos, C))
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                step(tok, pos, C)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(g):
                step(tok, pos, C)
            graph = time_ms(torch, g.replay)
            r = {"size": size, "batch": B, "context": C, "device": torch.cuda.get_device_name(),
                 "bound_tokens_per_s": bound, "eager_tokens_per_s": B / eager * 1e3,
                 "graph_tokens_per_s": B / graph * 1e3, "graph_vs_bound": B / graph * 1e3 / bound}
            out.append(r)
            print(json.dumps(r), flush=True)
            del step, g
            torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in out)
    print(f"{'size':>6} {'B':>3} {'ctx':>5} {'bound tok/s':>12} {'graph tok/s':>12} {'eager tok/s':>12} {'graph/bound':>11}")
    for r in out:
        print(f"{r['size']:>6} {r['batch']:>3} {r['context']:>5} {r['bound_tokens_per_s']:>12.0f} "
              f"{r['graph_tokens_per_s']:>12.0f} {r['eager_tokens_per_s']:>12.0f} {r['graph_vs_bound']:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
