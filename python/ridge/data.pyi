"""Byte-level BPE (CS336 assignment 1's tokenizer), with CS336's interface (type stubs)."""
import os
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

__all__: List[str]

_Path = Union[str, bytes, os.PathLike]

def train_bpe(input_path: Union[_Path, Sequence[_Path]], vocab_size: int, special_tokens: List[str], *,
              threads: Optional[int] = None) -> Tuple[Dict[int, bytes], List[Tuple[bytes, bytes]]]:
    """CS336's train_bpe: byte-level BPE trained on the text file `input_path` (a list of paths trains on
    them all, no pre-token crossing from one into the next). Returns (vocab: id -> bytes, merges in the
    order made). Ids: the special tokens first, then the 256 bytes, then one per merge. threads: for
    this call (default ridge.get_num_threads())."""

class Tokenizer:
    """CS336's Tokenizer: vocab (id -> bytes, ids 0..len-1), merges (in rank order), special tokens (kept
    whole when encoding, the longest first where they overlap; one missing from vocab is appended)."""
    def __init__(self, vocab: Dict[int, bytes], merges: List[Tuple[bytes, bytes]],
                 special_tokens: Optional[List[str]] = None) -> None: ...
    @classmethod
    def from_files(cls, vocab_filepath: _Path, merges_filepath: _Path,
                   special_tokens: Optional[List[str]] = None) -> "Tokenizer":
        """Reads GPT-2's pair of files (vocab.json, merges.txt), as GPT-2, HF tokenizers and
        `ridge data train-bpe` write them."""
    @classmethod
    def load(cls, directory: _Path) -> "Tokenizer":
        """Reads a tokenizer directory (vocab.json, merges.txt, special_tokens.json), as
        `ridge data train-bpe -o DIR` and save() write it."""
    def save(self, directory: _Path) -> None:
        """Writes vocab.json, merges.txt and special_tokens.json into `directory` (each file replaced whole)."""
    @property
    def vocab(self) -> Dict[int, bytes]:
        """id -> the token's bytes."""
    @property
    def merges(self) -> List[Tuple[bytes, bytes]]:
        """The merges in rank order."""
    @property
    def special_tokens(self) -> List[str]:
        """The special tokens, in the order given."""
    @property
    def vocab_size(self) -> int:
        """The number of ids (special tokens included)."""
    def content_hash(self) -> str:
        """The tokenizer's content hash (16 hex digits), as checkpoints record it."""
    def encode(self, text: str) -> List[int]:
        """Token ids of `text` (lone surrogates U+DC80..U+DCFF, from surrogateescape, stand for the bytes
        they came from)."""
    def encode_iterable(self, iterable: Iterable[str]) -> Iterator[int]:
        """Ids of the concatenated pieces (a file object yields its lines), the same as encode() of the
        whole, produced lazily: memory stays bounded by what one piece holds back."""
    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids`; bytes that are not UTF-8 become U+FFFD (Python's errors="replace")."""
    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """The bytes of `ids`, concatenated."""
