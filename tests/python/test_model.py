"""ridge.model: a CS336 state_dict loads by name; logits and loss against a NumPy fp64 forward of
the same weights; gradients against finite differences of that forward; training steps lower the loss."""
import numpy as np
import pytest

import ridge.model as rm

CFG = {"vocab_size": 23, "context_length": 12, "d_model": 32, "num_layers": 2, "num_heads": 2, "d_ff": 48,
       "rope_theta": 10000.0}


def random_state_dict(rng, cfg):
    V, D, F, L = cfg["vocab_size"], cfg["d_model"], cfg["d_ff"], cfg["num_layers"]
    Dkv = D // cfg["num_heads"] * cfg.get("num_kv_heads", cfg["num_heads"])  # k and v rows
    sd = {"token_embeddings.weight": rng.standard_normal((V, D)), "lm_head.weight": rng.standard_normal((V, D)) / 6,
          "ln_final.weight": 1 + 0.1 * rng.standard_normal(D)}
    for l in range(L):
        p = f"layers.{l}."
        for n in ("q_proj", "k_proj", "v_proj", "output_proj"):
            sd[p + f"attn.{n}.weight"] = rng.standard_normal((Dkv if n in ("k_proj", "v_proj") else D, D)) / np.sqrt(D)
        sd[p + "ffn.w1.weight"] = rng.standard_normal((F, D)) / np.sqrt(D)
        sd[p + "ffn.w3.weight"] = rng.standard_normal((F, D)) / np.sqrt(D)
        sd[p + "ffn.w2.weight"] = rng.standard_normal((D, F)) / np.sqrt(F)
        sd[p + "ln1.weight"] = 1 + 0.1 * rng.standard_normal(D)
        sd[p + "ln2.weight"] = 1 + 0.1 * rng.standard_normal(D)
    return {k: v.astype(np.float32) for k, v in sd.items()}


def np_forward(sd, cfg, ids):
    """The CS336 Transformer LM in fp64 NumPy: pre-norm, RMSNorm, RoPE on adjacent pairs, SwiGLU; with
    num_kv_heads, each kv head repeated for the num_heads // num_kv_heads query heads that share it."""
    sd = {k: v.astype(np.float64) for k, v in sd.items()}
    H, D = cfg["num_heads"], cfg["d_model"]
    KV = cfg.get("num_kv_heads", H)
    dh = D // H
    b, s = ids.shape

    eps = cfg.get("rms_norm_eps", 1e-5)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    pos = np.arange(s)[:, None]
    freq = cfg["rope_theta"] ** (-np.arange(0, dh, 2) / dh)
    cos, sin = np.cos(pos * freq), np.sin(pos * freq)

    def rope(x):  # b h s dh
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    x = sd["token_embeddings.weight"][ids]
    mask = np.triu(np.ones((s, s), dtype=bool), 1)
    for l in range(cfg["num_layers"]):
        p = f"layers.{l}."
        h = rms(x, sd[p + "ln1.weight"])
        q, k, v = ((h @ sd[p + f"attn.{n}_proj.weight"].T).reshape(b, s, H if n == "q" else KV, dh)
                   .transpose(0, 2, 1, 3) for n in "qkv")
        q, k = rope(q), rope(k)
        k, v = np.repeat(k, H // KV, axis=1), np.repeat(v, H // KV, axis=1)
        sc = np.where(mask, -np.inf, q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh))
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        att = (pr @ v).transpose(0, 2, 1, 3).reshape(b, s, D)
        x = x + att @ sd[p + "attn.output_proj.weight"].T
        h = rms(x, sd[p + "ln2.weight"])
        a1 = h @ sd[p + "ffn.w1.weight"].T
        x = x + ((a1 / (1 + np.exp(-a1))) * (h @ sd[p + "ffn.w3.weight"].T)) @ sd[p + "ffn.w2.weight"].T
    return rms(x, sd["ln_final.weight"]) @ sd["lm_head.weight"].T


def np_loss(logits, targets):
    m = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(-1)) + m[..., 0]
    picked = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
    return (lse - picked).mean()


@pytest.fixture
def setup(rng):
    sd = random_state_dict(rng, CFG)
    ids = rng.integers(0, CFG["vocab_size"], (2, 10))
    tg = rng.integers(0, CFG["vocab_size"], (2, 10))
    return sd, ids, tg


