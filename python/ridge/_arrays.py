"""Passing arrays to the extension without copies.

NumPy arrays and torch CPU tensors go through DLPack as they are. NumPy cannot export
ml_dtypes' bfloat16 / float8_e4m3fn over DLPack, so those pass as their same-sized integer view,
re-labelled in C++ (same memory, right dtype).
"""
from __future__ import annotations

import numpy as np

from . import _ridge

try:
    import ml_dtypes

    _LABELS = {
        np.dtype(ml_dtypes.bfloat16): ("bfloat16", np.uint16),
        np.dtype(ml_dtypes.float8_e4m3fn): ("float8_e4m3fn", np.uint8),
        np.dtype(ml_dtypes.float8_e5m2): ("float8_e5m2", np.uint8),
    }
    bfloat16 = np.dtype(ml_dtypes.bfloat16)
    float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
except ImportError:  # NumPy alone: float32 works, bf16/fp8 NumPy arrays cannot be made anyway
    _LABELS = {}
    bfloat16 = None
    float8_e4m3fn = None


def arg(x):
    """An input operand (may be read-only)."""
    if type(x) is np.ndarray:
        label = _LABELS.get(x.dtype)
        if label is not None:
            return _ridge.core._relabel_ro(x.view(label[1]), label[0])
    return x


def out(x, name="d"):
    """An output operand: written in place, so it must be writable."""
    if type(x) is np.ndarray:
        if not x.flags.writeable:
            raise ValueError(f"{name}: the array is read-only; ridge writes its result there")
        label = _LABELS.get(x.dtype)
        if label is not None:
            return _ridge.core._relabel(x.view(label[1]), label[0])
    return x


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def empty_like_framework(ref, shape, dtype_name):
    """A new array of `shape` in the framework of `ref` (NumPy or torch, on its device)."""
    if is_torch(ref):
        import torch

        dt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn}[dtype_name]
        return torch.empty(shape, dtype=dt, device=ref.device)
    dt = {"float32": np.dtype(np.float32), "bfloat16": bfloat16, "float8_e4m3fn": float8_e4m3fn}[dtype_name]
    if dt is None:
        raise TypeError(f"{dtype_name} NumPy arrays need the ml_dtypes package (pip install ml_dtypes)")
    return np.empty(shape, dtype=dt)


def dtype_name(x) -> str:
    """'float32', 'bfloat16', 'float8_e4m3fn', ... for a NumPy array or a torch tensor."""
    return str(x.dtype).replace("torch.", "")
