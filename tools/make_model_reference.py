#!/usr/bin/env python3
"""Reference tensors for ridge's Transformer LM (the CS336 "basics" model), llm.c style.

Builds the model in plain PyTorch, runs one fp32 forward/backward, the same under bf16 autocast, and a
10-step AdamW trajectory, and writes everything to one safetensors file that the C++ tests read:

    python3 tools/make_model_reference.py [-o tests/data/model_tiny_ref.safetensors]

With --gqa it writes the grouped-query attention cases instead (heads 4 with 2 kv heads and with 1, as
Llama shares them: query head h reads kv head h // (heads / kv_heads)), each one fp32 and one bf16
autocast forward/backward, to tests/data/model_gqa_ref.safetensors:

    python3 tools/make_model_reference.py --gqa [-o tests/data/model_gqa_ref.safetensors]

With --moe it writes the Mixture-of-Experts cases (issue 40), each one fp32 and one bf16 autocast
forward/backward of a model whose feed-forward is an MoE block in chosen layers (the tensor names of
docs/model.md: ffn.router.weight [E, D], ffn.experts.w1/.w3 [E, De, D], .w2 [E, D, De], ffn.shared.*,
ffn.router.bias [E]), to tests/data/model_moe_ref.safetensors:

    python3 tools/make_model_reference.py --moe [-o tests/data/model_moe_ref.safetensors]

Needs only PyTorch (no numpy, no safetensors package: the file is written by hand). The tests never run
this script; they read the committed file. Deterministic on CPU: re-running it gives the same bytes for a
given PyTorch version and CPU (the metadata records the version).
"""

import argparse
import json
import math
import os
import struct
import sys

import torch

import ridge_checkpoint as rc  # the defaults of a config (bench/shapes/model-sizes.json); NumPy not needed

CONFIG = {
    "vocab_size": 256,
    "context_length": 16,
    "d_model": 64,
    "num_layers": 2,
    "num_heads": 4,
    "d_ff": 160,
    "rope_theta": 10000.0,
}
BATCH = 2
TRAIN = {
    "steps": 10,
    "lr_max": 1e-2,
    "lr_min": 1e-3,
    "warmup_iters": 3,
    "cosine_cycle_iters": 10,
    "betas": [0.9, 0.95],
    "eps": 1e-8,
    "weight_decay": 0.1,
    "max_grad_norm": 1.0,
    "clip_eps": 1e-6,
}
# The grouped-query cases: CONFIG with a smaller vocabulary and feed-forward (the file stays small) and
# num_kv_heads below num_heads; each case's tensors are named "<case>.<name>".
# The MoE cases (issue 40): a softmax-gated block in every layer balanced by the auxiliary loss (Mixtral as
# Hugging Face computes it), and a sigmoid-gated one with a shared expert and the auxiliary-loss-free bias
# in layer 1 only (DeepSeek-V3's form; layer 0 stays dense). Each case's tensors are "<case>.<name>".
MOE_CASES = {
    "softmax_aux": dict(CONFIG, vocab_size=64, d_ff=96, num_experts=4, top_k=2, num_shared_experts=0, d_expert=48,
                        router="softmax", balance="aux", aux_loss_coef=0.05, bias_update_speed=0.001),
    "sigmoid_bias": dict(CONFIG, vocab_size=64, d_ff=96, num_experts=6, top_k=3, num_shared_experts=1, d_expert=32,
                         moe_layers=[1], router="sigmoid", balance="bias", aux_loss_coef=0.01,
                         bias_update_speed=0.001),
}
GQA_CASES = {"kv2": dict(CONFIG, vocab_size=64, d_ff=96, num_kv_heads=2),
             "kv1": dict(CONFIG, vocab_size=64, d_ff=96, num_kv_heads=1)}


# ---- the model ---------------------------------------------------------------------------------------

def trunc_normal(shape, std):
    w = torch.empty(shape)
    torch.nn.init.trunc_normal_(w, mean=0.0, std=std, a=-3.0 * std, b=3.0 * std)
    return w