def test_state_dict_names_and_views(setup):
    sd, _, _ = setup
    m = rm.TransformerLM(CFG, sd)
    assert set(m.names()) == set(sd)
    np.testing.assert_array_equal(m.param("layers.1.ffn.w2.weight"), sd["layers.1.ffn.w2.weight"])
    view = m.param("ln_final.weight")
    view[0] = 5.0  # a view of ridge's buffer: writes go into the model
    assert m.state_dict()["ln_final.weight"][0] == 5.0
    del m
    assert view[0] == 5.0  # the view keeps the model's memory alive


@pytest.mark.parametrize("attention", ["flash", "math"])
def test_logits_and_loss_match_numpy(setup, attention):
    sd, ids, tg = setup
    m = rm.TransformerLM(CFG, sd, attention=attention)
    want = np_forward(sd, CFG, ids)
    np.testing.assert_allclose(m(ids), want, atol=2e-4 * np.abs(want).max())
    loss = m.forward(ids, tg)
    assert loss == pytest.approx(np_loss(want, tg), rel=1e-5)


def test_rms_norm_eps_of_the_config_is_the_models(setup):
    """rms_norm_eps in the config is RMSNorm's epsilon (default 1e-5): at 0.3 the logits are NumPy's at
    0.3, and far from those at 1e-5; the config keeps it, and a default config does not mention it."""
    sd, ids, _ = setup
    cfg = dict(CFG, rms_norm_eps=0.3)
    m = rm.TransformerLM(cfg, sd)
    want, other = np_forward(sd, cfg, ids), np_forward(sd, CFG, ids)
    assert np.abs(want - other).max() > 0.05 * np.abs(want).max()
    np.testing.assert_allclose(m(ids), want, atol=2e-4 * np.abs(want).max())
    assert m.config["rms_norm_eps"] == 0.3
    assert "rms_norm_eps" not in rm.TransformerLM(CFG, sd).config
    with pytest.raises(ValueError, match="rms_norm_eps"):
        rm.TransformerLM(dict(CFG, rms_norm_eps=0.0))
    with pytest.raises(TypeError, match="rms_norm_eps"):
        rm.TransformerLM(dict(CFG, rms_norm_eps="1e-5"))


def test_the_memory_check_counts_with_the_library():
    """The parameter count and the step's bytes that TransformerLM checks against the machine are the
    library's (what `ridge train` checks): the count is the closed form, grouped-query included, and a
    model past any machine's memory is refused naming its sizes and that count, before anything is
    allocated."""
    cfg = dict(CFG, num_kv_heads=1)
    V, D, L, F, Dkv = 23, 32, 2, 48, 16
    params, need = rm._m.step_memory(rm._config_json(cfg), 2, 8, "fp32")
    assert params == 2 * V * D + L * (2 * D * D + 2 * Dkv * D + 3 * D * F + 2 * D) + D
    assert params == sum(int(np.prod(v.shape)) for v in rm.TransformerLM(cfg).state_dict().values())
    assert need > 16 * params  # fp32 weights, gradients and AdamW's two moments, then the activations
    huge = dict(CFG, num_layers=2**32 + 1)
    big_params, _ = rm._m.step_memory(rm._config_json(huge), 1, 4, "fp32")
    with pytest.raises(ValueError, match=rf"this model \({big_params} parameters\).*num_layers 4294967297"):
        rm.TransformerLM(huge, batch=1, seq=4)


def test_gradients_match_finite_differences(setup):
    sd, ids, tg = setup
    m = rm.TransformerLM(CFG, sd)
    m.zero_grad()
    m.forward(ids, tg)
    m.backward()
    eps = 1e-4
    rng = np.random.default_rng(7)
    for name in ("lm_head.weight", "layers.0.attn.q_proj.weight", "layers.1.ffn.w1.weight", "token_embeddings.weight",
                 "layers.0.ln1.weight"):
        g = m.grad(name)
        for _ in range(3):
            idx = tuple(rng.integers(0, n) for n in sd[name].shape)
            if name == "token_embeddings.weight":
                idx = (int(ids[0, 0]),) + idx[1:]
            plus = {k: v.astype(np.float64) for k, v in sd.items()}
            minus = {k: v.astype(np.float64) for k, v in sd.items()}
            plus[name][idx] += eps
            minus[name][idx] -= eps
            num = (np_loss(np_forward(plus, CFG, ids), tg) - np_loss(np_forward(minus, CFG, ids), tg)) / (2 * eps)
            assert g[idx] == pytest.approx(num, abs=2e-4), (name, idx)


