"""GEMMs with DeepGEMM's names and argument order, on the CPU.

Port DeepGEMM code by changing the import: ``fp8_gemm_nt((a, sfa), (b, sfb), d)`` computes
``d = a @ b.T`` with a's 1x128 and b's 128x128 fp32 block scales; ``bf16_gemm_nt(a, b, d)`` and
the nn/tn/tt layouts; the fp32 forms; the M-grouped MoE layouts (fp8, bf16, fp32) and the K-grouped
one for the experts' weight gradients; the casts to fp8.
Layouts: nt: a [m,k], b [n,k]; nn: a [m,k], b [k,n]; tn: a [k,m], b [k,n]; tt: a [k,m], b [n,k].
The output goes into ``d`` (and is returned); ``d=None`` allocates it (bf16 for bf16 and fp8
inputs, fp32 for fp32). ``c`` (optional) is added: d = c + a b. The GIL is released while the
kernel runs.
"""
from __future__ import annotations

from . import _ridge
from ._args import boolean, integer
from ._arrays import arg, dtype_name, empty_like_framework, out, shape
from . import get_num_threads, set_num_threads

_g = _ridge.gemm

__all__ = [
    "fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
    "bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt",
    "fp32_gemm_nt", "fp32_gemm_nn", "fp32_gemm_tn", "fp32_gemm_tt",
    "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nn_contiguous", "m_grouped_bf16_gemm_nt_masked",
    "m_grouped_fp32_gemm_nt_contiguous", "m_grouped_fp32_gemm_nn_contiguous", "m_grouped_fp32_gemm_nt_masked",
    "k_grouped_bf16_gemm_tn_contiguous", "k_grouped_fp32_gemm_tn_contiguous",
    "per_token_cast_to_fp8", "per_block_cast_to_fp8", "get_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout", "set_num_threads", "get_num_threads", "ceil_div",
]


def ceil_div(x: int, y: int) -> int:
    x, y = integer(x, "x"), integer(y, "y", 1)
    return (x + y - 1) // y


def _kind(in_dtype):
    return "bf16" if in_dtype == "bfloat16" else "fp32"


def _shape2(x, name):
    return shape(x, name, 2, "[*, *]")  # the library's wording


def _dense(layout, in_dtype, a, b, d, c):
    sa, sb = _shape2(a, "a"), _shape2(b, "b")
    if d is None:
        m = sa[0] if layout[0] == "n" else sa[1]
        n = sb[0] if layout[1] == "t" else sb[1]
        d = empty_like_framework(a, (m, n), in_dtype, "a")
    _g.dense(layout, in_dtype, arg(a, "a"), arg(b, "b"), out(d), None if c is None else arg(c, "c"))
    return d


def _make_dense(layout, in_dtype):
    def f(a, b, d=None, c=None):
        return _dense(layout, in_dtype, a, b, d, c)

    shapes = {"nt": "a [m,k], b [n,k]: d = a @ b.T", "nn": "a [m,k], b [k,n]: d = a @ b",
              "tn": "a [k,m], b [k,n]: d = a.T @ b", "tt": "a [k,m], b [n,k]: d = a.T @ b.T"}[layout]
    f.__name__ = f"{_kind(in_dtype)}_gemm_{layout}"
    f.__doc__ = (f"{in_dtype} inputs, fp32 accumulation, d float32 or bfloat16 [m,n]; {shapes} (+ c). "
                 "Returns d.")
    return f


bf16_gemm_nt = _make_dense("nt", "bfloat16")
bf16_gemm_nn = _make_dense("nn", "bfloat16")
bf16_gemm_tn = _make_dense("tn", "bfloat16")
bf16_gemm_tt = _make_dense("tt", "bfloat16")
fp32_gemm_nt = _make_dense("nt", "float32")
fp32_gemm_nn = _make_dense("nn", "float32")
fp32_gemm_tn = _make_dense("tn", "float32")
fp32_gemm_tt = _make_dense("tt", "float32")


