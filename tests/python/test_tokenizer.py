"""ridge.data's byte-level BPE against independent references:

- training against tools/bpe_reference.py (a deliberately simple Python BPE that recounts every pair at every
  step): identical merges and vocabulary, corpus by corpus;
- encoding against HF `tokenizers` loaded with the same vocab.json/merges.txt and GPT-2's ByteLevel
  pre-tokenizer (add_prefix_space=False, use_regex=True: GPT-2's regex, no prefix space; BPE with no
  dropout, no byte fallback, ignore_merges off: GPT-2's algorithm), with GPT-2's own files and with a
  ridge-trained vocabulary; and against the reference's plain encoder;
- decode(encode(x)) == x on random valid UTF-8; special tokens round-trip;
- bad input: one-line ValueError / TypeError naming the argument.

Invalid UTF-8. A str cannot hold bytes that are not UTF-8; ridge.data takes them as the lone surrogates
U+DC80..U+DCFF that Python's surrogateescape makes of them, and encodes the original bytes. ridge's rule
(include/ridge/text/tokenizer.hpp): a run of invalid bytes cuts the text as a special token does and is one
pre-token of its own. HF cannot take such text at all (its str is Rust's, always UTF-8), so the comparison
splits the text the same way first: HF encodes each valid piece, and HF's BPE model (models.BPE.tokenize, the
merge step alone) encodes each invalid run written in GPT-2's byte alphabet. The reference encoder applies the
same rule on its own.
"""
import io
import itertools
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import ridge
from ridge.data import Tokenizer, train_bpe

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
sys.path.insert(0, str(ROOT / "tools"))
ref = pytest.importorskip("bpe_reference", reason="tools/bpe_reference.py not found")
if ref.regex is None:
    pytest.skip("the `regex` module is missing (scripts/setup-python installs it)", allow_module_level=True)

GPT2_VOCAB, GPT2_MERGES = DATA / "gpt2_vocab.json", DATA / "gpt2_merges.txt"
EOT = "<|endoftext|>"

ENGLISH = """\
The quick brown fox jumps over the lazy dog. It's a sentence that you'll have seen before; we've all typed it
when we're testing a keyboard, a font or, as here, a tokenizer. Don't you think so? I'd say it's fine.

Chapter 1.  In 1865, a man named Lewis wrote about a girl who fell down a rabbit-hole -- "Curiouser and
curiouser!" cried Alice (she was so much surprised, that for the moment she quite forgot how to speak good
English). Prices rose 3.5% to $1,234.56 on 2024-01-15; e-mail: someone@example.com, see http://x.y/z?a=1&b=2.

    Indented lines, tabs\tand\ttabs, trailing spaces   
and a last line without a newline"""

HOSTILE = [
    " " * 300 + "x" + "\t" * 50 + "\n" * 40 + " y  \n  \n",  # long whitespace runs
    "a\u00a0b\u2003c\u3000d\u2028e\u2029f\u0085g\x0b\x0c\x1c\x1d\x1e\x1fh",  # exotic spaces and separators
    "👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️‍🔥 🏳️‍🌈 😀😃😄😁 ✊🏿",  # emoji: modifiers, ZWJ sequences, flags
    "日本語のテキストと漢字。中文文本，标点符号！한국어 텍스트입니다.",  # CJK and their punctuation
    "e\u0301 a\u0308\u0304 Z\u0351\u0352\u0353\u0354\u0355 \u0915\u094d\u0937 \u05e9\u05c1\u05b8",  # combining marks
    "٠١٢٣ ²³¼ ⅷ Ⅻ 123abc abc123 ½ 1,000,000.00",  # digits of other scripts, No and Nl
    "It'S THEY'LL we'Re 'sup ''s '''' I'm I’m",  # contractions, upper case, curly apostrophe
    "\x00\x01\x02 null and controls \x7f\x80\x9f",  # C0 and C1 controls
    "مرحبا بالعالم שלום עולם नमस्ते दुनिया Привет мир Γειά σου",  # other scripts
    "\r\n\r\n line\r\nbreaks \n\r mixed\r",
    "x" * 5000,  # one long pre-token
    "!!!???...,,,;;;:::" * 20,
]

