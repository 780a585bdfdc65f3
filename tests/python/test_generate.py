"""ridge.model's generation: every step of a KV-cached session against an fp64 NumPy forward of the whole
text (tests/python/test_model.py's np_forward, an independent implementation), greedy generation as the
argmax chain of that forward, seeds, GQA, and bad arguments."""
import numpy as np
import pytest

import ridge.model as rm
from test_model import np_forward, random_state_dict

CFG = {"vocab_size": 29, "context_length": 40, "d_model": 64, "num_layers": 2, "num_heads": 4, "d_ff": 48,
       "rope_theta": 10000.0}


def make(cfg=CFG, seed=0):
    return rm.TransformerLM(cfg, random_state_dict(np.random.default_rng(seed), cfg))


def last_logits(sd, cfg, text):
    return np_forward(sd, cfg, np.array([text]))[0, -1]


@pytest.mark.parametrize("kv", [4, 2, 1])
def test_session_steps_equal_the_full_forward(kv):
    cfg = dict(CFG, num_kv_heads=kv)
    sd = random_state_dict(np.random.default_rng(kv), cfg)
    m = rm.TransformerLM(cfg, sd)
    s = m.inference("fp32", block_size=4).session(max_sequences=3)
    texts = [[1, 2, 3], [4] * 9, [7]]
    ids = s.prefill(texts)
    for step in range(6):
        for i, t in zip(ids, texts):
            want = last_logits(sd, cfg, t)
            got = s.logits(i)
            assert got.shape == (cfg["vocab_size"],)
            assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
        nxt = [(5 * step + j) % cfg["vocab_size"] for j in range(3)]
        s.decode(ids, nxt)
        for t, n in zip(texts, nxt):
            t.append(n)
    assert s.length(ids[1]) == 9 + 6


def test_greedy_generation_is_the_argmax_chain():
    m = make()
    sd = {k: np.array(v) for k, v in m.state_dict().items()}
    out = m.generate([[3, 1, 4], [1, 5]], max_tokens=6, weights="fp32", temperature=0)
    for prompt, toks in zip([[3, 1, 4], [1, 5]], out):
        text = list(prompt)
        for t in toks:
            assert t == int(np.argmax(last_logits(sd, CFG, text)))
            text.append(t)


def test_seeds_streaming_eos_and_stats():
    m = make(seed=3)
    im = m.inference("bf16")
    a = im.generate([[1, 2], [3]], max_tokens=10, seed=7, top_p=0.9)
    assert a == im.generate([[1, 2], [3]], max_tokens=10, seed=7, top_p=0.9)
    assert a != im.generate([[1, 2], [3]], max_tokens=10, seed=8, top_p=0.9)
    seen = {0: [], 1: []}
    out, stats = im.generate([[1, 2], [3]], max_tokens=10, seed=7, top_p=0.9,
                             on_token=lambda i, t: seen[i].append(t), return_stats=True)
    assert out == a and [seen[0], seen[1]] == a
    assert stats["prefill_tokens"] == 3 and stats["decode_tokens"] == 18 and stats["decode_bytes"] > 0
    cut = im.generate([[1, 2], [3]], max_tokens=10, seed=7, top_p=0.9, eos=a[0][2])
    first = a[0].index(a[0][2])
    assert cut[0] == a[0][:first + 1]
    assert im.kv_dtype == "bf16" and m.inference("fp8").head == "bf16"


def test_fp8_weights_follow_fp32():
    m = make(seed=5)
    p = [[1, 2, 3, 4, 5, 6]]
    a = m.inference("fp32").session()
    b = m.inference("fp8-ue8m0").session()
    ia, ib = a.prefill(p), b.prefill(p)
    x, y = a.logits(ia[0]).astype(np.float64), b.logits(ib[0]).astype(np.float64)
    diff = 1 - 2 * (x * y).sum() / (x * x + y * y).sum()  # DeepGEMM's calc_diff
    assert 0 < diff < 1e-3