def _named(f, name, doc):
    f.__name__, f.__doc__ = name, doc
    return f


def _make_m_grouped_contiguous(layout, in_dtype):
    def f(a, b, d, m_indices):
        _g.m_grouped_contiguous(layout, in_dtype, arg(a, "a"), arg(b, "b"), out(d), arg(m_indices, "m_indices"))
        return d

    b_shape = "[G,n,k]: d[r] = a[r] @ b[g].T" if layout == "nt" else "[G,k,n]: d[r] = a[r] @ b[g]"
    return _named(f, f"m_grouped_{_kind(in_dtype)}_gemm_{layout}_contiguous",
                  f"MoE, groups end to end along M: {in_dtype} a [m_sum,k], b {b_shape} for the group g = "
                  "m_indices[r] (int32 [m_sum], -1: padding, its d row left untouched); d float32 or bfloat16 "
                  "[m_sum,n]. Returns d.")


def _make_m_grouped_masked(in_dtype):
    def f(a, b, d, masked_m, expected_m):
        expected_m = integer(expected_m, "expected_m")
        _g.m_grouped_masked(in_dtype, arg(a, "a"), arg(b, "b"), out(d), arg(masked_m, "masked_m"), expected_m)
        return d

    return _named(f, f"m_grouped_{_kind(in_dtype)}_gemm_nt_masked",
                  f"MoE, one padded slab per group: {in_dtype} a [G,m_max,k], b [G,n,k], d float32 or bfloat16 "
                  "[G,m_max,n]; only the first masked_m[g] (int32 [G]) rows of group g are computed. Returns d.")


def _make_k_grouped(in_dtype):
    def f(a, b, d, k_indices, c=None):
        _g.k_grouped_contiguous(in_dtype, arg(a, "a"), arg(b, "b"), out(d), arg(k_indices, "k_indices"),
                                None if c is None else arg(c, "c"))
        return d

    return _named(f, f"k_grouped_{_kind(in_dtype)}_gemm_tn_contiguous",
                  f"MoE weight gradients, groups along K: {in_dtype} a [k_sum,m], b [k_sum,n], d float32 "
                  "[G,m,n]: d[g] = (c[g] +) a_g.T @ b_g over the rows r with k_indices[r] == g (the forward's "
                  "m_indices; -1 rows are never read). A group without rows gets c[g] or 0; c may be d itself. "
                  "Returns d.")


def _grouped(in_dtype):
    """The grouped GEMMs of one input dtype: nt and nn contiguous, nt masked, K-grouped tn."""
    return (_make_m_grouped_contiguous("nt", in_dtype), _make_m_grouped_contiguous("nn", in_dtype),
            _make_m_grouped_masked(in_dtype), _make_k_grouped(in_dtype))


(m_grouped_bf16_gemm_nt_contiguous, m_grouped_bf16_gemm_nn_contiguous, m_grouped_bf16_gemm_nt_masked,
 k_grouped_bf16_gemm_tn_contiguous) = _grouped("bfloat16")
(m_grouped_fp32_gemm_nt_contiguous, m_grouped_fp32_gemm_nn_contiguous, m_grouped_fp32_gemm_nt_masked,
 k_grouped_fp32_gemm_tn_contiguous) = _grouped("float32")


def _pair(x, name):
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise TypeError(f"{name}: expected a pair (fp8 tensor, fp32 scales), as DeepGEMM takes it")
    return x


def _check_recipe(recipe):
    if recipe is not None and not isinstance(recipe, (tuple, list)):
        raise TypeError(f"recipe: expected a tuple (1, 128, 128), got {type(recipe).__name__}")
    if recipe is not None and tuple(recipe) != (1, 128, 128):
        raise ValueError(f"recipe: ridge implements (1, 128, 128) scaling only, got {tuple(recipe)}")


