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
