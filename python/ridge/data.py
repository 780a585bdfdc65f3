"""Byte-level BPE (CS336 assignment 1's tokenizer), with CS336's interface:

    vocab, merges = train_bpe("corpus.txt", 10_000, ["<|endoftext|>"])   # dict[int, bytes], [(bytes, bytes)]
    tok = Tokenizer(vocab, merges, ["<|endoftext|>"])                      # or Tokenizer.from_files(...)
    ids = tok.encode("Hello, world!<|endoftext|>")
    text = tok.decode(ids)
    for i in tok.encode_iterable(open("big.txt")): ...                    # lazily, memory-bounded

The algorithm, the files and the ids: include/ridge/text/tokenizer.hpp and docs/text.md.
"""
from __future__ import annotations

import numbers
import os
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from . import _ridge
from ._args import _type, integer
from ._args import path as _path

_d = _ridge.data

__all__ = ["train_bpe", "Tokenizer"]


def _specials(special_tokens, name="special_tokens") -> list[str]:
    if special_tokens is None:
        return []
    if isinstance(special_tokens, (str, bytes)) or not isinstance(special_tokens, Iterable):
        raise TypeError(f"{name}: expected a list of str, got {_type(special_tokens)}")
    out = []
    for i, s in enumerate(special_tokens):
        if not isinstance(s, str):
            raise TypeError(f"{name}[{i}]: expected a str, got {_type(s)}")
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{name}[{i}]: {s!r} is not valid UTF-8 text") from None
        out.append(s)
    return out


def _text_bytes(text, name: str) -> bytes:
    """A str as the bytes ridge encodes: UTF-8, with lone surrogates U+DC80..U+DCFF (what
    open(..., errors="surrogateescape") makes of bytes that are not UTF-8) turned back into those bytes."""
    if not isinstance(text, str):
        raise TypeError(f"{name}: expected a str, got {_type(text)}")
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:
        raise ValueError(f"{name}: character {e.object[e.start]!r} at position {e.start} is a lone surrogate "
                         f"that no byte stands for (only U+DC80..U+DCFF, from surrogateescape)") from None


def train_bpe(input_path: str | os.PathLike, vocab_size: int, special_tokens: list[str], *,
              threads: int | None = None) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """CS336's train_bpe: byte-level BPE trained on the text file `input_path` (a list of paths trains on
    them all, no pre-token crossing from one into the next). Returns (vocab: id -> bytes, merges in the
    order made). Ids: the special tokens first, then the 256 bytes, then one per merge. threads: for
    this call (default ridge.get_num_threads())."""
    paths = input_path if isinstance(input_path, (list, tuple)) else [input_path]
    paths = [_path(p, "input_path") for p in paths]
    vocab_size = integer(vocab_size, "vocab_size")
    specials = _specials(special_tokens)
    if threads is not None:
        from . import get_num_threads, set_num_threads

        before = get_num_threads()
        set_num_threads(integer(threads, "threads", 1, 2**31 - 1))
    try:
        t = _d.train_bpe(paths, vocab_size, specials)
    finally:
        if threads is not None:
            set_num_threads(before)
    return dict(enumerate(t.vocab())), t.merges()


def _vocab_list(vocab) -> list[bytes]:
    if not isinstance(vocab, Mapping):
        raise TypeError(f"vocab: expected a dict[int, bytes], got {_type(vocab)}")
    n = len(vocab)
    out = [None] * n
    for k, v in vocab.items():
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"vocab: key {k!r} is not an integer id")
        if not 0 <= int(k) < n:
            raise ValueError(f"vocab: id {int(k)} is outside 0..{n - 1} (the ids must be 0..len(vocab)-1)")
        if not isinstance(v, (bytes, bytearray)):
            raise TypeError(f"vocab[{int(k)}]: expected bytes, got {_type(v)}")
        out[int(k)] = bytes(v)
    return out  # every slot filled: n distinct keys in 0..n-1


def _merge_list(merges) -> list[tuple[bytes, bytes]]:
    if isinstance(merges, (str, bytes)) or not isinstance(merges, Iterable):
        raise TypeError(f"merges: expected a list of (bytes, bytes), got {_type(merges)}")
    out = []
    for i, m in enumerate(merges):
        if not isinstance(m, (tuple, list)) or len(m) != 2 or not all(isinstance(x, (bytes, bytearray)) for x in m):
            raise TypeError(f"merges[{i}]: expected a pair (bytes, bytes), got {m!r:.60}")
        out.append((bytes(m[0]), bytes(m[1])))
    return out


