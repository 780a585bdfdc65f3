"""Reads a ridge checkpoint (or any weights-only safetensors file with ridge's state_dict names) with
NumPy alone, for the decode peers (tools/ridge_to_gguf.py, tools/torch_decode_peer.py, ...).

The format: 8 bytes of little-endian header length n, n bytes of JSON header
({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}), then the raw data.
ridge's `Trainer::save` (src/model/train.cpp) writes the model's tensors under their PyTorch
state_dict names, the AdamW state under "optimizer.exp_avg.<name>" / "optimizer.exp_avg_sq.<name>"
(skipped here), and the metadata "format" ("ridge-checkpoint-1"), "config" (the ModelConfig as JSON:
vocab_size, context_length, d_model, num_layers, num_heads, d_ff, rope_theta and, when it differs from
num_heads, num_kv_heads) and "state". A config that omits rope_theta or rms_norm_eps has the defaults bench/shapes/model-sizes.json
states (ridge's own, held to the file by a test), and num_kv_heads 0 or absent means num_heads
(kv_head_count): the sizes and defaults come from there and from the checkpoint, never from a copy here.

An MoE checkpoint (config num_experts > 0, docs/model.md) holds, in each layer of moe_layers (every layer
when absent), ffn.router.weight [E, D], ffn.experts.w1/.w3.weight [E, De, D], ffn.experts.w2.weight
[E, D, De], the shared experts' ffn.shared.w1/.w3 [S, D] and .w2 [D, S] (S = num_shared_experts x De) and,
under balance bias, the state tensor ffn.router.bias [E], in place of ffn.w1/w2/w3. `load` reads one only
when asked (moe=True: the GGUF writer and its check); the other tools run dense models and refuse it.

Errors are `CheckpointError` with one line naming the file and what is wrong; the tools print it and
exit 2.
"""
import argparse
import json
import mmap
import os

try:  # the tools say "not installed" themselves (exit 3) when NumPy is missing
    import numpy as np
except ImportError:
    np = None

CONFIG_FIELDS = ("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff")
# What an MoE config adds (ModelConfig's JSON names); a dense config has none of them.
MOE_FIELDS = ("num_experts", "top_k", "num_shared_experts", "d_expert", "moe_layers", "router", "balance",
              "aux_loss_coef", "bias_update_speed")
_SIZES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "shapes", "model-sizes.json")


def sizes_table():
    """bench/shapes/model-sizes.json: the presets ("sizes") and the defaults of rope_theta and rms_norm_eps."""
    with open(_SIZES_FILE) as f:
        return json.load(f)


def kv_head_count(c):
    """The config's key/value heads: num_kv_heads, where 0 or absent means num_heads."""
    return c.get("num_kv_heads") or c["num_heads"]


def rms_norm_eps(c):
    """RMSNorm's epsilon of a config: its rms_norm_eps, or the default every ridge config has."""
    return c["rms_norm_eps"] if "rms_norm_eps" in c else sizes_table()["rms_norm_eps"]


class CheckpointError(ValueError):
    pass


def moe_layers(c):
    """The layers whose feed-forward is an MoE block: none in a dense config, else moe_layers (every
    layer when it is absent or empty)."""
    if not c.get("num_experts"):
        return set()
    return set(c.get("moe_layers") or range(c["num_layers"]))


def expert_width(c):
    """d_expert, the width of each routed expert (0 or absent: d_ff, as ModelConfig reads it)."""
    return c.get("d_expert") or c["d_ff"]


def _ffn_shapes(c, i):
    """{name: shape} of layer i's feed-forward, in the order the layer's tensors are listed."""
    p, d = f"layers.{i}.ffn.", c["d_model"]
    if i not in moe_layers(c):
        f = c["d_ff"]
        return {p + "w1.weight": (f, d), p + "w2.weight": (d, f), p + "w3.weight": (f, d)}
    e, de = c["num_experts"], expert_width(c)
    out = {p + "router.weight": (e, d), p + "experts.w1.weight": (e, de, d), p + "experts.w2.weight": (e, d, de),
           p + "experts.w3.weight": (e, de, d)}
    s = c.get("num_shared_experts", 0) * de
    if s:
        out.update({p + "shared.w1.weight": (s, d), p + "shared.w2.weight": (d, s), p + "shared.w3.weight": (s, d)})
    if c.get("balance") == "bias":
        out[p + "router.bias"] = (e,)
    return out


def tensor_names(c):
    """The state_dict names of the CS336 Transformer LM of config c, embedding first (an MoE layer's
    router bias, a state tensor, included)."""
    names = ["token_embeddings.weight"]
    for i in range(c["num_layers"]):
        p = f"layers.{i}."
        names += [p + "ln1.weight", p + "attn.q_proj.weight", p + "attn.k_proj.weight", p + "attn.v_proj.weight",
                  p + "attn.output_proj.weight", p + "ln2.weight"] + list(_ffn_shapes(c, i))
    return names + ["ln_final.weight", "lm_head.weight"]


