"""The roofline analyzer from Python: chips, cost models, bounds, critical batch, collectives.

    chip = load_chip("h100")
    b = bound(matmul(4096, 8192, 8192), chip)
    b.t_lower, b.binding        # seconds, "compute" | "memory" | "link"
"""
from __future__ import annotations

import json

from . import _ridge
from ._args import checked

_r = _ridge.roofline
Chip, Cost, Bound = _r.Chip, _r.Cost, _r.Bound
load_chip, chip_ids = checked(_r.load_chip, paths=("name_or_path",)), _r.chip_ids
bound, describe = checked(_r.bound), checked(_r.describe)
matmul, attention, fp8_gemm = checked(_r.matmul), checked(_r.attention), checked(_r.fp8_gemm)
grouped_gemm_contiguous, _grouped_gemm_masked = checked(_r.grouped_gemm_contiguous), checked(_r.grouped_gemm_masked)
all_reduce, all_gather, reduce_scatter = checked(_r.all_reduce), checked(_r.all_gather), checked(_r.reduce_scatter)
_critical_batch, _critical_split_d = checked(_r.critical_batch), checked(_r.critical_split_d)

__all__ = ["Chip", "Cost", "Bound", "load_chip", "chip_ids", "bound", "describe", "matmul", "attention",
           "fp8_gemm", "grouped_gemm_contiguous", "grouped_gemm_masked", "all_reduce", "all_gather",
           "reduce_scatter", "critical_batch", "critical_split_d", "to_dict"]


def grouped_gemm_masked(max_m, valid_m, n, k):
    """MoE with one padded slab of max_m rows per group, valid_m[g] of them real: the cost."""
    try:
        return _grouped_gemm_masked(max_m, valid_m, n, k)
    except ValueError as e:  # the library calls the valid rows "masked m"
        msg = str(e)
        raise ValueError("valid_m:" + msg.partition(":")[2] if msg.startswith("masked m:") else msg) from None


def to_dict(obj) -> dict:
    """The JSON form of a Chip, Cost or Bound (what the CLI's --json prints)."""
    if not isinstance(obj, (Chip, Cost, Bound)):
        raise TypeError(f"obj: expected a ridge.roofline Chip, Cost or Bound, got {type(obj).__name__}")
    return json.loads(obj._json())


def critical_batch(chip, d, f, x="bf16", w="bf16", out="bf16", compute="", level="") -> dict:
    """Smallest token batch B at which X[B,D] @ W[D,F] is compute-bound on `chip` (exact, or None
    when never), and the asymptotic peak/bw * size(w)/2."""
    return json.loads(_critical_batch(chip, d, f, x, w, out, compute, level))


def critical_split_d(chip, chips, link="intra_node") -> dict:
    """For D split over `chips` with an all-reduce of the partial sums: the D above which the
    matmul is compute-bound against the link."""
    return json.loads(_critical_split_d(chip, chips, link))