def _ids(ids, vocab_size: int) -> np.ndarray:
    """Token ids as a contiguous int32 array, each checked in [0, vocab_size) before it is narrowed."""
    if isinstance(ids, (str, bytes)) or ids is None:
        raise TypeError(f"ids: expected a sequence of integers, got {_type(ids)}")
    if type(ids).__module__.startswith("torch"):
        ids = ids.detach().cpu().numpy()
    try:
        a = np.asarray(ids)
    except (ValueError, TypeError, OverflowError):
        raise TypeError(f"ids: expected a sequence of integers, got {_type(ids)}") from None
    if a.size == 0:
        return np.zeros(0, np.int32)
    if a.dtype == object:
        for i, v in enumerate(a.reshape(-1)):
            integer(v, f"ids[{i}]")
    elif a.dtype.kind not in "iu":
        raise TypeError(f"ids: token ids must be integers, got {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"ids: expected a 1-D sequence, got shape {a.shape}")
    bad = np.flatnonzero((a < 0) | (a >= vocab_size))
    if bad.size:
        raise ValueError(f"ids: token {int(a[bad[0]])} at position {int(bad[0])} is outside 0..{vocab_size - 1}")
    return np.ascontiguousarray(a, dtype=np.int32)


class Tokenizer:
    """CS336's Tokenizer: vocab (id -> bytes, ids 0..len-1), merges (in rank order), special tokens (kept
    whole when encoding, the longest first where they overlap; one missing from vocab is appended)."""

    def __init__(self, vocab: dict[int, bytes], merges: list[tuple[bytes, bytes]],
                 special_tokens: list[str] | None = None):
        self._t = _d.Tokenizer(_vocab_list(vocab), _merge_list(merges), _specials(special_tokens))

    @classmethod
    def _wrap(cls, t) -> Tokenizer:
        self = cls.__new__(cls)
        self._t = t
        return self

    @classmethod
    def from_files(cls, vocab_filepath: str | os.PathLike, merges_filepath: str | os.PathLike,
                   special_tokens: list[str] | None = None) -> Tokenizer:
        """Reads GPT-2's pair of files (vocab.json, merges.txt), as GPT-2, HF tokenizers and
        `ridge data train-bpe` write them."""
        return cls._wrap(_d.Tokenizer.load(_path(vocab_filepath, "vocab_filepath"),
                                           _path(merges_filepath, "merges_filepath"), _specials(special_tokens)))

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Tokenizer:
        """Reads a tokenizer directory (vocab.json, merges.txt, special_tokens.json), as
        `ridge data train-bpe -o DIR` and save() write it."""
        return cls._wrap(_d.Tokenizer.load_dir(_path(directory, "directory")))

    def save(self, directory: str | os.PathLike) -> None:
        """Writes vocab.json, merges.txt and special_tokens.json as `directory`, one set: a new folder, or one
        holding only a tokenizer's files, replaced whole (a reader never sees a mix of two versions)."""
        self._t.save_dir(_path(directory, "directory"))

    @property
    def vocab(self) -> dict[int, bytes]:
        return dict(enumerate(self._t.vocab()))

    @property
    def merges(self) -> list[tuple[bytes, bytes]]:
        return self._t.merges()

    @property
    def special_tokens(self) -> list[str]:
        return self._t.special_tokens()

    @property
    def vocab_size(self) -> int:
        return self._t.vocab_size()

    def content_hash(self) -> str:
        """The tokenizer's content hash (16 hex digits), as checkpoints record it."""
        return f"{self._t.content_hash():016x}"

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`."""
        return self._t.encode(_text_bytes(text, "text"))

    def encode_iterable(self, iterable: Iterable[str]) -> Iterator[int]:
        """Ids of the concatenated pieces (a file object yields its lines), the same as encode() of the
        whole, produced lazily: memory stays bounded by what one piece holds back."""
        if isinstance(iterable, (str, bytes)) or not isinstance(iterable, Iterable):
            raise TypeError(f"iterable: expected an iterable of str, got {_type(iterable)}")
        stream = _d.EncodeStream(self._t)
        for i, piece in enumerate(iterable):
            yield from stream.feed(_text_bytes(piece, f"iterable item {i}"))
        yield from stream.finish()

    def decode(self, ids: list[int]) -> str:
        """The text of `ids`; bytes that are not UTF-8 become U+FFFD (Python's errors="replace")."""
        return self._t.decode(_ids(ids, self._t.vocab_size()))

    def decode_bytes(self, ids: list[int]) -> bytes:
        """The bytes of `ids`, concatenated."""
        return self._t.decode_bytes(_ids(ids, self._t.vocab_size()))

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab_size={self.vocab_size}, merges={len(self._t.merges())}, "
                f"special_tokens={self.special_tokens!r})")