class Linear(torch.nn.Module):
    """y = x W^T, W [d_out, d_in], no bias."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight = torch.nn.Parameter(trunc_normal((d_out, d_in), math.sqrt(2.0 / (d_in + d_out))))

    def forward(self, x):
        return torch.matmul(x, self.weight.t())


class Embedding(torch.nn.Module):
    def __init__(self, vocab, d):
        super().__init__()
        self.weight = torch.nn.Parameter(trunc_normal((vocab, d), 1.0))

    def forward(self, tokens):
        return self.weight[tokens]


class RMSNorm(torch.nn.Module):
    """x * rsqrt(mean(x^2) + eps) * w, in fp32 whatever the input dtype; the result in the input dtype."""

    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        in_dtype = x.dtype
        x = x.float()
        r = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x * r * self.weight).to(in_dtype)


def rope(x, theta):
    """Rotates adjacent pairs (2i, 2i+1) of the last dim by pos * theta^(-2i/dh); x [B, H, T, dh]."""
    t, dh = x.shape[-2], x.shape[-1]
    inv = theta ** (-torch.arange(0, dh, 2, dtype=torch.float32) / dh)  # [dh/2]
    ang = torch.arange(t, dtype=torch.float32)[:, None] * inv[None, :]  # [T, dh/2]
    cos, sin = torch.cos(ang), torch.sin(ang)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y0 = x0 * cos - x1 * sin
    y1 = x0 * sin + x1 * cos
    return torch.stack((y0, y1), dim=-1).flatten(-2)


class Attention(torch.nn.Module):
    """Causal self-attention; k_proj and v_proj have kv_heads heads (grouped-query attention when fewer than
    heads: each kv head serves heads // kv_heads consecutive query heads, repeated as Llama repeats them)."""

    def __init__(self, d, heads, theta, kv_heads=None):
        super().__init__()
        self.heads, self.theta = heads, theta
        self.kv_heads = heads if kv_heads is None else kv_heads
        dkv = d // heads * self.kv_heads
        self.q_proj, self.k_proj, self.v_proj, self.output_proj = (
            Linear(d, d), Linear(d, dkv), Linear(d, dkv), Linear(d, d))

    def forward(self, x):
        b, t, d = x.shape
        h, dh = self.heads, d // self.heads

        def split(y, n):  # head j takes columns [j*dh, (j+1)*dh)
            return y.view(b, t, n, dh).transpose(1, 2)

        kv = self.kv_heads
        q, k, v = split(self.q_proj(x), h), split(self.k_proj(x), kv), split(self.v_proj(x), kv)
        q, k = rope(q, self.theta), rope(k, self.theta)
        if kv != h:
            k, v = k.repeat_interleave(h // kv, dim=1), v.repeat_interleave(h // kv, dim=1)
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(dh)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        # Softmax in fp32 (the bf16 policy); under autocast P @ V goes back to bf16.
        p = torch.softmax(s.float().masked_fill(~mask, float("-inf")), dim=-1)
        o = torch.matmul(p, v)
        return self.output_proj(o.transpose(1, 2).reshape(b, t, d))


class FFN(torch.nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.w1, self.w2, self.w3 = Linear(d, f), Linear(f, d), Linear(d, f)

    def forward(self, x):
        a = self.w1(x)
        return self.w2(a * torch.sigmoid(a) * self.w3(x))


class Stacked(torch.nn.Module):
    """E expert matrices [E, d_out, d_in] in one tensor, each initialised as a Linear(d_in, d_out)."""

    def __init__(self, e, d_in, d_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.stack([trunc_normal((d_out, d_in), math.sqrt(2.0 / (d_in + d_out)))
                                                      for _ in range(e)]))


class Experts(torch.nn.Module):
    def __init__(self, e, d, de):
        super().__init__()
        self.w1, self.w2, self.w3 = Stacked(e, d, de), Stacked(e, de, d), Stacked(e, d, de)


class MoE(torch.nn.Module):
    """The MoE feed-forward: router logits l = x W_r^T in fp32 (outside autocast, as DeepSeek keeps its
    gate); scores softmax(l) or sigmoid(l); the top-k experts by score (+ the bias, for the choice only);
    weights = the chosen scores / their sum; y = sum_j w_j SwiGLU_ej(x) (+ the shared experts' SwiGLU).
    Balance aux adds coef * E * sum_e (c_e / T) P_e per layer (c_e tokens choosing e, P_e the mean over
    tokens of softmax p, or of s / sum(s) for sigmoid); the model's loss is the cross-entropy plus every
    MoE layer's term."""

    def __init__(self, c):
        super().__init__()
        d, e = c["d_model"], c["num_experts"]
        de = c.get("d_expert") or c["d_ff"]
        self.e, self.k, self.gate, self.balance, self.coef = e, c["top_k"], c["router"], c["balance"], c["aux_loss_coef"]
        self.router = Linear(d, e)
        if self.balance == "bias":
            self.router.register_buffer("bias", 0.05 * torch.randn(e))
        self.experts = Experts(e, d, de)
        s = c.get("num_shared_experts", 0) * de
        self.shared = FFN(d, s) if s else None
        self.aux = None

    def forward(self, x):
        b, t, d = x.shape
        h = x.reshape(-1, d)
        with torch.autocast("cpu", enabled=False):
            logits = torch.matmul(h.float(), self.router.weight.t())
        scores = torch.softmax(logits, dim=-1) if self.gate == "softmax" else torch.sigmoid(logits)
        choose = scores + self.router.bias if self.balance == "bias" else scores
        top = torch.topk(choose.detach(), min(self.k + 1, self.e), dim=-1)
        idx = top.indices[:, :self.k]  # [N, k], best first
        # How far the k-th choice is from the next (a near tie routes differently under rounding).
        self.margin = (top.values[:, self.k - 1] - top.values[:, self.k]).min().item() if self.k < self.e else 1.0
        w = scores.gather(1, idx)
        w = w / w.sum(dim=-1, keepdim=True)
        y = torch.zeros(h.shape[0], d, dtype=torch.float32)
        for e in range(self.e):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            xe = h[tok]
            a = torch.matmul(xe, self.experts.w1.weight[e].t())
            g = a * torch.sigmoid(a) * torch.matmul(xe, self.experts.w3.weight[e].t())
            y = y.index_add(0, tok, torch.matmul(g, self.experts.w2.weight[e].t()).float() * w[tok, slot, None])
        if self.shared is not None:
            y = y + self.shared(h).float()
        self.aux = None
        if self.balance == "aux":
            q = scores if self.gate == "softmax" else scores / scores.sum(dim=-1, keepdim=True)
            counts = torch.zeros(self.e).index_add(0, idx.reshape(-1), torch.ones(idx.numel()))
            self.aux = self.coef * self.e * (counts / h.shape[0] * q.mean(dim=0)).sum()
        return y.to(x.dtype).reshape(b, t, d)


class Block(torch.nn.Module):
    def __init__(self, c, moe=False):
        super().__init__()
        self.ln1 = RMSNorm(c["d_model"], rc.rms_norm_eps(c))
        self.attn = Attention(c["d_model"], c["num_heads"], c["rope_theta"], c.get("num_kv_heads"))
        self.ln2 = RMSNorm(c["d_model"], rc.rms_norm_eps(c))
        self.ffn = MoE(c) if moe else FFN(c["d_model"], c["d_ff"])

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class TransformerLM(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.token_embeddings = Embedding(c["vocab_size"], c["d_model"])
        moe = c.get("moe_layers") or range(c["num_layers"]) if c.get("num_experts") else []
        self.layers = torch.nn.ModuleList(Block(c, l in moe) for l in range(c["num_layers"]))
        self.ln_final = RMSNorm(c["d_model"], rc.rms_norm_eps(c))
        self.lm_head = Linear(c["d_model"], c["vocab_size"])

    def forward(self, tokens):
        x = self.token_embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.ln_final(x))

    def aux_loss(self):
        """The MoE layers' auxiliary losses of the last forward, summed (0 without any)."""
        terms = [l.ffn.aux for l in self.layers if isinstance(l.ffn, MoE) and l.ffn.aux is not None]
        return sum(terms) if terms else torch.zeros(())


def cross_entropy(logits, targets):
    """Mean over all tokens of logsumexp(logits) - logits[target], in fp32."""
    z = logits.float().reshape(-1, logits.shape[-1])
    t = targets.reshape(-1).long()
    return (torch.logsumexp(z, dim=-1) - z.gather(1, t[:, None])[:, 0]).mean()


def lr_at(t, tr):
    lo, hi, tw, tc = tr["lr_min"], tr["lr_max"], tr["warmup_iters"], tr["cosine_cycle_iters"]
    if t < tw:
        return t / tw * hi
    if t <= tc:
        return lo + 0.5 * (1.0 + math.cos(math.pi * (t - tw) / (tc - tw))) * (hi - lo)
    return lo


# ---- the file ----------------------------------------------------------------------------------------

def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    flat = t.reshape(-1).tolist()
    if t.dtype == torch.float32:
        return "F32", struct.pack("<%df" % len(flat), *flat)
    if t.dtype == torch.int32:
        return "I32", struct.pack("<%di" % len(flat), *flat)
    raise ValueError("unexpected dtype %s" % t.dtype)


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    chunks, offset = [], 0
    for name, t in tensors:
        dtype, data = tensor_bytes(t)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


def build_model(config):
    """The model at seed 0, its norm weights perturbed away from 1 so that their gradients are tested on
    non-trivial values; returns it and a copy of its initial state_dict."""
    torch.manual_seed(0)
    model = TransformerLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_final.weight":
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
    return model, {k: v.detach().clone() for k, v in model.state_dict().items()}


def forward_backward(model, init, inputs, targets, prefix=""):
    """fp32, then bf16 autocast, forward and backward from the weights `init`: the tensors to store (logits,
    loss, every gradient of the fp32 parameters) and the two losses."""
    out = []
    model.load_state_dict(init)
    model.zero_grad()
    logits = model(inputs.long())
    loss = cross_entropy(logits, targets) + model.aux_loss()
    loss.backward()
    out += [(prefix + "fp32.logits", logits), (prefix + "fp32.loss", loss)]
    out += [(prefix + "fp32.grad." + n, p.grad.clone()) for n, p in model.named_parameters()]

    model.load_state_dict(init)
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits16 = model(inputs.long())
        loss16 = cross_entropy(logits16, targets) + model.aux_loss()
    loss16.backward()
    out += [(prefix + "bf16.logits", logits16.float()), (prefix + "bf16.loss", loss16.float())]
    out += [(prefix + "bf16.grad." + n, p.grad.clone()) for n, p in model.named_parameters()]
    return out, loss.item(), loss16.item()


METADATA = {
    "init": "torch.manual_seed(0); linear weights trunc_normal(std=sqrt(2/(d_in+d_out)), cut at 3 std), "
            "embedding trunc_normal(std 1, cut at 3); norm weights then set to 1 + 0.1*randn (perturbed "
            "from CS336's 1 so that their gradients are tested non-trivially)",
    "model": "x = emb[tokens]; per layer x += attn(ln1(x)); x += ffn(ln2(x)); logits = lm_head(ln_final(x)); "
             "RMSNorm eps 1e-5 in fp32; RoPE on adjacent pairs; causal softmax in fp32; SwiGLU; loss = mean "
             "cross-entropy in fp32",
    "bf16": "torch.autocast('cpu', bfloat16): matmuls (linear, q k^T, P V) in bf16 with fp32 parameters cast; "
            "RMSNorm, softmax and loss in fp32; residual stream fp32; grads are of the fp32 parameters",
}


MOE_MARGIN = 4e-3


def min_router_margin(model, init, inputs):
    """The smallest gap between a token's k-th and (k+1)-th router score over the MoE layers, in fp32 and
    under bf16 autocast (inf without MoE layers)."""
    moe = [l.ffn for l in model.layers if isinstance(l.ffn, MoE)]
    if not moe:
        return math.inf
    model.load_state_dict(init)
    gaps = []
    with torch.no_grad():
        model(inputs.long())
        gaps += [m.margin for m in moe]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(inputs.long())
        gaps += [m.margin for m in moe]
    return min(gaps)


def write_cases(path, cases, about):
    """Named cases: per case its config (metadata "config.<case>"), initial weights (and buffers, such as the
    router's bias), inputs, targets, and fp32 and bf16 autocast logits, loss and gradients, all named
    "<case>.<name>"."""
    out, metadata, losses = [], {"cases": json.dumps(list(cases))}, []
    for case, config in cases.items():
        model, init = build_model(config)
        v, t = config["vocab_size"], config["context_length"]
        # Seed 1, or for an MoE model the first seed from 1 on whose tokens no router choice lies within
        # MOE_MARGIN of a tie, in fp32 and under bf16 autocast (a near tie is routed differently by two
        # roundings, and a test of bf16 against autocast would compare two different routings).
        for seed in range(1, 100):
            gen = torch.Generator().manual_seed(seed)
            inputs = torch.randint(0, v, (BATCH, t), generator=gen, dtype=torch.int32)
            targets = torch.randint(0, v, (BATCH, t), generator=gen, dtype=torch.int32)
            if min_router_margin(model, init, inputs) > MOE_MARGIN:
                break
        metadata["seed." + case] = str(seed)
        p = case + "."
        out += [(p + "inputs", inputs), (p + "targets", targets)]
        out += [(p + n, init[n]) for n in init]
        tensors, l32, l16 = forward_backward(model, init, inputs, targets, p)
        out += tensors
        metadata["config." + case] = json.dumps(config)
        losses.append("%s fp32 %.6f bf16 %.6f" % (case, l32, l16))
    metadata.update(METADATA)
    metadata.update(about)
    metadata.update({"batch": str(BATCH), "torch_version": torch.__version__,
                     "data": "per case, torch.Generator().manual_seed(seed.<case>): inputs, targets; the seed is 1, "
                             "or for MoE the first from 1 whose router choices all lie over %g from a tie in "
                             "fp32 and bf16 autocast" % MOE_MARGIN})
    write_safetensors(path, out, metadata)
    print("wrote %s (%d tensors, %d bytes); %s" % (path, len(out), os.path.getsize(path), "; ".join(losses)))


def write_moe(path):
    write_cases(path, MOE_CASES, {
        "regenerate": "python3 tools/make_model_reference.py --moe (writes tests/data/model_moe_ref.safetensors)",
        "moe": MoE.__doc__.replace("\n    ", " ").strip() + " Ties cannot occur (random fp32 scores). The bias "
               "(layers.L.ffn.router.bias, 0.05*randn) is a buffer: no gradient. Expert weights are stacked "
               "[E, d_out, d_in], each expert initialised as a Linear.",
    })


def write_gqa(path):
    write_cases(path, GQA_CASES, {
        "regenerate": "python3 tools/make_model_reference.py --gqa (writes tests/data/model_gqa_ref.safetensors)",
        "gqa": "k_proj, v_proj [kv_heads*d_head, d_model]; k and v split into kv_heads heads, RoPE'd, then "
               "repeat_interleave(heads // kv_heads, dim=1) so query head h reads kv head h // (heads // kv_heads)",
    })


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gqa", action="store_true", help="write the grouped-query attention cases instead")
    ap.add_argument("--moe", action="store_true", help="write the Mixture-of-Experts cases instead")
    ap.add_argument("-o", "--output", default=None,
                    help="default: tests/data/model_tiny_ref.safetensors (--gqa: model_gqa_ref.safetensors, "
                         "--moe: model_moe_ref.safetensors)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    output = args.output or os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                         "model_gqa_ref.safetensors" if args.gqa else
                                         "model_moe_ref.safetensors" if args.moe else "model_tiny_ref.safetensors")
    if args.moe:
        write_moe(os.path.normpath(output))
        return 0
    if args.gqa:
        write_gqa(os.path.normpath(output))
        return 0

    model, init = build_model(CONFIG)
    names = list(init.keys())

    gen = torch.Generator().manual_seed(1)
    v, t = CONFIG["vocab_size"], CONFIG["context_length"]
    inputs = torch.randint(0, v, (BATCH, t), generator=gen, dtype=torch.int32)
    targets = torch.randint(0, v, (BATCH, t), generator=gen, dtype=torch.int32)
    train_inputs = torch.randint(0, v, (TRAIN["steps"], BATCH, t), generator=gen, dtype=torch.int32)
    train_targets = torch.randint(0, v, (TRAIN["steps"], BATCH, t), generator=gen, dtype=torch.int32)

    out = [("inputs", inputs), ("targets", targets)]
    out += [(n, init[n]) for n in names]
    tensors, loss, loss16 = forward_backward(model, init, inputs, targets)
    out += tensors

    # 10 steps of AdamW with clipping and the cosine schedule, fp32.
    model.load_state_dict(init)
    model.zero_grad()
    opt = torch.optim.AdamW(model.parameters(), lr=0.0, betas=tuple(TRAIN["betas"]), eps=TRAIN["eps"],
                            weight_decay=TRAIN["weight_decay"], foreach=False)
    losses, lrs, norms = [], [], []
    for step in range(TRAIN["steps"]):
        lr = lr_at(step, TRAIN)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        l = cross_entropy(model(train_inputs[step].long()), train_targets[step])
        l.backward()
        grads = [p.grad for p in model.parameters()]
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).item()
        if norm > TRAIN["max_grad_norm"]:
            scale = TRAIN["max_grad_norm"] / (norm + TRAIN["clip_eps"])
            for g in grads:
                g.mul_(scale)
        opt.step()
        losses.append(l.item())
        lrs.append(lr)
        norms.append(norm)
    out += [("train.inputs", train_inputs), ("train.targets", train_targets),
            ("train.losses", torch.tensor(losses, dtype=torch.float32)),
            ("train.lr", torch.tensor(lrs, dtype=torch.float32)),
            ("train.grad_norm", torch.tensor(norms, dtype=torch.float32))]
    out += [("train.final." + n, p) for n, p in model.named_parameters()]

    metadata = {
        "config": json.dumps(CONFIG),
        "batch": str(BATCH),
        "train": json.dumps(TRAIN),
        "param_names": json.dumps(names),
        "torch_version": torch.__version__,
        "regenerate": "python3 tools/make_model_reference.py (writes tests/data/model_tiny_ref.safetensors)",
        "init": METADATA["init"],
        "data": "torch.Generator().manual_seed(1): inputs, targets, train.inputs, train.targets in that order",
        "model": METADATA["model"],
        "bf16": METADATA["bf16"],
        "optimizer": "torch.optim.AdamW(foreach=False): p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; "
                     "p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps); t counts from 1",
        "clipping": "global L2 norm over all grads (train.grad_norm, before clipping); if norm > 1.0 grads *= "
                    "1.0/(norm + 1e-6)",
        "schedule": "lr(t), t = 0..9: t < Tw: t/Tw*max; Tw <= t <= Tc: min + 0.5*(1+cos(pi*(t-Tw)/(Tc-Tw)))*(max-min)",
    }
    path = os.path.normpath(output)
    write_safetensors(path, out, metadata)
    print("wrote %s (%d tensors, %d bytes); fp32 loss %.6f, bf16 loss %.6f, train losses %s" %
          (path, len(out), os.path.getsize(path), loss, loss16,
           " ".join("%.4f" % x for x in losses)))


if __name__ == "__main__":
    sys.exit(main())
