"""ridge.gemm against NumPy references (fp64 products of the same rounded inputs)."""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import ridge
import ridge.gemm as rg

BF16 = ml_dtypes.bfloat16
FP8 = ml_dtypes.float8_e4m3fn

LAYOUT_SHAPES = {"nt": lambda m, n, k: ((m, k), (n, k)), "nn": lambda m, n, k: ((m, k), (k, n)),
                 "tn": lambda m, n, k: ((k, m), (k, n)), "tt": lambda m, n, k: ((k, m), (n, k))}


def ref(layout, a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    a64 = a64 if layout[0] == "n" else a64.T
    b64 = b64.T if layout[1] == "t" else b64
    return a64 @ b64


@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 17, 129), (33, 5, 64), (64, 48, 300)])
def test_fp32_layouts(isa, rng, layout, shape):
    m, n, k = shape
    sa, sb = LAYOUT_SHAPES[layout](m, n, k)
    a = rng.standard_normal(sa, dtype=np.float32)
    b = rng.standard_normal(sb, dtype=np.float32)
    d = np.full((m, n), np.nan, dtype=np.float32)
    got = getattr(rg, f"fp32_gemm_{layout}")(a, b, d)
    assert got is d  # written in place, the caller's buffer returned
    want = ref(layout, a, b)
    tol = 1e-5 * k * np.abs(a).max() * np.abs(b).max() + 1e-6
    np.testing.assert_allclose(d, want, atol=tol, rtol=0)


@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("out", [np.float32, BF16])
def test_bf16_layouts_with_c(isa, rng, layout, out):
    m, n, k = 19, 37, 130
    sa, sb = LAYOUT_SHAPES[layout](m, n, k)
    a = rng.standard_normal(sa).astype(BF16)
    b = rng.standard_normal(sb).astype(BF16)
    c = rng.standard_normal((m, n)).astype(out)
    d = np.zeros((m, n), dtype=out)
    getattr(rg, f"bf16_gemm_{layout}")(a, b, d, c)
    want = ref(layout, a, b) + c.astype(np.float64)
    tol = 1e-5 * k * 16 + (2.0 ** -8) * np.abs(want).max() * (out is BF16)
    np.testing.assert_allclose(d.astype(np.float64), want, atol=tol + 1e-5, rtol=0)


def test_strided_views_read_in_place(rng):
    big = rng.standard_normal((40, 300), dtype=np.float32)
    a = big[3:20, 10:140]  # row stride 300, not contiguous
    b = rng.standard_normal((11, 130), dtype=np.float32)
    dbig = np.zeros((17, 50), dtype=np.float32)
    d = dbig[:, 5:16]
    rg.fp32_gemm_nt(a, b, d)
    np.testing.assert_allclose(dbig[:, 5:16], a.astype(np.float64) @ b.T.astype(np.float64), atol=1e-3)
    assert not dbig[:, :5].any() and not dbig[:, 16:].any()  # nothing outside the view was touched


def test_allocates_when_d_is_none(rng):
    a = rng.standard_normal((5, 8), dtype=np.float32)
    b = rng.standard_normal((8, 3), dtype=np.float32)
    d = rg.fp32_gemm_nn(a, b)
    assert d.shape == (5, 3) and d.dtype == np.float32
    assert sys.getrefcount(d) == 2  # only `d` and getrefcount's argument hold it
    np.testing.assert_allclose(d, a @ b, atol=1e-5)


def _fp8_ref(q, s_rows, k):
    """Dequantises fp8 values with per-row-block scales s (rows x ceil(k/128)) expanded to [m,k]."""
    cols = np.repeat(s_rows, 128, axis=1)[:, :k]
    return q.astype(np.float64) * cols


