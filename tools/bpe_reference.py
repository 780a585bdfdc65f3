#!/usr/bin/env python3
"""Byte-level BPE as CS336 assignment 1 defines it, written as simply as possible: the independent reference
for ridge's tokenizer tests and the "straightforward Python implementation" peer of `ridge bench tokenizer`.

Nothing here is incremental or clever, on purpose: training recounts every pair of every pre-token at every
step, and encoding applies the lowest-ranked merge of a pre-token until none applies. It shares no code with
ridge (its own GPT-2 byte-to-unicode table, file reader and writer).

The algorithm: the vocabulary starts with the special tokens (ids 0..S-1, in the order given), then the 256
bytes in the order of GPT-2's byte-to-unicode table ('!'..'~', 0xA1..0xAC, 0xAE..0xFF, then the rest: HF's
BpeTrainer's and CS336's fixture's ids); the text is split on the special tokens (longest first where several
start at one place; none of them is counted), each piece pre-tokenized with GPT-2's regular expression; a
pre-token is a sequence of byte strings, counted once per occurrence; each step merges the most frequent
adjacent pair within pre-tokens, ties broken by the lexicographically greater pair of byte strings, until the
vocabulary has vocab_size entries or no pair is left.

Bytes that are not UTF-8 (only files have them: a str cannot) are read with Python's surrogateescape, each
invalid byte a lone surrogate U+DC80..U+DCFF; a run of them cuts the text as a special token does, and is one
pre-token of its own (ridge's rule, include/ridge/text/tokenizer.hpp; on valid UTF-8 it changes nothing).

    python3 tools/bpe_reference.py train TEXT --vocab-size N [--special TOK]... --vocab V.json --merges M.txt
    python3 tools/bpe_reference.py encode TEXT --vocab V.json --merges M.txt [--special TOK]...   (ids, one a line)
    python3 tools/bpe_reference.py bench train --text F --vocab-size N [--special TOK]... [--time-limit S]
    python3 tools/bpe_reference.py bench encode --text F --vocab V.json --merges M.txt [--special TOK]...
        (the benchmark's peer: one JSON line, {"seconds": s, ...} or {"error": "..."})
"""
from __future__ import annotations

import argparse
import functools
import json
import re
import resource
import sys
import time
from collections import Counter

try:
    import regex
except ImportError:  # the `regex` module is the only one with \p{L}; scripts/setup-python installs it
    regex = None

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


_INVALID = re.compile("([\udc80-\udcff]+)")


class TimeLimit(Exception):
    pass


def _pattern():
    if regex is None:
        raise SystemExit("bpe_reference: the 'regex' module is missing (scripts/setup-python installs it)")
    return regex.compile(GPT2_PATTERN)


def as_text(data) -> str:
    """str as it is; bytes decoded as UTF-8 with each invalid byte kept as a lone surrogate."""
    return data.decode("utf-8", "surrogateescape") if isinstance(data, (bytes, bytearray)) else data


def _to_bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def split_on_specials(text: str, specials) -> list[tuple[bool, str]]:
    """[(is_special, piece)]: the text cut at each special token, the longest matching first."""
    if not specials:
        return [(False, text)]
    ordered = sorted(set(specials), key=lambda s: (-len(s), s))
    out, start, i = [], 0, 0
    while i < len(text):
        hit = next((s for s in ordered if text.startswith(s, i)), None)
        if hit is None:
            i += 1
            continue
        if i > start:
            out.append((False, text[start:i]))
        out.append((True, hit))
        i += len(hit)
        start = i
    if start < len(text):
        out.append((False, text[start:]))
    return out


def pretokens(text: str) -> list[bytes]:
    """GPT-2's pre-tokens of a piece with no special token in it, as bytes. A run of invalid bytes (lone
    surrogates) is a pre-token of its own, and the valid text between runs is cut on its own."""
    out = []
    for piece in _INVALID.split(text):
        if piece and _INVALID.fullmatch(piece):
            out.append(_to_bytes(piece))
        elif piece:
            out.extend(_to_bytes(m.group()) for m in _pattern().finditer(piece))
    return out


# ---------------------------------------------------------------- training
def train(text, vocab_size: int, special_tokens=(), deadline: float | None = None):
    """(vocab {id: bytes}, merges [(bytes, bytes)]). text: str, or bytes (see the module's note)."""
    text = as_text(text)
    specials = list(dict.fromkeys(special_tokens))
    vocab = {}
    for s in specials:
        vocab[len(vocab)] = s.encode("utf-8")
    for b in gpt2_byte_order():
        vocab[len(vocab)] = bytes([b])
    if vocab_size < len(vocab):
        raise ValueError(f"vocab_size {vocab_size} is below 256 + {len(specials)} special tokens")
    counts = Counter()
    for is_special, piece in split_on_specials(text, specials):
        if not is_special:
            counts.update(pretokens(piece))
    words = {tuple(bytes([b]) for b in w): n for w, n in counts.items()}
    merges = []
    while len(vocab) < vocab_size:
        if deadline is not None and time.monotonic() > deadline:
            raise TimeLimit(f"{len(merges)} merges done")
        pairs = Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[a, b] += n
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        joined = best[0] + best[1]
        vocab[len(vocab)] = joined
        new_words = {}
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            key = tuple(out)
            new_words[key] = new_words.get(key, 0) + n
        words = new_words
    return vocab, merges


