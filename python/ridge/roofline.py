"""The roofline analyzer from Python: chips, cost models, bounds, critical batch, collectives.

    chip = load_chip("h100")
    b = bound(matmul(4096, 8192, 8192), chip)
    b.t_lower, b.binding        # seconds, "compute" | "memory" | "link"
"""
from __future__ import annotations

import json

from collections.abc import Mapping

from . import _ridge
from ._args import _type, boolean, checked, integer, real, string

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
           "reduce_scatter", "critical_batch", "critical_split_d", "decode", "to_dict"]


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


_CONFIG_FIELDS = ("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff")


def _moe_fields(config, n_layers):
    """The config's Mixture-of-Experts fields (absent or num_experts 0: a dense model), checked."""
    experts = integer(config.get("num_experts", 0), "config['num_experts']", 0, 2**40)
    if not experts:
        for k in ("top_k", "num_shared_experts", "d_expert", "moe_layers"):
            if config.get(k):
                raise ValueError(f"config: {k} is set but num_experts is 0; MoE fields need num_experts >= 1")
        return 0, 0, 0, 0, []
    top_k = integer(config.get("top_k", 0), "config['top_k']", 0, 2**40)
    if not 1 <= top_k <= experts:
        raise ValueError(f"config: top_k {top_k} is not in 1..num_experts = {experts}")
    shared = integer(config.get("num_shared_experts", 0), "config['num_shared_experts']", 0, 2**40)
    d_expert = integer(config.get("d_expert", 0), "config['d_expert']", 0, 2**40)
    layers = config.get("moe_layers", [])
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
        raise TypeError(f"config['moe_layers']: expected a list of layer indices, got {_type(layers)}")
    layers = [integer(v, "config['moe_layers']", 0, n_layers - 1) for v in layers]
    if any(b <= a for a, b in zip(layers, layers[1:])):
        raise ValueError(f"config: moe_layers {layers} must be ascending layer indices")
    return experts, top_k, shared, d_expert, layers


def _histogram(h, experts):
    """expert_histogram: None (uniform routing) or one real number per expert."""
    if h is None:
        return []
    if not experts:
        raise ValueError("expert_histogram: a routing histogram needs an MoE config (num_experts >= 1)")
    if isinstance(h, (str, bytes, Mapping)) or not hasattr(h, "__iter__"):
        raise TypeError(f"expert_histogram: expected a list of numbers (one per expert), got {_type(h)}")
    return [real(v, "expert_histogram", finite=True) for v in h]


def decode(config, batch=1, context=None, weights="bf16", head=None, embedding=None, kv=None, chip="h100",
           level="", prompt=0, sweep=False, expert_histogram=None) -> dict:
    """The roofline of generating with a Transformer LM: what `ridge roofline decode --json` prints (less its
    "model" label). `config` is a model config dict (ridge.model.preset's, "num_kv_heads" optional); one decode
    step of `batch` sequences attending to `context` keys each (default the config's context_length), with
    `weights` fp32 | bf16 | fp8, `head` and `embedding` dtypes (default: the weights', bf16 for fp8), the KV
    cache in `kv` (default fp32 for fp32 weights, else bf16), on `chip` (a Chip or a chip name) at memory level
    `level` ("" the outermost, "auto" where the weights and KV cache fit); the prefill of `prompt` tokens when
    > 0; with `sweep`, the steps at batch 1, 2, 4, ... past the critical batch. An MoE config (num_experts,
    top_k, num_shared_experts, d_expert, moe_layers: ridge.model.preset("moe-tiny", ...)'s) reads only the experts
    its batch routes to, under uniform routing or `expert_histogram` (one number per expert: shares of the routed
    choices, or tokens per expert)."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a dict, got {_type(config)}")
    cfg = {}
    for k in _CONFIG_FIELDS:
        if k not in config:
            raise ValueError(f"config: missing '{k}'")
        cfg[k] = integer(config[k], f"config['{k}']", 1, 2**40)
    kv_heads = integer(config.get("num_kv_heads", 0), "config['num_kv_heads']", 0, 2**40)
    if cfg["d_model"] % cfg["num_heads"]:
        raise ValueError(f"config: d_model {cfg['d_model']} is not a multiple of num_heads {cfg['num_heads']}")
    if kv_heads and cfg["num_heads"] % kv_heads:
        raise ValueError(f"config: num_kv_heads {kv_heads} does not divide num_heads {cfg['num_heads']}")
    n = cfg["context_length"]
    batch = integer(batch, "batch")
    context = n if context is None else integer(context, "context")
    if not 1 <= context <= n:
        raise ValueError(f"context: {context} is not in 1..{n} (the model's context_length)")
    moe = _moe_fields(config, cfg["num_layers"])
    histogram = _histogram(expert_histogram, moe[0])
    prompt = integer(prompt, "prompt")
    if not 0 <= prompt <= n:
        raise ValueError(f"prompt: {prompt} is not in 0..{n} (0: no prefill; at most the model's context_length)")
    dtypes = {name: "" if v is None else string(v, name)
              for name, v in (("head", head), ("embedding", embedding), ("kv", kv))}
    if not isinstance(chip, Chip):
        name = string(chip, "chip")
        try:
            chip = _r.load_chip(name)
        except ValueError as e:
            raise ValueError(f"chip: {e}") from None
    try:
        return json.loads(_r._decode(cfg["vocab_size"], cfg["d_model"], cfg["num_layers"], cfg["num_heads"],
                                     kv_heads, cfg["d_ff"], batch, context, string(weights, "weights"),
                                     dtypes["head"], dtypes["embedding"], dtypes["kv"], chip, string(level, "level"),
                                     prompt, boolean(sweep, "sweep"), *moe, histogram))
    except ValueError as e:  # the library calls the histogram's shares "expert_shares"
        msg = str(e)
        if msg.startswith("expert_shares:"):
            raise ValueError("expert_histogram:" + msg.partition(":")[2]) from None
        raise