# Bytes that are not UTF-8, in every position: alone, in runs, inside words, a truncated sequence at the end.
INVALID = [
    b"abc\xffdef",
    b"\x80\x81\x82 hello \xc3\x28 w\xe2\x82orld \xf0\x9f\x98",
    b"\xed\xa0\x80 surrogate half \xc0\xaf overlong \xf5\x80 too big",
    b"caf\xe9 na\xefve \xff\xfe\xfd\xfc" + b" " * 10 + b"\xff",
    b"\xe2\x82",
]


def _hf():
    return pytest.importorskip("tokenizers", reason="HF tokenizers is not installed (scripts/setup-python)")


def hf_tokenizer(vocab_path, merges_path, specials=()):
    """HF tokenizers set up as GPT-2: the same files, GPT-2's byte-level pre-tokenizer, no normalizer."""
    tk = _hf()
    t = tk.Tokenizer(tk.models.BPE.from_file(str(vocab_path), str(merges_path)))
    t.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if specials:
        t.add_special_tokens(list(specials))
    return t


def hf_encode_bytes(t, data: bytes):
    """HF's ids for bytes that may not be UTF-8, under ridge's rule (see the module's note)."""
    table = ref.bytes_to_unicode()
    out = []
    for piece in ref._INVALID.split(data.decode("utf-8", "surrogateescape")):
        if not piece:
            continue
        if ref._INVALID.fullmatch(piece):
            raw = piece.encode("utf-8", "surrogateescape")
            out += [tok.id for tok in t.model.tokenize("".join(table[b] for b in raw))]
        else:
            out += t.encode(piece).ids
    return out


def random_text(rng, n):
    """n random code points: mostly ASCII, the rest from every plane (no surrogates), often repeated words."""
    words = ["the", " the", " of", "and", " a", " token", "izer", "!", " ", "\n", "  ", "123", "é", "日本"]
    out = []
    while len(out) < n:
        r = rng.random()
        if r < 0.45:
            out.extend(words[rng.integers(len(words))])
        elif r < 0.75:
            out.append(chr(rng.integers(32, 127)))
        elif r < 0.85:
            out.append(chr(rng.integers(0xA0, 0x800)))
        else:
            c = int(rng.integers(0x800, 0x110000))
            out.append(chr(c) if not 0xD800 <= c < 0xE000 else "x")
    return "".join(out)


@pytest.fixture(scope="module")
def gpt2():
    return Tokenizer.from_files(GPT2_VOCAB, GPT2_MERGES, [EOT])


@pytest.fixture(scope="module")
def gpt2_ref():
    vocab, merges = ref.load(str(GPT2_VOCAB), str(GPT2_MERGES))
    return ref.Encoder(vocab, merges, [EOT])


# ---------------------------------------------------------------- training against the reference
def _corpus_words(rng, n_words):
    """Random words over a small alphabet: many pairs tie, so the tie-break decides most steps."""
    syll = ["ab", "ba", "cd", "dc", "a", "b", "c", "d", "ee"]
    return " ".join("".join(syll[j] for j in rng.integers(len(syll), size=rng.integers(1, 5)))
                    for _ in range(n_words))


CORPORA = {
    "english": (ENGLISH * 2, 256 + 1 + 200, [EOT]),
    "unicode": ("".join(HOSTILE[2:6]) * 3 + "naïve café 🙂 日本語", 256 + 150, []),
    "digits": (" ".join(str(7 ** k) for k in range(120)) + " 3.14159 2,718 1e10 ٣٤٥ ²³", 256 + 120, []),
    "whitespace": ("a  b\t\t c\n\n\n  d   \r\n" * 5 + " " * 40 + "end \n \n\t \t", 256 + 40, []),
    "specials": (f"first doc{EOT}second doc<|pad|>third{EOT}{EOT}<|pad|><|endoftext|>x", 256 + 2 + 30,
                 [EOT, "<|pad|>"]),
    "overlapping-specials": ("ab<|x|>abc<|x|><|y|>bca<|x|><|y|> dab<|x|><|y" * 3, 256 + 2 + 20, ["<|x|>", "<|x|><|y|>"]),
    "ties": ("ab ab cd cd ef ef gh gh " * 3, 256 + 12, []),
}


