"""FlashAttention-2 on the CPU.

``flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False)`` takes flash-attn's
layout, (batch, seqlen, heads, head_dim), strided views included (they are read in place), with
grouped-query attention when k and v have fewer heads, sliding windows (query i sees keys j with
i + s_k - s_q - left <= j <= i + s_k - s_q + right, -1 = unbounded; causal is right = 0) and logit
softcapping (scores -> softcap * tanh(scores / softcap)). ``flash_attn_varlen_func`` takes packed
(total, heads, head_dim) batches with cu_seqlens_q/k, as flash-attn's. On torch tensors both are
custom ops (``ridge::flash_attn_fwd``, ``ridge::flash_attn_varlen_fwd``) with autograd (so they
work under torch.compile); on NumPy arrays they return the output (and lse with return_attn_probs).
``flash_attn_forward``/``flash_attn_backward`` and ``flash_attn_varlen_forward``/``..._backward``
are the NumPy (any framework) entry points. dropout_p != 0 and alibi_slopes are refused (ValueError). ``FlashAttention2.apply(q, k, v, is_causal=False)`` is CS336's autograd.Function on
(batch, seq, d), saving the logsumexp L (batch, seq) for backward.
``flash_attn_with_kvcache(q, k_cache, v_cache, ...)`` is flash-attn's decode attention over a KV cache
(dense or paged, appended to in place when k and v are given) on NumPy arrays.
"""
from __future__ import annotations

import math

from . import _ridge
import numpy as np

from ._args import boolean, checked, integer, real
from ._arrays import arg, empty_like_framework, is_torch, out, shape

_a = _ridge.attention

__all__ = ["flash_attn_func", "flash_attn_forward", "flash_attn_backward", "flash_attn_varlen_func",
           "flash_attn_varlen_forward", "flash_attn_varlen_backward", "FlashAttention2", "attention_flops",
           "attention_visible_scores", "flash_attn_with_kvcache", "kvcache_num_splits"]

attention_flops = checked(_a.flops)
kvcache_num_splits = checked(_a.kvcache_num_splits, ranges={"threads": (-(2**31), 2**31 - 1)})


def attention_visible_scores(n_q, n_k, causal=False, window_size=(-1, -1)):
    """The score entries a mask leaves visible in one (sequence, head): what a masked row's roofline
    counts (4 * head_dim FLOPs each forward)."""
    left, right = _window(window_size)
    return _a.visible_scores(integer(n_q, "n_q", 0), integer(n_k, "n_k", 0), boolean(causal, "causal"), left,
                             right)


def _window(window_size):
    """flash-attn's window_size as (left, right), each -1 (unbounded) or >= 0."""
    if isinstance(window_size, (str, bytes)) or not hasattr(window_size, "__len__") or len(window_size) != 2:
        raise ValueError(f"window_size: expected a pair (left, right) of ints, -1 for unbounded, got {window_size!r}")
    left = integer(window_size[0], "window_size[0]", -(2**63), 2**62)
    right = integer(window_size[1], "window_size[1]", -(2**63), 2**62)
    for name, x in (("window_size[0]", left), ("window_size[1]", right)):
        if x < -1:
            raise ValueError(f"{name}: must be >= 0, or -1 for no limit on that side, got {x}")
    return left, right


def _softcap(softcap):
    s = real(softcap, "softcap")
    if not (math.isfinite(s) and 0.0 <= s <= 1e30):
        raise ValueError(f"softcap: must be finite, >= 0 and <= 1e30 (0 means off), got {softcap}")
    return s


def _refuse_unsupported(dropout_p, alibi_slopes):
    if real(dropout_p, "dropout_p") != 0.0:
        raise ValueError(f"dropout_p: ridge's FlashAttention has no dropout; pass 0.0, got {dropout_p}")
    if alibi_slopes is not None:
        raise ValueError("alibi_slopes: ridge's FlashAttention has no ALiBi bias; pass None")


def _bhsd(x):
    """(batch, seq, heads, d) -> a (batch, heads, seq, d) view: a transpose, never a copy."""
    return x.transpose(1, 2) if is_torch(x) else x.transpose(0, 2, 1, 3)