def test_training_steps_lower_the_loss(setup):
    sd, ids, tg = setup
    m = rm.TransformerLM(CFG, sd, batch=2, seq=10, lr_max=3e-3, weight_decay=0.0)
    first = m.step(ids, tg)
    for _ in range(15):
        last = m.step(ids, tg)
    assert last["step"] == 16 and last["loss"] < first["loss"] * 0.8


def test_errors(setup):
    sd, ids, tg = setup
    m = rm.TransformerLM(CFG, sd, batch=2, seq=10)
    with pytest.raises(ValueError, match="outside"):
        m.forward(ids + 100)
    with pytest.raises(ValueError, match="unknown parameter"):
        m.load_state_dict({"nope": np.zeros(3, np.float32)})
    bad = dict(sd)
    bad["lm_head.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match="lm_head.weight"):
        m.load_state_dict(bad)
    with pytest.raises(ValueError, match="batch"):
        m.step(ids[:1], tg[:1])
    with pytest.raises(ValueError, match="num_heads|d_model"):
        rm.TransformerLM(dict(CFG, num_heads=5))
    with pytest.raises(ValueError, match="backward"):
        m.forward(ids)
        m.backward()


# Grouped-query attention: 4 query heads of 16 sharing 2 kv heads, and 1.
GQA = [dict(CFG, d_model=64, num_heads=4, num_kv_heads=kv) for kv in (2, 1)]


@pytest.mark.parametrize("cfg", GQA, ids=["kv2", "kv1"])
@pytest.mark.parametrize("attention", ["flash", "math"])
def test_gqa_logits_loss_and_kv_gradients_match_numpy(rng, cfg, attention):
    sd = random_state_dict(rng, cfg)
    ids = rng.integers(0, cfg["vocab_size"], (2, 10))
    tg = rng.integers(0, cfg["vocab_size"], (2, 10))
    m = rm.TransformerLM(cfg, sd, attention=attention)
    assert m.config["num_kv_heads"] == cfg["num_kv_heads"]
    assert m.param("layers.0.attn.k_proj.weight").shape == (16 * cfg["num_kv_heads"], 64)
    want = np_forward(sd, cfg, ids)
    np.testing.assert_allclose(m(ids), want, atol=2e-4 * np.abs(want).max())
    m.zero_grad()
    assert m.forward(ids, tg) == pytest.approx(np_loss(want, tg), rel=1e-5)
    m.backward()
    # k and v are shared by a group of query heads: their gradient sums what every head of the group sends.
    eps = 1e-4
    for name in ("layers.0.attn.k_proj.weight", "layers.1.attn.v_proj.weight", "layers.1.attn.q_proj.weight"):
        g = m.grad(name)
        for _ in range(3):
            idx = tuple(int(rng.integers(0, n)) for n in sd[name].shape)
            plus = {k: v.astype(np.float64) for k, v in sd.items()}
            minus = {k: v.astype(np.float64) for k, v in sd.items()}
            plus[name][idx] += eps
            minus[name][idx] -= eps
            num = (np_loss(np_forward(plus, cfg, ids), tg) - np_loss(np_forward(minus, cfg, ids), tg)) / (2 * eps)
            assert g[idx] == pytest.approx(num, abs=2e-4), (name, idx)


def test_gqa_config_errors_and_multi_head_default(rng):
    with pytest.raises(ValueError, match="num_kv_heads 3"):
        rm.TransformerLM(dict(GQA[0], num_kv_heads=3))
    with pytest.raises(TypeError, match="num_kv_heads"):
        rm.TransformerLM(dict(GQA[0], num_kv_heads="2"))
    # A state_dict of the multi-head shape does not load into the grouped model.
    with pytest.raises(ValueError, match="k_proj"):
        rm.TransformerLM(GQA[0], random_state_dict(rng, dict(GQA[0], num_kv_heads=4)))
    # num_kv_heads equal to num_heads is the multi-head model: its config does not mention it.
    assert "num_kv_heads" not in rm.TransformerLM(dict(CFG, num_kv_heads=2)).config
    assert "num_kv_heads" not in rm.preset("tiny", 100, 16)


def test_from_checkpoint_builds_the_model_the_file_records(tmp_path, rng):
    """A checkpoint written by a bf16 run: from_checkpoint takes the config and the precision from the
    file's metadata, and the model it returns is the saved one (same logits, same next step)."""
    cfg = dict(CFG)
    src = rm.TransformerLM(cfg, random_state_dict(rng, cfg), precision="bf16", batch=2, seq=8, lr_max=1e-2)
    ids = rng.integers(0, cfg["vocab_size"], size=(2, 9))
    src.step(ids[:, :-1], ids[:, 1:])
    path = str(tmp_path / "ck.safetensors")
    src.save(path)
    m = rm.TransformerLM.from_checkpoint(path, batch=2, seq=8, lr_max=1e-2)
    assert m.config == src.config
    np.testing.assert_array_equal(m(ids[:, :-1]), src(ids[:, :-1]))
    # Precision and the optimizer state came along: the next step is the same step to the bit.
    a, b = src.step(ids[:, :-1], ids[:, 1:]), m.step(ids[:, :-1], ids[:, 1:])
    assert a["loss"] == b["loss"] and a["step"] == b["step"]
    with pytest.raises(ValueError, match="precision: .* was written by a bf16 run"):
        rm.TransformerLM.from_checkpoint(path, precision="fp32")
    # A weights-only file records no config; a file that is not safetensors is refused by the library.
    np.save(tmp_path / "w.npy", np.zeros(3))
    with pytest.raises(ValueError):
        rm.TransformerLM.from_checkpoint(str(tmp_path / "w.npy"))
    with pytest.raises(ValueError):
        rm.TransformerLM.from_checkpoint(str(tmp_path / "missing.safetensors"))


def test_moe_config_builds_the_moe_model_and_its_errors_name_the_field():
    # The MoE fields reach the library (issue 40): the stacked experts' tensors, the model's config back,
    # and a training step; a dense model's config does not mention them.
    cfg = dict(CFG, num_experts=4, top_k=2, d_expert=12, moe_layers=[1], router="sigmoid")
    m = rm.TransformerLM(cfg, batch=2, seq=10)
    shapes = {k: v.shape for k, v in m.state_dict().items()}
    assert shapes["layers.1.ffn.experts.w1.weight"] == (4, 12, CFG["d_model"])
    assert shapes["layers.1.ffn.experts.w2.weight"] == (4, CFG["d_model"], 12)
    assert shapes["layers.1.ffn.router.weight"] == (4, CFG["d_model"])
    assert "layers.0.ffn.w1.weight" in shapes and "layers.0.ffn.router.weight" not in shapes
    back = m.config
    assert (back["num_experts"], back["top_k"], back["moe_layers"], back["router"]) == (4, 2, [1], "sigmoid")
    ids = np.arange(20, dtype=np.int32).reshape(2, 10) % CFG["vocab_size"]
    assert np.isfinite(m.step(ids, ids)["loss"])
    assert "num_experts" not in rm.TransformerLM(CFG).config
    with pytest.raises(ValueError, match="top_k is 5"):
        rm.TransformerLM(dict(cfg, top_k=5))
    with pytest.raises(ValueError, match="top_k is set but num_experts is 0"):
        rm.TransformerLM(dict(CFG, top_k=2))
    with pytest.raises(TypeError, match="moe_layers"):
        rm.TransformerLM(dict(cfg, moe_layers="1"))


def test_moe_router_bias_is_in_the_state_dict_and_round_trips():
    # Under balance bias the router's bias is state PyTorch keeps as a buffer: state_dict() carries it, a
    # step moves it (DeepSeek's rule), and loading the dict into a fresh model gives the same logits.
    cfg = dict(CFG, num_experts=4, top_k=2, d_expert=12, balance="bias", bias_update_speed=0.05)
    m = rm.TransformerLM(cfg, batch=2, seq=10)
    assert "layers.0.ffn.router.bias" in m.state_dict() and "layers.0.ffn.router.bias" not in m.names()
    ids = np.arange(20, dtype=np.int32).reshape(2, 10) % CFG["vocab_size"]
    m.step(ids, ids)
    bias = np.array(m.state_dict()["layers.1.ffn.router.bias"])
    assert bias.shape == (4,) and np.any(bias != 0)
    fresh = rm.TransformerLM(cfg, {k: np.array(v) for k, v in m.state_dict().items()}, batch=2, seq=10)
    assert np.array_equal(np.array(fresh.state_dict()["layers.1.ffn.router.bias"]), bias)
    m.forward(ids)
    fresh.forward(ids)
    assert np.array_equal(m.logits(), fresh.logits())
    with pytest.raises(ValueError, match="router.bias"):
        fresh.load_state_dict({"layers.1.ffn.router.bias": np.zeros(5, np.float32)}, strict=False)