@pytest.mark.parametrize("name", sorted(CORPORA))
def test_train_matches_reference(name, tmp_path):
    text, vocab_size, specials = CORPORA[name]
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    vocab, merges = train_bpe(path, vocab_size, specials)
    rvocab, rmerges = ref.train(text, vocab_size, specials)
    assert merges == rmerges
    assert vocab == rvocab


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_train_matches_reference_random_ties(seed, tmp_path):
    rng = np.random.default_rng(seed)
    text = _corpus_words(rng, 400) + EOT + _corpus_words(rng, 100)
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    vocab, merges = train_bpe(str(path), 256 + 1 + 80, [EOT], threads=2)
    rvocab, rmerges = ref.train(text, 256 + 1 + 80, [EOT])
    assert merges == rmerges
    assert vocab == rvocab


def test_train_runs_out_of_pairs(tmp_path):
    """A vocabulary larger than the text can fill stops when no pair is left, as the reference does."""
    path = tmp_path / "small.txt"
    path.write_text("hello hello world", encoding="utf-8")
    vocab, merges = train_bpe(path, 1000, [])
    rvocab, rmerges = ref.train("hello hello world", 1000, [])
    assert (vocab, merges) == (rvocab, rmerges) and len(vocab) < 1000


def test_train_on_invalid_utf8_matches_reference(tmp_path):
    data = b"".join(INVALID) * 3 + ENGLISH.encode()
    path = tmp_path / "bytes.txt"
    path.write_bytes(data)
    vocab, merges = train_bpe(path, 256 + 100, [])
    rvocab, rmerges = ref.train(data, 256 + 100, [])
    assert merges == rmerges and vocab == rvocab


def test_train_threads_do_not_change_the_result(tmp_path):
    text = (ENGLISH + EOT) * 40 + random_text(np.random.default_rng(5), 20000)
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    one = train_bpe(path, 256 + 1 + 300, [EOT], threads=1)
    four = train_bpe(path, 256 + 1 + 300, [EOT], threads=4)
    assert one == four


def test_train_several_files_no_merge_across(tmp_path):
    """Two files train as if a special token stood between them."""
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("abc abc ab", encoding="utf-8")
    b.write_text("c abc", encoding="utf-8")
    vocab, merges = train_bpe([a, b], 256 + 1 + 6, [EOT])
    rvocab, rmerges = ref.train("abc abc ab" + EOT + "c abc", 256 + 1 + 6, [EOT])
    assert (vocab, merges) == (rvocab, rmerges)


# ---------------------------------------------------------------- encoding against HF tokenizers
def _texts():
    rng = np.random.default_rng(7)
    return [ENGLISH] + HOSTILE + [random_text(rng, 3000) for _ in range(3)]


@pytest.mark.parametrize("i", range(len(HOSTILE) + 4))
def test_encode_gpt2_matches_hf(gpt2, i):
    hf = hf_tokenizer(GPT2_VOCAB, GPT2_MERGES, [EOT])
    text = _texts()[i]
    assert gpt2.encode(text) == hf.encode(text).ids


def test_encode_gpt2_with_specials_matches_hf(gpt2):
    hf = hf_tokenizer(GPT2_VOCAB, GPT2_MERGES, [EOT])
    text = f"{EOT}Hello{EOT} world{EOT}{EOT}  {EOT}\n<|endoftext|<|endoftext|>>"
    ids = gpt2.encode(text)
    assert ids == hf.encode(text).ids
    assert ids.count(50256) == 6


def test_encode_invalid_utf8_matches_hf_and_reference(gpt2, gpt2_ref):
    hf = hf_tokenizer(GPT2_VOCAB, GPT2_MERGES, [EOT])
    for data in INVALID:
        text = data.decode("utf-8", "surrogateescape")
        ids = gpt2.encode(text)
        assert ids == hf_encode_bytes(hf, data), data
        assert ids == gpt2_ref.encode(data), data
        assert gpt2.decode_bytes(ids) == data
        assert gpt2.decode(ids) == data.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A ridge-trained vocabulary (on English and hostile text), saved in GPT-2's format."""
    d = tmp_path_factory.mktemp("trained")
    text = (ENGLISH + EOT) * 3 + EOT.join(HOSTILE) + random_text(np.random.default_rng(3), 5000)
    (d / "corpus.txt").write_text(text, encoding="utf-8")
    vocab, merges = train_bpe(d / "corpus.txt", 256 + 1 + 700, [EOT])
    tok = Tokenizer(vocab, merges, [EOT])
    tok.save(d / "tok")
    return tok, d / "tok"


