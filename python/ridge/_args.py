"""Checking the arguments of public functions before they reach the extension.

The contract: a value of the wrong type raises TypeError, a value of the right type that is out of
range raises ValueError, each message starting with the argument's name. Sizes and ids are checked
against their range before anything narrows them (a Python int of 2**32 + 1 never becomes 1).
"""
from __future__ import annotations

import functools
import numbers
import os
import re

import numpy as np

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _type(x) -> str:
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def integer(x, name, lo=INT64_MIN, hi=INT64_MAX):
    """x as a Python int in [lo, hi]: TypeError for a non-integer (bool, float, str, an array...),
    ValueError outside the range."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name}: expected an integer, got {_type(x)}")
    v = int(x)
    if not lo <= v <= hi:
        raise ValueError(f"{name}: {v} is out of range; it must be in {lo}..{hi}")
    return v


def real(x, name, finite=False):
    """x as a Python float: TypeError unless a real number (bool excluded); ValueError for nan/inf
    when `finite`."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {_type(x)}")
    try:
        v = float(x)
    except OverflowError:
        raise ValueError(f"{name}: {x} is too large for a float") from None
    if finite and v != v or finite and v in (float("inf"), float("-inf")):
        raise ValueError(f"{name}: must be finite, got {v}")
    return v


def boolean(x, name):
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, numbers.Integral) and int(x) in (0, 1):
        return bool(x)
    raise TypeError(f"{name}: expected a bool, got {_type(x)}")


def string(x, name):
    """x as a str that UTF-8 can encode (a str holding lone surrogates, as os.fsdecode makes of
    invalid bytes, is refused with ValueError)."""
    if not isinstance(x, str):
        raise TypeError(f"{name}: expected a str, got {_type(x)}")
    try:
        x.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name}: {x!r} is not valid UTF-8 text") from None
    return x


def path(x, name):
    """A file path: a str, bytes (valid UTF-8) or os.PathLike; returns the str."""
    if isinstance(x, (bytes, bytearray)):
        try:
            return string(bytes(x).decode("utf-8"), name)
        except UnicodeDecodeError:
            raise ValueError(f"{name}: the path {bytes(x)!r} is not valid UTF-8") from None
    if isinstance(x, os.PathLike):
        return path(os.fspath(x), name)
    return string(x, name)


def array(x, name):
    """An operand: a NumPy array or a torch tensor (anything with shape and dtype)."""
    if not (hasattr(x, "shape") and hasattr(x, "dtype")) or isinstance(x, (np.generic, type)):
        raise TypeError(f"{name}: expected a NumPy array or a torch tensor, got {_type(x)}")
    return x


# The checks for the types nanobind writes into a function's signature.
_CHECKS = {"int": integer, "float": real, "str": string, "bool": boolean}


def _params(sig: str):
    """[(name, annotation, optional)] from a nanobind signature 'def f(a: int, b: str = \\0) -> T'."""
    inner = sig[sig.index("(") + 1: sig.rindex(")")] if "->" not in sig else sig[sig.index("(") + 1: sig.rindex(") ->")]
    out, depth, cur = [], 0, ""
    for ch in inner + ",":
        if ch == "," and depth == 0:
            cur = cur.strip()
            if cur and cur not in ("*", "/") and not cur.startswith("*"):
                name, _, ann = cur.partition(":")
                ann = ann.split("=")[0].strip()
                out.append((name.strip(), ann))
            cur = ""
            continue
        depth += ch in "[(" and 1 or 0
        depth -= ch in "])" and 1 or 0
        cur += ch
    return out


def _resolve(dotted: str):
    """The class an annotation 'ridge._ridge.module.Class' names, or None."""
    from . import _ridge

    obj = _ridge
    for part in dotted.split(".")[2:]:
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def checked(fn, *, ranges=None, paths=()):
    """fn (an extension function) behind a check of every scalar argument its signature declares
    (int, float, str, bool, and their Optional forms); ranges: {name: (lo, hi)} for ints; paths:
    str arguments that name files (bytes and os.PathLike accepted). Other arguments go through
    as they are."""
    sig = getattr(fn, "__nb_signature__", None)
    if not sig:
        return fn
    params = _params(sig[0][0])
    ranges = ranges or {}

    def check(name, ann, value):
        optional = ann.endswith("| None") or ann.startswith("typing.Optional[") or ann.startswith("Optional[")
        if value is None and optional:
            return value
        base = re.sub(r"^(typing\.)?Optional\[(.*)\]$", r"\2", ann).replace("| None", "").strip()
        if name in paths:
            return path(value, name)
        if base == "int":
            lo, hi = ranges.get(name, (INT64_MIN, INT64_MAX))
            return integer(value, name, lo, hi)
        if base in ("collections.abc.Sequence[int]", "list[int]", "Sequence[int]"):
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__") or np.ndim(value) == 0:
                raise TypeError(f"{name}: expected a sequence of integers, got {_type(value)}")
            return [integer(v, f"{name}[{i}]") for i, v in enumerate(value)]
        if base.startswith("ridge._ridge."):
            cls = _resolve(base)
            if cls is not None and not isinstance(value, cls):
                raise TypeError(f"{name}: expected a {base.replace('_ridge.', '')}, got {_type(value)}")
            return value
        c = _CHECKS.get(base)
        return value if c is None else c(value, name)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if len(args) > len(params):
            raise TypeError(f"{fn.__name__}() takes {len(params)} arguments, got {len(args)}")
        args = tuple(check(n, a, v) for (n, a), v in zip(params, args))
        names = {n: a for n, a in params}
        for k in kwargs:
            if k not in names:
                raise TypeError(f"{fn.__name__}() got an unexpected argument '{k}'")
            kwargs[k] = check(k, names[k], kwargs[k])
        return fn(*args, **kwargs)

    return wrapper
