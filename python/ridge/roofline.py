"""The roofline analyzer from Python: chips, cost models, bounds, critical batch, collectives.

    chip = load_chip("h100")
    b = bound(matmul(4096, 8192, 8192), chip)
    b.t_lower, b.binding        # seconds, "compute" | "memory" | "link"
"""
from __future__ import annotations

import json

from . import _ridge

_r = _ridge.roofline
Chip, Cost, Bound = _r.Chip, _r.Cost, _r.Bound
load_chip, chip_ids, bound, describe = _r.load_chip, _r.chip_ids, _r.bound, _r.describe
matmul, attention, fp8_gemm = _r.matmul, _r.attention, _r.fp8_gemm
grouped_gemm_contiguous, grouped_gemm_masked = _r.grouped_gemm_contiguous, _r.grouped_gemm_masked
all_reduce, all_gather, reduce_scatter = _r.all_reduce, _r.all_gather, _r.reduce_scatter

__all__ = ["Chip", "Cost", "Bound", "load_chip", "chip_ids", "bound", "describe", "matmul", "attention",
           "fp8_gemm", "grouped_gemm_contiguous", "grouped_gemm_masked", "all_reduce", "all_gather",
           "reduce_scatter", "critical_batch", "critical_split_d", "to_dict"]


def to_dict(obj) -> dict:
    """The JSON form of a Chip, Cost or Bound (what the CLI's --json prints)."""
    return json.loads(obj._json())


def critical_batch(chip, d, f, x="bf16", w="bf16", out="bf16", compute="", level="") -> dict:
    """Smallest token batch B at which X[B,D] @ W[D,F] is compute-bound on `chip` (exact, or None
    when never), and the asymptotic peak/bw * size(w)/2."""
    return json.loads(_r.critical_batch(chip, d, f, x, w, out, compute, level))


def critical_split_d(chip, chips, link="intra_node") -> dict:
    """For D split over `chips` with an all-reduce of the partial sums: the D above which the
    matmul is compute-bound against the link."""
    return json.loads(_r.critical_split_d(chip, chips, link))