@pytest.mark.parametrize("i", range(len(HOSTILE) + 4))
def test_encode_trained_matches_hf(trained, i):
    tok, d = trained
    hf = hf_tokenizer(d / "vocab.json", d / "merges.txt", [EOT])
    text = _texts()[i] + EOT + _texts()[0]
    assert tok.encode(text) == hf.encode(text).ids


def test_encode_trained_matches_reference(trained):
    tok, _ = trained
    r = ref.Encoder(tok.vocab, tok.merges, [EOT])
    for text in _texts()[:6] + [b.decode("utf-8", "surrogateescape") for b in INVALID]:
        assert tok.encode(text) == r.encode(text)


def test_saved_files_are_what_hf_writes(trained, tmp_path):
    """vocab.json and merges.txt round-trip through HF: HF reads ridge's files and writes the same tokens."""
    tok, d = trained
    hf = hf_tokenizer(d / "vocab.json", d / "merges.txt")
    hf.model.save(str(tmp_path))
    again = Tokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt", [EOT])
    assert again.vocab == tok.vocab and again.merges == tok.merges
    assert json.loads((d / "vocab.json").read_text(encoding="utf-8")) == json.loads(
        (tmp_path / "vocab.json").read_text(encoding="utf-8"))


def test_from_files_and_load_dir_agree(trained):
    tok, d = trained
    a = Tokenizer.from_files(d / "vocab.json", d / "merges.txt", [EOT])
    b = Tokenizer.load(d)
    assert a.vocab == b.vocab == tok.vocab and a.merges == b.merges == tok.merges
    assert b.special_tokens == [EOT] and a.content_hash() == b.content_hash() == tok.content_hash()


def test_gpt2_vocab_reads_as_reference_reads_it(gpt2):
    vocab, merges = ref.load(str(GPT2_VOCAB), str(GPT2_MERGES))
    assert gpt2.vocab == vocab and gpt2.merges == merges and gpt2.vocab_size == 50257


# ---------------------------------------------------------------- round trips, special tokens, streaming
@pytest.mark.parametrize("seed", range(5))
def test_decode_encode_round_trip(gpt2, trained, seed):
    rng = np.random.default_rng(100 + seed)
    for tok in (gpt2, trained[0]):
        for n in (0, 1, 2, 17, 1000):
            text = random_text(rng, n)
            assert tok.decode(tok.encode(text)) == text


def test_special_tokens_round_trip_and_overlap():
    vocab, merges = ref.train("a<|x|>b<|x|><|y|>c" * 4, 256 + 2 + 10, ["<|x|>", "<|x|><|y|>"])
    tok = Tokenizer(vocab, merges, ["<|x|>", "<|x|><|y|>"])
    text = "q<|x|><|y|>r<|x|>s<|x|><|y|><|x|>"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert ids == ref.Encoder(vocab, merges, ["<|x|>", "<|x|><|y|>"]).encode(text)
    assert [i for i in ids if i < 2] == [1, 0, 1, 0]  # the longer special wins where both start


def test_special_token_missing_from_vocab_is_appended():
    vocab = {i: bytes([i]) for i in range(256)}
    tok = Tokenizer(vocab, [], ["<|new|>"])
    assert tok.vocab_size == 257 and tok.encode("a<|new|>") == [97, 256]
    assert tok.decode([256]) == "<|new|>"


def test_encode_iterable_matches_encode(gpt2):
    text = (ENGLISH + EOT + "\n") * 20 + "".join(HOSTILE)
    assert list(gpt2.encode_iterable(io.StringIO(text))) == gpt2.encode(text)
    rng = np.random.default_rng(9)
    cuts = sorted(rng.integers(0, len(text), size=60))
    pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]  # cut anywhere, even in a special
    assert list(gpt2.encode_iterable(pieces)) == gpt2.encode(text)


def test_encode_iterable_is_lazy(gpt2):
    """An endless input still yields ids: each piece's final ids come out before the next is read."""
    endless = itertools.repeat("Some words on a line.\n")
    first = list(itertools.islice(gpt2.encode_iterable(endless), 1000))
    assert first[:6] == gpt2.encode("Some words on a line.\n")[:6] and len(first) == 1000


