"""ridge: roofline-guided LLM kernels on the CPU, from Python (type stubs for the package itself).

Submodules, imported on first use: ridge.gemm, ridge.attention, ridge.model, ridge.data, ridge.roofline,
ridge.bench.
"""
from typing import List

from . import attention as attention, bench as bench, data as data, gemm as gemm, model as model
from . import roofline as roofline

__version__: str
__all__: List[str]

def get_num_threads() -> int:
    """Threads ridge kernels use."""
def set_num_threads(n: int) -> None:
    """Sets the thread count for later kernel calls (n >= 1)."""
def get_isa() -> str:
    """The instruction-set path kernels take: scalar, avx2, avx512 or avx512bf16."""
def set_isa(isa: str) -> None:
    """Forces an instruction-set path for this process (ValueError if the machine cannot run it)."""
def reset_isa() -> None:
    """Returns to the best path (or RIDGE_ISA)."""
def supported_isas() -> List[str]:
    """Every path this machine supports, lowest first."""