def _scale(q, softmax_scale):
    if softmax_scale is None:
        if q.shape[-1] == 0:
            raise ValueError("q: head_dim is 0; the default softmax_scale 1/sqrt(head_dim) needs head_dim >= 1")
        return 1.0 / math.sqrt(q.shape[-1])
    s = real(softmax_scale, "softmax_scale")
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"softmax_scale: must be finite and > 0, got {softmax_scale}")
    # The kernels take a float32 scale: one that would round to 0 or inf is refused, not narrowed.
    if not _FLT_MIN <= s <= _FLT_MAX:
        raise ValueError(f"softmax_scale: {softmax_scale} is outside float32's normal range [{_FLT_MIN:.3g}, "
                         f"{_FLT_MAX:.3g}]")
    return s


_DTYPES = ("float32", "bfloat16")
_FLT_MIN, _FLT_MAX = 1.1754943508222875e-38, 3.4028234663852886e38


def _dims(q, name="q"):
    s = shape(q, name, 4, "[batch, seqlen, heads, head_dim]")
    dt = str(q.dtype).replace("torch.", "")
    if dt not in _DTYPES:
        raise TypeError(f"{name}: expected a float32 or bfloat16 array, got {dt}")
    return s


def _operands(**arrays):
    """Each given operand: an array of rank 4 in q's dtype."""
    for name, x in arrays.items():
        _dims(x, name)


def flash_attn_forward(q, k, v, softmax_scale=None, causal=False, o=None, lse=None, window_size=(-1, -1),
                       softcap=0.0):
    """Forward only, any framework: returns (o, lse). q (b, s_q, h, d); k, v (b, s_k, h_kv, d);
    o like q (allocated when None); lse float32 (b, h, s_q)."""
    b, s, h, _ = _dims(q)
    _operands(k=k, v=v, **({} if o is None else {"o": o}))
    causal, scale = boolean(causal, "causal"), _scale(q, softmax_scale)
    (left, right), cap = _window(window_size), _softcap(softcap)
    if o is None:
        o = empty_like_framework(q, tuple(q.shape), str(q.dtype).replace("torch.", ""), "q")
    if lse is None:
        lse = empty_like_framework(q, (b, h, s), "float32", "q")
    shape(lse, "lse", 3, "[batch, heads, seqlen]")
    _a.forward(arg(_bhsd(q), "q"), arg(_bhsd(k), "k"), arg(_bhsd(v), "v"), out(_bhsd(o), "o"), out(lse, "lse"),
               causal, scale, left, right, cap)
    return o, lse


