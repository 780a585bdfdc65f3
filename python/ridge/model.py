"""The CS336 Transformer LM, built from a config and a PyTorch-style state_dict.

    m = TransformerLM(config, state_dict)          # names as model.state_dict() gives them
    loss = m.forward(inputs, targets)              # int32 [batch, seq]
    m.backward(); m.grad("lm_head.weight")         # NumPy views of ridge's buffers
    m.step(inputs, targets)                        # forward, backward, clipping, AdamW
    m.train("tokens.bin", 200, on_log=print)       # the loop `ridge train` runs, checkpoints included
    m.generate([[1, 2, 3]], max_tokens=20)         # sampled continuations (KV cache)
    s = m.inference("fp8").session(4)              # step by step: s.prefill, s.decode, s.logits
"""
from __future__ import annotations

import json
import numbers
import os
from collections.abc import Mapping

import numpy as np

from . import _ridge
from ._args import _type, boolean, integer, real, string
from ._args import path as _path

_m = _ridge.model

__all__ = ["TransformerLM", "InferenceModel", "Session", "preset", "preset_names"]

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
    if "rms_norm_eps" in config:  # RMSNorm's epsilon; absent: the library's default (1e-5)
        out["rms_norm_eps"] = real(config["rms_norm_eps"], "config['rms_norm_eps']", finite=True)
    # Mixture of Experts (issue 40): carried to the library, which checks them together and names the field.
    for k in ("num_experts", "top_k", "num_shared_experts", "d_expert"):
        if k in config:
            out[k] = integer(config[k], f"config['{k}']")
    if "moe_layers" in config:
        layers = config["moe_layers"]
        if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
            raise TypeError(f"config['moe_layers']: expected a list of layer indices, got {_type(layers)}")
        out["moe_layers"] = [integer(x, "config['moe_layers']") for x in layers]
    for k in ("router", "balance"):
        if k in config:
            out[k] = string(config[k], f"config['{k}']")
    for k in ("aux_loss_coef", "bias_update_speed"):
        if k in config:
            out[k] = real(config[k], f"config['{k}']", finite=True)
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
    a = _integer_array(x, name, "an integer array [batch, seq]")
    _check_ids(a, name, vocab - 1)
    return np.ascontiguousarray(a, dtype=np.int32)


def _integer_array(x, name, expected):
    """x as a NumPy array of integers: TypeError naming `expected` for what is no array, and for other
    dtypes."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError, OverflowError):
        raise TypeError(f"{name}: expected {expected}, got {_type(x)}") from None
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: token ids must be integers, got {a.dtype}")
    return a


def _check_ids(a, name, top):
    """ValueError naming the first id of the integer array `a` outside 0..top (checked before any
    narrowing: an id of 2**32 + 1 is refused, never taken as 1)."""
    flat = a.reshape(-1)
    bad = np.flatnonzero((flat < 0) | (flat > top))
    if bad.size:
        raise ValueError(f"{name}: token {int(flat[bad[0]])} at position {int(bad[0])} is outside 0..{top}")


def _token_data(data):
    """(path, tokens) for the extension: a token file's path, or a 1-D integer array checked to fit
    uint16 (what a token file holds) before it is narrowed; (None, None) for random tokens."""
    if data is None:
        return None, None
    if isinstance(data, (str, bytes, bytearray, os.PathLike)):
        return _path(data, "data"), None
    expected = "a token file path, a 1-D integer array or None"
    if isinstance(data, (bool, np.bool_, numbers.Number)):
        raise TypeError(f"data: expected {expected}, got {_type(data)}")
    a = _integer_array(data, "data", expected)
    if a.ndim != 1:
        raise ValueError(f"data: expected a 1-D array of token ids, got {a.ndim} dimensions")
    _check_ids(a, "data", 65535)
    return None, np.ascontiguousarray(a, dtype=np.int32)


def _check_fits(text: str, batch: int, seq: int, precision: str):
    """ValueError for a model whose weights, gradients, AdamW state and one batch's activations need more
    than this machine's memory: refused, rather than an allocation that fails or a process the kernel
    kills. The parameter count and the bytes are the library's (ridge.model's step_memory, what `ridge
    train` checks), never a formula of this file's own."""
    params, need = _m.step_memory(text, batch, seq, precision)
    try:
        import os

        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return
    if need > have:
        cfg = json.loads(text)
        raise ValueError(f"config: this model ({params} parameters) with batch {batch} x seq {seq} in {precision} "
                         f"needs about {need / 2**30:.3g} GiB; this machine has {have / 2**30:.3g} GiB (vocab_size "
                         f"{cfg['vocab_size']}, context_length {cfg['context_length']}, d_model {cfg['d_model']}, "
                         f"num_layers {cfg['num_layers']}, d_ff {cfg['d_ff']})")


