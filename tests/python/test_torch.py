"""torch tensors: zero-copy in and out, bf16/fp8 dtypes, autograd, the custom op under torch.compile,
and CS336's FlashAttention2 interface. Skipped where torch is absent (CI)."""
import pytest

torch = pytest.importorskip("torch")

import ridge.attention as ra  # noqa: E402
import ridge.gemm as rg  # noqa: E402


def test_gemm_writes_into_tensor_bf16():
    torch.manual_seed(0)
    a = torch.randn(9, 70, dtype=torch.bfloat16)
    b = torch.randn(13, 70, dtype=torch.bfloat16)
    d = torch.empty(9, 13, dtype=torch.bfloat16)
    ptr = d.data_ptr()
    out = rg.bf16_gemm_nt(a, b, d)
    assert out is d and d.data_ptr() == ptr
    torch.testing.assert_close(d.float(), a.double().matmul(b.double().T).float(), atol=0.1, rtol=0.02)


def test_fp8_torch_tensors():
    x = torch.randn(17, 256)
    w = torch.randn(32, 256)
    xq, xs = rg.per_token_cast_to_fp8(x)
    wq, ws = rg.per_block_cast_to_fp8(w)
    assert xq.dtype == torch.float8_e4m3fn and ws.shape == (1, 2)
    d = rg.fp8_gemm_nt((xq, xs), (wq, ws))
    assert d.dtype == torch.bfloat16
    a = xq.float() * xs.repeat_interleave(128, dim=1)
    bb = wq.float() * ws.repeat_interleave(128, dim=0)[:32].repeat_interleave(128, dim=1)
    torch.testing.assert_close(d.float(), a @ bb.T, atol=0.05, rtol=0.02)


def _ref(q, k, v, causal):
    rep = q.shape[2] // k.shape[2]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    kt, vt = kt.repeat_interleave(rep, 1), vt.repeat_interleave(rep, 1)
    return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func_autograd_gqa(causal):
    torch.manual_seed(1)
    q = torch.randn(2, 33, 4, 32, dtype=torch.float64).float().requires_grad_()
    k = torch.randn(2, 33, 2, 32).requires_grad_()
    v = torch.randn(2, 33, 2, 32).requires_grad_()
    o = ra.flash_attn_func(q, k, v, causal=causal)
    o.sum().backward()  # an expanded (stride 0) gradient
    got = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    _ref(q, k, v, causal).sum().backward()
    torch.testing.assert_close(o, _ref(q, k, v, causal), atol=1e-5, rtol=1e-5)
    for g, x in zip(got, (q, k, v)):
        torch.testing.assert_close(g, x.grad, atol=1e-4, rtol=1e-4)


def test_custom_op_registered_and_compiles():
    assert hasattr(torch.ops.ridge, "flash_attn_fwd")
    torch.library.opcheck(torch.ops.ridge.flash_attn_fwd.default,
                          (torch.randn(1, 8, 2, 16), torch.randn(1, 8, 2, 16), torch.randn(1, 8, 2, 16), 0.25, True,
                           -1, 0, 0.0))

    def f(q, k, v):
        return ra.flash_attn_func(q, k, v, causal=True) * 2

    q = torch.randn(1, 16, 2, 32, requires_grad=True)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    out = compiled(q, q, q)
    torch.testing.assert_close(out, f(q, q, q))
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_flash_attention2_cs336_interface():
    torch.manual_seed(2)
    q, k, v = (torch.randn(3, 40, 64, requires_grad=True) for _ in range(3))
    o = ra.FlashAttention2.apply(q, k, v, True)
    # exactly one extra saved tensor: L (batch, seq)
    saved = o.grad_fn.saved_tensors
    known = {x.data_ptr() for x in (q, k, v, o)}
    extra = [t for t in saved if t.data_ptr() not in known]
    assert len(extra) == 1 and extra[0].shape == (3, 40)
    s = q @ k.transpose(-1, -2) / 8
    s = s.masked_fill(torch.ones(40, 40, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(extra[0], torch.logsumexp(s, -1), atol=1e-5, rtol=1e-5)
    want = torch.softmax(s, -1) @ v
    torch.testing.assert_close(o, want, atol=1e-5, rtol=1e-5)
    do = torch.randn_like(o)
    got = torch.autograd.grad(o, (q, k, v), do)
    ref = torch.autograd.grad(want, (q, k, v), do)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4)


def test_cuda_or_meta_tensor_is_a_type_error():
    q = torch.empty(1, 8, 1, 16, device="meta")
    with pytest.raises((TypeError, ValueError, NotImplementedError, RuntimeError)):
        ra.flash_attn_forward(q, q, q)