def test_encode_iterable_file(gpt2, tmp_path):
    p = tmp_path / "t.txt"
    p.write_text(ENGLISH * 10, encoding="utf-8")
    with open(p, encoding="utf-8") as f:
        assert list(gpt2.encode_iterable(f)) == gpt2.encode(ENGLISH * 10)


def test_decode_accepts_arrays(gpt2):
    ids = gpt2.encode(ENGLISH)
    assert gpt2.decode(np.array(ids, dtype=np.uint16)) == ENGLISH
    assert gpt2.decode(np.array(ids, dtype=np.int64)) == ENGLISH
    assert gpt2.decode([]) == ""


# ---------------------------------------------------------------- bad input
def _one_line(e, *words):
    msg = str(e.value)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, msg


def test_vocab_size_too_small(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("hello", encoding="utf-8")
    with pytest.raises(ValueError) as e:
        train_bpe(p, 256, [EOT])
    _one_line(e, "vocab_size")
    with pytest.raises(TypeError) as e:
        train_bpe(p, 300.0, [])
    _one_line(e, "vocab_size")


def test_missing_input_file(tmp_path):
    with pytest.raises(ValueError) as e:
        train_bpe(tmp_path / "absent.txt", 300, [])
    _one_line(e, "absent.txt")


def test_bad_files(tmp_path):
    with pytest.raises(ValueError) as e:
        Tokenizer.from_files(tmp_path / "nope.json", GPT2_MERGES)
    _one_line(e, "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 0, "b": ', encoding="utf-8")
    with pytest.raises(ValueError) as e:
        Tokenizer.from_files(bad, GPT2_MERGES)
    _one_line(e, "bad.json")
    merges = tmp_path / "merges.txt"
    merges.write_text("#version: 0.2\nĠ t\nzzzzunknown q\n", encoding="utf-8")
    with pytest.raises(ValueError) as e:
        Tokenizer.from_files(GPT2_VOCAB, merges)
    _one_line(e, "merges.txt")
    merges.write_text("#version: 0.2\nonlyonetoken\n", encoding="utf-8")
    with pytest.raises(ValueError) as e:
        Tokenizer.from_files(GPT2_VOCAB, merges)
    _one_line(e, "merges.txt")


def test_bad_parts():
    vocab = {i: bytes([i]) for i in range(256)}
    with pytest.raises(ValueError) as e:
        Tokenizer(vocab, [(b"a", b"zz")])  # names a token that is not in vocab
    _one_line(e, "merges")
    with pytest.raises(ValueError) as e:
        Tokenizer({i: bytes([i]) for i in range(255)}, [])  # byte 255 missing
    _one_line(e, "vocab")
    with pytest.raises(ValueError) as e:
        Tokenizer({**vocab, 300: b"ab"}, [])
    _one_line(e, "vocab", "300")
    with pytest.raises(TypeError) as e:
        Tokenizer({**vocab, 256: "ab"}, [])
    _one_line(e, "vocab[256]")
    with pytest.raises(TypeError) as e:
        Tokenizer(vocab, [(b"a",)])
    _one_line(e, "merges[0]")
    with pytest.raises(TypeError) as e:
        Tokenizer(vocab, [], "<|endoftext|>")
    _one_line(e, "special_tokens")


def test_bad_ids_and_text(gpt2):
    with pytest.raises(ValueError) as e:
        gpt2.decode([1, 2, 50257])
    _one_line(e, "ids", "50257", "position 2")
    with pytest.raises(ValueError) as e:
        gpt2.decode([-1])
    _one_line(e, "ids", "-1")
    with pytest.raises(TypeError) as e:
        gpt2.decode([1.5])
    _one_line(e, "ids")
    with pytest.raises(TypeError) as e:
        gpt2.encode(b"bytes")
    _one_line(e, "text")
    with pytest.raises(ValueError) as e:
        gpt2.encode("lone \ud800 surrogate")
    _one_line(e, "text", "position 5")
    with pytest.raises(TypeError) as e:
        list(gpt2.encode_iterable(["ok", 3]))
    _one_line(e, "iterable item 1")