class TransformerLM:
    """config: dict with vocab_size, context_length, d_model, num_layers, num_heads, d_ff and
    optionally rope_theta, rms_norm_eps (RMSNorm's epsilon, default 1e-5) and num_kv_heads (grouped-query
    attention: k_proj and v_proj then have num_kv_heads * d_head rows; default num_heads), and for a
    Mixture-of-Experts model num_experts, top_k, num_shared_experts, d_expert, moe_layers, router, balance,
    aux_loss_coef and bias_update_speed (docs/model.md; the tensors ffn.router / ffn.experts.*). state_dict:
    name -> float32 array/tensor (missing names keep ridge's CS336 initialisation from `seed`).
    precision: fp32 | bf16 | fp16; attention: flash | math.
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
        _check_fits(text, integer(batch, "batch", 1), integer(seq, "seq", 1), string(precision, "precision"))
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
        names = set(self.names()) | set(self._t.state_names())
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
        """name -> NumPy view of the parameter or state tensor (writes go into the model): the parameters,
        then the state PyTorch keeps as buffers (an MoE router's bias, `layers.L.ffn.router.bias`, under
        balance bias)."""
        out = {n: self._t.param(n) for n in self.names()}
        out.update({n: self._t.state(n) for n in self._t.state_names()})
        return out

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

    def train(self, data, steps, *, log_every=10, checkpoint=None, save_every=0, on_log=None,
              peak_flops=None) -> dict:
        """The training loop `ridge train` runs (one C++ function, model::train), from the model's step
        count up to `steps` (a model resumed at step k runs steps - k more). Each step draws batch rows of
        seq + 1 tokens from `data` with the model's generator (CS336's get_batch), then step()s. data: a
        token file's path (uint16, as `ridge data encode` and numpy.memmap write), a 1-D integer array of
        token ids, or None (random tokens). on_log(metrics) is called at every log_every-th step, the
        first and the last, with `ridge train --json`'s fields (step, loss, mean_loss, lr, grad_norm,
        tokens_per_s, step_ms, mfu, skipped, loss_scale) and seconds_left; returning True stops the run
        after that step (the checkpoint is written). checkpoint: written at the end and every save_every
        steps, as save() writes it. peak_flops: the FLOP/s mfu divides by (None: mfu is None). The GIL is
        released while steps run; Ctrl-C stops at the next logged step. Returns {first_step, steps,
        stopped, last: the last step's metrics}."""
        path, tokens = _token_data(data)
        if on_log is not None and not callable(on_log):
            raise TypeError(f"on_log: expected a callable, got {_type(on_log)}")
        return self._t.train(path, tokens, integer(steps, "steps", 1), integer(log_every, "log_every", 1),
                             "" if checkpoint is None else _path(checkpoint, "checkpoint"),
                             integer(save_every, "save_every", 0),
                             0.0 if peak_flops is None else real(peak_flops, "peak_flops", finite=True), on_log)

    def inference(self, weights="bf16", head=None, block_size=16) -> "InferenceModel":
        """The weights as they are now, prepared for inference (see InferenceModel)."""
        return InferenceModel(self, weights, head, block_size)

    def generate(self, prompts, max_tokens=64, *, weights="bf16", head=None, temperature=1.0, top_p=1.0, top_k=0,
                 seed=0, eos=None, on_token=None, return_stats=False):
        """Sampled continuations of each prompt with a KV cache (see InferenceModel.generate)."""
        return self.inference(weights, head).generate(prompts, max_tokens, temperature=temperature, top_p=top_p,
                                                      top_k=top_k, seed=seed, eos=eos, on_token=on_token,
                                                      return_stats=return_stats)

    def load(self, path: str):
        """Loads a checkpoint save() wrote (or a weights-only safetensors file); every field and tensor
        is checked first, so a bad file raises ValueError and leaves the model as it was."""
        self._t.load(_path(path, "path"))

    @classmethod
    def from_checkpoint(cls, path: str, **kwargs) -> "TransformerLM":
        """The model a checkpoint of `ridge train` (or save()) holds, built from the config and the
        training precision its metadata records, then load()ed with the same all-or-nothing checks:
        weights, optimizer state, step and schedule position resume. kwargs are TransformerLM's other
        keyword arguments (attention, batch, seq, the optimizer's); precision, if given, must be the
        checkpoint's. A weights-only file records no config: build TransformerLM(config) and load() it."""
        path = _path(path, "path")
        config, precision = _m.checkpoint_info(path)
        if config is None:
            raise ValueError(f"path: '{path}' records no model config (a weights-only file); build "
                             f"TransformerLM(config) and call load('{path}')")
        if precision is not None and "precision" in kwargs and kwargs["precision"] != precision:
            raise ValueError(f"precision: '{path}' was written by a {precision} run; leave precision out or "
                             f"pass '{precision}'")
        if precision is not None:
            kwargs["precision"] = precision
        model = cls(json.loads(config), **kwargs)
        model.load(path)
        return model


def _prompts(prompts, name="prompts"):
    """A list of token sequences (lists, tuples or 1-D integer arrays; bytes count as byte tokens) as
    lists of ints; the library checks the values (range, length, empty)."""
    if isinstance(prompts, (str, bytes, np.ndarray)) or not isinstance(prompts, (list, tuple)):
        raise TypeError(f"{name}: expected a list of token sequences, got {_type(prompts)}")
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, bytes):
            out.append(list(p))
            continue
        if isinstance(p, str):
            raise TypeError(f"{name}[{i}]: a str is not tokens; pass p.encode() for byte-level ids")
        a = np.asarray(p)
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise TypeError(f"{name}[{i}]: expected a 1-D sequence of integers, got {_type(p)}")
        if a.size and (a.min() < -2**31 or a.max() >= 2**31):
            raise ValueError(f"{name}[{i}]: token ids must fit int32")
        out.append([int(t) for t in a])
    return out


