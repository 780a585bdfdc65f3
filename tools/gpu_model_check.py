#!/usr/bin/env python3
"""Holds the analyzer's GPU predictions against a real GPU (issue 13, "On a GPU").

On a machine with torch + CUDA (an H100), end to end:
  1. the standard GEMM shapes (bench/shapes/gemm-shapes.json, dense and decode) in bf16, and in fp8
     through torch._scaled_mm where it runs, timed with CUDA events;
  2. the CS336 model (tools/make_model_reference.py, attention through scaled_dot_product_attention)
     in bf16 autocast, forward and forward+backward, every size at context 512 that fits;
and prints predicted vs measured with the error: the prediction is `ridge roofline ... --hw h100
--json` (the bound, T_lower), run here through the ridge binary (--ridge, default build/release/ridge),
so the ridge build must be present on the GPU machine (the repository's build folder carried over).
Writes the table as JSON lines to --out too (for docs/). Prints a note and exits 3 without CUDA.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIZES = ["tiny", "small", "medium", "large", "xl", "2.7B"]


def cuda_torch(tool):
    """torch when it is installed and sees a CUDA device; else None, after one line saying which is missing
    (the tools' exit code 3)."""
    try:
        import torch
    except Exception:
        print(f"{tool}: PyTorch is not installed")
        return None
    if not torch.cuda.is_available():
        print(f"{tool}: no CUDA device; nothing to check here")
        return None
    return torch


def ridge_json(ridge, args):
    out = subprocess.run([ridge] + args + ["--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def cuda_time_ms(torch, fn, warmup=5, iters=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def row(kind, label, pred_ms, meas_ms, rows):
    err = 100.0 * (meas_ms - pred_ms) / pred_ms
    r = {"kind": kind, "case": label, "bound_ms": pred_ms, "measured_ms": meas_ms,
         "measured_over_bound": meas_ms / pred_ms, "error_pct": err}
    rows.append(r)
    print(f"{kind:<10} {label:<44} bound {pred_ms:9.4f} ms  measured {meas_ms:9.4f} ms  "
          f"({meas_ms / pred_ms:5.2f}x the bound)", flush=True)


def gemms(torch, ridge, rows, hw):
    with open(os.path.join(ROOT, "bench", "shapes", "gemm-shapes.json")) as f:
        spec = json.load(f)
    shapes = []
    for group in ("dense", "decode"):
        for s in spec.get(group, []):
            if isinstance(s, dict) and all(k in s for k in ("m", "n", "k")):
                shapes.append((group, s["m"], s["n"], s["k"]))
    for group, m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        meas = cuda_time_ms(torch, lambda: a @ b.t())
        j = ridge_json(ridge, ["roofline", "matmul", "--b", str(m), "--d", str(k), "--f", str(n), "--dtype", "bf16",
                               "--hw", hw])
        row("gemm bf16", f"{group} m={m} n={n} k={k}", j["bounds"][0]["t_lower_s"] * 1e3, meas, rows)
        try:
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.to(torch.float8_e4m3fn)
            one = torch.tensor(1.0, device="cuda")
            meas8 = cuda_time_ms(torch, lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                                                 out_dtype=torch.bfloat16))
            j8 = ridge_json(ridge, ["roofline", "fp8-gemm", "--m", str(m), "--n", str(n), "--k", str(k), "--hw", hw])
            row("gemm fp8", f"{group} m={m} n={n} k={k}", j8["bounds"][0]["t_lower_s"] * 1e3, meas8, rows)
        except Exception as e:  # no fp8 on this GPU or this torch
            print(f"gemm fp8   {group} m={m} n={n} k={k}: skipped ({type(e).__name__})")


def models(torch, ridge, rows, hw, ctx, batch, vocab):
    sys.path.insert(0, HERE)
    import make_model_reference as ref
    import torch.nn.functional as F

    def attn_forward(self, x):
        b, t, d = x.shape
        h, dh = self.heads, d // self.heads
        q, k, v = (y.view(b, t, h, dh).transpose(1, 2) for y in (self.q_proj(x), self.k_proj(x), self.v_proj(x)))
        q, k = ref.rope(q, self.theta), ref.rope(k, self.theta)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.output_proj(o.transpose(1, 2).reshape(b, t, d))

    ref.Attention.forward = attn_forward
    with open(os.path.join(ROOT, "bench", "shapes", "model-sizes.json")) as f:
        sizes = json.load(f)
    table = sizes.get("sizes", sizes)
    for name in SIZES:
        s = table.get(name) if isinstance(table, dict) else None
        if s is None:
            continue
        cfg = {"vocab_size": vocab, "context_length": ctx, "d_model": s["d_model"], "num_layers": s["num_layers"],
               "num_heads": s["num_heads"], "d_ff": s["d_ff"], "rope_theta": float(sizes["rope_theta"])}
        try:
            model = ref.TransformerLM(cfg).cuda()
            x = torch.randint(0, vocab, (batch, ctx), device="cuda")
            y = torch.randint(0, vocab, (batch, ctx), device="cuda")

            def fwd():
                with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                    ref.cross_entropy(model(x), y)

            def fwd_bwd():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = ref.cross_entropy(model(x), y)
                loss.backward()

            t_f = cuda_time_ms(torch, fwd, 3, 10)
            t_fb = cuda_time_ms(torch, fwd_bwd, 3, 10)
        except torch.cuda.OutOfMemoryError:
            print(f"model     {name}: does not fit at batch {batch} x context {ctx}")
            torch.cuda.empty_cache()
            continue
        j = ridge_json(ridge, ["roofline", "model", "--size", name, "--context", str(ctx), "--batch", str(batch),
                               "--vocab", str(vocab), "--precision", "bf16", "--hw", hw])
        f_ms = j["passes"]["forward"]["t_lower_s"] * 1e3
        b_ms = j["passes"]["backward"]["t_lower_s"] * 1e3
        label = f"{name} ctx={ctx} batch={batch}"
        row("model fwd", label, f_ms, t_f, rows)
        row("model f+b", label, f_ms + b_ms, t_fb, rows)
        mfu = j["model_flops"] / (t_fb * 1e-3) / 989e12
        print(f"          {label}: forward+backward at {100 * mfu:.1f}% of the H100's dense bf16 peak")
        del model
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ridge", default=os.path.join(ROOT, "build", "release", "ridge"))
    ap.add_argument("--hw", default="h100")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--out", default="gpu_model_check.jsonl")
    ap.add_argument("--skip-gemm", action="store_true")
    ap.add_argument("--skip-model", action="store_true")
    a = ap.parse_args()
    torch = cuda_torch("gpu_model_check")
    if torch is None:
        return 3
    if not os.access(a.ridge, os.X_OK):
        print(f"gpu_model_check: no ridge binary at {a.ridge} (build it, or pass --ridge)")
        return 3
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; predictions: ridge --hw {a.hw}")
    rows = []
    if not a.skip_gemm:
        gemms(torch, a.ridge, rows, a.hw)
    if not a.skip_model:
        models(torch, a.ridge, rows, a.hw, a.context, a.batch, a.vocab)
    with open(a.out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    if rows:
        ratios = [r["measured_over_bound"] for r in rows]
        print(f"{len(rows)} cases; measured / bound: median {statistics.median(ratios):.2f}x, "
              f"min {min(ratios):.2f}x, max {max(ratios):.2f}x -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
