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


def _operand(x, name):
    """TypeError naming the argument for what cannot reach the extension as an array: not an array at
    all, or a NumPy dtype DLPack cannot carry (object, strings, datetimes, non-native byte order)."""
    if type(x) is np.ndarray or isinstance(x, np.ndarray):
        if x.dtype in _LABELS:
            return
        if x.dtype.kind in "OUSVMm" or not x.dtype.isnative:
            raise TypeError(f"{name}: unsupported dtype {x.dtype}; ridge takes float32, bfloat16, float8_e4m3fn "
                            "and int32 arrays")
        return
    if not is_torch(x) and not hasattr(x, "__dlpack__"):
        raise TypeError(f"{name}: expected a NumPy array or a torch tensor, got {type(x).__name__}")


def arg(x, name="array"):
    """An input operand (may be read-only)."""
    _operand(x, name)
    if type(x) is np.ndarray:
        label = _LABELS.get(x.dtype)
        if label is not None:
            return _ridge.core._relabel_ro(x.view(label[1]), label[0])
    return x


def out(x, name="d"):
    """An output operand: written in place, so it must be writable."""
    _operand(x, name)
    if type(x) is np.ndarray:
        if not x.flags.writeable:
            raise ValueError(f"{name}: the array is read-only; ridge writes its result there")
        label = _LABELS.get(x.dtype)
        if label is not None:
            return _ridge.core._relabel(x.view(label[1]), label[0])
    return x


def shape(x, name, rank, what):
    """x's shape, checked to be of `rank` (what: the dimensions' names, for the message)."""
    _operand(x, name)
    s = tuple(x.shape)
    if len(s) != rank:
        raise ValueError(f"{name} has rank {len(s)}, expected rank {rank} {what}")
    return s


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def empty_like_framework(ref, shape, dtype_name, name="array"):
    """A new array of `shape` in the framework of `ref` (NumPy or torch, on its device); TypeError
    naming `name` (the argument `ref` came from) for a dtype ridge does not compute in."""
    if is_torch(ref):
        import torch

        dt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn}.get(dtype_name)
        if dt is None:
            raise TypeError(f"{name}: unsupported dtype {dtype_name}; ridge takes float32, bfloat16 and float8_e4m3fn here")
        return torch.empty(shape, dtype=dt, device=ref.device)
    if dtype_name not in ("float32", "bfloat16", "float8_e4m3fn"):
        raise TypeError(f"{name}: unsupported dtype {dtype_name}; ridge takes float32, bfloat16 and float8_e4m3fn here")
    dt = {"float32": np.dtype(np.float32), "bfloat16": bfloat16, "float8_e4m3fn": float8_e4m3fn}[dtype_name]
    if dt is None:
        raise TypeError(f"{dtype_name} NumPy arrays need the ml_dtypes package (pip install ml_dtypes)")
    return np.empty(shape, dtype=dt)


def dtype_name(x) -> str:
    """'float32', 'bfloat16', 'float8_e4m3fn', ... for a NumPy array or a torch tensor."""
    return str(x.dtype).replace("torch.", "")
