"""ridge.attention against an fp64 NumPy reference, in flash-attn's (batch, seq, heads, d) layout."""
import sys

import ml_dtypes
import numpy as np
import pytest

import ridge.attention as ra


def ref_forward(q, k, v, scale, causal):
    q, k, v = (x.astype(np.float64).transpose(0, 2, 1, 3) for x in (q, k, v))  # b h s d
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if causal:
        nq, nk = s.shape[-2:]
        mask = np.arange(nk)[None, :] > np.arange(nq)[:, None] + (nk - nq)
        s = np.where(mask, -np.inf, s)
    mx = s.max(-1, keepdims=True)
    p = np.exp(s - mx)
    lse = np.log(p.sum(-1)) + mx[..., 0]
    o = (p / p.sum(-1, keepdims=True)) @ v
    return o.transpose(0, 2, 1, 3), lse


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads,kv_heads", [(2, 2), (4, 1)])
def test_forward_matches_reference(isa, rng, causal, heads, kv_heads):
    b, s, d = 2, 37, 32
    q = rng.standard_normal((b, s, heads, d), dtype=np.float32)
    k = rng.standard_normal((b, s, kv_heads, d), dtype=np.float32)
    v = rng.standard_normal((b, s, kv_heads, d), dtype=np.float32)
    o = ra.flash_attn_func(q, k, v, causal=causal)
    want, want_lse = ref_forward(q, k, v, d ** -0.5, causal)
    np.testing.assert_allclose(o, want, atol=2e-5)
    o2, lse = ra.flash_attn_forward(q, k, v, softmax_scale=0.3, causal=causal)
    want2, want_lse2 = ref_forward(q, k, v, 0.3, causal)
    np.testing.assert_allclose(o2, want2, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse2, atol=2e-5)
    assert sys.getrefcount(o) == 2


def test_bf16_and_strided_inputs(rng):
    b, s, h, d = 1, 20, 2, 64
    qkv = rng.standard_normal((b, s, 3, h, d)).astype(ml_dtypes.bfloat16)  # packed qkv: strided views
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    o = ra.flash_attn_func(q, k, v, causal=True)
    assert o.dtype == ml_dtypes.bfloat16
    want, _ = ref_forward(q, k, v, d ** -0.5, True)
    np.testing.assert_allclose(o.astype(np.float64), want, atol=2e-2)


def test_output_into_caller_buffer(rng):
    q = rng.standard_normal((1, 8, 1, 16), dtype=np.float32)
    o = np.zeros_like(q)
    lse = np.zeros((1, 1, 8), dtype=np.float32)
    o2, lse2 = ra.flash_attn_forward(q, q, q, o=o, lse=lse)
    assert o2 is o and lse2 is lse and np.abs(o).sum() > 0


def test_backward_matches_finite_differences(rng):
    b, s, h, d = 1, 6, 2, 16
    q, k, v = (rng.standard_normal((b, s, h, d)) for _ in range(3))
    do = rng.standard_normal((b, s, h, d))
    f32 = [x.astype(np.float32) for x in (q, k, v, do)]
    o, lse = ra.flash_attn_forward(*f32[:3], causal=True)
    dq, dk, dv = ra.flash_attn_backward(f32[3], *f32[:3], o, lse, causal=True)

    def loss(qq, kk, vv):
        return (ref_forward(qq, kk, vv, d ** -0.5, True)[0] * do).sum()

    eps = 1e-6
    for got, idx in ((dq, 0), (dk, 1), (dv, 2)):
        args = [q, k, v]
        num = np.zeros_like(args[idx])
        it = np.nditer(args[idx], flags=["multi_index"])
        for _ in it:
            mi = it.multi_index
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[idx][mi] += eps
            minus[idx][mi] -= eps
            num[mi] = (loss(*plus) - loss(*minus)) / (2 * eps)
        np.testing.assert_allclose(got, num, atol=1e-4)


