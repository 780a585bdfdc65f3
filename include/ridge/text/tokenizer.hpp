// Byte-level BPE as CS336 assignment 1 defines it (GPT-2's tokenizer): training, encoding, decoding, and
// the tokenizer files GPT-2, HF `tokenizers` and CS336's fixtures use.
//
// Pre-tokenization. Text is first split on the special tokens (leftmost occurrence first; where several
// special tokens start at one position the longest wins, so overlapping specials match longest first),
// then every piece between them is cut with GPT-2's regular expression
//     '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// run by PCRE2 (JIT) in UTF mode with Unicode properties (UCP), the way HF's ByteLevel pre-tokenizer
// runs it. No merge crosses a pre-token, a special token or the boundary between two input files.
// \p{L}, \p{N} and \s follow PCRE2's Unicode tables (Unicode 14.0 in Debian 12's PCRE2 10.42): on every
// code point assigned by Unicode 14 the pieces are HF's (checked on all of them); a character assigned
// later (CJK Extension H, Egyptian Hieroglyphs Extended-A, ...) is unassigned here and may be cut
// differently from a library with newer tables (HF `tokenizers` 0.23's Oniguruma has Unicode 16).
//
// Invalid UTF-8. Byte-level BPE encodes any bytes. A byte that does not belong to a well-formed UTF-8
// sequence (the rule Python's decoder applies: each byte of an ill-formed subsequence is one invalid
// byte, exactly the bytes `bytes.decode("utf-8", "surrogateescape")` turns into U+DC80..U+DCFF) cuts the
// text like a special token does: the valid pieces on either side are pre-tokenized on their own, as if
// each were a whole text, and every maximal run of invalid bytes is one pre-token (merges apply inside
// it). On valid UTF-8 this is HF `tokenizers`' byte-level pre-tokenizer exactly; a test that compares
// hostile bytes with HF splits them the same way first (surrogateescape, split on runs of surrogates).
//
// Files (the directory a tokenizer is saved as; `load` also reads GPT-2's own pair of files):
//   vocab.json           {"token": id, ...}: each token's bytes written through GPT-2's byte-to-unicode
//                        table (bytes_to_unicode() in GPT-2's encoder.py); a special token is written as
//                        its own UTF-8 text, as HF writes added tokens.
//   merges.txt           "#version: 0.2" then one merge per line, "A B" in the same alphabet, in rank
//                        order (line 1 = rank 0). Reading accepts the file with or without the header.
//   special_tokens.json  ["<|endoftext|>", ...]: the special tokens in order, their ids read from
//                        vocab.json. Optional on load (none then, unless the caller names some).
// Ids of a trained tokenizer: the special tokens first (0..S-1, in the order given), then the 256 bytes
// in GPT-2's order (the order of their characters in the byte-to-unicode table: '!'..'~', then
// 0xA1..0xAC, 0xAE..0xFF, then the rest), then one id per merge in merge order. This is the vocabulary
// HF's BpeTrainer builds and CS336's reference fixture (train-bpe-reference-vocab.json) holds.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ridge::text {

// GPT-2's byte-to-unicode table: the UTF-8 text of the character that stands for byte `b` in vocab.json
// and merges.txt (printable Latin-1 bytes stand for themselves, the other 68 for U+0100.. in byte order).
std::string gpt2_byte_to_unicode(uint8_t b);

// Immutable once built: every const method may be called from several threads at once.
class Tokenizer {
 public:
  // A tokenizer from its parts (CS336's Tokenizer(vocab, merges, special_tokens)). `vocab[i]` is the
  // bytes of id i. `merges` in rank order; each pair's two sides and their concatenation must be tokens
  // of `vocab`. Every one of the 256 single bytes must be a token (byte-level BPE encodes any bytes).
  // A special token missing from `vocab` is appended to it (CS336's rule). ridge::Error naming
  // `vocab`, `merges` or `special_tokens` otherwise (duplicate tokens, an empty token, a merge naming an
  // unknown token, a missing byte, more than 2^31 - 1 tokens).
  Tokenizer(std::vector<std::string> vocab, std::vector<std::pair<std::string, std::string>> merges,
            std::vector<std::string> special_tokens = {});