@pytest.mark.parametrize("shape", [(1, 1, 1), (9, 130, 257), (64, 256, 128)])
@pytest.mark.parametrize("out", [BF16, np.float32])
def test_fp8_gemm_nt_matches_dequantized_product(isa, rng, shape, out):
    m, n, k = shape
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    xq, xs = rg.per_token_cast_to_fp8(x)
    wq, ws = rg.per_block_cast_to_fp8(w)
    assert xq.dtype == FP8 and xs.shape == (m, (k + 127) // 128)
    assert ws.shape == ((n + 127) // 128, (k + 127) // 128)
    d = np.empty((m, n), dtype=out)
    rg.fp8_gemm_nt((xq, xs), (wq, ws), d)
    a = _fp8_ref(xq, xs, k)
    b = _fp8_ref(wq, np.repeat(ws, 128, axis=0)[:n], k)
    want = a @ b.T
    tol = 1e-4 * np.abs(a).max() * np.abs(b).max() * k + (2.0 ** -8) * np.abs(want).max() * (out is BF16)
    np.testing.assert_allclose(d.astype(np.float64), want, atol=tol + 1e-6, rtol=0)
    # and the quantisation itself: close to x within fp8's relative step
    np.testing.assert_allclose(a, x, atol=np.abs(x).max() / 8)


def test_cast_matches_numpy_definition(rng):
    x = rng.standard_normal((5, 200), dtype=np.float32) * 3
    q, s = rg.per_token_cast_to_fp8(x)
    for r in range(5):
        for kb in range(2):
            blk = x[r, kb * 128:(kb + 1) * 128]
            scale = max(np.abs(blk).max(), 1e-4) / 448
            assert s[r, kb] == pytest.approx(scale, rel=1e-6)
            want = (blk / np.float32(scale)).astype(FP8)
            np.testing.assert_array_equal(q[r, kb * 128:(kb + 1) * 128].view(np.uint8), want.view(np.uint8))


def test_grouped_contiguous_and_masked(isa, rng):
    g, n, k = 3, 40, 200
    align = rg.get_mk_alignment_for_contiguous_layout()
    assert align >= 1 and rg.get_m_alignment_for_contiguous_layout() == align
    counts = [align, 2 * align, align]
    m_sum = sum(counts)
    x = rng.standard_normal((m_sum, k), dtype=np.float32)
    w = rng.standard_normal((g, n, k), dtype=np.float32)
    xq, xs = rg.per_token_cast_to_fp8(x)
    wq = np.empty((g, n, k), dtype=FP8)
    ws = np.empty((g, 1, 2), dtype=np.float32)
    for i in range(g):
        rg.per_block_cast_to_fp8(w[i], q=wq[i], scales=ws[i])
    m_indices = np.repeat(np.arange(g, dtype=np.int32), counts)
    m_indices[align - 3:align] = -1  # padding rows are skipped
    d = np.full((m_sum, n), 7, dtype=BF16)
    rg.m_grouped_fp8_gemm_nt_contiguous((xq, xs), (wq, ws), d, m_indices)
    a = _fp8_ref(xq, xs, k)
    for r in range(m_sum):
        gi = m_indices[r]
        if gi < 0:
            assert (d[r].astype(np.float32) == 7).all()
            continue
        want = a[r] @ _fp8_ref(wq[gi], np.repeat(ws[gi], 128, axis=0)[:n], k).T
        np.testing.assert_allclose(d[r].astype(np.float64), want, atol=0.02 * np.abs(want).max() + 1e-3)

    m_max = 24
    xa = rng.standard_normal((g, m_max, k), dtype=np.float32)
    aq = np.empty((g, m_max, k), dtype=FP8)
    asc = np.empty((g, m_max, 2), dtype=np.float32)
    for i in range(g):
        rg.per_token_cast_to_fp8(xa[i], q=aq[i], scales=asc[i])
    masked_m = np.array([0, 5, 24], dtype=np.int32)
    dm = np.full((g, m_max, n), 7, dtype=BF16)
    rg.m_grouped_fp8_gemm_nt_masked((aq, asc), (wq, ws), dm, masked_m, expected_m=12)
    for i in range(g):
        want = _fp8_ref(aq[i], asc[i], k) @ _fp8_ref(wq[i], np.repeat(ws[i], 128, axis=0)[:n], k).T
        mm = masked_m[i]
        np.testing.assert_allclose(dm[i, :mm].astype(np.float64), want[:mm], atol=0.02 * np.abs(want).max() + 1e-3)
        assert (dm[i, mm:].astype(np.float32) == 7).all()


def _layout_of(counts, align):
    """The contiguous layout of counts[g] rows per group, each padded with -1 to the alignment."""
    idx = []
    for g, c in enumerate(counts):
        idx += [g] * c + [-1] * (-c % align)
    return np.array(idx, dtype=np.int32)


@pytest.mark.parametrize("kind", ["fp32", "bf16"])
@pytest.mark.parametrize("out_dtype", [np.float32, BF16])
def test_m_grouped_contiguous_and_masked_fp32_bf16(isa, rng, kind, out_dtype):
    in_dtype = np.float32 if kind == "fp32" else BF16
    g, n, k = 4, 37, 129
    m_indices = _layout_of([70, 0, 1, 130], rg.get_mk_alignment_for_contiguous_layout())
    a = rng.standard_normal((len(m_indices), k)).astype(in_dtype)
    tol = 1e-5 * k * 16 + 1e-5
    for layout in ("nt", "nn"):
        b = rng.standard_normal((g, n, k) if layout == "nt" else (g, k, n)).astype(in_dtype)
        d = np.full((len(m_indices), n), 7, dtype=out_dtype)
        got = getattr(rg, f"m_grouped_{kind}_gemm_{layout}_contiguous")(a, b, d, m_indices)
        assert got is d
        for r, gi in enumerate(m_indices):
            if gi < 0:
                assert (d[r].astype(np.float32) == 7).all(), "padding rows are left untouched"
                continue
            want = ref(layout, a[r:r + 1], b[gi])[0]
            bound = tol + (2.0 ** -8) * np.abs(want) * (out_dtype is BF16)
            np.testing.assert_array_less(np.abs(d[r].astype(np.float64) - want), bound)

    m_max = 20
    masked_m = np.array([0, 5, 20, 16], dtype=np.int32)
    am = rng.standard_normal((g, m_max, k)).astype(in_dtype)
    b = rng.standard_normal((g, n, k)).astype(in_dtype)
    dm = np.full((g, m_max, n), 7, dtype=out_dtype)
    getattr(rg, f"m_grouped_{kind}_gemm_nt_masked")(am, b, dm, masked_m, expected_m=10)
    for i in range(g):
        mm = masked_m[i]
        want = ref("nt", am[i, :mm], b[i])
        bound = tol + (2.0 ** -8) * np.abs(want) * (out_dtype is BF16)
        np.testing.assert_array_less(np.abs(dm[i, :mm].astype(np.float64) - want), bound)
        assert (dm[i, mm:].astype(np.float32) == 7).all(), "rows past masked_m are left untouched"


@pytest.mark.parametrize("kind", ["fp32", "bf16"])
def test_k_grouped_weight_gradients(isa, rng, kind):
    in_dtype = np.float32 if kind == "fp32" else BF16
    counts, m, n = [70, 0, 1, 130], 37, 29
    k_indices = _layout_of(counts, rg.get_mk_alignment_for_contiguous_layout())
    a = rng.standard_normal((len(k_indices), m)).astype(in_dtype)
    b = rng.standard_normal((len(k_indices), n)).astype(in_dtype)
    a[k_indices < 0] = np.nan  # padding rows are never read
    b[k_indices < 0] = np.nan
    c = rng.standard_normal((len(counts), m, n)).astype(np.float32)
    fn = getattr(rg, f"k_grouped_{kind}_gemm_tn_contiguous")
    d = fn(a, b, np.full((len(counts), m, n), 7, dtype=np.float32), k_indices)
    acc = c.copy()
    fn(a, b, acc, k_indices, c=acc)  # in place: acc += a_g.T @ b_g
    for gi in range(len(counts)):
        rows = k_indices == gi
        want = a[rows].astype(np.float64).T @ b[rows].astype(np.float64)
        tol = 1e-5 * max(counts[gi], 1) * 16 + 1e-5
        np.testing.assert_allclose(d[gi], want, atol=tol, rtol=0)  # an empty group: exactly 0
        np.testing.assert_allclose(acc[gi], want + c[gi], atol=tol, rtol=0)
    assert (d[1] == 0).all() and (acc[1] == c[1]).all()


def test_threads_roundtrip():
    old = rg.get_num_threads()
    rg.set_num_threads(1)
    assert rg.get_num_threads() == 1
    rg.set_num_threads(old)
    with pytest.raises(ValueError, match="n"):
        rg.set_num_threads(0)


def test_errors_are_python_exceptions(rng):
    a = rng.standard_normal((4, 8), dtype=np.float32)
    b = rng.standard_normal((5, 9), dtype=np.float32)
    d = np.zeros((4, 5), dtype=np.float32)
    with pytest.raises(ValueError, match="a has 8 columns but b has 9"):
        rg.fp32_gemm_nt(a, b, d)  # k mismatch
    with pytest.raises(TypeError, match="a: expected a bf16"):
        rg.bf16_gemm_nt(a, b[:, :8], d)
    with pytest.raises(TypeError):
        rg.fp32_gemm_nt(a.astype(np.float64), b[:, :8], d)
    # Shapes and strides: the library's view check and its messages, as the C++ API gives them.
    with pytest.raises(ValueError, match=r"^a\.stride\[1\] = 4: the last dimension must be contiguous \(expected stride 1\)$"):
        rg.fp32_gemm_nt(np.asfortranarray(a), b[:, :8], d)
    with pytest.raises(ValueError, match=r"^a has rank 3, expected rank 2 \[\*, \*\]$"):
        rg.fp32_gemm_nt(a[None], b[:, :8], d)
    with pytest.raises(ValueError, match=r"^a has rank 3, expected rank 2 \[\*, \*\]$"):
        rg.fp32_gemm_nt(a[None], b[:, :8])  # d allocated here: the Python side words it the same
    with pytest.raises(ValueError, match=r"^b\.stride\[0\] = 4 makes its entries overlap \(expected >= 8\)$"):
        rg.fp32_gemm_nt(a, np.lib.stride_tricks.as_strided(b, (5, 8), (16, 4)), d)
    ro = d.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        rg.fp32_gemm_nt(a, b[:, :8], ro)
    with pytest.raises(ValueError):
        rg.fp32_gemm_nt(a, b[:, :8], a[:, :5])  # d overlaps a
    with pytest.raises(TypeError, match="pair"):
        rg.fp8_gemm_nt(a, (b, b), d)
    with pytest.raises(ValueError, match="recipe"):
        rg.fp8_gemm_nt((a, a), (b, b), d, recipe=(1, 1, 128))
    with pytest.raises(ValueError, match="use_ue8m0"):
        rg.per_token_cast_to_fp8(a, use_ue8m0=True)
    with pytest.raises(ValueError, match="isa"):
        ridge.set_isa("sse9")


def test_tile_emulator_run():
    """The package takes the AMX tile kernels wherever ridge does. Here they run on the tile emulator:
    this file's bf16 and FP8 tests again in a child process with RIDGE_AMX_EMULATE=1, which is read
    once per process."""
    if os.environ.get("RIDGE_AMX_EMULATE") == "1":
        pytest.skip("this is the emulated run")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__,
                        "-k", "bf16 or fp8"], env={**os.environ, "RIDGE_AMX_EMULATE": "1"},
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout, r.stdout[-2000:]
