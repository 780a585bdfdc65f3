"""FlashAttention-2 in flash-attn's layout, and CS336's autograd.Function (type stubs)."""
from typing import Any, List, Optional, Tuple, Union

__all__: List[str]

_Array = Any  # numpy.ndarray or torch.Tensor (CPU), float32 or bfloat16

def flash_attn_func(q: _Array, k: _Array, v: _Array, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                    causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: Optional[_Array] = None, deterministic: bool = False,
                    return_attn_probs: bool = False) -> Union[_Array, Tuple[_Array, _Array, None]]:
    """flash-attn's flash_attn_func: q (b, s_q, h, d), k, v (b, s_k, h_kv, d); window_size (left, right)
    with -1 unbounded (query i sees keys i + s_k - s_q - left .. i + s_k - s_q + right; causal is
    right = 0); softcap > 0 caps scores at softcap * tanh(s / softcap). Returns o like q, or
    (o, lse (b, h, s_q), None) with return_attn_probs. dropout_p != 0 and alibi_slopes are a ValueError."""
def flash_attn_forward(q: _Array, k: _Array, v: _Array, softmax_scale: Optional[float] = None, causal: bool = False,
                       o: Optional[_Array] = None, lse: Optional[_Array] = None,
                       window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0) -> Tuple[_Array, _Array]:
    """Forward only, any framework: returns (o, lse). q (b, s_q, h, d); k, v (b, s_k, h_kv, d);
    o like q (allocated when None); lse float32 (b, h, s_q). An o or lse sharing memory with q, k or v
    is a ValueError."""
def flash_attn_backward(do: _Array, q: _Array, k: _Array, v: _Array, o: _Array, lse: _Array,
                        softmax_scale: Optional[float] = None, causal: bool = False, dq: Optional[_Array] = None,
                        dk: Optional[_Array] = None, dv: Optional[_Array] = None,
                        window_size: Tuple[int, int] = (-1, -1),
                        softcap: float = 0.0) -> Tuple[_Array, _Array, _Array]:
    """Backward, any framework: returns (dq, dk, dv) in the layout of q, k, v. A dq, dk or dv
    sharing memory with an input or with each other is a ValueError."""
def flash_attn_varlen_func(q: _Array, k: _Array, v: _Array, cu_seqlens_q: _Array, cu_seqlens_k: _Array,
                           max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                           alibi_slopes: Optional[_Array] = None, deterministic: bool = False,
                           return_attn_probs: bool = False,
                           block_table: Optional[_Array] = None) -> Union[_Array, Tuple[_Array, _Array, None]]:
    """flash-attn's flash_attn_varlen_func: q (total_q, h, d), k, v (total_k, h_kv, d) packed, cu_seqlens_q/k
    int32 (batch + 1,) offsets, max_seqlen_q/k the longest lengths; masks per sequence. Returns o like q, or
    (o, lse (h, total_q), None) with return_attn_probs."""
def flash_attn_varlen_forward(q: _Array, k: _Array, v: _Array, cu_seqlens_q: _Array, cu_seqlens_k: _Array,
                              max_seqlen_q: int, max_seqlen_k: int, softmax_scale: Optional[float] = None,
                              causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                              o: Optional[_Array] = None, lse: Optional[_Array] = None) -> Tuple[_Array, _Array]:
    """Forward of a packed batch, any framework: returns (o, lse (h, total_q) float32)."""
def flash_attn_varlen_backward(do: _Array, q: _Array, k: _Array, v: _Array, o: _Array, lse: _Array,
                               cu_seqlens_q: _Array, cu_seqlens_k: _Array, max_seqlen_q: int, max_seqlen_k: int,
                               softmax_scale: Optional[float] = None, causal: bool = False,
                               window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                               dq: Optional[_Array] = None, dk: Optional[_Array] = None,
                               dv: Optional[_Array] = None) -> Tuple[_Array, _Array, _Array]:
    """Backward of a packed batch, any framework: returns (dq, dk, dv) like q, k, v."""
def attention_visible_scores(n_q: int, n_k: int, causal: bool = False,
                             window_size: Tuple[int, int] = (-1, -1)) -> float:
    """The score entries a mask leaves visible in one (sequence, head)."""
def flash_attn_with_kvcache(q: _Array, k_cache: _Array, v_cache: _Array, k: Optional[_Array] = None,
                            v: Optional[_Array] = None, cache_seqlens: Union[int, _Array, None] = None,
                            block_table: Optional[_Array] = None, softmax_scale: Optional[float] = None,
                            causal: bool = True, num_splits: int = 0,
                            return_softmax_lse: bool = False) -> Union[_Array, Tuple[_Array, _Array]]:
    """flash-attn's flash_attn_with_kvcache on NumPy arrays (float32 or bfloat16). q (b, s_q, h, d);
    k_cache, v_cache (b, s_cache, h_kv, d), or with block_table (b, max_blocks) int32 a pool
    (num_blocks, block_size, h_kv, d); cache_seqlens an int or int32 (b,) (None: full); k, v
    (b, s_new, h_kv, d) are appended into the caches in place at cache_seqlens and attended to.
    num_splits: 0 chooses, n splits each sequence's keys n ways. Returns o like q, or (o, lse
    (b, h, s_q) float32) with return_softmax_lse."""
def kvcache_num_splits(seqlen_k: int, units: int, threads: int) -> int:
    """The split count num_splits = 0 picks for a sequence of seqlen_k keys when units = batch x
    kv_heads share `threads` threads."""
def attention_flops(batch: int, heads: int, n_q: int, n_k: int, d: int, causal: bool, backward: bool) -> float:
    """FLOPs as FlashAttention papers count them: 4 n_q n_k d batch heads forward, 2.5x that for
    backward, scaled by the visible fraction of the scores when causal."""

class FlashAttention2:
    """CS336's interface (a torch.autograd.Function; None without PyTorch): apply(q, k, v, is_causal=False)
    on (batch, seq, d) tensors; saves q, k, v, o and the logsumexp L (batch, seq) for backward."""
    @staticmethod
    def apply(q: Any, k: Any, v: Any, is_causal: bool = False) -> Any: ...
    @staticmethod
    def forward(ctx: Any, q: Any, k: Any, v: Any, is_causal: bool = False) -> Any: ...
    @staticmethod
    def backward(ctx: Any, do: Any) -> Any: ...
