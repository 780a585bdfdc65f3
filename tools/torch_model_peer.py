#!/usr/bin/env python3
"""PyTorch peer for `ridge bench model`: the same CS336 Transformer LM, weights and batch.

ridge writes the weights (state_dict names) and the batch (batch.inputs, batch.targets) to a
safetensors file; this script loads them into the PyTorch model of tools/make_model_reference.py
(attention through F.scaled_dot_product_attention for --attention flash, the explicit math for
math), runs the pass with the same threads and precision (torch.autocast("cpu", bf16|fp16)), eager
and, unless --no-compile, torch.compile, and prints one JSON line:
  {"torch": "2.x", "eager": {"median_ms", "mean_ms", "std_ms"}, "compile": {...}}
or {"error": "..."} (exit 3) without torch. A torch.compile failure is reported in "compile_error".

A Mixture-of-Experts config (--experts > 0, issue 40) runs the reference's MoE block, the Hugging Face
Mixtral form: router in fp32, top-k, then a Python loop over the experts, each gathering its tokens and
running its SwiGLU (three GEMMs) and index_add-ing the weighted result back: PyTorch eager's per-expert
loop. The loss adds the auxiliary loss under --balance aux; under --balance bias the router bias is read
from the weights file (layers.L.ffn.router.bias) and not updated (ridge's update is E additions per
layer, nothing to time).
"""
import argparse
import json
import os
import statistics
import struct
import sys
import time


def read_safetensors(path, torch):
    dtypes = {"F32": torch.float32, "I32": torch.int32, "BF16": torch.bfloat16, "F16": torch.float16}
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = memoryview(data)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(body[a:b]), dtype=dtypes[info["dtype"]])
        out[name] = t.reshape(info["shape"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    for k in ("vocab", "d-model", "d-ff", "layers", "heads", "batch", "seq"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--kv-heads", type=int, default=None, help="key/value heads (default: --heads)")
    ap.add_argument("--rope-theta", type=float, default=None, help="default: ridge's (bench/shapes/model-sizes.json)")
    ap.add_argument("--experts", type=int, default=0, help="MoE: routed experts per MoE layer (0: dense)")
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--shared-experts", type=int, default=0)
    ap.add_argument("--d-expert", type=int, default=0, help="0: --d-ff")
    ap.add_argument("--moe-layers", default="all", help="'all' or a comma list of layer indices")
    ap.add_argument("--router", choices=["softmax", "sigmoid"], default="softmax")
    ap.add_argument("--balance", choices=["aux", "bias"], default="aux")
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--pass", dest="pass_", choices=["forward", "forward_backward", "step"], default="step")
    ap.add_argument("--attention", choices=["flash", "math"], default="flash")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # torch absent or broken: the benchmark row says so
        print(json.dumps({"error": f"PyTorch absent ({type(e).__name__})"}))
        return 3
    torch.set_num_threads(a.threads)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_model_reference as ref

    # scaled_dot_product_attention shares kv heads itself from torch 2.5 (enable_gqa).
    native_gqa = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)
    if a.attention == "flash":
        def attn_forward(self, x):
            b, t, d = x.shape
            h, kv, dh = self.heads, self.kv_heads, d // self.heads

            def split(y, n):
                return y.view(b, t, n, dh).transpose(1, 2)

            q, k, v = split(self.q_proj(x), h), split(self.k_proj(x), kv), split(self.v_proj(x), kv)
            q, k = ref.rope(q, self.theta), ref.rope(k, self.theta)
            if kv == h:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            elif native_gqa:  # each kv head serves h // kv consecutive query heads, read in place
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                o = F.scaled_dot_product_attention(q, k.repeat_interleave(h // kv, dim=1),
                                                   v.repeat_interleave(h // kv, dim=1), is_causal=True)
            return self.output_proj(o.transpose(1, 2).reshape(b, t, d))

        ref.Attention.forward = attn_forward

    cfg = {"vocab_size": a.vocab, "context_length": a.seq, "d_model": a.d_model, "num_layers": a.layers,
           "num_heads": a.heads, "num_kv_heads": a.kv_heads or a.heads, "d_ff": a.d_ff,
           "rope_theta": ref.rc.sizes_table()["rope_theta"] if a.rope_theta is None else a.rope_theta}
    if a.experts > 0:
        cfg.update(num_experts=a.experts, top_k=a.top_k, num_shared_experts=a.shared_experts,
                   d_expert=a.d_expert, router=a.router, balance=a.balance, aux_loss_coef=a.aux_coef,
                   moe_layers=[] if a.moe_layers == "all" else [int(x) for x in a.moe_layers.split(",")])
    tensors = read_safetensors(a.weights, torch)
    inputs = tensors.pop("batch.inputs").long()
    targets = tensors.pop("batch.targets").long()
    amp = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]

    def build():
        m = ref.TransformerLM(cfg)
        m.load_state_dict(tensors, strict=True)
        return m

    def timed(model, min_warmup=0):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)

        def loss_of():
            if amp is None:
                return ref.cross_entropy(model(inputs), targets) + model.aux_loss()
            with torch.autocast("cpu", dtype=amp):
                return ref.cross_entropy(model(inputs), targets) + model.aux_loss()

        def one():
            if a.pass_ == "forward":
                with torch.no_grad():
                    loss_of()
                return
            opt.zero_grad(set_to_none=False)
            loss_of().backward()
            if a.pass_ == "step":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()

        for _ in range(max(min_warmup, a.warmup)):  # torch.compile compiles in its first call
            one()
        ts = []
        for _ in range(max(1, a.iters)):
            t0 = time.perf_counter()
            one()
            ts.append(time.perf_counter() - t0)
        ms = [t * 1e3 for t in ts]
        return {"median_ms": statistics.median(ms), "mean_ms": statistics.mean(ms),
                "std_ms": statistics.stdev(ms) if len(ms) > 1 else 0.0}

    out = {"torch": torch.__version__, "eager": timed(build())}
    if not a.no_compile:
        try:
            out["compile"] = timed(torch.compile(build()), min_warmup=1)
        except Exception as e:  # no compiler, an unsupported op: eager still stands
            out["compile_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