def test_errors(rng):
    q = rng.standard_normal((1, 8, 2, 16), dtype=np.float32)
    with pytest.raises(ValueError, match=r"q has rank 3, expected rank 4 \[batch, seqlen, heads, head_dim\]"):
        ra.flash_attn_func(q[0], q[0], q[0])
    # A reversed (or broadcast) view is refused by the library's view check, naming the argument.
    with pytest.raises(ValueError, match=r"^q\.stride\[2\] = 0 is not accepted \(expected a positive stride"):
        ra.flash_attn_func(np.broadcast_to(q[:, :1], q.shape), q, q)
    with pytest.raises(ValueError, match="kv_heads|multiple"):
        ra.flash_attn_func(q, np.repeat(q, 2, axis=2)[:, :, :3], np.repeat(q, 2, axis=2)[:, :, :3])
    with pytest.raises(TypeError, match="k: expected"):
        ra.flash_attn_func(q, q.astype(np.float64), q)
    with pytest.raises(ValueError, match="head dimension"):
        ra.flash_attn_func(q[..., :8], q[..., :8], q[..., :8])
    with pytest.raises(ValueError, match="dropout_p"):
        ra.flash_attn_func(q, q, q, 0.1)
    with pytest.raises(ValueError, match="softmax_scale"):
        ra.flash_attn_func(q, q, q, softmax_scale=-1.0)


def test_output_aliasing_an_input_is_a_value_error(rng):
    """An output sharing memory with an input would be read after it is written: ValueError naming both."""
    b, s, h, d = 1, 16, 2, 32
    q, k, v, do = (rng.standard_normal((b, s, h, d), dtype=np.float32) for _ in range(4))
    with pytest.raises(ValueError, match="attention: output o overlaps input q in memory"):
        ra.flash_attn_forward(q, k, v, o=q)
    with pytest.raises(ValueError, match="output o overlaps input v"):
        ra.flash_attn_forward(q, k, v, o=v)
    with pytest.raises(ValueError, match="output lse overlaps input k"):
        ra.flash_attn_forward(q, k, v, lse=k.reshape(-1)[: b * h * s].reshape(b, h, s))
    o, lse = ra.flash_attn_forward(q, k, v)
    with pytest.raises(ValueError, match="output dq overlaps input q"):
        ra.flash_attn_backward(do, q, k, v, o, lse, dq=q)
    with pytest.raises(ValueError, match="output dv overlaps input do"):
        ra.flash_attn_backward(do, q, k, v, o, lse, dv=do)
    dk = np.empty_like(k)
    with pytest.raises(ValueError, match="attention: outputs dk and dv overlap in memory"):
        ra.flash_attn_backward(do, q, k, v, o, lse, dk=dk, dv=dk)