def expected_shapes(c):
    v, d, h = c["vocab_size"], c["d_model"], c["num_heads"]
    dkv = kv_head_count(c) * (d // h)
    out = {"token_embeddings.weight": (v, d), "ln_final.weight": (d,), "lm_head.weight": (v, d)}
    for i in range(c["num_layers"]):
        p = f"layers.{i}."
        out.update({p + "ln1.weight": (d,), p + "ln2.weight": (d,), p + "attn.q_proj.weight": (d, d),
                    p + "attn.k_proj.weight": (dkv, d), p + "attn.v_proj.weight": (dkv, d),
                    p + "attn.output_proj.weight": (d, d)})
        out.update(_ffn_shapes(c, i))
    return out


def read_safetensors(path):
    """(metadata dict, {name: read-only NumPy array}) with the arrays mapped from the file (nothing is
    read until used). F32/F16/F64/I32/I64 come as themselves, BF16 as float32."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise CheckpointError(f"checkpoint '{path}': cannot open ({e.strerror})") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise CheckpointError(f"checkpoint '{path}': {size} bytes, too short for a safetensors file")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    n = int.from_bytes(mm[:8], "little")
    if n > size - 8:
        raise CheckpointError(f"checkpoint '{path}': header length {n} runs past the end of the file ({size} bytes)")
    try:
        header = json.loads(bytes(mm[8:8 + n]))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"checkpoint '{path}': the safetensors header is not JSON") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"checkpoint '{path}': the safetensors header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    body = 8 + n
    kinds = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I32": np.int32, "I64": np.int64,
             "BF16": np.uint16}
    out = {}
    for name, info in header.items():
        try:
            dtype, shape, (a, b) = info["dtype"], [int(s) for s in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"checkpoint '{path}': tensor '{name}' has a malformed header entry") from None
        if dtype not in kinds:
            raise CheckpointError(f"checkpoint '{path}': tensor '{name}' has dtype {dtype}; "
                                  f"read are {', '.join(kinds)}")
        nt = kinds[dtype]
        count = int(np.prod(shape, dtype=np.int64))
        if not (0 <= a <= b and body + b <= size and b - a == count * np.dtype(nt).itemsize):
            raise CheckpointError(f"checkpoint '{path}': tensor '{name}' data_offsets [{a}, {b}] do not match "
                                  f"its shape {shape} and dtype {dtype} inside the file")
        arr = np.frombuffer(mm, dtype=nt, count=count, offset=body + a).reshape(shape)
        if dtype == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr
    return meta, out


def load(path, heads=None, kv_heads=None, context=None, rope_theta=None, moe=False):
    """(config dict, {name: float32 array}) of a ridge model. The config is the checkpoint's metadata
    'config'; a file without one (a weights-only state_dict) needs `heads` and gets the rest from the
    tensor shapes (context from `context`, default 2048; rope_theta the default of
    bench/shapes/model-sizes.json). Every model tensor must be there with the config's shape. An MoE
    model is refused unless `moe` (the caller runs one); a weights-only MoE file always is (its top_k
    and gate are in no shape)."""
    meta, tensors = read_safetensors(path)
    if "config" in meta:
        try:
            cfg = json.loads(meta["config"])
        except json.JSONDecodeError:
            raise CheckpointError(f"checkpoint '{path}': metadata 'config' is not JSON") from None
        for k in CONFIG_FIELDS:
            if not isinstance(cfg.get(k), int) or cfg[k] < 1:
                raise CheckpointError(f"checkpoint '{path}': metadata 'config' has no positive integer '{k}'")
    else:
        if any(".ffn.router." in name for name in tensors):
            raise CheckpointError(f"checkpoint '{path}' holds MoE tensors (ffn.router.*) but no metadata 'config': "
                                  "top_k and the gate are in no shape; write it with ridge train or "
                                  "TransformerLM.save")
        if heads is None:
            raise CheckpointError(f"checkpoint '{path}' has no metadata 'config' (a weights-only file): "
                                  "pass --heads (and --context, --rope-theta if not 2048 and ridge's default)")
        emb, w1 = tensors.get("token_embeddings.weight"), tensors.get("layers.0.ffn.w1.weight")
        if emb is None or w1 is None or emb.ndim != 2 or w1.ndim != 2:
            raise CheckpointError(f"checkpoint '{path}': no token_embeddings.weight / layers.0.ffn.w1.weight "
                                  "to take the shape from")
        layers = 0
        while f"layers.{layers}.ln1.weight" in tensors:
            layers += 1
        cfg = {"vocab_size": emb.shape[0], "context_length": context or 2048, "d_model": emb.shape[1],
               "num_layers": layers, "num_heads": heads, "d_ff": w1.shape[0]}
        k = tensors.get("layers.0.attn.k_proj.weight")
        if k is not None and emb.shape[1] % heads == 0:
            cfg["num_kv_heads"] = k.shape[0] // (emb.shape[1] // heads)
    if heads is not None and heads != cfg["num_heads"]:
        raise CheckpointError(f"--heads {heads} differs from the checkpoint's num_heads {cfg['num_heads']}")
    if context is not None:
        cfg["context_length"] = context
    if rope_theta is not None:
        cfg["rope_theta"] = rope_theta
    if kv_heads is not None:
        cfg["num_kv_heads"] = kv_heads
    cfg.setdefault("rope_theta", float(sizes_table()["rope_theta"]))
    cfg["num_kv_heads"] = kv_head_count(cfg)
    check_config(cfg, f"checkpoint '{path}'")
    if moe_layers(cfg) and not moe:
        raise CheckpointError(f"checkpoint '{path}': a Mixture-of-Experts model (num_experts {cfg['num_experts']}); "
                              "this tool runs dense models only (tools/ridge_to_gguf.py and "
                              "tools/check_gguf_logits.py take MoE checkpoints)")
    want = expected_shapes(cfg)
    for name, shape in want.items():
        if name not in tensors:
            raise CheckpointError(f"checkpoint '{path}': tensor '{name}' is missing")
        if tuple(tensors[name].shape) != shape:
            raise CheckpointError(f"checkpoint '{path}': tensor '{name}' has the shape {tuple(tensors[name].shape)}; "
                                  f"the config {describe(cfg)} needs {shape}")
    return cfg, {name: np.asarray(tensors[name], dtype=np.float32) for name in want}


def check_config(c, what):
    d, h, kv = c["d_model"], c["num_heads"], c["num_kv_heads"]
    if d % h or (d // h) % 2:
        raise CheckpointError(f"{what}: d_model {d} must be a multiple of num_heads {h} with an even head dimension")
    if kv < 1 or h % kv:
        raise CheckpointError(f"{what}: num_heads {h} must be a multiple of num_kv_heads {kv}")
    if c.get("num_experts"):
        e, k, layers = c["num_experts"], c.get("top_k"), c.get("moe_layers") or []
        if not isinstance(k, int) or not 1 <= k <= e:
            raise CheckpointError(f"{what}: top_k {k} must be an integer in [1, num_experts = {e}]")
        if not isinstance(layers, list) or any(not isinstance(i, int) or not 0 <= i < c["num_layers"] for i in layers):
            raise CheckpointError(f"{what}: moe_layers {layers} must be layer indices in [0, {c['num_layers']})")


def describe(c):
    s = (f"vocab {c['vocab_size']}, context {c['context_length']}, d_model {c['d_model']}, layers {c['num_layers']}, "
         f"heads {c['num_heads']}")
    if kv_head_count(c) != c["num_heads"]:
        s += f", kv_heads {kv_head_count(c)}"
    table = sizes_table()
    s += f", d_ff {c['d_ff']}, rope_theta {c.get('rope_theta', table['rope_theta']):g}"
    s += (f", rms_norm_eps {c['rms_norm_eps']:g}" if c.get("rms_norm_eps", table["rms_norm_eps"]) !=
          table["rms_norm_eps"] else "")
    if moe_layers(c):
        layers = c.get("moe_layers") or []
        s += (f", {c['num_experts']} experts (top-{c['top_k']}, d_expert {expert_width(c)}"
              + (f", {c['num_shared_experts']} shared" if c.get("num_shared_experts") else "")
              + (f", layers {','.join(map(str, layers))}" if layers else "")
              + f", router {c.get('router', 'softmax')}, balance {c.get('balance', 'aux')})")
    return s


def preset(size, vocab, context, kv_heads=None):
    """The config of a size in bench/shapes/model-sizes.json (tiny .. 2.7B)."""
    table = sizes_table()
    sizes = table["sizes"]
    if size not in sizes:
        raise CheckpointError(f"--size {size}: unknown; accepted: {', '.join(sizes)}")
    if "num_experts" in sizes[size]:
        raise CheckpointError(f"--size {size}: a Mixture-of-Experts size; these tools build dense models only "
                              f"(accepted: {', '.join(n for n in sizes if 'num_experts' not in sizes[n])})")
    c = dict(sizes[size], vocab_size=vocab, context_length=context, rope_theta=float(table["rope_theta"]))
    c["num_kv_heads"] = kv_head_count(dict(c, num_kv_heads=kv_heads))
    check_config(c, f"--size {size}")
    return c


def param_count(c):
    """The parameters of a config: the sizes of its tensors (expected_shapes, less an MoE router's bias,
    a state tensor), summed."""
    total = 0
    for name, shape in expected_shapes(c).items():
        if name.endswith(".router.bias"):
            continue
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def available_memory():
    """Bytes the kernel says a new allocation can have (MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def kv_cache_bytes(c, batch, positions, elem_bytes):
    """K and V of every layer for `batch` sequences of `positions` each."""
    return 2 * c["num_layers"] * batch * positions * kv_head_count(c) * (c["d_model"] // c["num_heads"]) * elem_bytes


def parse_cases(text):
    """The --cases argument of the decode peers: a JSON list of {phase: prefill|decode, batch, context,
    prompt} (what `ridge bench decode` passes)."""
    try:
        cases = json.loads(text)
        assert isinstance(cases, list) and all(isinstance(c, dict) and c.get("phase") in ("prefill", "decode")
                                               for c in cases)
    except (ValueError, AssertionError):
        raise argparse.ArgumentTypeError("expected a JSON list of {phase: prefill|decode, batch, context, prompt}")
    return cases
