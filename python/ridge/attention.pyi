"""FlashAttention-2 in flash-attn's layout, and CS336's autograd.Function (type stubs)."""
from typing import Any, List, Optional, Tuple

__all__: List[str]

_Array = Any  # numpy.ndarray or torch.Tensor (CPU), float32 or bfloat16

def flash_attn_func(q: _Array, k: _Array, v: _Array, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                    causal: bool = False) -> _Array:
    """flash-attn's flash_attn_func (dropout_p must be 0: ridge has no dropout). Returns o like q."""
def flash_attn_forward(q: _Array, k: _Array, v: _Array, softmax_scale: Optional[float] = None, causal: bool = False,
                       o: Optional[_Array] = None, lse: Optional[_Array] = None) -> Tuple[_Array, _Array]:
    """Forward only, any framework: returns (o, lse). q (b, s_q, h, d); k, v (b, s_k, h_kv, d);
    o like q (allocated when None); lse float32 (b, h, s_q). An o or lse sharing memory with q, k or v
    is a ValueError."""
def flash_attn_backward(do: _Array, q: _Array, k: _Array, v: _Array, o: _Array, lse: _Array,
                        softmax_scale: Optional[float] = None, causal: bool = False, dq: Optional[_Array] = None,
                        dk: Optional[_Array] = None, dv: Optional[_Array] = None) -> Tuple[_Array, _Array, _Array]:
    """Backward, any framework: returns (dq, dk, dv) in the layout of q, k, v. A dq, dk or dv
    sharing memory with an input or with each other is a ValueError."""
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
