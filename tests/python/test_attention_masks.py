"""flash-attn's window_size, softcap and flash_attn_varlen_func against an fp64 NumPy reference (forward
and backward written out here), varlen against each sequence alone, the refusals, and torch autograd
through the custom ops where torch is installed."""
import numpy as np
import pytest

import ridge.attention as ra


def ref_head(q, k, v, do, scale, causal, window, softcap):
    """One head in fp64: q (n_q, d), k, v (n_k, d), do (n_q, d) -> o, lse, dq, dk, dv."""
    q, k, v, do = (x.astype(np.float64) for x in (q, k, v, do))
    nq, nk = q.shape[0], k.shape[0]
    left, right = window
    if causal:
        right = 0
    i, j = np.arange(nq)[:, None], np.arange(nk)[None, :]
    vis = np.ones((nq, nk), bool)
    if left >= 0:
        vis &= j >= i + nk - nq - left
    if right >= 0:
        vis &= j <= i + nk - nq + right
    s = q @ k.T * scale
    g = np.ones_like(s)
    if softcap > 0:
        t = np.tanh(s / softcap)
        s, g = softcap * t, 1 - t * t
    s = np.where(vis, s, -np.inf)
    mx = s.max(-1, keepdims=True)
    seen = np.isfinite(mx)
    mx = np.where(seen, mx, 0.0)
    p = np.where(vis, np.exp(s - mx), 0.0)
    l = p.sum(-1, keepdims=True)
    p = np.divide(p, l, out=np.zeros_like(p), where=l > 0)
    lse = np.where(seen[:, 0], mx[:, 0] + np.log(np.where(l[:, 0] > 0, l[:, 0], 1.0)), -np.inf)
    o = p @ v
    dp = do @ v.T
    ds = p * (dp - (p * dp).sum(-1, keepdims=True)) * g * scale
    return o, lse, ds @ k, ds.T @ q, p.T @ do


