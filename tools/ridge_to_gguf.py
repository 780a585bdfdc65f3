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


def convert(cfg, tensors, out_path, qtype, log=lambda s: None):
    import gguf
    import numpy as np

    gt = {"bf16": gguf.GGMLQuantizationType.BF16, "q8_0": gguf.GGMLQuantizationType.Q8_0,
          "f32": gguf.GGMLQuantizationType.F32}[qtype]
    ftype = {"bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "f32": gguf.LlamaFileType.ALL_F32}[qtype]
    d, h = cfg["d_model"], cfg["num_heads"]
    # Written next to the target and renamed at the end: a failed run leaves nothing half written.
    fd, tmp = tempfile.mkstemp(prefix=".ridge_to_gguf.", suffix=".tmp", dir=os.path.dirname(os.path.abspath(out_path)))
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, "llama")
        w.add_name("ridge CS336 Transformer LM")
        w.add_context_length(cfg["context_length"])
        w.add_embedding_length(d)
        w.add_block_count(cfg["num_layers"])
        w.add_feed_forward_length(cfg["d_ff"])
        w.add_head_count(h)
        w.add_head_count_kv(cfg["num_kv_heads"])
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
            for ours, theirs in per_layer.items():
                names[f"layers.{i}.{ours}.weight"] = f"blk.{i}.{theirs}.weight"
        for src in rc.tensor_names(cfg["num_layers"]):
            a = np.ascontiguousarray(tensors[src], dtype=np.float32)
            if a.ndim == 1 or gt == gguf.GGMLQuantizationType.F32:
                w.add_tensor(names[src], a)
                continue
            t = gt
            if t == gguf.GGMLQuantizationType.Q8_0 and a.shape[-1] % 32:
                log(f"ridge_to_gguf: {src} {a.shape}: rows of {a.shape[-1]} are not a multiple of 32; kept in bf16")
                t = gguf.GGMLQuantizationType.BF16
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
                               rope_theta=a.rope_theta)
    except rc.CheckpointError as e:
        print(f"ridge_to_gguf: {e}", file=sys.stderr)
        return 2
    convert(cfg, tensors, a.output, a.type, log=lambda s: print(s, file=sys.stderr))
    print(f"ridge_to_gguf: wrote {a.output} ({a.type}, {os.path.getsize(a.output) / 2**20:.1f} MiB): "
          f"{rc.describe(cfg)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
