#!/usr/bin/env python3
"""HF `tokenizers` (Rust) as the peer of `ridge bench tokenizer`: byte-level BPE set up as GPT-2 (the ByteLevel
pre-tokenizer with GPT-2's regex, no prefix space), trained and run on the text ridge is given.

    hf_bpe_peer.py train --text F --vocab-size N [--special TOK]...       (Tokenizer.train on the file)
    hf_bpe_peer.py encode --text F --vocab V.json --merges M.txt [--special TOK]...   (encode_batch)

Threads: Rayon's, from RAYON_NUM_THREADS (the benchmark sets it to ridge's thread count). encode reads the file
and cuts it into pieces of about 64 KiB at newlines between two printable ASCII characters (where GPT-2's
pre-tokenizer always cuts, so the ids are those of the whole text), then times one encode_batch of the pieces.
Prints one JSON line: {"seconds": s, "tokens": n} or {"error": "..."}; the benchmark reads the process's peak
memory from its own rusage.
"""
import argparse
import json
import re
import sys
import time


def train(args):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=args.vocab_size, special_tokens=args.special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t0 = time.perf_counter()
    tok.train([args.text], trainer)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "vocab_size": tok.get_vocab_size()}


_CUT = re.compile(r"(?<=[!-~]\n)(?=[!-~])")


def pieces(text, target=1 << 16):
    out, start = [], 0
    while start < len(text):
        m = _CUT.search(text, start + target) if start + target < len(text) else None
        end = m.start() if m else len(text)
        out.append(text[start:end])
        start = end
    return out


def encode(args):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.BPE.from_file(args.vocab, args.merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if args.special:
        tok.add_special_tokens(args.special)
    with open(args.text, encoding="utf-8") as f:
        batch = pieces(f.read())
    tok.encode_batch(batch[:2])  # warm-up: the thread pool, the caches
    t0 = time.perf_counter()
    out = tok.encode_batch(batch, add_special_tokens=False)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "tokens": sum(len(e.ids) for e in out), "pieces": len(batch)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["train", "encode"])
    p.add_argument("--text", required=True)
    p.add_argument("--vocab-size", type=int)
    p.add_argument("--vocab")
    p.add_argument("--merges")
    p.add_argument("--special", action="append", default=[])
    args = p.parse_args()
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        print(json.dumps({"error": "HF tokenizers is not installed (scripts/setup-python installs it)"}))
        return 0
    try:
        out = train(args) if args.what == "train" else encode(args)
    except Exception as e:  # the benchmark reports the peer's failure in its row
        out = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