def test_packed_qkv_slices_are_not_aliases(rng):
    """q, k, v and dq, dk, dv as interleaved slices of packed (b, s, 3, h, d) buffers are disjoint: they run
    and give exactly the results of separate arrays."""
    b, s, h, d = 2, 9, 3, 32
    qkv = rng.standard_normal((b, s, 3, h, d), dtype=np.float32)
    do = rng.standard_normal((b, s, h, d), dtype=np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    o, lse = ra.flash_attn_forward(q, k, v, causal=True)
    dqkv = np.zeros_like(qkv)
    ra.flash_attn_backward(do, q, k, v, o, lse, causal=True, dq=dqkv[:, :, 0], dk=dqkv[:, :, 1], dv=dqkv[:, :, 2])
    qc, kc, vc = (np.ascontiguousarray(x) for x in (q, k, v))
    o2, lse2 = ra.flash_attn_forward(qc, kc, vc, causal=True)
    dq, dk, dv = ra.flash_attn_backward(do, qc, kc, vc, o2, lse2, causal=True)
    np.testing.assert_array_equal(o, o2)
    np.testing.assert_array_equal(lse, lse2)
    np.testing.assert_array_equal(dqkv[:, :, 0], dq)
    np.testing.assert_array_equal(dqkv[:, :, 1], dk)
    np.testing.assert_array_equal(dqkv[:, :, 2], dv)


# ---- flash_attn_with_kvcache: decode attention over a (paged) KV cache ----

def ref_kvcache(q, keys, values, scale, causal):
    """fp64 reference: q (b, s_q, h, d); keys[b], values[b] (len_b, h_kv, d) the keys each sequence holds.
    A query that sees no key gets o = 0 and lse = -inf."""
    b, sq, h, d = q.shape
    o = np.zeros((b, sq, h, d))
    lse = np.full((b, h, sq), -np.inf)
    for i in range(b):
        kk, vv = keys[i].astype(np.float64), values[i].astype(np.float64)
        n, kvh = kk.shape[0], kk.shape[1]
        for t in range(sq):
            visible = min(n, max(0, t + n - sq + 1)) if causal else n
            if visible == 0:
                continue
            for head in range(h):
                g = head // (h // kvh)
                s = kk[:visible, g] @ q[i, t, head].astype(np.float64) * scale
                m = s.max()
                p = np.exp(s - m)
                o[i, t, head] = p @ vv[:visible, g] / p.sum()
                lse[i, head, t] = m + np.log(p.sum())
    return o, lse


def paged(rng, lens, block_size, kv_heads, d, dtype, spare=3):
    """A pool holding the sequences' keys in shuffled blocks (more blocks than used), its block table
    (-1 past each sequence's blocks) and the keys and values of each sequence gathered by hand."""
    used = [-(-n // block_size) for n in lens]
    max_blocks = max(used) + 1
    num_blocks = sum(used) + spare
    k_cache = rng.standard_normal((num_blocks, block_size, kv_heads, d)).astype(dtype)
    v_cache = rng.standard_normal((num_blocks, block_size, kv_heads, d)).astype(dtype)
    ids = rng.permutation(num_blocks).astype(np.int32)
    table = np.full((len(lens), max_blocks), -1, dtype=np.int32)
    keys, values, nxt = [], [], 0
    for i, n in enumerate(lens):
        table[i, :used[i]] = ids[nxt:nxt + used[i]]
        nxt += used[i]
        pos = np.arange(n)
        blocks, rows = table[i, pos // block_size], pos % block_size
        keys.append(k_cache[blocks, rows])
        values.append(v_cache[blocks, rows])
    return k_cache, v_cache, table, keys, values


def close(o, want, bf16):
    """fp32 within 1e-5 of the largest |o|; bf16 rounds the fp32 result once: half an ulp (2^-8 |o|)."""
    o = o.astype(np.float64)
    top = np.abs(want).max() if want.size else 0.0
    if bf16:
        assert np.all(np.abs(o - want) <= 2.0**-8 * np.abs(want) + 2e-5 * top)
    else:
        assert np.all(np.abs(o - want) <= 1e-5 * top)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("seqlen_q", [1, 3])
def test_kvcache_paged_matches_reference(isa, rng, dtype, seqlen_q):
    lens, block_size, kv_heads, heads, d = [0, 1, 15, 16, 17, 100], 16, 2, 8, 64
    k_cache, v_cache, table, keys, values = paged(rng, lens, block_size, kv_heads, d, dtype)
    q = rng.standard_normal((len(lens), seqlen_q, heads, d)).astype(dtype)
    want, want_lse = ref_kvcache(q, keys, values, d ** -0.5, True)
    for splits in (0, 1, 3):
        o, lse = ra.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array(lens, dtype=np.int32),
                                            block_table=table, num_splits=splits, return_softmax_lse=True)
        assert o.dtype == q.dtype and o.shape == q.shape and lse.dtype == np.float32
        close(o, want, dtype != np.float32)
        np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)


def test_kvcache_full_attention_and_custom_scale(rng):
    lens = [3, 40]
    k_cache, v_cache, table, keys, values = paged(rng, lens, 8, 1, 32, np.float32)
    q = rng.standard_normal((2, 5, 4, 32), dtype=np.float32)
    o = ra.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array(lens, dtype=np.int32),
                                   block_table=table, softmax_scale=0.3, causal=False)
    close(o, ref_kvcache(q, keys, values, 0.3, False)[0], False)


def test_kvcache_dense_append_in_place(rng):
    """Without block_table the cache is (batch, seqlen_cache, kv_heads, d); k and v land at cache_seqlens,
    the rest of the cache is untouched, cache_seqlens is not changed, and attention covers the new keys."""
    b, s_cache, kvh, h, d, n_new = 3, 20, 2, 4, 32, 2
    k_cache = rng.standard_normal((b, s_cache, kvh, d), dtype=np.float32)
    v_cache = rng.standard_normal((b, s_cache, kvh, d), dtype=np.float32)
    k_before, v_before = k_cache.copy(), v_cache.copy()
    lens = np.array([0, 7, 18], dtype=np.int32)
    k = rng.standard_normal((b, n_new, kvh, d), dtype=np.float32)
    v = rng.standard_normal((b, n_new, kvh, d), dtype=np.float32)
    q = rng.standard_normal((b, n_new, h, d), dtype=np.float32)
    o = ra.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lens)
    np.testing.assert_array_equal(lens, [0, 7, 18])
    k_want, v_want = k_before.copy(), v_before.copy()
    for i in range(b):
        k_want[i, lens[i]:lens[i] + n_new] = k[i]
        v_want[i, lens[i]:lens[i] + n_new] = v[i]
    np.testing.assert_array_equal(k_cache, k_want)
    np.testing.assert_array_equal(v_cache, v_want)
    keys = [k_cache[i, :lens[i] + n_new] for i in range(b)]
    values = [v_cache[i, :lens[i] + n_new] for i in range(b)]
    close(o, ref_kvcache(q, keys, values, d ** -0.5, True)[0], False)