def test_bad_arguments():
    m = make()
    with pytest.raises(ValueError, match="prompt 0 is empty"):
        m.generate([[]], max_tokens=4)
    with pytest.raises(ValueError, match="vocabulary"):
        m.generate([[1, 29]], max_tokens=4)
    with pytest.raises(ValueError, match="max_tokens"):
        m.generate([[1] * 30], max_tokens=20)
    with pytest.raises(ValueError, match="temperature"):
        m.generate([[1]], 4, temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        m.generate([[1]], 4, top_p=1.5)
    with pytest.raises(ValueError, match="weights"):
        m.generate([[1]], 4, weights="int4")
    with pytest.raises(TypeError):
        m.generate("hello", 4)
    with pytest.raises(TypeError):
        m.generate([["a"]], 4)
    s = m.inference("fp32").session(1)
    ids = s.prefill([[1, 2]])
    with pytest.raises(ValueError, match="sequences"):
        s.prefill([[3]])  # one sequence at most
    s.release(ids[0])
    with pytest.raises(ValueError, match="released"):
        s.decode(ids, [1])


def test_an_moe_model_generates_what_its_forward_computes():
    # Issue 40: an MoE config (sigmoid gate, bias balance, a shared expert, MoE in layer 1 only) built from a
    # config and a state_dict that holds the router's bias: every step of a session (the prefill's contiguous
    # layout, the decode steps' masked slabs) against the TransformerLM's own forward over the whole text.
    cfg = dict(CFG, num_experts=4, top_k=2, d_expert=24, num_shared_experts=1, moe_layers=[1], router="sigmoid",
               balance="bias")
    sd = {k: np.array(v) for k, v in rm.TransformerLM(cfg, seed=3).state_dict().items()}
    assert not sd["layers.1.ffn.router.bias"].any()
    sd["layers.1.ffn.router.bias"] = np.random.default_rng(4).uniform(-0.3, 0.3, 4).astype(np.float32)
    m = rm.TransformerLM(cfg, sd)
    s = m.inference("fp32", block_size=4).session(max_sequences=3)
    texts = [[1, 2, 3], [4, 9, 2, 7, 7, 1, 3, 8, 5], [7]]
    ids = s.prefill(texts)
    for step in range(5):
        for i, t in zip(ids, texts):
            want = m(np.array([t]))[0, -1]
            assert np.abs(s.logits(i) - want).max() <= 1e-5 * np.abs(want).max()
        nxt = [(5 * step + j) % cfg["vocab_size"] for j in range(3)]
        s.decode(ids, nxt)
        for t, n in zip(texts, nxt):
            t.append(n)
    # The bias took part: the model without it computes other logits on these texts.
    unbiased = rm.TransformerLM(cfg, dict(sd, **{"layers.1.ffn.router.bias": np.zeros(4, np.float32)}))
    x = np.array([texts[1]])
    assert np.abs(m(x) - unbiased(x)).max() > 1e-3 * np.abs(m(x)).max()
    # Every format runs it; FP8 follows fp32 by DeepGEMM's calc_diff, through its more GEMMs
    # (tests/generate's GenerateMoe.Fp8ExpertsStayWithinDeepGemmsCalcDiffOfFp32).
    out, stats = m.generate([[1, 2, 3]], max_tokens=4, weights="fp8", temperature=0, return_stats=True)
    assert len(out[0]) == 4 and stats["decode_bytes"] > 0
    # One sequence: each MoE layer read exactly its token's top-k experts at every step.
    assert stats["decode_experts_read"] == cfg["top_k"]
    a, b = m.inference("fp32").session(), m.inference("fp8").session()
    ia, ib = a.prefill([texts[1]]), b.prefill([texts[1]])
    x, y = a.logits(ia[0]).astype(np.float64), b.logits(ib[0]).astype(np.float64)
    assert 0 < 1 - 2 * (x * y).sum() / (x * x + y * y).sum() < 2.5e-3
    assert m.inference("bf16").weight_bytes() < m.inference("fp32").weight_bytes()