class InferenceModel:
    """The model's weights prepared for inference: weights fp32 | bf16 | fp8 | fp8-ue8m0 (e4m3 with
    DeepGEMM's 128x128 block scales; UE8M0: power-of-two scales); head: the lm_head's format (default:
    as weights, bf16 when weights are FP8). The KV cache is bf16 (fp32 for fp32 weights). An MoE model's
    routed experts take the weights' format (each expert's blocks its own) and run as DeepGEMM's grouped
    GEMMs; its routers stay fp32 and its router bias (`layers.L.ffn.router.bias`, in state_dict()) is the
    model's as it is now (docs/generate.md, "Mixture of Experts")."""

    def __init__(self, model: "TransformerLM", weights="bf16", head=None, block_size=16):
        if not isinstance(model, TransformerLM):
            raise TypeError(f"model: expected a ridge.model.TransformerLM, got {_type(model)}")
        self.config = model.config
        self._im = _m.InferenceModel(model._t, string(weights, "weights"),
                                     None if head is None else string(head, "head"),
                                     integer(block_size, "block_size", 1, 1024))

    @property
    def weights(self) -> str:
        return self._im.weights()

    @property
    def head(self) -> str:
        return self._im.head()

    @property
    def kv_dtype(self) -> str:
        return self._im.kv_dtype()

    def weight_bytes(self) -> float:
        """Bytes of weights one decode step reads (layers, final norm, head); for an MoE model those every
        step reads (routers, shared experts, the rest), the routed experts it reads coming on top."""
        return self._im.weight_bytes()

    def session(self, max_sequences=1, cache_tokens=0) -> "Session":
        return Session(self, max_sequences, cache_tokens)

    def generate(self, prompts, max_tokens=64, *, temperature=1.0, top_p=1.0, top_k=0, seed=0, eos=None,
                 num_splits=0, on_token=None, return_stats=False):
        """Sampled continuations of each prompt (a list of int lists). temperature 0: greedy; top_p in
        (0, 1]; top_k 0: off; seed: prompt i samples from its own streams (seed, i, draw), so the tokens
        do not depend on the thread count; eos: a token id that ends its sequence (emitted). on_token(i,
        token) is called for each token as it is sampled. With return_stats, also a dict of the prefill
        and decode tokens, seconds and decode bytes."""
        if on_token is not None and not callable(on_token):
            raise TypeError(f"on_token: expected a callable, got {_type(on_token)}")
        out, stats = _m.generate(self._im, _prompts(prompts), integer(max_tokens, "max_tokens", 1),
                                 real(temperature, "temperature", finite=True), real(top_p, "top_p", finite=True),
                                 integer(top_k, "top_k", 0), integer(seed, "seed", 0, 2**64 - 1),
                                 -1 if eos is None else integer(eos, "eos", 0),
                                 integer(num_splits, "num_splits", 0, 256), on_token)
        return (out, stats) if boolean(return_stats, "return_stats") else out


class Session:
    """Sequences and their paged KV cache, step by step:
        s = im.session(max_sequences=4)
        ids = s.prefill([[1, 2, 3], [4, 5]])      # logits(ids[i]) follow each prompt
        s.decode(ids, [7, 8])                      # one token per sequence
        s.logits(ids[0]); s.release(ids[0])        # a copy [vocab]; blocks back to the pool"""

    def __init__(self, model: InferenceModel, max_sequences=1, cache_tokens=0):
        if not isinstance(model, InferenceModel):
            raise TypeError(f"model: expected a ridge.model.InferenceModel, got {_type(model)}")
        self._model = model
        self._s = _m.Session(model._im, integer(max_sequences, "max_sequences", 1),
                             integer(cache_tokens, "cache_tokens", 0))

    def prefill(self, prompts) -> list:
        return self._s.prefill(_prompts(prompts))

    def decode(self, ids, tokens):
        ids = [integer(i, "ids") for i in ids]
        toks = _prompts([tokens], "tokens")[0]
        self._s.decode(ids, toks)

    def logits(self, id):
        return self._s.logits(integer(id, "id"))

    def length(self, id) -> int:
        return self._s.length(integer(id, "id"))

    def live(self, id) -> bool:
        return self._s.live(integer(id, "id"))

    def release(self, id):
        self._s.release(integer(id, "id"))

    @property
    def free_blocks(self) -> int:
        return self._s.free_blocks()

    @property
    def total_blocks(self) -> int:
        return self._s.total_blocks()

    def set_num_splits(self, n):
        self._s.set_num_splits(integer(n, "n", 0, 256))
