"""The CS336 Transformer LM, built from a config and a PyTorch-style state_dict.

    m = TransformerLM(config, state_dict)          # names as model.state_dict() gives them
    loss = m.forward(inputs, targets)              # int32 [batch, seq]
    m.backward(); m.grad("lm_head.weight")         # NumPy views of ridge's buffers
    m.step(inputs, targets)                        # forward, backward, clipping, AdamW
"""
from __future__ import annotations

import json

import numpy as np

from . import _ridge

_m = _ridge.model

__all__ = ["TransformerLM", "preset", "preset_names"]

preset_names = _m.preset_names


def preset(name: str, vocab_size: int, context_length: int) -> dict:
    """A CS336 size (tiny, small, medium, large, xl, 2.7B) as a config dict."""
    return json.loads(_m.preset(name, vocab_size, context_length))


def _tokens(x, name):
    if type(x).__module__.startswith("torch"):
        import torch

        x = x.to(torch.int32)
        return x if x.is_contiguous() else x.contiguous()
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: token ids must be integers, got {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int32)


class TransformerLM:
    """config: dict with vocab_size, context_length, d_model, num_layers, num_heads, d_ff and
    optionally rope_theta. state_dict: name -> float32 array/tensor (missing names keep ridge's
    CS336 initialisation from `seed`). precision: fp32 | bf16 | fp16; attention: flash | math.
    batch and seq fix the shape step() trains on; forward() takes any [batch, seq <= context]."""

    def __init__(self, config: dict, state_dict=None, *, precision="fp32", attention="flash", batch=1, seq=None,
                 lr_max=1e-3, lr_min=1e-4, warmup_steps=0, cosine_steps=0, weight_decay=0.1, betas=(0.9, 0.95),
                 eps=1e-8, max_grad_norm=1.0, seed=0):
        seq = int(config.get("context_length", 1)) if seq is None else seq
        self._shape = (0, 0)
        self._t = _m.Trainer(json.dumps(config), precision, attention, batch, seq, lr_max, lr_min, warmup_steps,
                             cosine_steps, weight_decay, betas[0], betas[1], eps, max_grad_norm, seed)
        if state_dict is not None:
            self.load_state_dict(state_dict)

    @property
    def config(self) -> dict:
        return json.loads(self._t.config_json())

    def names(self) -> list:
        """Parameter names, as PyTorch's state_dict names them."""
        return self._t.names()

    def load_state_dict(self, state_dict, strict=True):
        """Copies float32 tensors in by name; unknown names (and, if strict, missing ones) raise."""
        names = set(self.names())
        unknown = sorted(set(state_dict) - names)
        if unknown:
            raise ValueError(f"state_dict: unknown parameter '{unknown[0]}' (the model has {len(names)} others)")
        if strict:
            missing = sorted(names - set(state_dict))
            if missing:
                raise ValueError(f"state_dict: missing '{missing[0]}' ({len(missing)} missing in all)")
        for name, value in state_dict.items():
            if type(value).__module__.startswith("torch"):
                value = value.detach().float()
            elif not isinstance(value, np.ndarray) or value.dtype != np.float32:
                value = np.asarray(value, dtype=np.float32)
            self._t.set_param(name, value)

    def state_dict(self) -> dict:
        """name -> NumPy view of the parameter (writes go into the model)."""
        return {n: self._t.param(n) for n in self.names()}

    def param(self, name):
        return self._t.param(name)

    def grad(self, name):
        return self._t.grad(name)

    def forward(self, inputs, targets=None) -> float:
        """Runs the forward pass; returns the mean cross-entropy (0.0 without targets)."""
        x = _tokens(inputs, "inputs")
        loss = self._t.forward(x, None if targets is None else _tokens(targets, "targets"))
        self._shape = tuple(x.shape)
        return loss

    def logits(self):
        """Logits of the last forward, a read-only NumPy view [batch, seq, vocab] (until the next backward)."""
        lg = self._t.logits()
        return lg.reshape(self._shape + (lg.shape[-1],))

    def __call__(self, inputs):
        """Logits for inputs [batch, seq] (a copy: the model's buffer is reused by the next pass)."""
        x = _tokens(inputs, "inputs")
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
        return self._t.step(_tokens(inputs, "inputs"), _tokens(targets, "targets"))

    def save(self, path: str):
        self._t.save(path)

    def load(self, path: str):
        self._t.load(path)