def ref_dense(q, k, v, do, scale, causal, window, softcap):
    """(b, s, h, d) layout, GQA: dk, dv summed over each group."""
    b, nq, h, d = q.shape
    kvh = k.shape[2]
    rep = h // kvh
    o, dq = np.zeros(q.shape), np.zeros(q.shape)
    dk, dv = np.zeros(k.shape), np.zeros(v.shape)
    lse = np.zeros((b, h, nq))
    for bb in range(b):
        for hh in range(h):
            r = ref_head(q[bb, :, hh], k[bb, :, hh // rep], v[bb, :, hh // rep], do[bb, :, hh], scale, causal, window,
                         softcap)
            o[bb, :, hh], lse[bb, hh], dq[bb, :, hh] = r[0], r[1], r[2]
            dk[bb, :, hh // rep] += r[3]
            dv[bb, :, hh // rep] += r[4]
    return o, lse, dq, dk, dv


def close(a, b, tol=1e-5):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert np.max(np.abs(a - b)) <= tol * max(np.max(np.abs(b)), 1.0)


@pytest.mark.parametrize("causal,window,softcap", [(False, (-1, -1), 30.0), (True, (-1, -1), 0.0),
                                                   (False, (5, 2), 0.0), (True, (9, -1), 5.0), (False, (0, 0), 50.0),
                                                   (False, (400, 400), 0.0)])
def test_dense_masks_and_softcap_match_reference(isa, rng, causal, window, softcap):
    b, nq, nk, h, kvh, d = 2, 37, 45, 4, 1, 32
    q = rng.standard_normal((b, nq, h, d), dtype=np.float32)
    k = rng.standard_normal((b, nk, kvh, d), dtype=np.float32)
    v = rng.standard_normal((b, nk, kvh, d), dtype=np.float32)
    do = rng.standard_normal((b, nq, h, d), dtype=np.float32)
    o, lse, _ = ra.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap, return_attn_probs=True)
    want = ref_dense(q, k, v, do, d ** -0.5, causal, window, softcap)
    close(o, want[0])
    finite = np.isfinite(want[1])
    assert np.all(np.isneginf(lse[~finite]))
    close(lse[finite], want[1][finite])
    dq, dk, dv = ra.flash_attn_backward(do, q, k, v, o, lse, causal=causal, window_size=window, softcap=softcap)
    for got, w in zip((dq, dk, dv), want[2:]):
        close(got, w, 2e-5)


def pack(lens, h, d, rng, dtype=np.float32):
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return cu, rng.standard_normal((int(cu[-1]), h, d)).astype(dtype)


@pytest.mark.parametrize("causal,window,softcap", [(True, (-1, -1), 0.0), (False, (6, 3), 30.0)])
def test_varlen_equals_each_sequence_alone(isa, rng, causal, window, softcap):
    lq, lk = [5, 0, 70, 1, 33], [9, 4, 64, 0, 33]
    h, kvh, d = 4, 2, 64
    cq, q = pack(lq, h, d, rng)
    ck, k = pack(lk, kvh, d, rng)
    _, v = pack(lk, kvh, d, rng)
    _, do = pack(lq, h, d, rng)
    o, lse, none = ra.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=causal, window_size=window,
                                             softcap=softcap, return_attn_probs=True)
    assert none is None and lse.shape == (h, cq[-1])
    dq, dk, dv = ra.flash_attn_varlen_backward(do, q, k, v, o, lse, cq, ck, max(lq), max(lk), causal=causal,
                                               window_size=window, softcap=softcap)
    for b in range(len(lq)):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if lq[b] == 0:
            assert not np.any(dk[ks]) and not np.any(dv[ks])
            continue
        if lk[b] == 0:
            assert not np.any(o[qs]) and np.all(np.isneginf(lse[:, qs])) and not np.any(dq[qs])
            continue
        # Alone through the dense API: the same bits.
        o1, lse1 = ra.flash_attn_forward(q[None, qs], k[None, ks], v[None, ks], causal=causal, window_size=window,
                                         softcap=softcap)
        np.testing.assert_array_equal(o[qs], o1[0])
        np.testing.assert_array_equal(lse[:, qs], lse1[0])
        g1 = ra.flash_attn_backward(do[None, qs], q[None, qs], k[None, ks], v[None, ks], o1, lse1, causal=causal,
                                    window_size=window, softcap=softcap)
        for got, alone in zip((dq[qs], dk[ks], dv[ks]), g1):
            np.testing.assert_array_equal(got, alone[0])
        want = ref_dense(q[None, qs], k[None, ks], v[None, ks], do[None, qs], d ** -0.5, causal, window, softcap)
        close(o[qs], want[0][0])
        for got, w in zip((dq[qs], dk[ks], dv[ks]), want[2:]):
            close(got, w[0], 2e-5)


def test_varlen_bf16_runs_close_to_fp32(rng):
    import ml_dtypes

    lq = [17, 40]
    cq, q = pack(lq, 2, 32, rng)
    _, k = pack(lq, 2, 32, rng)
    _, v = pack(lq, 2, 32, rng)
    o32 = ra.flash_attn_varlen_func(q, k, v, cq, cq, 40, 40, causal=True, softcap=20.0)
    bf = [x.astype(ml_dtypes.bfloat16) for x in (q, k, v)]
    o16 = ra.flash_attn_varlen_func(*bf, cq, cq, 40, 40, causal=True, softcap=20.0)
    assert o16.dtype == ml_dtypes.bfloat16
    assert np.max(np.abs(o16.astype(np.float32) - o32)) < 5e-2


def test_refusals_and_bad_arguments(rng):
    q = rng.standard_normal((1, 8, 2, 32), dtype=np.float32)
    with pytest.raises(ValueError, match="dropout_p"):
        ra.flash_attn_func(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="alibi_slopes"):
        ra.flash_attn_func(q, q, q, alibi_slopes=np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"window_size\[0\]"):
        ra.flash_attn_func(q, q, q, window_size=(-2, 0))
    with pytest.raises(ValueError, match="window_size"):
        ra.flash_attn_func(q, q, q, window_size=3)
    with pytest.raises(ValueError, match="softcap"):
        ra.flash_attn_func(q, q, q, softcap=-1.0)
    p = q[0]
    cu = np.array([0, 3, 8], np.int32)
    with pytest.raises(ValueError, match="dropout_p"):
        ra.flash_attn_varlen_func(p, p, p, cu, cu, 5, 5, dropout_p=0.5)
    with pytest.raises(ValueError, match="block_table"):
        ra.flash_attn_varlen_func(p, p, p, cu, cu, 5, 5, block_table=np.zeros((2, 1), np.int32))
    with pytest.raises(ValueError, match="cu_seqlens_q must not decrease"):
        ra.flash_attn_varlen_func(p, p, p, np.array([0, 6, 5, 8], np.int32), np.array([0, 3, 5, 8], np.int32), 6, 5)
    with pytest.raises(ValueError, match=r"cu_seqlens_k\[0\] must be 0"):
        ra.flash_attn_varlen_func(p, p, p, cu, np.array([1, 3, 8], np.int32), 5, 5)
    with pytest.raises(ValueError, match="cu_seqlens_q's last entry"):
        ra.flash_attn_varlen_func(p, p, p, np.array([0, 3, 7], np.int32), cu, 5, 5)
    with pytest.raises(ValueError, match="max_seqlen_q"):
        ra.flash_attn_varlen_func(p, p, p, cu, cu, 4, 5)
    with pytest.raises(TypeError, match="cu_seqlens_q"):
        ra.flash_attn_varlen_func(p, p, p, np.array([0.0, 3, 8]), cu, 5, 5)


def test_visible_scores():
    assert ra.attention_visible_scores(4, 4) == 16
    assert ra.attention_visible_scores(4, 4, causal=True) == 10
    assert ra.attention_visible_scores(5, 5, window_size=(1, 0)) == 9


def test_torch_autograd_through_the_custom_ops(rng):
    torch = pytest.importorskip("torch")
    b, n, h, d = 1, 29, 2, 32
    q, k, v, do = (rng.standard_normal((b, n, h, d), dtype=np.float32) for _ in range(4))
    want = ref_dense(q, k, v, do, d ** -0.5, True, (7, -1), 30.0)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    o = ra.flash_attn_func(tq, tk, tv, causal=True, window_size=(7, -1), softcap=30.0)
    o.backward(torch.tensor(do))
    close(o.detach().numpy(), want[0])
    for t, w in zip((tq, tk, tv), want[2:]):
        close(t.grad.numpy(), w, 2e-5)
    # varlen: two sequences packed
    cu = torch.tensor([0, 10, n], dtype=torch.int32)
    pq, pk, pv = (torch.tensor(x[0], requires_grad=True) for x in (q, k, v))
    po = ra.flash_attn_varlen_func(pq, pk, pv, cu, cu, 19, 19, causal=True)
    po.backward(torch.tensor(do[0]))
    for lo, hi in ((0, 10), (10, n)):
        w = ref_dense(q[:, lo:hi], k[:, lo:hi], v[:, lo:hi], do[:, lo:hi], d ** -0.5, True, (-1, -1), 0.0)
        close(po.detach().numpy()[lo:hi], w[0][0])
        for t, ww in zip((pq, pk, pv), w[2:]):
            close(t.grad.numpy()[lo:hi], ww[0], 2e-5)
