"""tools/ridge_to_gguf.py, dense and Mixture of Experts, without llama.cpp (tools/check_gguf_logits.py runs
llama.cpp itself; it is a peer, not a test dependency):

- every tensor's GGUF shape (ne) is the one llama.cpp's `llama` loader asks for (src/models/llama.cpp's
  create_tensor calls, written out here), and the hyperparameters are the config's;
- the f32 file, run by a NumPy fp64 forward written from llama.cpp's definitions (ggml_mul_mat over ne,
  RoPE NORM on adjacent pairs, build_moe_ffn: softmax over all experts, the top k, their weights divided
  by their sum, SwiGLU experts), gives ridge's fp32 logits;
- bf16 and q8_0 files hold the checkpoint's values within each format's rounding; the router stays f32;
- what llama.cpp's Mixtral form cannot run as ridge does is refused: one line, exit 2, no file.

Skipped when the gguf package is absent (scripts/setup-peers llama installs it).
"""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ridge.model as rm

gguf = pytest.importorskip("gguf", reason="the gguf package is not installed (scripts/setup-peers llama)")

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "ridge_to_gguf.py"
sys.path.insert(0, str(ROOT / "tools"))
import ridge_checkpoint as rc  # noqa: E402

BASE = {"vocab_size": 64, "context_length": 32, "d_model": 64, "num_layers": 2, "num_heads": 4, "d_ff": 96,
        "rope_theta": 10000.0}
CONFIGS = {
    "dense": BASE,
    "dense-gqa": dict(BASE, num_kv_heads=2),
    # d_expert differs from d_model and d_ff, so a transposed or misread stack cannot keep its shape.
    "moe": dict(BASE, num_experts=4, top_k=2, d_expert=160),
    "moe-top1-gqa": dict(BASE, num_kv_heads=1, num_experts=3, top_k=1, d_expert=32),
}


def checkpoint(tmp_path, cfg, name="model", seed=7):
    """A checkpoint of cfg with ridge's initialisation, norms moved off 1 and the router doubled so that
    the top-k choices stand clear of ties (fp32 and fp64 then route alike)."""
    m = rm.TransformerLM(cfg, seq=16, seed=seed)
    g = np.random.default_rng(seed)
    sd = {k: np.array(v) for k, v in m.state_dict().items()}
    for k in sd:
        if k.endswith("ln1.weight") or k.endswith("ln2.weight") or k == "ln_final.weight":
            sd[k] = (1 + 0.2 * g.standard_normal(sd[k].shape)).astype(np.float32)
        if k.endswith("router.weight"):
            sd[k] = sd[k] * 2
    m = rm.TransformerLM(cfg, sd, seq=16)
    path = tmp_path / f"{name}.safetensors"
    m.save(str(path))
    return path, m, sd


def convert(ckpt, out, qtype):
    return subprocess.run([sys.executable, str(TOOL), str(ckpt), "-o", str(out), "--type", qtype],
                          capture_output=True, text=True)


