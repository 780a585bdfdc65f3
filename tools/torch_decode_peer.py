#!/usr/bin/env python3
"""PyTorch eager with a KV cache as a peer for `ridge bench decode`: the same CS336 model math as ridge
(pre-norm RMSNorm in fp32 with the config's epsilon, RoPE on adjacent pairs, SwiGLU, GQA, untied head), greedy.

    tools/torch_decode_peer.py (--checkpoint F | --size S [--vocab V]) [--kv-heads K]
        --weights fp32|bf16 --threads T --prompt-len P --batch B --context C --tokens N
        [--phase prefill|decode|both] [--warmup W] [--iters I] [--json]
    tools/torch_decode_peer.py ... --check      # cached logits against full forwards (and ridge's)

Prefill: one prompt of P random ids through the model, K/V written into the cache, logits of the last
position only (what a server needs to pick the first token); tokens/s = P / time.
Decode: B sequences whose caches hold C tokens (one prefill of C random ids, copied into each row:
the bytes each step reads are the same as B distinct prompts'), then N steps of one greedy token per
sequence; tokens/s = B * N / time. The cache is preallocated, [B, kv_heads, C + N, d_head] per layer
for K and for V, in the weights' dtype; attention is F.scaled_dot_product_attention over the filled
part, with the query heads that share a kv head laid out as rows of one (no K/V copy for GQA).
bf16: the whole model in bf16 (as `model.to(torch.bfloat16)` runs it), RMSNorm in fp32.

Each measurement is timed --iters times after --warmup untimed runs; with --json one line each:
  {"peer": "torch", "version": "2.x", "phase": "prefill", "weights": "bf16", "threads": 2, "batch": 1,
   "prompt_len": 512, "tokens_per_s": median, "min_tokens_per_s": ..., "max_tokens_per_s": ...,
   "median_s": ..., "iters": 5}
  {"peer": "torch", ..., "phase": "decode", "batch": 4, "context": 1024, "tokens": 32, "tokens_per_s": ...}
Without --json a line of text each. Exit codes: 0, 1 (--check failed), 2 (bad input, one line),
3 (torch not installed: one line, {"error": ...} with --json).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ridge_checkpoint as rc  # noqa: E402


def build_model(torch, cfg, state, dtype):
    """The model as plain tensors (no nn.Module: eager ops, nothing hidden) in `dtype`."""
    F = torch.nn.functional

    def t(name):
        return torch.from_numpy(state[name].copy()).to(dtype)

    L = cfg["num_layers"]
    w = {"emb": t("token_embeddings.weight"), "norm": t("ln_final.weight").float(), "head": t("lm_head.weight"),
         "layers": []}
    for i in range(L):
        p = f"layers.{i}."
        q, k, v = t(p + "attn.q_proj.weight"), t(p + "attn.k_proj.weight"), t(p + "attn.v_proj.weight")
        w["layers"].append({"ln1": t(p + "ln1.weight").float(), "ln2": t(p + "ln2.weight").float(),
                            "qkv": torch.cat([q, k, v]).contiguous(), "o": t(p + "attn.output_proj.weight"),
                            "w13": torch.cat([t(p + "ffn.w1.weight"), t(p + "ffn.w3.weight")]).contiguous(),
                            "w2": t(p + "ffn.w2.weight")})
    d, h, kv = cfg["d_model"], cfg["num_heads"], cfg["num_kv_heads"]
    dh, f, eps = d // h, cfg["d_ff"], rc.rms_norm_eps(cfg)

    def rmsnorm(x, g):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * g).to(x.dtype)

    class Model:
        config = cfg

        def __init__(self, max_pos):
            inv = cfg["rope_theta"] ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
            ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
            # fp32 angles as ridge computes them (pos * theta^(-2i/dh) in fp32) would differ by an ulp
            # of the angle at long positions; fp64 then rounded is the exact rotation, the better peer.
            self.cos, self.sin = torch.cos(ang).float(), torch.sin(ang).float()

        def rope(self, x, pos0):
            # x [B, T, heads, dh], positions pos0 .. pos0 + T - 1; pairs (2i, 2i+1)
            T = x.shape[1]
            c = self.cos[pos0:pos0 + T, None, :].to(x.dtype)
            s = self.sin[pos0:pos0 + T, None, :].to(x.dtype)
            x0, x1 = x[..., 0::2], x[..., 1::2]
            return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)

        def forward(self, tokens, cache, pos0, all_logits=False):
            """tokens [B, T] at positions pos0.., every sequence the same length; K/V written into
            cache[layer] = (K, V) [B, kv, max, dh] at pos0..pos0+T-1; returns logits [B, T or 1, V]."""
            B, T = tokens.shape
            x = w["emb"][tokens]
            end = pos0 + T
            for li, lw in enumerate(w["layers"]):
                y = rmsnorm(x, lw["ln1"])
                qkv = F.linear(y, lw["qkv"])
                q = self.rope(qkv[..., :d].view(B, T, h, dh), pos0)
                k = self.rope(qkv[..., d:d + kv * dh].view(B, T, kv, dh), pos0)
                v = qkv[..., d + kv * dh:].view(B, T, kv, dh)
                K, V = cache[li]
                K[:, :, pos0:end] = k.transpose(1, 2)
                V[:, :, pos0:end] = v.transpose(1, 2)
                Kc, Vc = K[:, :, :end], V[:, :, :end]
                if T == 1:
                    # one query per sequence sees the whole cache: the h/kv query heads of a kv head
                    # become the rows of one attention, K/V read once
                    o = F.scaled_dot_product_attention(q.view(B, kv, h // kv, dh), Kc, Vc)
                    o = o.reshape(B, 1, d)
                else:
                    qh = q.transpose(1, 2)
                    if pos0 == 0:
                        kw = {"is_causal": True}
                    else:  # a continuation: query i sees keys 0 .. pos0 + i
                        kw = {"attn_mask": torch.ones(T, end, dtype=torch.bool).tril(pos0)}
                    if kv != h:
                        kw["enable_gqa"] = True
                    o = F.scaled_dot_product_attention(qh, Kc, Vc, **kw).transpose(1, 2).reshape(B, T, d)
                x = x + F.linear(o, lw["o"])
                y = rmsnorm(x, lw["ln2"])
                ab = F.linear(y, lw["w13"])
                x = x + F.linear(F.silu(ab[..., :f]) * ab[..., f:], lw["w2"])
            if not all_logits:
                x = x[:, -1:]
            return F.linear(rmsnorm(x, w["norm"]), w["head"])

        def new_cache(self, B, n):
            return [(torch.zeros(B, kv, n, dh, dtype=dtype), torch.zeros(B, kv, n, dh, dtype=dtype)) for _ in range(L)]

    return Model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="a ridge checkpoint or weights-only safetensors state_dict")
    src.add_argument("--size", help="a size of bench/shapes/model-sizes.json, random weights (CS336 init)")
    ap.add_argument("--vocab", type=int, default=10000, help="vocab_size for --size")
    ap.add_argument("--heads", type=int, help="num_heads of a weights-only --checkpoint")
    ap.add_argument("--kv-heads", type=int, help="num_kv_heads (for --size; default num_heads)")
    ap.add_argument("--weights", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=128, help="tokens in each sequence's cache before decoding")
    ap.add_argument("--tokens", type=int, default=32, help="decode steps (one token per sequence each)")
    ap.add_argument("--phase", choices=["prefill", "decode", "both"], default="both")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check", action="store_true",
                    help="compare cached prefill/decode logits with full forwards and ridge's Python forward")
    ap.add_argument("--fill", choices=["prefill", "random"], default="prefill",
                    help="decode: the context's cache from a real prefill copied into every sequence, or random "
                    "values (the same step cost without the prefill's time)")
    ap.add_argument("--cases", type=rc.parse_cases, help="JSON list of {phase, batch, context, prompt}: measure each in "
                    "turn, print {\"results\": [...]} (what `ridge bench decode` runs)")
    a = ap.parse_args()
    if a.cases is not None:  # the model and the memory check cover the largest case
        a.prompt_len = max([c.get("prompt", 1) or 1 for c in a.cases] + [1])
        a.batch = max([c.get("batch", 1) for c in a.cases] + [1])
        a.context = max([c.get("context", 1) or 1 for c in a.cases] + [1])
    for k in ("threads", "prompt_len", "batch", "context", "tokens", "iters", "vocab"):
        if getattr(a, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be >= 1, got {getattr(a, k)}")
    if a.warmup < 0:
        ap.error(f"--warmup must be >= 0, got {a.warmup}")
    try:
        import numpy as np
        import torch
    except Exception as e:  # torch absent or broken: the bench's column says so
        msg = f"PyTorch not installed ({type(e).__name__}); scripts/setup-peers torch installs it"
        print(json.dumps({"error": msg}) if a.json else "torch_decode_peer: " + msg)
        return 3
    torch.set_num_threads(a.threads)
    try:
        if a.checkpoint:
            cfg, state = rc.load(a.checkpoint, heads=a.heads, kv_heads=a.kv_heads)
        else:
            need = max(a.prompt_len, a.context + a.tokens)
            cfg = rc.preset(a.size, a.vocab, max(need, 128), a.kv_heads)
            state = random_state(np, cfg, a.seed)
    except rc.CheckpointError as e:
        print(f"torch_decode_peer: {e}", file=sys.stderr)
        return 2
    dtype = torch.float32 if a.weights == "fp32" else torch.bfloat16
    esize = 4 if a.weights == "fp32" else 2
    need = rc.param_count(cfg) * esize + rc.kv_cache_bytes(cfg, a.batch, a.context + a.tokens, esize)
    have = rc.available_memory()
    if not a.check and have is not None and need > 0.9 * have:
        msg = (f"the {a.weights} weights and a KV cache of batch {a.batch} x {a.context + a.tokens} positions need "
               f"{need / 2**30:.2f} GiB; {have / 2**30:.2f} GiB is available")
        print(json.dumps({"error": msg}) if a.json else "torch_decode_peer: " + msg)
        return 2
    max_pos = max(a.prompt_len, a.context + a.tokens, cfg["context_length"])
    Model = build_model(torch, cfg, state, dtype)
    m = Model(max_pos)
    if not a.check:
        del state
    gen = np.random.default_rng(a.seed)

    def ids(*shape):
        return torch.from_numpy(gen.integers(0, cfg["vocab_size"], size=shape, dtype=np.int64))

    if a.check:
        return check(torch, m, cfg, state, a, ids, dtype)

    if a.cases is not None:
        # Several cases in one process (`ridge bench decode`), one result each, in order, on the last line.
        results = []
        for c in a.cases:
            a.phase, a.batch = c["phase"], c.get("batch", 1)
            a.prompt_len, a.context = c.get("prompt", 1) or 1, c.get("context", 1) or 1
            try:
                results.append(measure(torch, m, a, ids)[0])
            except (RuntimeError, MemoryError) as e:
                results.append({"error": f"{type(e).__name__}: {str(e)[:200]}"})
        print(json.dumps({"results": results}), flush=True)
        return 0
    out = measure(torch, m, a, ids)
    for r in out:
        if a.json:
            print(json.dumps(r), flush=True)
        else:
            what = (f"prompt {r['prompt_len']}" if r["phase"] == "prefill"
                    else f"batch {r['batch']}, context {r['context']}, {r['tokens']} tokens")
            print(f"torch {r['version']} {r['phase']} ({a.weights}, {what}, {a.threads} threads): "
                  f"{r['tokens_per_s']:.1f} tokens/s (median of {r['iters']}; {r['min_tokens_per_s']:.1f} .. "
                  f"{r['max_tokens_per_s']:.1f})")
    return 0


def measure(torch, m, a, ids):
    """The measurements a.phase asks for (one dict each)."""
    out = []
    with torch.inference_mode():
        if a.phase in ("prefill", "both"):
            prompt = ids(1, a.prompt_len)
            cache = m.new_cache(1, a.prompt_len)

            def prefill():
                m.forward(prompt, cache, 0).argmax(-1)

            ts = timed(prefill, a.warmup, a.iters)
            out.append(record(torch, a, "prefill", [a.prompt_len / t for t in ts], ts,
                              batch=1, prompt_len=a.prompt_len))
        if a.phase in ("decode", "both"):
            n = a.context + a.tokens
            cache = m.new_cache(a.batch, n)
            if a.fill == "random":
                # Uniform values in [-1, 1) stand for the context's keys and values: a decode step costs the
                # same whatever they hold, and the prefill of a long context is not what this row times.
                for K, V in cache:
                    K[:, :, :a.context].uniform_(-1, 1)
                    V[:, :, :a.context].uniform_(-1, 1)
                start = ids(a.batch, 1)
            else:
                one = m.new_cache(1, a.context)
                first = m.forward(ids(1, a.context), one, 0).argmax(-1)  # [1, 1]
                for (K, V), (k1, v1) in zip(cache, one):
                    K[:, :, :a.context] = k1
                    V[:, :, :a.context] = v1
                del one
                start = first.expand(a.batch, 1).contiguous()

            def decode():
                tok = start
                for s in range(a.tokens):
                    tok = m.forward(tok, cache, a.context + s).argmax(-1)

            ts = timed(decode, a.warmup, a.iters)
            out.append(record(torch, a, "decode", [a.batch * a.tokens / t for t in ts], ts,
                              batch=a.batch, context=a.context, tokens=a.tokens))
    return out


def random_state(np, cfg, seed):
    """CS336's initialisation (truncated normal linears with std sqrt(2/(in+out)) cut at 3 std,
    embedding N(0,1) cut at 3, norms 1) in NumPy; only the sizes matter for timing."""
    g = np.random.default_rng(seed)
    out = {}
    for name, shape in rc.expected_shapes(cfg).items():
        if len(shape) == 1:
            out[name] = np.ones(shape, np.float32)
            continue
        std = 1.0 if name == "token_embeddings.weight" else math.sqrt(2.0 / (shape[0] + shape[1]))
        x = g.standard_normal(shape, dtype=np.float32)
        bad = np.abs(x) > 3
        while bad.any():  # redraw the tails: a truncated normal
            x[bad] = g.standard_normal(int(bad.sum()), dtype=np.float32)
            bad = np.abs(x) > 3
        out[name] = x * np.float32(std)
    return out


def timed(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return ts


def record(torch, a, phase, rates, ts, **shape):
    r = {"peer": "torch", "version": torch.__version__, "phase": phase, "weights": a.weights, "threads": a.threads}
    r.update(shape)
    r.update({"tokens_per_s": statistics.median(rates), "min_tokens_per_s": min(rates),
              "max_tokens_per_s": max(rates), "median_s": statistics.median(ts), "iters": len(ts)})
    return r


def check(torch, m, cfg, state, a, ids, dtype):
    """The cache path against the full forward of the same model (prefill of P, then --tokens greedy
    steps at batch B, each step's logits against a full forward over the whole sequence so far), and
    the first logits against ridge's Python forward (fp32 weights) when ridge is importable."""
    P, N, B = a.prompt_len, a.tokens, a.batch
    tol = 1e-4 if dtype == torch.float32 else None
    worst, ok = 0.0, True
    with torch.inference_mode():
        prompt = ids(B, P)
        cache = m.new_cache(B, P + N)
        lg = m.forward(prompt, cache, 0, all_logits=True).float()
        seq = prompt
        tok = lg[:, -1:].argmax(-1)
        for s in range(N):
            seq = torch.cat([seq, tok], dim=1)
            step = m.forward(tok, cache, P + s).float()
            full = m.forward(seq, m.new_cache(B, P + s + 1), 0).float()[:, -1:]
            worst = max(worst, rel(step, full))
            tok = step.argmax(-1)
        if tol is not None:
            ok &= worst <= tol
        line = f"cache vs full forward ({a.weights}, batch {B}, prompt {P}, {N} steps): max |diff| / max |logit| {worst:.3g}"
        print(line + (f" (tolerance {tol:g})" if tol else " (bf16: reported)"))
        try:
            import ridge.model as rm
        except Exception as e:
            print(f"ridge's Python package is not importable ({type(e).__name__}); scripts/setup-python builds it")
            return 0 if ok else 1
        rcfg = {k: cfg[k] for k in rc.CONFIG_FIELDS}
        rcfg["rope_theta"] = cfg["rope_theta"]
        if cfg["num_kv_heads"] != cfg["num_heads"]:
            rcfg["num_kv_heads"] = cfg["num_kv_heads"]
        try:
            ridge_m = rm.TransformerLM(rcfg, seq=min(P, cfg["context_length"]))
            ridge_m.load_state_dict(state)
        except Exception as e:  # e.g. a GQA config before ridge's Python package takes num_kv_heads
            print(f"ridge's Python package cannot run this config ({e}); ridge comparison skipped")
            return 0 if ok else 1
        ref = torch.from_numpy(ridge_m(prompt[:, :min(P, cfg["context_length"])].int().numpy()))
        mine = lg[:, :ref.shape[1]]
        d = rel(mine, ref)
        lim = 1e-4 if dtype == torch.float32 else 1e-3
        dif = calc_diff(mine.double(), ref.double())
        good = (d <= lim) if dtype == torch.float32 else (dif < lim)
        print(f"prefill logits vs ridge's Python forward (fp32): max |diff| / max |logit| {d:.3g}, "
              f"calc_diff {dif:.3g} ({'ok' if good else 'FAIL'}; "
              f"{'relative' if dtype == torch.float32 else 'calc_diff'} tolerance {lim:g})")
        ok &= good
    return 0 if ok else 1


def rel(x, ref):
    return float((x - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def calc_diff(x, y):
    """DeepGEMM's similarity: 1 - 2 sum(x y) / sum(x^2 + y^2), 0 for equal tensors."""
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


if __name__ == "__main__":
    sys.exit(main())
