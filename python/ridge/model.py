"""The CS336 Transformer LM, built from a config and a PyTorch-style state_dict.

    m = TransformerLM(config, state_dict)          # names as model.state_dict() gives them
    loss = m.forward(inputs, targets)              # int32 [batch, seq]
    m.backward(); m.grad("lm_head.weight")         # NumPy views of ridge's buffers
    m.step(inputs, targets)                        # forward, backward, clipping, AdamW
"""
from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from . import _ridge
from ._args import _type, boolean, integer, real, string
from ._args import path as _path

_m = _ridge.model

__all__ = ["TransformerLM", "preset", "preset_names"]

preset_names = _m.preset_names


def preset(name: str, vocab_size: int, context_length: int) -> dict:
    """A CS336 size (tiny, small, medium, large, xl, 2.7B) as a config dict."""
    return json.loads(_m.preset(string(name, "name"), integer(vocab_size, "vocab_size"),
                                integer(context_length, "context_length")))


_INT_FIELDS = ("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff")


def _config_json(config) -> str:
    """The config dict as the JSON the extension reads, each field checked for its type (the library
    checks the values and names the field)."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a dict, got {_type(config)}")
    out = {}
    for k in _INT_FIELDS:
        if k not in config:
            raise ValueError(f"config: missing '{k}'")
        out[k] = integer(config[k], f"config['{k}']")
    if "rope_theta" in config:
        out["rope_theta"] = real(config["rope_theta"], "config['rope_theta']", finite=True)
    if "num_kv_heads" in config:  # grouped-query attention; absent (or equal to num_heads): multi-head
        out["num_kv_heads"] = integer(config["num_kv_heads"], "config['num_kv_heads']")
    return json.dumps(out)


def _tokens(x, name, vocab):
    """Token ids as a C-contiguous int32 array, each checked to be in [0, vocab) before it is narrowed
    (an int64 id of 2**32 + 1 is refused, never taken as 1)."""
    if type(x).__module__.startswith("torch"):
        import torch

        if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
            raise TypeError(f"{name}: token ids must be integers, got {x.dtype}")
        if x.numel():
            lo, hi = int(x.min()), int(x.max())
            if lo < 0 or hi >= vocab:
                bad = lo if lo < 0 else hi
                pos = int((x.reshape(-1) == bad).nonzero()[0])
                raise ValueError(f"{name}: token {bad} at position {pos} is outside 0..{vocab - 1}")
        x = x.to(torch.int32)
        return x if x.is_contiguous() else x.contiguous()
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name}: expected an integer array [batch, seq], got {_type(x)}")
    try:
        a = np.asarray(x)
    except (ValueError, TypeError, OverflowError):
        raise TypeError(f"{name}: expected an integer array [batch, seq], got {_type(x)}") from None
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: token ids must be integers, got {a.dtype}")
    if a.size:
        flat = a.reshape(-1)
        bad = np.flatnonzero((flat < 0) | (flat >= vocab))
        if bad.size:
            raise ValueError(f"{name}: token {int(flat[bad[0]])} at position {int(bad[0])} is outside 0..{vocab - 1}")
    return np.ascontiguousarray(a, dtype=np.int32)


def _check_fits(cfg: dict, batch: int, seq: int):
    """ValueError for a model whose weights, gradients, AdamW state and one batch's activations (a rough
    lower bound) need more than this machine's memory: refused, rather than an allocation that fails
    or a process the kernel kills."""
    V, T, D, L, H, F = (cfg[k] for k in _INT_FIELDS)
    if min(V, T, D, L, H, F, batch, seq) < 1:
        return  # the library names the field
    Dkv = D // H * (cfg.get("num_kv_heads") or H)  # k and v: the kv heads' width (D without grouped-query)
    params = 2 * V * D + L * (2 * D * D + 2 * D * Dkv + 3 * D * F + 2 * D) + D
    need = 16 * params + 4 * batch * seq * (2 * V + L * (16 * D + 4 * F + H * seq))
    try:
        import os

        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return
    if need > have:
        raise ValueError(f"config: this model ({params} parameters) with batch {batch} x seq {seq} needs at least "
                         f"{need / 2**30:.3g} GiB; this machine has {have / 2**30:.3g} GiB (vocab_size "
                         f"{V}, context_length {T}, d_model {D}, num_layers {L}, d_ff {F})")


class TransformerLM:
    """config: dict with vocab_size, context_length, d_model, num_layers, num_heads, d_ff and
    optionally rope_theta and num_kv_heads (grouped-query attention: k_proj and v_proj then have
    num_kv_heads * d_head rows; default num_heads). state_dict: name -> float32 array/tensor (missing names keep ridge's
    CS336 initialisation from `seed`). precision: fp32 | bf16 | fp16; attention: flash | math.
    batch and seq fix the shape step() trains on; forward() takes any [batch, seq <= context]."""

    def __init__(self, config: dict, state_dict=None, *, precision="fp32", attention="flash", batch=1, seq=None,
                 lr_max=1e-3, lr_min=1e-4, warmup_steps=0, cosine_steps=0, weight_decay=0.1, betas=(0.9, 0.95),
                 eps=1e-8, max_grad_norm=1.0, seed=0):
        text = _config_json(config)
        seq = json.loads(text)["context_length"] if seq is None else seq
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"betas: expected a pair (beta1, beta2), got {_type(betas)}")
        self._shape = (0, 0)
        _m.validate_config(text)  # the library's checks of the fields together, before any size is used
        context = json.loads(text)["context_length"]
        if integer(seq, "seq", 1) > context:
            raise ValueError(f"seq: {seq} is longer than the model's context_length {context}")
        _check_fits(json.loads(text), integer(batch, "batch", 1), seq)
        self._t = _m.Trainer(text, string(precision, "precision"), string(attention, "attention"),
                             integer(batch, "batch", 1), integer(seq, "seq", 1), real(lr_max, "lr_max"),
                             real(lr_min, "lr_min"), integer(warmup_steps, "warmup_steps", 0),
                             integer(cosine_steps, "cosine_steps", 0), real(weight_decay, "weight_decay"),
                             real(betas[0], "betas[0]"), real(betas[1], "betas[1]"), real(eps, "eps"),
                             real(max_grad_norm, "max_grad_norm"), integer(seed, "seed", 0, 2**64 - 1))
        self._vocab = json.loads(text)["vocab_size"]
        if state_dict is not None:
            self.load_state_dict(state_dict)

    @property
    def config(self) -> dict:
        return json.loads(self._t.config_json())

    def names(self) -> list:
        """Parameter names, as PyTorch's state_dict names them."""
        return self._t.names()

    def load_state_dict(self, state_dict, strict=True):
        """Copies float32 tensors in by name; unknown names (and, if strict, missing ones) raise. Every
        tensor is checked (type, shape) before any is copied: on an error the model is as it was."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict: expected a dict of name -> array, got {_type(state_dict)}")
        for k in state_dict:
            string(k, "state_dict key")
        names = set(self.names())
        unknown = sorted(set(state_dict) - names)
        if unknown:
            raise ValueError(f"state_dict: unknown parameter '{unknown[0]}' (the model has {len(names)} others)")
        if boolean(strict, "strict"):
            missing = sorted(names - set(state_dict))
            if missing:
                raise ValueError(f"state_dict: missing '{missing[0]}' ({len(missing)} missing in all)")
        # Every tensor is converted and its shape checked before any is copied: all or nothing.
        ready = {}
        for name, value in state_dict.items():
            where = f"state_dict['{name}']"
            if type(value).__module__.startswith("torch"):
                if value.dtype.is_complex or not (value.dtype.is_floating_point or value.dtype.is_signed):
                    raise TypeError(f"{where}: expected a real-valued tensor, got {value.dtype}")
                value = value.detach().float()
            else:
                if isinstance(value, (str, bytes)) or value is None:
                    raise TypeError(f"{where}: expected an array, got {_type(value)}")
                try:
                    a = np.asarray(value)
                except (ValueError, TypeError):
                    raise TypeError(f"{where}: expected an array of numbers, got {_type(value)}") from None
                if a.dtype.kind not in "biuf" or a.dtype.kind == "b":
                    raise TypeError(f"{where}: expected a real-valued array, got {a.dtype}")
                value = a if a.dtype == np.float32 else a.astype(np.float32)
            want = tuple(self._t.shape(name))
            if tuple(value.shape) != want:
                raise ValueError(f"{where}: has the shape {tuple(value.shape)}; the model's is {want}")
            ready[name] = value
        for name, value in ready.items():
            self._t.set_param(name, value)

    def state_dict(self) -> dict:
        """name -> NumPy view of the parameter (writes go into the model)."""
        return {n: self._t.param(n) for n in self.names()}

    def param(self, name):
        return self._t.param(string(name, "name"))

    def grad(self, name):
        return self._t.grad(string(name, "name"))

    def forward(self, inputs, targets=None) -> float:
        """Runs the forward pass; returns the mean cross-entropy (0.0 without targets)."""
        x = _tokens(inputs, "inputs", self._vocab)
        loss = self._t.forward(x, None if targets is None else _tokens(targets, "targets", self._vocab))
        self._shape = tuple(x.shape)
        return loss

    def logits(self):
        """Logits of the last forward, a read-only NumPy view [batch, seq, vocab] (until the next backward)."""
        lg = self._t.logits()
        return lg.reshape(self._shape + (lg.shape[-1],))

    def __call__(self, inputs):
        """Logits for inputs [batch, seq] (a copy: the model's buffer is reused by the next pass)."""
        x = _tokens(inputs, "inputs", self._vocab)
        self._t.forward(x, None)
        return np.array(self._t.logits()).reshape(tuple(x.shape) + (-1,))

    def backward(self):
        """Accumulates the loss's gradients (call zero_grad first for fresh ones)."""
        self._t.backward()

    def zero_grad(self):
        self._t.zero_grad()

    def step(self, inputs, targets) -> dict:
        """One training step: zero_grad, forward, backward, clipping, AdamW at the scheduled rate.
        Returns {step, loss, grad_norm, lr, skipped}."""
        return self._t.step(_tokens(inputs, "inputs", self._vocab), _tokens(targets, "targets", self._vocab))

    def save(self, path: str):
        self._t.save(_path(path, "path"))

    def load(self, path: str):
        """Loads a checkpoint save() wrote (or a weights-only safetensors file); every field and tensor
        is checked first, so a bad file raises ValueError and leaves the model as it was."""
        self._t.load(_path(path, "path"))