# ---------------------------------------------------------------- encoding
class Encoder:
    def __init__(self, vocab: dict, merges: list, special_tokens=()):
        self.vocab = dict(vocab)
        self.ids = {v: k for k, v in self.vocab.items()}
        self.rank = {pair: i for i, pair in enumerate(merges)}
        self.specials = list(special_tokens or ())
        for s in self.specials:  # a special token missing from the vocabulary gets the next id
            if s.encode("utf-8") not in self.ids:
                self.ids[s.encode("utf-8")] = len(self.vocab)
                self.vocab[len(self.vocab)] = s.encode("utf-8")

    def encode_pretoken(self, word: bytes) -> list[int]:
        parts = [bytes([b]) for b in word]
        while len(parts) > 1:
            ranked = [(self.rank.get((a, b), len(self.rank)), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            r, _ = min(ranked)
            if r == len(self.rank):
                break
            pair, out, i = (parts[_], parts[_ + 1]), [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == pair:
                    out.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        return [self.ids[p] for p in parts]

    def encode(self, text) -> list[int]:
        out = []
        for is_special, piece in split_on_specials(as_text(text), self.specials):
            if is_special:
                out.append(self.ids[piece.encode("utf-8")])
            else:
                for w in pretokens(piece):
                    out.extend(self.encode_pretoken(w))
        return out

    def decode(self, ids) -> str:
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", "replace")


# ---------------------------------------------------------------- GPT-2's files
@functools.lru_cache(maxsize=None)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte: bytes that print as themselves keep their code point, the
    others (control, space, 0x7f..0xa0, 0xad) take 256, 257, ... in byte order."""
    keep = {b for b in range(256) if (33 <= b <= 126) or (161 <= b <= 172) or (174 <= b <= 255)}
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def gpt2_byte_order() -> list[int]:
    """The 256 bytes sorted by the code point of their stand-in character."""
    table = bytes_to_unicode()
    return sorted(range(256), key=lambda b: ord(table[b]))


def _encode_token(t: bytes) -> str:
    table = bytes_to_unicode()
    return "".join(table[b] for b in t)


@functools.lru_cache(maxsize=None)
def _unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


def _decode_token(s: str) -> bytes:
    inverse = _unicode_to_bytes()
    return bytes(inverse[c] for c in s)


def save(vocab: dict, merges: list, vocab_path: str, merges_path: str) -> None:
    with open(vocab_path, "w", encoding="utf-8") as f:
        json.dump({_encode_token(t): i for i, t in sorted(vocab.items())}, f, ensure_ascii=False)
    with open(merges_path, "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{_encode_token(a)} {_encode_token(b)}\n")


def load(vocab_path: str, merges_path: str):
    with open(vocab_path, encoding="utf-8") as f:
        vocab = {i: _decode_token(s) for s, i in json.load(f).items()}
    merges = []
    with open(merges_path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#version"):
                continue
            a, b = line.split(" ")
            merges.append((_decode_token(a), _decode_token(b)))
    return vocab, merges


# ---------------------------------------------------------------- command line
def _read(path: str) -> str:
    with open(path, "rb") as f:
        return as_text(f.read())


def _bench(args) -> dict:
    """Seconds of one training (file read included) or of one encoding (of text already read), and this
    process's peak memory."""
    if args.what == "train":
        deadline = time.monotonic() + args.time_limit if args.time_limit else None
        t0 = time.perf_counter()
        try:
            vocab, merges = train(_read(args.text), args.vocab_size, args.special, deadline)
        except TimeLimit as e:
            return {"error": f"stopped at the --time-limit of {args.time_limit:g} s ({e})"}
        out = {"seconds": time.perf_counter() - t0, "merges": len(merges)}
    else:
        vocab, merges = load(args.vocab, args.merges)
        enc = Encoder(vocab, merges, args.special)
        data = _read(args.text)
        t0 = time.perf_counter()
        ids = enc.encode(data)
        out = {"seconds": time.perf_counter() - t0, "tokens": len(ids)}
    out["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("text")
    t.add_argument("--vocab-size", type=int, required=True)
    t.add_argument("--special", action="append", default=[])
    t.add_argument("--vocab", required=True)
    t.add_argument("--merges", required=True)
    e = sub.add_parser("encode")
    e.add_argument("text")
    e.add_argument("--vocab", required=True)
    e.add_argument("--merges", required=True)
    e.add_argument("--special", action="append", default=[])
    b = sub.add_parser("bench")
    b.add_argument("what", choices=["train", "encode"])
    b.add_argument("--text", required=True)
    b.add_argument("--vocab-size", type=int, help="train: the vocabulary size")
    b.add_argument("--vocab", help="encode: vocab.json")
    b.add_argument("--merges", help="encode: merges.txt")
    b.add_argument("--special", action="append", default=[])
    b.add_argument("--time-limit", type=float, default=0, help="train: give up after this many seconds")
    args = p.parse_args(argv)
    if args.cmd == "train":
        vocab, merges = train(_read(args.text), args.vocab_size, args.special)
        save(vocab, merges, args.vocab, args.merges)
    elif args.cmd == "encode":
        vocab, merges = load(args.vocab, args.merges)
        for i in Encoder(vocab, merges, args.special).encode(_read(args.text)):
            print(i)
    else:
        try:
            out = _bench(args)
        except (OSError, ValueError) as ex:
            out = {"error": str(ex)}
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