def read(path):
    """(kv dict, {name: (ne, type, fp64 array shaped as ne reversed)}) of a GGUF file."""
    r = gguf.GGUFReader(str(path))
    kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.")}
    out = {}
    for t in r.tensors:
        ne = [int(n) for n in t.shape]
        flat = np.asarray(t.data if t.tensor_type == gguf.GGMLQuantizationType.F32
                          else gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(-1)
        out[t.name] = (ne, t.tensor_type, flat.reshape(ne[::-1]))  # ne[0] varies fastest
    return kv, out


def loader_shapes(kv):
    """ne of every tensor as llama.cpp's llama loader creates it, from the file's own hyperparameters."""
    d, v, n_ff = kv["llama.embedding_length"], kv["llama.vocab_size"], kv["llama.feed_forward_length"]
    h, hkv = kv["llama.attention.head_count"], kv["llama.attention.head_count_kv"]
    dh, e = d // h, kv.get("llama.expert_count", 0)
    want = {"token_embd.weight": [d, v], "output_norm.weight": [d], "output.weight": [d, v]}
    for i in range(kv["llama.block_count"]):
        b = f"blk.{i}."
        want |= {b + "attn_norm.weight": [d], b + "attn_q.weight": [d, dh * h], b + "attn_k.weight": [d, dh * hkv],
                 b + "attn_v.weight": [d, dh * hkv], b + "attn_output.weight": [dh * h, d], b + "ffn_norm.weight": [d]}
        if e == 0:
            want |= {b + "ffn_gate.weight": [d, n_ff], b + "ffn_down.weight": [n_ff, d], b + "ffn_up.weight": [d, n_ff]}
        else:
            want |= {b + "ffn_gate_inp.weight": [d, e], b + "ffn_gate_exps.weight": [d, n_ff, e],
                     b + "ffn_down_exps.weight": [n_ff, d, e], b + "ffn_up_exps.weight": [d, n_ff, e]}
    return want


def llama_forward(kv, w, ids):
    """llama.cpp's `llama` graph in fp64 NumPy over the file's tensors; returns the logits [T, vocab] and
    the smallest gap between a token's k-th and (k+1)-th router logit (inf for a dense file)."""
    def mm(name, x):  # ggml_mul_mat(W, x): W ne [in, out] is the array [out, in]
        return x @ w[name][2].T

    d, h, hkv = kv["llama.embedding_length"], kv["llama.attention.head_count"], kv["llama.attention.head_count_kv"]
    dh, eps, base = d // h, kv["llama.attention.layer_norm_rms_epsilon"], kv["llama.rope.freq_base"]
    e, k = kv.get("llama.expert_count", 0), kv.get("llama.expert_used_count", 0)
    t = len(ids)
    ang = np.arange(t)[:, None] * base ** (-np.arange(0, dh, 2) / dh)

    def rms(x, name):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w[name][2]

    def rope(x):  # [T, heads, dh], mode NORM: pairs (2i, 2i+1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
        return np.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).reshape(x.shape)

    def silu(a):
        return a / (1 + np.exp(-a))

    x, gap = w["token_embd.weight"][2][ids], np.inf
    for i in range(kv["llama.block_count"]):
        b = f"blk.{i}."
        a = rms(x, b + "attn_norm.weight")
        q = rope(mm(b + "attn_q.weight", a).reshape(t, h, dh))
        kk = np.repeat(rope(mm(b + "attn_k.weight", a).reshape(t, hkv, dh)), h // hkv, axis=1)
        vv = np.repeat(mm(b + "attn_v.weight", a).reshape(t, hkv, dh), h // hkv, axis=1)
        s = np.einsum("qhd,khd->hqk", q, kk) / np.sqrt(dh) + np.triu(np.full((t, t), -np.inf), 1)
        p = np.exp(s - s.max(-1, keepdims=True))
        o = np.einsum("hqk,khd->qhd", p / p.sum(-1, keepdims=True), vv).reshape(t, d)
        x = x + mm(b + "attn_output.weight", o)
        a = rms(x, b + "ffn_norm.weight")
        if not e:
            x = x + mm(b + "ffn_down.weight", silu(mm(b + "ffn_gate.weight", a)) * mm(b + "ffn_up.weight", a))
            continue
        logits = mm(b + "ffn_gate_inp.weight", a)
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        order = np.argsort(-probs, axis=-1, kind="stable")
        if k < e:
            ranked = np.take_along_axis(logits, order, -1)
            gap = min(gap, float((ranked[:, k - 1] - ranked[:, k]).min()))
        top = order[:, :k]
        wts = np.take_along_axis(probs, top, -1)
        wts /= wts.sum(-1, keepdims=True)
        gate, up, down = (w[b + f"ffn_{n}_exps.weight"][2] for n in ("gate", "up", "down"))
        y = np.zeros_like(x)
        for tok in range(t):
            for j, ex in enumerate(top[tok]):
                g = silu(gate[ex] @ a[tok]) * (up[ex] @ a[tok])
                y[tok] += wts[tok, j] * (down[ex] @ g)
        x = x + y
    return mm("output.weight", rms(x, "output_norm.weight")), gap


@pytest.mark.parametrize("case", list(CONFIGS))
def test_f32_gguf_has_llamas_shapes_and_gives_ridges_logits(tmp_path, case):
    cfg = CONFIGS[case]
    ckpt, m, _ = checkpoint(tmp_path, cfg)
    res = convert(ckpt, tmp_path / "m.gguf", "f32")
    assert res.returncode == 0, res.stderr
    kv, w = read(tmp_path / "m.gguf")
    moe = "num_experts" in cfg
    assert kv["general.architecture"] == "llama"
    assert kv["llama.feed_forward_length"] == (cfg["d_expert"] if moe else cfg["d_ff"])
    assert kv.get("llama.expert_count", 0) == cfg.get("num_experts", 0)
    assert kv.get("llama.expert_used_count", 0) == cfg.get("top_k", 0)
    assert kv["llama.attention.head_count_kv"] == cfg.get("num_kv_heads", cfg["num_heads"])
    assert {n: ne for n, (ne, _, _) in w.items()} == loader_shapes(kv)
    assert all(tp == gguf.GGMLQuantizationType.F32 for _, tp, _ in w.values())

    ids = np.random.default_rng(3).integers(0, cfg["vocab_size"], 20)
    got, gap = llama_forward(kv, w, ids)
    want = np.array(m(ids[None, :].astype(np.int32)))[0]
    # ridge computes in fp32, this forward in fp64: 1e-4 of the largest logit is check_gguf_logits.py's f32
    # bound (a wrong layout, gate, gate/up order or RoPE moves the logits by their own size).
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    if moe and cfg["top_k"] < cfg["num_experts"]:
        assert gap > 1e-3, "a near tie in the router: fp32 and fp64 may route apart (change the seed)"


@pytest.mark.parametrize("qtype", ["bf16", "q8_0"])
def test_bf16_and_q8_0_hold_the_weights_within_their_rounding_and_the_router_in_f32(tmp_path, qtype):
    cfg = CONFIGS["moe"]
    ckpt, _, sd = checkpoint(tmp_path, cfg)
    assert convert(ckpt, tmp_path / "m.gguf", qtype).returncode == 0
    _, w = read(tmp_path / "m.gguf")
    names = {"token_embeddings.weight": "token_embd.weight", "lm_head.weight": "output.weight"}
    for i in range(cfg["num_layers"]):
        names |= {f"layers.{i}.ffn.router.weight": f"blk.{i}.ffn_gate_inp.weight",
                  f"layers.{i}.ffn.experts.w1.weight": f"blk.{i}.ffn_gate_exps.weight",
                  f"layers.{i}.ffn.experts.w3.weight": f"blk.{i}.ffn_up_exps.weight",
                  f"layers.{i}.ffn.experts.w2.weight": f"blk.{i}.ffn_down_exps.weight",
                  f"layers.{i}.attn.q_proj.weight": f"blk.{i}.attn_q.weight"}
    want_type = gguf.GGMLQuantizationType.BF16 if qtype == "bf16" else gguf.GGMLQuantizationType.Q8_0
    for ours, theirs in names.items():
        _, tp, got = w[theirs]
        x = sd[ours].astype(np.float64)
        assert got.shape == x.shape, theirs
        if ours.endswith("router.weight"):
            assert tp == gguf.GGMLQuantizationType.F32 and np.array_equal(got, x), theirs
            continue
        assert tp == want_type, theirs
        if qtype == "bf16":  # round to nearest: half an ulp, 2^-8 relative
            bound = np.abs(x) * 2.0**-8
        else:  # blocks of 32 along a row, one scale amax / 127 in fp16: half a step, and the scale's rounding
            amax = np.abs(x.reshape(*x.shape[:-1], -1, 32)).max(-1, keepdims=True)
            bound = np.broadcast_to(amax / 127 * (0.5 + 127 * 2.0**-11), amax.shape[:-1] + (32,)).reshape(x.shape)
        assert np.all(np.abs(got - x) <= bound * (1 + 1e-6) + 1e-30), theirs


@pytest.mark.parametrize("change, field", [(dict(router="sigmoid"), "router sigmoid"),
                                           (dict(num_shared_experts=1), "num_shared_experts 1"),
                                           (dict(moe_layers=[1]), "moe_layers [1]"),
                                           (dict(balance="bias"), "router.bias is nonzero")])
def test_what_mixtral_cannot_run_is_refused_in_one_line(tmp_path, change, field):
    cfg = dict(CONFIGS["moe"], **change)
    ckpt, m, sd = checkpoint(tmp_path, cfg)
    if "balance" in change:  # a bias moved by a training step (DeepSeek-V3's rule) chooses other experts
        sd["layers.1.ffn.router.bias"] = np.array([0.0, 0.1, 0.0, 0.0], np.float32)
        rm.TransformerLM(cfg, sd, seq=16).save(str(ckpt))
    out = tmp_path / "m.gguf"
    res = convert(ckpt, out, "bf16")
    assert res.returncode == 2 and res.stdout == ""
    assert len(res.stderr.splitlines()) == 1 and field in res.stderr and str(ckpt) in res.stderr, res.stderr
    assert not out.exists() and list(tmp_path.glob("*.tmp")) == []


def test_a_zero_bias_routes_as_none_and_is_accepted(tmp_path):
    # balance bias with the bias still at its initial zeros chooses exactly as no bias: the file is the one
    # the same weights under balance aux give (the bias is not written).
    cfg = dict(CONFIGS["moe"], balance="bias")
    ckpt, _, sd = checkpoint(tmp_path, cfg)
    assert not any(np.any(v) for k, v in sd.items() if k.endswith("router.bias"))
    aux = tmp_path / "aux.safetensors"
    rm.TransformerLM(CONFIGS["moe"], {k: v for k, v in sd.items() if not k.endswith("router.bias")},
                     seq=16).save(str(aux))
    for src, out in ((ckpt, "bias.gguf"), (aux, "aux.gguf")):
        assert convert(src, tmp_path / out, "f32").returncode == 0
    (_, a), (_, b) = read(tmp_path / "bias.gguf"), read(tmp_path / "aux.gguf")
    assert a.keys() == b.keys() and all(np.array_equal(a[n][2], b[n][2]) for n in a)


def test_dense_only_tools_refuse_an_moe_checkpoint_by_name(tmp_path):
    ckpt, _, _ = checkpoint(tmp_path, CONFIGS["moe"])
    with pytest.raises(rc.CheckpointError, match=r"Mixture-of-Experts model \(num_experts 4\); this tool runs dense"):
        rc.load(str(ckpt))
    cfg, tensors = rc.load(str(ckpt), moe=True)
    assert set(tensors) == set(rc.tensor_names(cfg)) and tensors["layers.0.ffn.experts.w2.weight"].shape == (4, 64, 160)