def test_kvcache_paged_append_bf16(rng):
    lens, block_size = [5, 16, 30], 16
    grown = [n + 3 for n in lens]
    k_cache, v_cache, table, _, _ = paged(rng, grown, block_size, 1, 32, ml_dtypes.bfloat16)
    before = k_cache.copy()
    k = rng.standard_normal((3, 3, 1, 32)).astype(ml_dtypes.bfloat16)
    v = rng.standard_normal((3, 3, 1, 32)).astype(ml_dtypes.bfloat16)
    q = rng.standard_normal((3, 3, 2, 32)).astype(ml_dtypes.bfloat16)
    o = ra.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=np.array(lens, dtype=np.int32),
                                   block_table=table)
    changed = np.zeros(k_cache.shape[:2], dtype=bool)
    for i, n in enumerate(lens):
        for t in range(3):
            blk, row = table[i, (n + t) // block_size], (n + t) % block_size
            assert np.array_equal(k_cache[blk, row].view(np.uint16), k[i, t].view(np.uint16))
            assert np.array_equal(v_cache[blk, row].view(np.uint16), v[i, t].view(np.uint16))
            changed[blk, row] = True
    assert np.array_equal(k_cache[~changed].view(np.uint16), before[~changed].view(np.uint16))
    keys, values = [], []
    for i, n in enumerate(grown):
        pos = np.arange(n)
        keys.append(k_cache[table[i, pos // block_size], pos % block_size])
        values.append(v_cache[table[i, pos // block_size], pos % block_size])
    close(o, ref_kvcache(q, keys, values, 32 ** -0.5, True)[0], True)


def test_kvcache_seqlens_int_and_none(rng):
    k_cache = rng.standard_normal((2, 9, 1, 16), dtype=np.float32)
    v_cache = rng.standard_normal((2, 9, 1, 16), dtype=np.float32)
    q = rng.standard_normal((2, 1, 2, 16), dtype=np.float32)
    full = ra.flash_attn_with_kvcache(q, k_cache, v_cache)
    close(full, ref_kvcache(q, list(k_cache), list(v_cache), 0.25, True)[0], False)
    part = ra.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=4)
    close(part, ref_kvcache(q, list(k_cache[:, :4]), list(v_cache[:, :4]), 0.25, True)[0], False)


def test_kvcache_errors(rng):
    k_cache, v_cache, table, _, _ = paged(rng, [5, 20], 8, 2, 32, np.float32)
    q = rng.standard_normal((2, 1, 4, 32), dtype=np.float32)
    lens = np.array([5, 20], dtype=np.int32)
    call = ra.flash_attn_with_kvcache
    bad = table.copy()
    bad[1, 2] = 999
    with pytest.raises(ValueError, match=r"block_table\[1\]\[2\] = 999 is not a block of the cache"):
        call(q, k_cache, v_cache, cache_seqlens=lens, block_table=bad)
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\] = -1 is negative"):
        call(q, k_cache, v_cache, cache_seqlens=np.array([5, -1], dtype=np.int32), block_table=table)
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\] = 100 passes the block table's capacity"):
        call(q, k_cache, v_cache, cache_seqlens=np.array([5, 100], dtype=np.int32), block_table=table)
    with pytest.raises(ValueError, match="cache_seqlens has 3 entries, expected batch = 2"):
        call(q, k_cache, v_cache, cache_seqlens=np.array([5, 5, 5], dtype=np.int32), block_table=table)
    with pytest.raises(TypeError, match="block_table: expected an integer array"):
        call(q, k_cache, v_cache, cache_seqlens=lens, block_table=table.astype(np.float32))
    with pytest.raises(ValueError, match=r"block_table has rank 1, expected rank 2"):
        call(q, k_cache, v_cache, cache_seqlens=lens, block_table=table[0])
    with pytest.raises(ValueError, match="k, v: pass both"):
        call(q, k_cache, v_cache, k=q[:, :, :2], cache_seqlens=lens, block_table=table)
    with pytest.raises(ValueError, match="num_splits"):
        call(q, k_cache, v_cache, cache_seqlens=lens, block_table=table, num_splits=-1)
    with pytest.raises(ValueError, match="softmax_scale"):
        call(q, k_cache, v_cache, cache_seqlens=lens, block_table=table, softmax_scale=-1.0)
    with pytest.raises(ValueError, match=r"heads \(4\) must be a multiple of kv_heads \(3\)"):
        call(q, np.zeros((4, 8, 3, 32), np.float32), np.zeros((4, 8, 3, 32), np.float32),
             cache_seqlens=np.array([5, 7], dtype=np.int32), block_table=np.array([[0], [1]], dtype=np.int32))
    with pytest.raises(TypeError, match="k_cache: expected a fp32 array, got bf16"):
        call(q, k_cache.astype(ml_dtypes.bfloat16), v_cache, cache_seqlens=lens, block_table=table)
    with pytest.raises(ValueError, match="k_cache: without block_table"):
        call(q, k_cache, v_cache, cache_seqlens=lens)
    # An append that does not fit is refused before anything is written.
    before = k_cache.copy()
    new = rng.standard_normal((2, 2, 2, 32), dtype=np.float32)
    with pytest.raises(ValueError, match=r"block_table\[1\]\[3\] = -1 is not a block of the cache"):
        call(q, k_cache, v_cache, k=new, v=new, cache_seqlens=np.array([5, 23], dtype=np.int32), block_table=table)
    np.testing.assert_array_equal(k_cache, before)
    with pytest.raises(ValueError, match="k_cache: the array is read-only"):
        ro = k_cache.copy()
        ro.flags.writeable = False
        call(q, ro, v_cache, k=new, v=new, cache_seqlens=lens, block_table=table)


def test_kvcache_num_splits_heuristic():
    assert ra.kvcache_num_splits(4096, 1, 2) == 8
    assert ra.kvcache_num_splits(100, 1, 2) == 1
    assert ra.kvcache_num_splits(1 << 20, 16, 2) == 1