def flash_attn_backward(do, q, k, v, o, lse, softmax_scale=None, causal=False, dq=None, dk=None, dv=None,
                        window_size=(-1, -1), softcap=0.0):
    """Backward, any framework: returns (dq, dk, dv) in the layout of q, k, v."""
    _dims(q)
    given = {"dq": dq, "dk": dk, "dv": dv}
    _operands(do=do, k=k, v=v, o=o, **{n: x for n, x in given.items() if x is not None})
    shape(lse, "lse", 3, "[batch, heads, seqlen]")
    causal, scale = boolean(causal, "causal"), _scale(q, softmax_scale)
    (left, right), cap = _window(window_size), _softcap(softcap)
    name = str(q.dtype).replace("torch.", "")
    dq = empty_like_framework(q, tuple(q.shape), name, "q") if dq is None else dq
    dk = empty_like_framework(k, tuple(k.shape), name, "k") if dk is None else dk
    dv = empty_like_framework(v, tuple(v.shape), name, "v") if dv is None else dv
    _a.backward(arg(_bhsd(q), "q"), arg(_bhsd(k), "k"), arg(_bhsd(v), "v"), arg(_bhsd(o), "o"), arg(_bhsd(do), "do"),
                arg(lse, "lse"), out(_bhsd(dq), "dq"), out(_bhsd(dk), "dk"), out(_bhsd(dv), "dv"), causal, scale,
                left, right, cap)
    return dq, dk, dv


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash-attn's flash_attn_func: q (b, s_q, h, d), k, v (b, s_k, h_kv, d). Returns o like q, or with
    return_attn_probs (o, lse (b, h, s_q) float32, None) as flash-attn (no dropout mask to return).
    dropout_p must be 0 and alibi_slopes None; deterministic is accepted (ridge always is)."""
    _refuse_unsupported(dropout_p, alibi_slopes)
    boolean(deterministic, "deterministic")
    probs = boolean(return_attn_probs, "return_attn_probs")
    _dims(q)
    _operands(k=k, v=v)
    (left, right), cap = _window(window_size), _softcap(softcap)
    scale, causal = _scale(q, softmax_scale), boolean(causal, "causal")
    if is_torch(q):
        if _torch_ops is None:
            raise TypeError("q: torch tensors need torch importable when ridge.attention was imported")
        o, lse = _torch_ops.flash_attn(q, k, v, scale, causal, left, right, cap)
    else:
        o, lse = flash_attn_forward(q, k, v, scale, causal, window_size=(left, right), softcap=cap)
    return (o, lse, None) if probs else o


def _varlen_dims(q, name="q"):
    s = shape(q, name, 3, "[total_tokens, heads, head_dim]")
    dt = str(q.dtype).replace("torch.", "")
    if dt not in _DTYPES:
        raise TypeError(f"{name}: expected a float32 or bfloat16 array, got {dt}")
    return s


def _cu_seqlens(x, name):
    """cu_seqlens as the C++ API takes it: NumPy int32 (a torch tensor is read through NumPy)."""
    if is_torch(x):
        x = x.detach().cpu().numpy()
    return _int32_array(x, name, 1, "[batch + 1]")


def _max_seqlen(x, name):
    return integer(x, name, 0, _INT32_MAX)


def flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
                              causal=False, window_size=(-1, -1), softcap=0.0, o=None, lse=None):
    """Forward of a packed batch, any framework: returns (o, lse). q (total_q, h, d); k, v (total_k, h_kv, d);
    cu_seqlens_q/k int32 (batch + 1,); o like q (allocated when None); lse float32 (h, total_q)."""
    tq, h, _ = _varlen_dims(q)
    for name, x in (("k", k), ("v", v)) + ((("o", o),) if o is not None else ()):
        _varlen_dims(x, name)
    causal, scale = boolean(causal, "causal"), _scale(q, softmax_scale)
    (left, right), cap = _window(window_size), _softcap(softcap)
    cq, ck = _cu_seqlens(cu_seqlens_q, "cu_seqlens_q"), _cu_seqlens(cu_seqlens_k, "cu_seqlens_k")
    mq, mk = _max_seqlen(max_seqlen_q, "max_seqlen_q"), _max_seqlen(max_seqlen_k, "max_seqlen_k")
    if o is None:
        o = empty_like_framework(q, tuple(q.shape), str(q.dtype).replace("torch.", ""), "q")
    if lse is None:
        lse = empty_like_framework(q, (h, tq), "float32", "q")
    shape(lse, "lse", 2, "[heads, total_q]")
    _a.varlen_forward(arg(q, "q"), arg(k, "k"), arg(v, "v"), cq, ck, mq, mk, out(o, "o"), out(lse, "lse"), causal,
                      scale, left, right, cap)
    return o, lse


def flash_attn_varlen_backward(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, dq=None, dk=None,
                               dv=None):
    """Backward of a packed batch, any framework: returns (dq, dk, dv) like q, k, v."""
    _varlen_dims(q)
    given = {"dq": dq, "dk": dk, "dv": dv}
    for name, x in dict(do=do, k=k, v=v, o=o, **{n: x for n, x in given.items() if x is not None}).items():
        _varlen_dims(x, name)
    shape(lse, "lse", 2, "[heads, total_q]")
    causal, scale = boolean(causal, "causal"), _scale(q, softmax_scale)
    (left, right), cap = _window(window_size), _softcap(softcap)
    cq, ck = _cu_seqlens(cu_seqlens_q, "cu_seqlens_q"), _cu_seqlens(cu_seqlens_k, "cu_seqlens_k")
    mq, mk = _max_seqlen(max_seqlen_q, "max_seqlen_q"), _max_seqlen(max_seqlen_k, "max_seqlen_k")
    name = str(q.dtype).replace("torch.", "")
    dq = empty_like_framework(q, tuple(q.shape), name, "q") if dq is None else dq
    dk = empty_like_framework(k, tuple(k.shape), name, "k") if dk is None else dk
    dv = empty_like_framework(v, tuple(v.shape), name, "v") if dv is None else dv
    _a.varlen_backward(arg(q, "q"), arg(k, "k"), arg(v, "v"), arg(o, "o"), arg(do, "do"), arg(lse, "lse"), cq, ck,
                       mq, mk, out(dq, "dq"), out(dk, "dk"), out(dv, "dv"), causal, scale, left, right, cap)
    return dq, dk, dv


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """flash-attn's flash_attn_varlen_func: q (total_q, h, d), k, v (total_k, h_kv, d) packed without padding,
    cu_seqlens_q/k int32 (batch + 1,) offsets, max_seqlen_q/k the longest sequences; masks per sequence,
    aligned bottom-right. Returns o like q, or with return_attn_probs (o, lse (h, total_q) float32, None).
    dropout_p must be 0, alibi_slopes and block_table None."""
    _refuse_unsupported(dropout_p, alibi_slopes)
    if block_table is not None:
        raise ValueError("block_table: ridge's flash_attn_varlen_func takes no paged KV cache; pass None "
                         "(flash_attn_with_kvcache takes one)")
    boolean(deterministic, "deterministic")
    probs = boolean(return_attn_probs, "return_attn_probs")
    _varlen_dims(q)
    for name, x in (("k", k), ("v", v)):
        _varlen_dims(x, name)
    (left, right), cap = _window(window_size), _softcap(softcap)
    scale, causal = _scale(q, softmax_scale), boolean(causal, "causal")
    mq, mk = _max_seqlen(max_seqlen_q, "max_seqlen_q"), _max_seqlen(max_seqlen_k, "max_seqlen_k")
    if is_torch(q):
        if _torch_ops is None:
            raise TypeError("q: torch tensors need torch importable when ridge.attention was imported")
        import torch as _t
        cq = _t.as_tensor(_cu_seqlens(cu_seqlens_q, "cu_seqlens_q"))
        ck = _t.as_tensor(_cu_seqlens(cu_seqlens_k, "cu_seqlens_k"))
        o, lse = _torch_ops.flash_attn_varlen(q, k, v, cq, ck, mq, mk, scale, causal, left, right, cap)
    else:
        o, lse = flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, mq, mk, scale, causal, (left, right),
                                           cap)
    return (o, lse, None) if probs else o


_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _int32_array(x, name, rank, what):
    """x as a C-contiguous int32 NumPy array of `rank`; TypeError for a non-integer array, ValueError for
    a wrong rank or a value int32 cannot hold (never wrapped)."""
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer array, got {a.dtype}")
    if a.ndim != rank:
        raise ValueError(f"{name} has rank {a.ndim}, expected rank {rank} {what}")
    if a.size and (int(a.min()) < _INT32_MIN or int(a.max()) > _INT32_MAX):
        raise ValueError(f"{name}: values must fit in int32, got {int(a.min())}..{int(a.max())}")
    return np.ascontiguousarray(a, dtype=np.int32)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None,
                            softmax_scale=None, causal=True, num_splits=0, return_softmax_lse=False):
    """flash-attn's flash_attn_with_kvcache on NumPy arrays (float32, or bfloat16 from ml_dtypes).

    q (batch, seqlen_q, heads, head_dim). Without block_table, k_cache and v_cache are
    (batch, seqlen_cache, kv_heads, head_dim); with it, a pool of blocks (num_blocks, block_size,
    kv_heads, head_dim) and block_table (batch, max_blocks_per_seq) int32 names the blocks of each
    sequence in order. cache_seqlens: an int or an int32 array (batch,), the keys already in each
    sequence's cache (None: the cache is full). k, v (batch, seqlen_new, kv_heads, head_dim), when
    given, are written into the caches in place at cache_seqlens and attention then covers
    cache_seqlens + seqlen_new keys (cache_seqlens itself is not changed). causal: query i sees the
    keys up to i + seqlen_k - seqlen_q. num_splits: 0 chooses, 1 does not split, n splits each
    sequence's keys n ways. Returns o like q, and with return_softmax_lse (o, lse (batch, heads,
    seqlen_q) float32)."""
    b, _, h, _ = _dims(q)
    _operands(k_cache=k_cache, v_cache=v_cache)
    causal, with_lse = boolean(causal, "causal"), boolean(return_softmax_lse, "return_softmax_lse")
    num_splits = integer(num_splits, "num_splits", 0, 256)
    scale = _scale(q, softmax_scale)
    if block_table is None:
        if k_cache.shape[0] != b:
            raise ValueError(f"k_cache: without block_table the cache is (batch, seqlen_cache, kv_heads, "
                             f"head_dim) with batch = {b}, got shape {tuple(k_cache.shape)}")
        table = np.arange(b, dtype=np.int32).reshape(b, 1)  # one block per sequence: its whole cache
    else:
        table = _int32_array(block_table, "block_table", 2, "[batch, max_blocks_per_seq]")
    capacity = table.shape[1] * k_cache.shape[1]
    if cache_seqlens is None:
        if capacity > _INT32_MAX:
            raise ValueError(f"cache_seqlens: the cache holds {capacity} keys per sequence, more than int32 counts")
        lens = np.full(b, capacity, dtype=np.int32)
    elif isinstance(cache_seqlens, (int, np.integer)) and not isinstance(cache_seqlens, (bool, np.bool_)):
        lens = np.full(b, integer(cache_seqlens, "cache_seqlens", _INT32_MIN, _INT32_MAX), dtype=np.int32)
    else:
        lens = _int32_array(cache_seqlens, "cache_seqlens", 1, "[batch]")
    if (k is None) != (v is None):
        raise ValueError("k, v: pass both (the new keys and values to append) or neither")
    if k is not None:
        _operands(k=k, v=v)
        _a.kvcache_append(arg(k, "k"), arg(v, "v"), out(k_cache, "k_cache"), out(v_cache, "v_cache"), lens,
                          table)
        grown = lens.astype(np.int64) + k.shape[1]
        if grown.size and int(grown.max()) > _INT32_MAX:
            raise ValueError("cache_seqlens: with the new keys a length passes int32")
        lens = grown.astype(np.int32)
    o = empty_like_framework(q, tuple(q.shape), str(q.dtype).replace("torch.", ""), "q")
    lse = empty_like_framework(q, (b, h, q.shape[1]), "float32", "q") if with_lse else None
    _a.with_kvcache(arg(q, "q"), arg(k_cache, "k_cache"), arg(v_cache, "v_cache"), lens, table, out(o, "o"),
                    None if lse is None else out(lse, "lse"), scale, causal, num_splits)
    return (o, lse) if with_lse else o


def _no_zero_strides(t):
    # Gradients of a sum arrive expanded (stride 0); the kernels take only positive strides.
    return t if all(st > 0 or n == 1 for st, n in zip(t.stride(), t.shape)) else t.contiguous()


try:
    import torch
except ImportError:  # NumPy-only use
    torch = None

_torch_ops = None
FlashAttention2 = None

if torch is not None:

    @torch.library.custom_op("ridge::flash_attn_fwd", mutates_args=(), device_types="cpu")
    def _fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool, window_left: int,
             window_right: int, softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
        return flash_attn_forward(q, k, v, scale, causal, window_size=(window_left, window_right), softcap=softcap)

    @_fwd.register_fake
    def _(q, k, v, scale, causal, window_left, window_right, softcap):
        b, s, h, _ = q.shape
        return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty((b, h, s),
                                                                                       dtype=torch.float32)

    @torch.library.custom_op("ridge::flash_attn_bwd", mutates_args=(), device_types="cpu")
    def _bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
             lse: torch.Tensor, scale: float, causal: bool, window_left: int, window_right: int,
             softcap: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return flash_attn_backward(_no_zero_strides(do), q, k, v, o, lse, scale, causal,
                                   window_size=(window_left, window_right), softcap=softcap)

    @_bwd.register_fake
    def _(do, q, k, v, o, lse, scale, causal, window_left, window_right, softcap):
        return (torch.empty_like(q, memory_format=torch.contiguous_format),
                torch.empty_like(k, memory_format=torch.contiguous_format),
                torch.empty_like(v, memory_format=torch.contiguous_format))

    def _setup(ctx, inputs, output):
        q, k, v, scale, causal, left, right, cap = inputs
        o, lse = output
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (scale, causal, left, right, cap)

    def _backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _bwd(do.to(q.dtype), q, k, v, o, lse, *ctx.args)
        return dq, dk, dv, None, None, None, None, None

    _fwd.register_autograd(_backward, setup_context=_setup)

    @torch.library.custom_op("ridge::flash_attn_varlen_fwd", mutates_args=(), device_types="cpu")
    def _vfwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor,
              max_q: int, max_k: int, scale: float, causal: bool, window_left: int, window_right: int,
              softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
        return flash_attn_varlen_forward(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, (window_left, window_right),
                                         softcap)

    @_vfwd.register_fake
    def _(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, window_left, window_right, softcap):
        t, h, _ = q.shape
        return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty((h, t), dtype=torch.float32)

    @torch.library.custom_op("ridge::flash_attn_varlen_bwd", mutates_args=(), device_types="cpu")
    def _vbwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
              lse: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor, max_q: int, max_k: int, scale: float,
              causal: bool, window_left: int, window_right: int,
              softcap: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return flash_attn_varlen_backward(_no_zero_strides(do), q, k, v, o, lse, cu_q, cu_k, max_q, max_k, scale,
                                          causal, (window_left, window_right), softcap)

    @_vbwd.register_fake
    def _(do, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, scale, causal, window_left, window_right, softcap):
        return (torch.empty_like(q, memory_format=torch.contiguous_format),
                torch.empty_like(k, memory_format=torch.contiguous_format),
                torch.empty_like(v, memory_format=torch.contiguous_format))

    def _vsetup(ctx, inputs, output):
        q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, left, right, cap = inputs
        o, lse = output
        ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
        ctx.args = (max_q, max_k, scale, causal, left, right, cap)

    def _vbackward(ctx, do, dlse):
        q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = _vbwd(do.to(q.dtype), q, k, v, o, lse, cu_q, cu_k, *ctx.args)
        return (dq, dk, dv) + (None,) * 9

    _vfwd.register_autograd(_vbackward, setup_context=_vsetup)

    class _Ops:
        @staticmethod
        def flash_attn(q, k, v, scale, causal, left=-1, right=-1, softcap=0.0):
            return _fwd(q, k, v, scale, causal, left, right, softcap)

        @staticmethod
        def flash_attn_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, left, right, softcap):
            return _vfwd(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, left, right, softcap)

    _torch_ops = _Ops()

    class FlashAttention2(torch.autograd.Function):  # noqa: F811
        """CS336's interface: apply(q, k, v, is_causal=False) on (batch, seq, d) tensors; saves q, k, v,
        o and the logsumexp L (batch, seq) for backward."""

        @staticmethod
        def forward(ctx, q, k, v, is_causal=False):
            for name, t in (("q", q), ("k", k), ("v", v)):
                if not is_torch(t):
                    raise TypeError(f"{name}: expected a torch tensor, got {type(t).__name__}")
                if t.dim() != 3:
                    raise ValueError(f"{name} has rank {t.dim()}, expected rank 3 [batch, seq, d]")
            # (batch, seq, d) is flash-attn's layout with one head: unsqueeze is a view.
            o, lse = flash_attn_forward(q.unsqueeze(2), k.unsqueeze(2), v.unsqueeze(2), None, bool(is_causal))
            o = o.squeeze(2)
            L = lse.squeeze(1)
            ctx.save_for_backward(L, q, k, v, o)
            ctx.is_causal = boolean(is_causal, "is_causal")
            return o

        @staticmethod
        def backward(ctx, do):
            L, q, k, v, o = ctx.saved_tensors
            do = _no_zero_strides(do.to(q.dtype))
            dq, dk, dv = flash_attn_backward(do.unsqueeze(2), q.unsqueeze(2), k.unsqueeze(2), v.unsqueeze(2),
                                             o.unsqueeze(2), L.unsqueeze(1), None, ctx.is_causal)
            return dq.squeeze(2), dk.squeeze(2), dv.squeeze(2), None
