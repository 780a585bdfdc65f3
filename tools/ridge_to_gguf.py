#!/usr/bin/env python3
"""Writes a ridge checkpoint as a GGUF file that llama.cpp runs as a `llama` model (the peer of
`ridge bench decode`):

    tools/ridge_to_gguf.py CHECKPOINT -o OUT.gguf --type bf16|q8_0|f32 [--heads H --context C ...]

CHECKPOINT: what `ridge train` / TransformerLM.save write (the config is in the metadata), or a
weights-only safetensors state_dict (then --heads is needed; the rest comes from the shapes).

The CS336 model is Llama's architecture, so the mapping is one to one, with no reordering:
  token_embeddings -> token_embd        layers.N.attn.q/k/v_proj -> blk.N.attn_q/k/v
  layers.N.attn.output_proj -> blk.N.attn_output    layers.N.ffn.w1/w3/w2 -> blk.N.ffn_gate/up/down
  layers.N.ln1/ln2 -> blk.N.attn_norm/ffn_norm      ln_final -> output_norm    lm_head -> output
A PyTorch [out, in] weight is GGUF's ne = [in, out], the layout llama.cpp expects, so the bytes go in
as they are. RoPE: llama.cpp's `llama` arch rotates adjacent pairs (2i, 2i+1) (rope type NORM), as
ridge does; Hugging Face's Llama rotates halves, which is why HF's converter permutes q/k rows and
why this one must not (tools/check_gguf_logits.py checks it on logits).

--type: the 2-D weights (embedding and output included, as llama.cpp's own converter does) in bf16
(round to nearest even), q8_0 (blocks of 32 with one fp16 scale, llama.cpp's reference quantizer) or
f32; norms always f32. A tensor whose rows are not a multiple of 32 cannot be q8_0 and stays bf16
(said on stderr).

Mixture of Experts (config num_experts > 0, issue 40): written as llama.cpp's MoE form of the same
`llama` arch, Mixtral's: `llama.expert_count` E, `llama.expert_used_count` top_k, and per layer
  layers.N.ffn.router -> blk.N.ffn_gate_inp [E, D] (GGUF ne [D, E]; always f32)
  layers.N.ffn.experts.w1/w3/w2 -> blk.N.ffn_gate_exps/ffn_up_exps [E, De, D] (ne [D, De, E]) and
      blk.N.ffn_down_exps [E, D, De] (ne [De, D, E])
the stacks' bytes as they are, as for the dense tensors: llama.cpp's loader asks for ne
{n_embd, n_ff, n_expert} and {n_ff, n_embd, n_expert}, i.e. row-major [E, De, D] and [E, D, De].
`llama.feed_forward_length` is d_expert: llama arch sizes its experts by it (the config's d_ff, the
active width, sizes no tensor when every layer is MoE). The router stays f32 whatever --type, as
llama.cpp's own converter and llama-quantize keep ffn_gate_inp and as ridge computes it (fp32 in every
precision). The gate is the same function: llama.cpp takes softmax over all E logits, the top k of
those probabilities, and divides them by their sum; ridge does exactly that, and Mixtral's "softmax over
the top-k logits" is the same weights (exp(l_i) / sum over the chosen exp(l_j) either way; softmax is
monotone, so the same k are chosen). Ties: ridge gives the lower expert id, llama.cpp's argsort leaves
them unspecified; random fp32 weights never tie, but a near tie can route apart under bf16/q8_0.

Refused (exit 2, one line), because llama.cpp's llama arch would run another model than ridge does:
  - router sigmoid (DeepSeek-V3's gate): llama arch gates by softmax only (its graph hard-codes it);
  - balance bias with a nonzero bias: the bias changes which experts are chosen, and llama arch has
    no selection bias (a zero bias, as at initialisation, chooses alike and is accepted, not written);
  - shared experts: llama arch's graph has no always-on expert (it loads Granite's shexp tensors but
    never applies them);
  - moe_layers not covering every layer: llama arch makes every layer MoE or none (one expert_count);
  - more than 1024 experts: llama.cpp's LLAMA_MAX_EXPERTS (llama-cpp-python 0.3.36's build loads 1024 and
    aborts the whole process on 1025, a GGML_ASSERT in its loader).
  d_expert != d_ff is not refused: only d_expert sizes an expert.

Tokenizer: ridge's ids 0..255 are bytes, so the vocab is SentencePiece-style ("llama") with
"<0x00>".."<0xFF>" as BYTE tokens (llama.cpp detokenizes them to the bytes) and "<ridge_N>" for ids
>= 256; no BOS is added. The peers only ever feed token ids.

Exit codes: 0 written, 2 bad input (one line), 3 the gguf package is missing (scripts/setup-peers).
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ridge_checkpoint as rc  # noqa: E402

TYPES = ("bf16", "q8_0", "f32")
MAX_EXPERTS = 1024
# ridge's names of an MoE layer's tensors -> llama.cpp's (the Mixtral form of the llama arch).
MOE_NAMES = {"ffn.router": "ffn_gate_inp", "ffn.experts.w1": "ffn_gate_exps", "ffn.experts.w3": "ffn_up_exps",
             "ffn.experts.w2": "ffn_down_exps"}


def mixtral_refusal(cfg, tensors):
    """Why llama.cpp's llama arch cannot run this MoE model as ridge runs it (one line), or None; the
    reasons are the module docstring's."""
    e, layers = cfg["num_experts"], rc.moe_layers(cfg)
    if cfg.get("router", "softmax") != "softmax":
        return (f"router {cfg['router']}: llama.cpp's llama arch (Mixtral) gates by softmax only "
                "(accepted: router softmax)")
    if cfg.get("num_shared_experts"):
        return (f"num_shared_experts {cfg['num_shared_experts']}: llama.cpp's llama arch (Mixtral) has no shared "
                "expert (accepted: 0)")
    if len(layers) != cfg["num_layers"]:
        return (f"moe_layers {sorted(layers)}: llama.cpp's llama arch makes every layer MoE or none "
                f"(accepted: all {cfg['num_layers']} layers)")
    if e > MAX_EXPERTS:
        return f"num_experts {e}: llama.cpp loads at most {MAX_EXPERTS} experts (accepted: 1 .. {MAX_EXPERTS})"
    for i in sorted(layers):
        b = tensors.get(f"layers.{i}.ffn.router.bias")
        if b is not None and b.any():
            return (f"layers.{i}.ffn.router.bias is nonzero (balance bias): it changes which experts are chosen "
                    "and llama.cpp's llama arch has no selection bias (accepted: balance aux, or an all-zero bias)")
    return None


