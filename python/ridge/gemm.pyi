"""GEMMs with DeepGEMM's names and argument order, on the CPU (type stubs)."""
from typing import Any, List, Optional, Sequence, Tuple

__all__: List[str]

_Array = Any  # numpy.ndarray (float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn) or torch.Tensor (CPU)
_Fp8Pair = Tuple[_Array, _Array]  # (fp8 e4m3 values, fp32 scales)

def fp8_gemm_nt(a: _Fp8Pair, b: _Fp8Pair, d: Optional[_Array] = None, c: Optional[_Array] = None,
                recipe: Optional[Sequence[int]] = None) -> _Array:
    """d = a @ b.T from fp8 e4m3 values with fp32 block scales (a: 1x128 per token, b: 128x128),
    accumulated in fp32 with DeepGEMM's promotion every 128 of k; plus c when given. Returns d."""
def m_grouped_fp8_gemm_nt_contiguous(a: _Fp8Pair, b: _Fp8Pair, d: _Array, m_indices: _Array,
                                     recipe: Optional[Sequence[int]] = None) -> _Array:
    """MoE layout: rows of a grouped back to back, m_indices[r] the group of row r (-1: padding)."""
def m_grouped_fp8_gemm_nt_masked(a: _Fp8Pair, b: _Fp8Pair, d: _Array, masked_m: _Array, expected_m: int,
                                 recipe: Optional[Sequence[int]] = None) -> _Array:
    """MoE layout: a [groups, max_m, k]; only masked_m[g] rows of group g are computed."""
def bf16_gemm_nt(a: _Array, b: _Array, d: Optional[_Array] = None, c: Optional[_Array] = None) -> _Array:
    """d = a @ b.T (a [m,k], b [n,k]) from bf16, accumulated in fp32; plus c when given."""
def bf16_gemm_nn(a: _Array, b: _Array, d: Optional[_Array] = None, c: Optional[_Array] = None) -> _Array:
    """d = a @ b (a [m,k], b [k,n]) from bf16; plus c when given."""
def bf16_gemm_tn(a: _Array, b: _Array, d: Optional[_Array] = None, c: Optional[_Array] = None) -> _Array:
    """d = a.T @ b (a [k,m], b [k,n]) from bf16; plus c when given."""
def bf16_gemm_tt(a: _Array, b: _Array, d: Optional[_Array] = None, c: Optional[_Array] = None) -> _Array:
    """d = a.T @ b.T (a [k,m], b [n,k]) from bf16; plus c when given."""
def fp32_gemm_nt(a: _Array, b: _Array, d: Optional[_Array] = None, c: Optional[_Array] = None) -> _Array:
    """d = a @ b.T (a [m,k], b [n,k]) in fp32; plus c when given."""
def fp32_gemm_nn(a: _Array, b: _Array, d: Optional[_Array] = None, c: Optional[_Array] = None) -> _Array:
    """d = a @ b (a [m,k], b [k,n]) in fp32; plus c when given."""
def fp32_gemm_tn(a: _Array, b: _Array, d: Optional[_Array] = None, c: Optional[_Array] = None) -> _Array:
    """d = a.T @ b (a [k,m], b [k,n]) in fp32; plus c when given."""
def fp32_gemm_tt(a: _Array, b: _Array, d: Optional[_Array] = None, c: Optional[_Array] = None) -> _Array:
    """d = a.T @ b.T (a [k,m], b [n,k]) in fp32; plus c when given."""
def m_grouped_bf16_gemm_nt_contiguous(a: _Array, b: _Array, d: _Array, m_indices: _Array) -> _Array:
    """MoE layout, bf16: d[r] = a[r] @ b[g].T for g = m_indices[r] (a [m_sum,k], b [G,n,k]; -1: padding)."""
def m_grouped_bf16_gemm_nn_contiguous(a: _Array, b: _Array, d: _Array, m_indices: _Array) -> _Array:
    """MoE layout, bf16: d[r] = a[r] @ b[g] for g = m_indices[r] (a [m_sum,k], b [G,k,n]; -1: padding)."""
def m_grouped_bf16_gemm_nt_masked(a: _Array, b: _Array, d: _Array, masked_m: _Array, expected_m: int) -> _Array:
    """MoE layout, bf16: a [G,m_max,k], b [G,n,k]; only masked_m[g] rows of group g are computed."""
def m_grouped_fp32_gemm_nt_contiguous(a: _Array, b: _Array, d: _Array, m_indices: _Array) -> _Array:
    """MoE layout, fp32: d[r] = a[r] @ b[g].T for g = m_indices[r] (a [m_sum,k], b [G,n,k]; -1: padding)."""
def m_grouped_fp32_gemm_nn_contiguous(a: _Array, b: _Array, d: _Array, m_indices: _Array) -> _Array:
    """MoE layout, fp32: d[r] = a[r] @ b[g] for g = m_indices[r] (a [m_sum,k], b [G,k,n]; -1: padding)."""
def m_grouped_fp32_gemm_nt_masked(a: _Array, b: _Array, d: _Array, masked_m: _Array, expected_m: int) -> _Array:
    """MoE layout, fp32: a [G,m_max,k], b [G,n,k]; only masked_m[g] rows of group g are computed."""
def k_grouped_bf16_gemm_tn_contiguous(a: _Array, b: _Array, d: _Array, k_indices: _Array,
                                      c: Optional[_Array] = None) -> _Array:
    """MoE dW, bf16: d[g] (float32 [G,m,n]) = (c[g] +) a_g.T @ b_g over the rows with k_indices[r] == g."""
def k_grouped_fp32_gemm_tn_contiguous(a: _Array, b: _Array, d: _Array, k_indices: _Array,
                                      c: Optional[_Array] = None) -> _Array:
    """MoE dW, fp32: d[g] (float32 [G,m,n]) = (c[g] +) a_g.T @ b_g over the rows with k_indices[r] == g."""
def per_token_cast_to_fp8(x: _Array, use_ue8m0: bool = False, *, q: Optional[_Array] = None,
                          scales: Optional[_Array] = None) -> _Fp8Pair:
    """x [m,k] -> (fp8 e4m3 values, fp32 scales [m, ceil(k/128)]): one scale per 1x128 block."""
def per_block_cast_to_fp8(x: _Array, use_ue8m0: bool = False, *, q: Optional[_Array] = None,
                          scales: Optional[_Array] = None) -> _Fp8Pair:
    """x [n,k] -> (fp8 e4m3 values, fp32 scales [ceil(n/128), ceil(k/128)]): one per 128x128 block."""
def get_mk_alignment_for_contiguous_layout() -> int:
    """The row alignment of each group in the contiguous MoE layout."""
def get_m_alignment_for_contiguous_layout() -> int:
    """The same as get_mk_alignment_for_contiguous_layout (DeepGEMM's other name)."""
def set_num_threads(n: int) -> None:
    """Sets the thread count for later kernel calls (n >= 1)."""
def get_num_threads() -> int:
    """Threads ridge kernels use."""
def ceil_div(x: int, y: int) -> int:
    """(x + y - 1) // y."""