  // Reads vocab.json and merges.txt (GPT-2's format, see the top of this file). `special_tokens` as in
  // the constructor: each is looked up in vocab.json by its own text, then by its byte-to-unicode form,
  // and appended when absent. ridge::Error "vocab file 'PATH': ..." / "merges file 'PATH': line N: ..."
  // for a missing, unreadable or malformed file, a token outside GPT-2's alphabet, ids that are not
  // 0..n-1 each once, a merge naming an unknown token.
  static Tokenizer load(const std::string& vocab_json, const std::string& merges_txt,
                        std::vector<std::string> special_tokens = {});
  // Reads a directory written by save() (vocab.json, merges.txt, special_tokens.json when present). A
  // folder replaced while it is read (save_dir swaps it whole) is read again, so the files read are
  // always of one version.
  static Tokenizer load_dir(const std::string& dir);
  // Writes vocab.json, merges.txt and special_tokens.json as the folder `dir`, one set
  // (files::write_folder): a new folder (its parent must exist), or one that holds only a tokenizer's
  // files, which is replaced whole; a reader never sees a mix of two versions, and a failed save leaves
  // the old folder as it was. ridge::Error naming `dir` when it cannot.
  void save_dir(const std::string& dir) const;
  // The files of a tokenizer folder, in the order save_dir writes them: vocab.json, merges.txt,
  // special_tokens.json; and their paths in `dir` (every file load_dir may read: a command's inputs).
  static const std::vector<std::string>& file_names();
  static std::vector<std::string> dir_files(const std::string& dir);

  int64_t vocab_size() const { return static_cast<int64_t>(vocab_.size()); }
  const std::vector<std::string>& vocab() const { return vocab_; }  // id -> bytes
  const std::vector<std::pair<std::string, std::string>>& merges() const { return merges_; }
  const std::vector<std::string>& special_tokens() const { return specials_; }
  // The id of a special token (-1 when `token` is not one).
  int32_t special_id(std::string_view token) const;
  // FNV-1a (ridge/core/hash.hpp) over the vocabulary (id -> bytes), the merges in order and the special
  // tokens: equal for equal tokenizers whatever files they came from; what a checkpoint records.
  uint64_t content_hash() const;

  // Token ids of `text` (any bytes, see the top of this file). Parallel over chunks of `text` (cut
  // where the pre-tokenizer cuts, so the result does not depend on the chunks or on `threads`) when
  // it is large; `threads` 0 means ridge::get_num_threads().
  std::vector<int32_t> encode(std::string_view text, int threads = 0) const;
  // Ids of one pre-token (bytes that the pre-tokenizer keeps whole, no special token in them): the
  // merges applied by rank, lowest first, as GPT-2 and HF's byte-level BPE apply them.
  std::vector<int32_t> encode_pretoken(std::string_view piece) const;
  // The pre-tokens of `text` (special tokens included, each as one piece), in order: what encode
  // merges inside. For tests and for comparing the pre-tokenizer with other implementations.
  std::vector<std::string_view> pretokenize(std::string_view text) const;

  // The bytes of `ids` concatenated (ridge::Error naming `ids` for an id outside 0..vocab_size()-1).
  std::string decode_bytes(std::span<const int32_t> ids) const;
  // decode_bytes as text: each ill-formed UTF-8 subsequence replaced by U+FFFD, exactly as Python's
  // bytes.decode("utf-8", errors="replace") does (CS336's decode).
  std::string decode(std::span<const int32_t> ids) const;

  struct Impl;  // the merge table and the special-token matcher

