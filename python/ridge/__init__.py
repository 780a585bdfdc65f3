"""ridge: roofline-guided LLM kernels on the CPU, from Python.

Modules: ridge.gemm (DeepGEMM's names), ridge.attention (flash-attn's flash_attn_func and a CS336
FlashAttention2 autograd.Function), ridge.model (the Transformer LM), ridge.data (CS336's byte-level BPE
tokenizer), ridge.roofline, ridge.bench.
NumPy arrays (bf16 / fp8 through ml_dtypes) and torch CPU tensors go in and out without copies.
"""
from . import _ridge
from ._args import checked as _checked, integer as _integer
from ._ridge.core import get_isa, get_num_threads, reset_isa, supported_isas

set_isa = _checked(_ridge.core.set_isa)


def set_num_threads(n: int) -> None:
    """Sets the thread count for later kernel calls (n >= 1)."""
    n = _integer(n, "n", 1, 2**31 - 1)
    try:
        _ridge.core.set_num_threads(n)
    except ValueError as e:  # the library names its argument 'threads'
        raise ValueError("n:" + str(e).partition(":")[2]) from None

__version__ = _ridge.core.version()  # the C++ library's, so there is one place it is written
__all__ = ["get_num_threads", "set_num_threads", "get_isa", "set_isa", "reset_isa", "supported_isas"]

# The submodules, imported on first use (PEP 562, as SciPy does): `import ridge; ridge.gemm` works, and
# `import ridge` stays as cheap as the extension itself.
_SUBMODULES = ("attention", "bench", "data", "gemm", "model", "roofline")


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'ridge' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES))