def fp8_gemm_nt(a, b, d=None, c=None, recipe=None):
    """d[m,n] = (c +) a @ b.T with a = (fp8 [m,k], fp32 scales [m, ceil(k/128)]) and
    b = (fp8 [n,k], fp32 scales [ceil(n/128), ceil(k/128)]); d bfloat16 or float32, c float32.
    Returns d."""
    _check_recipe(recipe)
    (a_, sfa), (b_, sfb) = _pair(a, "a"), _pair(b, "b")
    ma, mb = _shape2(a_, "a"), _shape2(b_, "b")
    if d is None:
        d = empty_like_framework(a_, (ma[0], mb[0]), "bfloat16", "a")
    _g.fp8_gemm_nt(arg(a_, "a"), arg(sfa, "sfa"), arg(b_, "b"), arg(sfb, "sfb"), out(d),
                   None if c is None else arg(c, "c"))
    return d


def m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, recipe=None):
    """MoE, groups end to end along M: a = (fp8 [m_sum,k], scales [m_sum, ceil(k/128)]),
    b = (fp8 [G,n,k], scales [G, ceil(n/128), ceil(k/128)]), d bfloat16 [m_sum,n], m_indices int32
    [m_sum]: the group of each row, -1 for padding (its d row is left untouched). Returns d."""
    _check_recipe(recipe)
    (a_, sfa), (b_, sfb) = _pair(a, "a"), _pair(b, "b")
    _g.m_grouped_fp8_gemm_nt_contiguous(arg(a_, "a"), arg(sfa, "sfa"), arg(b_, "b"), arg(sfb, "sfb"), out(d),
                                        arg(m_indices, "m_indices"))
    return d


def m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None):
    """MoE, one padded slab per group: a = (fp8 [G,m_max,k], scales [G,m_max,ceil(k/128)]),
    b = (fp8 [G,n,k], scales [G,ceil(n/128),ceil(k/128)]), d bfloat16 [G,m_max,n]; only the first
    masked_m[g] (int32 [G]) rows of group g are computed. Returns d."""
    _check_recipe(recipe)
    (a_, sfa), (b_, sfb) = _pair(a, "a"), _pair(b, "b")
    expected_m = integer(expected_m, "expected_m")
    _g.m_grouped_fp8_gemm_nt_masked(arg(a_, "a"), arg(sfa, "sfa"), arg(b_, "b"), arg(sfb, "sfb"), out(d),
                                    arg(masked_m, "masked_m"), expected_m)
    return d


def _cast(per_token, x, q, scales, use_ue8m0):
    if boolean(use_ue8m0, "use_ue8m0"):
        raise ValueError("use_ue8m0: ridge keeps fp32 scales (SM90 style); pass use_ue8m0=False")
    m, k = _shape2(x, "x")
    rows = m if per_token else ceil_div(m, 128)
    if q is None:
        q = empty_like_framework(x, (m, k), "float8_e4m3fn", "x")
    if scales is None:
        scales = empty_like_framework(x, (rows, ceil_div(k, 128)), "float32", "x")
    f = _g.per_token_cast_to_fp8 if per_token else _g.per_block_cast_to_fp8
    f(arg(x, "x"), out(q, "q"), out(scales, "scales"))
    return q, scales


def per_token_cast_to_fp8(x, use_ue8m0=False, *, q=None, scales=None):
    """float32 x [m,k] -> (fp8 e4m3 [m,k], fp32 scales [m, ceil(k/128)]): one scale per row per
    128 columns, scale = max(amax, 1e-4) / 448."""
    return _cast(True, x, q, scales, use_ue8m0)


def per_block_cast_to_fp8(x, use_ue8m0=False, *, q=None, scales=None):
    """float32 x [m,k] -> (fp8 e4m3 [m,k], fp32 scales [ceil(m/128), ceil(k/128)]): one scale per
    128x128 block (the weight layout fp8_gemm_nt's b takes)."""
    return _cast(False, x, q, scales, use_ue8m0)


def get_mk_alignment_for_contiguous_layout() -> int:
    """Rows per aligned block of m_grouped_fp8_gemm_nt_contiguous's layout (each block one group)."""
    return _g.m_alignment_for_contiguous_layout()


get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
del dtype_name