  Tokenizer(const Tokenizer&);
  Tokenizer& operator=(const Tokenizer&);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  friend class EncodeStream;
  Tokenizer() = default;
  static Tokenizer load_dir_files(const std::string& dir);  // load_dir's one reading of the files
  std::vector<std::string> vocab_;
  std::vector<std::pair<std::string, std::string>> merges_;
  std::vector<std::string> specials_;
  Impl* impl_ = nullptr;
};

// Encodes text that arrives in pieces (a file read block by block, CS336's encode_iterable) with the
// same ids as encoding the concatenation at once: feed() holds back the tail after the last point
// where the pre-tokenizer is sure to cut (a newline between two printable ASCII characters, a space
// between an ASCII letter or digit and the next, a special token), finish() encodes what is left.
// Text that never offers such a point is held until finish() (memory grows with it, checked against the
// memory available as it grows: ridge::Error about `text` when it would not fit). The tokenizer must
// outlive the stream.
class EncodeStream {
 public:
  explicit EncodeStream(const Tokenizer& tokenizer, int threads = 0);
  void feed(std::string_view text, std::vector<int32_t>& out);
  void finish(std::vector<int32_t>& out);

 private:
  const Tokenizer& tok_;
  int threads_;
  std::string pending_;
  size_t checked_ = 0;                    // no safe cut in pending_[0, checked_)
  size_t next_check_ = size_t{64} << 20;  // pending_'s size at which memory is checked next
};

struct EncodeFileStats {
  int64_t bytes = 0;   // of text read
  int64_t tokens = 0;  // written
  double seconds = 0;
};
// Encodes the text files in order (each file on its own: no pre-token crosses from one file into the
// next) and writes the ids as a token file (uint16 little-endian, CS336's np.memmap layout), reading
// block by block so files larger than memory work. The output is written to a temporary and renamed.
// ridge::Error naming `out` when the vocabulary does not fit uint16 ("vocabulary of N tokens does not
// fit uint16 token files (at most 65536)"), checked before anything is read; naming `texts` for a file
// that cannot be read; naming `out` for an empty result or an I/O failure.
EncodeFileStats encode_file(const Tokenizer& tokenizer, const std::vector<std::string>& texts,
                            const std::string& out, int threads = 0);

struct BpeTrainStats {
  int64_t input_bytes = 0;
  int64_t pretokens = 0;           // pre-token occurrences (special tokens not counted)
  int64_t distinct_pretokens = 0;  // the words the merge loop works on
  int64_t merges = 0;              // fewer than asked when no pair is left to merge
  double pretokenize_seconds = 0;
  double merge_seconds = 0;
  int64_t peak_rss_bytes = 0;  // the process's peak resident set (getrusage), after training
};

// CS336's train_bpe: vocabulary = special tokens + 256 bytes, then merges until `vocab_size` tokens
// (or no pair is left); text split on the special tokens and pre-tokenized as above; each step merges
// the most frequent pair of adjacent tokens within pre-tokens (counts weighted by how often each
// pre-token occurs), ties broken by the lexicographically greater pair (the pair of byte strings
// compared as Python compares (bytes, bytes) tuples). Pre-tokenization runs on `threads` threads over
// chunks cut where the pre-tokenizer cuts; the merge loop updates only the pre-tokens holding the
// merged pair. ridge::Error naming `vocab_size` when it is below 256 + the number of special tokens
// or above 2^31 - 1, naming `special_tokens` for an empty or repeated one.
Tokenizer train_bpe(std::string_view text, int64_t vocab_size, const std::vector<std::string>& special_tokens,
                    int threads = 0, BpeTrainStats* stats = nullptr);
// The same over text files (each file on its own, as if a special token stood between them), read
// block by block. ridge::Error naming `texts` for a file that is missing, not a regular file or unreadable.
Tokenizer train_bpe_files(const std::vector<std::string>& texts, int64_t vocab_size,
                          const std::vector<std::string>& special_tokens, int threads = 0,
                          BpeTrainStats* stats = nullptr);

}  // namespace ridge::text
