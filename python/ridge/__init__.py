"""ridge: roofline-guided LLM kernels on the CPU, from Python.

Modules: ridge.gemm (DeepGEMM's names), ridge.attention (flash-attn's flash_attn_func and a CS336
FlashAttention2 autograd.Function), ridge.model (the Transformer LM), ridge.roofline, ridge.bench.
NumPy arrays (bf16 / fp8 through ml_dtypes) and torch CPU tensors go in and out without copies.
"""
from . import _ridge
from ._ridge.core import get_isa, get_num_threads, reset_isa, set_isa, set_num_threads, supported_isas

__version__ = "0.1.0"
__all__ = ["get_num_threads", "set_num_threads", "get_isa", "set_isa", "reset_isa", "supported_isas"]