def stored_type(gguf, name, shape, qtype):
    """The GGML type tensor `name` of `shape` is written in under --type qtype: f32 for norms, the router
    and --type f32; bf16 for a q8_0 tensor whose rows are not a multiple of 32; else qtype."""
    if len(shape) == 1 or qtype == "f32" or name.endswith(".router.weight"):
        return gguf.GGMLQuantizationType.F32
    if qtype == "q8_0" and shape[-1] % 32:
        return gguf.GGMLQuantizationType.BF16
    return gguf.GGMLQuantizationType.BF16 if qtype == "bf16" else gguf.GGMLQuantizationType.Q8_0


def convert(cfg, tensors, out_path, qtype, log=lambda s: None, source=None):
    """Writes out_path; an MoE model llama.cpp cannot run as ridge does raises rc.CheckpointError (naming
    `source`, the checkpoint, where given) before anything is written."""
    import gguf
    import numpy as np

    gt = {"bf16": gguf.GGMLQuantizationType.BF16, "q8_0": gguf.GGMLQuantizationType.Q8_0,
          "f32": gguf.GGMLQuantizationType.F32}[qtype]
    ftype = {"bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "f32": gguf.LlamaFileType.ALL_F32}[qtype]
    d, h = cfg["d_model"], cfg["num_heads"]
    moe = rc.moe_layers(cfg)
    if moe:
        why = mixtral_refusal(cfg, tensors)
        if why:
            raise rc.CheckpointError(f"checkpoint '{source}': {why}" if source else why)
    # Written next to the target and renamed at the end: a failed run leaves nothing half written.
    fd, tmp = tempfile.mkstemp(prefix=".ridge_to_gguf.", suffix=".tmp", dir=os.path.dirname(os.path.abspath(out_path)))
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, "llama")
        w.add_name("ridge CS336 Transformer LM")
        w.add_context_length(cfg["context_length"])
        w.add_embedding_length(d)
        w.add_block_count(cfg["num_layers"])
        w.add_feed_forward_length(rc.expert_width(cfg) if moe else cfg["d_ff"])
        w.add_head_count(h)
        w.add_head_count_kv(cfg["num_kv_heads"])
        if moe:
            w.add_expert_count(cfg["num_experts"])
            w.add_expert_used_count(cfg["top_k"])
        w.add_rope_freq_base(float(cfg["rope_theta"]))
        w.add_rope_dimension_count(d // h)
        w.add_layer_norm_rms_eps(rc.rms_norm_eps(cfg))
        w.add_vocab_size(cfg["vocab_size"])
        w.add_file_type(ftype)

        v = cfg["vocab_size"]
        w.add_tokenizer_model("llama")
        w.add_token_list([f"<0x{i:02X}>" if i < 256 else f"<ridge_{i}>" for i in range(v)])
        w.add_token_scores([0.0] * v)
        w.add_token_types([gguf.TokenType.BYTE if i < 256 else gguf.TokenType.NORMAL for i in range(v)])
        w.add_add_bos_token(False)
        w.add_add_eos_token(False)

        names = {"token_embeddings.weight": "token_embd.weight", "ln_final.weight": "output_norm.weight",
                 "lm_head.weight": "output.weight"}
        per_layer = {"ln1": "attn_norm", "attn.q_proj": "attn_q", "attn.k_proj": "attn_k", "attn.v_proj": "attn_v",
                     "attn.output_proj": "attn_output", "ln2": "ffn_norm", "ffn.w1": "ffn_gate", "ffn.w3": "ffn_up",
                     "ffn.w2": "ffn_down"}
        for i in range(cfg["num_layers"]):
            for ours, theirs in (per_layer | MOE_NAMES).items():
                names[f"layers.{i}.{ours}.weight"] = f"blk.{i}.{theirs}.weight"
        for src in rc.tensor_names(cfg):
            if src.endswith(".router.bias"):  # all zero (mixtral_refusal): chooses as no bias does
                continue
            a = np.ascontiguousarray(tensors[src], dtype=np.float32)
            t = stored_type(gguf, src, a.shape, qtype)
            if t == gguf.GGMLQuantizationType.F32:
                w.add_tensor(names[src], a)
                continue
            if t != gt:
                log(f"ridge_to_gguf: {src} {a.shape}: rows of {a.shape[-1]} are not a multiple of 32; kept in bf16")
            w.add_tensor(names[src], gguf.quants.quantize(a, t), raw_dtype=t)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("-o", "--output", required=True, help="the GGUF file to write")
    ap.add_argument("--type", choices=TYPES, default="bf16")
    ap.add_argument("--heads", type=int, help="num_heads, for a weights-only file (checked against a checkpoint's)")
    ap.add_argument("--kv-heads", type=int, help="num_kv_heads, overriding what the shapes say")
    ap.add_argument("--context", type=int, help="context_length written to the GGUF (default: the checkpoint's)")
    ap.add_argument("--rope-theta", type=float, help="for a weights-only file (default 10000)")
    ap.add_argument("--force", action="store_true", help="overwrite OUT.gguf if it exists")
    a = ap.parse_args()
    try:
        import gguf  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        print(f"ridge_to_gguf: {e.name} is not installed (scripts/setup-peers llama installs it)")
        return 3
    if os.path.exists(a.output) and not a.force:
        print(f"ridge_to_gguf: {a.output} exists; pass --force to overwrite it", file=sys.stderr)
        return 2
    if not os.path.isdir(os.path.dirname(os.path.abspath(a.output))):
        print(f"ridge_to_gguf: -o {a.output}: no such directory", file=sys.stderr)
        return 2
    try:
        cfg, tensors = rc.load(a.checkpoint, heads=a.heads, kv_heads=a.kv_heads, context=a.context,
                               rope_theta=a.rope_theta, moe=True)
        convert(cfg, tensors, a.output, a.type, log=lambda s: print(s, file=sys.stderr), source=a.checkpoint)
    except rc.CheckpointError as e:
        print(f"ridge_to_gguf: {e}", file=sys.stderr)
        return 2
    print(f"ridge_to_gguf: wrote {a.output} ({a.type}, {os.path.getsize(a.output) / 2**20:.1f} MiB): "
          f"{rc.describe(cfg)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
