// Byte-level BPE (see include/ridge/text/tokenizer.hpp for the rules and the file format).
//
// Encoding: special tokens are found first (leftmost, longest), the text between them is cut into
// well-formed UTF-8 runs and runs of invalid bytes, the UTF-8 runs are cut by GPT-2's regex (PCRE2's
// JIT), and each pre-token becomes ids by applying the merges lowest rank first, through a per-thread
// cache of pre-token -> ids. Large texts are cut into chunks where the pre-tokenizer is sure to cut
// (safe_cut below) and the chunks encoded in parallel.
//
// Training: the same pre-tokenizer counts the distinct pre-tokens (per thread, over chunks, then
// summed). The merge loop keeps, for every pair of adjacent ids, its count and the words that hold it;
// a binary heap of (count, pair) with lazy invalidation gives the most frequent pair, ties broken by
// comparing the pairs' byte strings. A merge rewrites only the words on its pair's list and applies
// the difference between each word's old and new pairs.
#include "ridge/text/tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fcntl.h>
#include <omp.h>
#include <pcre2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "ridge/core/error.hpp"
#include "ridge/core/files.hpp"
#include "ridge/core/hash.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/threads.hpp"
#include "ridge/core/units.hpp"
#include "core/check.hpp"
#include "core/parallel.hpp"
#include "core/json.hpp"

namespace ridge::text {

namespace {

namespace fs = std::filesystem;

// Replaces every occurrence of the pair (a, b) in s at or after `from`, left to right without overlap,
// by `merged` (GPT-2's bpe() step, and the trainer's rewrite of a word holding the merged pair).
void merge_pair(std::vector<int32_t>& s, size_t from, int32_t a, int32_t b, int32_t merged) {
  size_t w = from;
  for (size_t i = from; i < s.size();) {
    if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
      s[w++] = merged;
      i += 2;
    } else {
      s[w++] = s[i++];
    }
  }
  s.resize(w);
}
using Clock = std::chrono::steady_clock;

// ---- memory, checked before it is taken ----
// Bytes of memory per byte of text, from what the code holds and checked against the peak resident set
// on one long pre-token (the case where they are largest). Training one holds its text twice (the
// stream's buffer and the count map's key), its symbols (4 bytes each) and the list of words each pair
// is in (4), and each merge rewrites the word through its old and new pair lists (8 + 8): 22; measured
// 21 (`ridge data train-bpe` on 64 MiB of "a") and 23 (8 MiB of random letters), so 28 with a margin.
// Encoding one holds the text, its symbols (4), the chunk's ids (4, doubled while that vector grows) and
// the output's (4): 16; measured 11 (64 MiB of "a").
constexpr double kTrainBytesPerPretokenByte = 28, kTrainBytesPerDistinctByte = 8;
constexpr double kEncodeBytesPerPretokenByte = 16;
// A pre-token at least this long is checked before it is copied or encoded; shorter ones cost less
// than the block a stream reads at once.
constexpr size_t kCheckedPretoken = size_t{16} << 20;

// ridge::Error about `argument` when `bytes` are more than the memory available now:
// "ARGUMENT: WHAT needs about X, more than the Y of memory available; HINT".
void check_memory(double bytes, const std::string& argument, const std::string& what, const char* hint) {
  const auto avail = static_cast<double>(memory::available_bytes());
  if (bytes <= avail) return;
  throw Error(argument, fmt::format("{} needs about {}, more than the {} of memory available; {}", what,
                                    units::format_bytes(bytes), units::format_bytes(avail), hint));
}

constexpr const char* kLongPretokenHint =
    "a pre-token is a run of letters, of digits, of other symbols or of spaces, so break the run (a space, "
    "a newline)";

// A stream's buffer holds text up to its last safe cut; text that offers none is held whole. Checked
// once it reaches `next` (64 MiB at first, then each quarter more): the buffer, and the copy twice its
// size that a growing std::string makes, must fit.
constexpr size_t kFirstHeldCheck = size_t{64} << 20;
void check_held(size_t held, size_t& next, const std::string& argument, const std::string& where) {
  if (held < next) return;
  next = held + held / 4;
  check_memory(
      3.0 * static_cast<double>(held), argument,
      fmt::format("{}holding {} of text with no point where pre-tokens surely end", where,
                  units::format_bytes(static_cast<double>(held))),
      "break the text with newlines between ASCII characters, or spaces after ASCII letters or digits");
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- GPT-2's byte-to-unicode alphabet ----

struct ByteAlphabet {
  std::array<uint32_t, 256> code{};       // byte -> code point
  std::array<int16_t, 324> byte_of{};     // code point (< 324) -> byte, -1 when none
  std::array<uint8_t, 256> gpt2_order{};  // i -> the byte with the i-th smallest code point
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a = [] {
    ByteAlphabet t;
    t.byte_of.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t.code[b] = printable ? static_cast<uint32_t>(b) : next++;
      t.byte_of[t.code[b]] = static_cast<int16_t>(b);
    }
    int i = 0;
    for (uint32_t c = 0; c < 324; ++c)
      if (t.byte_of[c] >= 0) t.gpt2_order[i++] = static_cast<uint8_t>(t.byte_of[c]);
    return t;
  }();
  return a;
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// ---- UTF-8 ----

// One step of a UTF-8 decoder at `p` (n >= 1 bytes left): a well-formed sequence (ok, its length), or
// the maximal subpart of an ill-formed one (not ok, 1..3 bytes), the unit Python's decoder replaces
// with one U+FFFD and surrogateescape maps byte by byte.
struct Utf8Step {
  bool ok;
  int len;
};
inline Utf8Step utf8_step(const unsigned char* p, size_t n) {
  const unsigned b = p[0];
  if (b < 0x80) return {true, 1};
  int need;
  unsigned lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b == 0xE0) {
    need = 2, lo = 0xA0;
  } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
    need = 2;
  } else if (b == 0xED) {
    need = 2, hi = 0x9F;
  } else if (b == 0xF0) {
    need = 3, lo = 0x90;
  } else if (b >= 0xF1 && b <= 0xF3) {
    need = 3;
  } else if (b == 0xF4) {
    need = 3, hi = 0x8F;
  } else {
    return {false, 1};
  }
  for (int k = 1; k <= need; ++k) {
    if (static_cast<size_t>(k) >= n) return {false, k};
    const unsigned c = p[k];
    if (c < (k == 1 ? lo : 0x80u) || c > (k == 1 ? hi : 0xBFu)) return {false, k};
  }
  return {true, need + 1};
}

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(p + i, s.size() - i);
    if (!st.ok) return false;
    i += static_cast<size_t>(st.len);
  }
  return true;
}

// Printable for an error message: the token as JSON would quote it (invalid bytes as \xNN).
std::string shown(std::string_view s) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size() && out.size() < 80;) {
    const Utf8Step st = utf8_step(p + i, s.size() - i);
    if (st.ok && !(st.len == 1 && (p[i] < 0x20 || p[i] == 0x7F))) {
      out.append(s.substr(i, static_cast<size_t>(st.len)));
      i += static_cast<size_t>(st.len);
    } else {
      out += fmt::format("\\x{:02x}", p[i]);
      ++i;
    }
  }
  return out;
}

// The bytes a vocab.json / merges.txt token stands for (GPT-2's alphabet), or why it has none.
bool decode_gpt2_token(std::string_view token, std::string& bytes, std::string& why) {
  const ByteAlphabet& a = alphabet();
  bytes.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  for (size_t i = 0; i < token.size();) {
    const Utf8Step st = utf8_step(p + i, token.size() - i);
    if (!st.ok) {
      why = "is not valid UTF-8";
      return false;
    }
    uint32_t cp = st.len == 1 ? p[i] : (p[i] & (0xFFu >> (st.len + 1)));
    for (int k = 1; k < st.len; ++k) cp = (cp << 6) | (p[i + static_cast<size_t>(k)] & 0x3F);
    if (cp >= a.byte_of.size() || a.byte_of[cp] < 0) {
      why = fmt::format("has the character U+{:04X}, outside GPT-2's byte-to-unicode alphabet", cp);
      return false;
    }
    bytes += static_cast<char>(a.byte_of[cp]);
    i += static_cast<size_t>(st.len);
  }
  return true;
}

std::string encode_gpt2_token(std::string_view bytes) {
  std::string s;
  for (unsigned char b : bytes) append_utf8(s, alphabet().code[b]);
  return s;
}

// ---- the pre-tokenizer regex ----

constexpr char kGpt2Pattern[] = R"('(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Compiled once per process; matching is thread-safe with a match-data block per thread.
struct Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  Regex() {
    int err = 0;
    PCRE2_SIZE at = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("BPE pre-tokenizer: PCRE2 cannot compile GPT-2's pattern at {}: {}", at,
           reinterpret_cast<char*>(msg));
    }
    jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(code); }
};

const Regex& gpt2_regex() {
  static const Regex r;
  return r;
}

// A thread's matching state: PCRE2's match data and a JIT stack large enough for any backtracking
// the pattern does (\s+(?!\S) over a long run of spaces).
class Matcher {
 public:
  Matcher() : re_(gpt2_regex()) {
    md_ = pcre2_match_data_create_from_pattern(re_.code, nullptr);
    if (re_.jit) {
      stack_ = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
      ctx_ = pcre2_match_context_create(nullptr);
      pcre2_jit_stack_assign(ctx_, nullptr, stack_);
    }
  }
  ~Matcher() {
    pcre2_match_data_free(md_);
    if (ctx_) pcre2_match_context_free(ctx_);
    if (stack_) pcre2_jit_stack_free(stack_);
  }
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  // Calls emit(piece) for each match of the pattern in `seg` (well-formed UTF-8, matched as a whole
  // subject: its end is the end of the text for the lookahead).
  template <class F>
  void split(std::string_view seg, F&& emit) {
    const auto* s = reinterpret_cast<PCRE2_SPTR>(seg.data());
    size_t off = 0;
    while (off < seg.size()) {
      const int rc = re_.jit ? pcre2_jit_match(re_.code, s, seg.size(), off, 0, md_, ctx_)
                             : pcre2_match(re_.code, s, seg.size(), off, PCRE2_NO_UTF_CHECK, md_, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) {
        emit(seg.substr(off));  // cannot happen (the pattern matches every character), kept whole
        return;
      }
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fail("BPE pre-tokenizer: PCRE2 failed at byte {}: {}", off, reinterpret_cast<char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md_);
      size_t start = ov[0], end = ov[1];
      if (start > off) emit(seg.substr(off, start - off));  // cannot happen either
      if (end <= start) {  // an empty match (not possible with this pattern): step one character
        end = start + static_cast<size_t>(utf8_step(s + start, seg.size() - start).len);
      }
      emit(seg.substr(start, end - start));
      off = end;
    }
  }

  // Pre-tokens of `text` (no special tokens in it): UTF-8 runs through the regex, each maximal run
  // of invalid bytes as one piece.
  template <class F>
  void split_plain(std::string_view text, F&& emit) {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
      size_t j = i;
      while (j < n) {
        if (p[j] < 0x80) {
          ++j;
          continue;
        }
        const Utf8Step st = utf8_step(p + j, n - j);
        if (!st.ok) break;
        j += static_cast<size_t>(st.len);
      }
      if (j > i) split(text.substr(i, j - i), emit);
      size_t k = j;
      while (k < n && p[k] >= 0x80) {
        const Utf8Step st = utf8_step(p + k, n - k);
        if (st.ok) break;
        k += static_cast<size_t>(st.len);
      }
      if (k > j) emit(text.substr(j, k - j));
      i = k;
    }
  }

 private:
  const Regex& re_;
  pcre2_match_data* md_ = nullptr;
  pcre2_match_context* ctx_ = nullptr;
  pcre2_jit_stack* stack_ = nullptr;
};

// ---- special tokens ----

class Specials {
 public:
  Specials() = default;
  Specials(const std::vector<std::string>& tokens, const std::vector<int32_t>& ids)
      : tokens_(tokens), ids_(ids) {
    for (const auto& t : tokens_) {
      first_[static_cast<unsigned char>(t[0])] = true;
      max_len_ = std::max(max_len_, t.size());
    }
  }
  bool empty() const { return tokens_.empty(); }
  size_t max_len() const { return max_len_; }

  // Calls plain(text) for the text between special tokens and special(index, position) for each special
  // token, in order; occurrences found leftmost first, the longest where several start at one position.
  template <class P, class S>
  void split(std::string_view text, P&& plain, S&& special) const {
    if (tokens_.empty()) {
      if (!text.empty()) plain(text);
      return;
    }
    std::vector<size_t> next(tokens_.size(), 0);
    std::vector<bool> stale(tokens_.size(), true);
    size_t pos = 0;
    for (;;) {
      size_t best = std::string_view::npos, best_k = 0;
      for (size_t k = 0; k < tokens_.size(); ++k) {
        if (stale[k] || (next[k] != std::string_view::npos && next[k] < pos)) {
          next[k] = text.find(tokens_[k], pos);
          stale[k] = false;
        }
        if (next[k] == std::string_view::npos) continue;
        if (next[k] < best || (next[k] == best && tokens_[k].size() > tokens_[best_k].size())) {
          best = next[k];
          best_k = k;
        }
      }
      if (best == std::string_view::npos) break;
      if (best > pos) plain(text.substr(pos, best - pos));
      special(best_k, best);
      pos = best + tokens_[best_k].size();
    }
    if (pos < text.size()) plain(text.substr(pos));
  }

  int32_t id(size_t k) const { return ids_[k]; }

  // Whether a special token starts at `p` (all of it inside `t`).
  bool starts_at(std::string_view t, size_t p) const {
    if (!first_[static_cast<unsigned char>(t[p])]) return false;
    for (const auto& s : tokens_)
      if (t.compare(p, s.size(), s) == 0 && p + s.size() <= t.size()) return true;
    return false;
  }
  // Whether an occurrence of a special token starts before `p` and ends after it.
  bool spans(std::string_view t, size_t p) const {
    for (const auto& s : tokens_)
      for (size_t k = 1; k < s.size() && k <= p; ++k)
        if (p - k + s.size() <= t.size() && t.compare(p - k, s.size(), s) == 0) return true;
    return false;
  }

 private:
  std::vector<std::string> tokens_;
  std::vector<int32_t> ids_;
  std::array<bool, 256> first_{};
  size_t max_len_ = 0;
};

// ---- where the pre-tokenizer is sure to cut ----
//
// A cut at p is safe when pre-tokenizing t[0, p) and t[p, n) on their own gives the pre-tokens of t.
// The pattern has no lookbehind, so what follows a pre-token boundary depends only on the text after
// it; what matters is that p is a boundary and that nothing before p looked past it. Three cases:
//  - t[p-1] == '\n' between two printable ASCII characters: the newline is a pre-token of its own
//    (\s+ alone, since a non-space follows), and at the end of t[0, p) it is one too (\s+(?!\S));
//    a newline after whitespace is not safe: "a \n" alone is one pre-token " \n", in "a \nb" two.
//  - t[p] == ' ' between two ASCII letters or digits: the letter/digit run before stops at the space
//    either way and " x..." starts a pre-token (' ?\p{L}+' or ' ?\p{N}+') either way.
//  - a special token starts at p: special tokens cut the text before the regex sees it.
// In every case no special token may span p, and the characters around p are ASCII, so the
// UTF-8 runs on either side are the same as in the whole text.
inline bool printable_ascii(unsigned char c) {
  return c >= 0x21 && c <= 0x7E;
}
inline bool alnum_ascii(unsigned char c) {
  return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

bool safe_cut(std::string_view t, size_t p, const Specials& sp) {
  if (p == 0 || p + 1 >= t.size()) return false;
  const auto* u = reinterpret_cast<const unsigned char*>(t.data());
  const bool ok = (u[p - 1] == '\n' && p >= 2 && printable_ascii(u[p - 2]) && printable_ascii(u[p])) ||
                  (u[p] == ' ' && alnum_ascii(u[p - 1]) && alnum_ascii(u[p + 1])) ||
                  (!sp.empty() && p + sp.max_len() <= t.size() && sp.starts_at(t, p));
  return ok && (sp.empty() || !sp.spans(t, p));
}

// The first safe cut in [from, t.size() - margin), or npos. `margin` keeps the test away from the end
// of a buffer whose continuation has not arrived yet.
size_t cut_forward(std::string_view t, size_t from, size_t margin, const Specials& sp) {
  const size_t end = t.size() > margin ? t.size() - margin : 0;
  for (size_t p = std::max<size_t>(from, 1); p < end; ++p)
    if (safe_cut(t, p, sp)) return p;
  return std::string_view::npos;
}

// The last safe cut in [lo, t.size() - margin), or npos.
size_t cut_backward(std::string_view t, size_t lo, size_t margin, const Specials& sp) {
  const size_t end = t.size() > margin ? t.size() - margin : 0;
  for (size_t p = end; p > std::max<size_t>(lo, 1);) {
    --p;
    if (safe_cut(t, p, sp)) return p;
  }
  return std::string_view::npos;
}

// What a buffer needs past a cut before the cut can be judged.
size_t cut_margin(const Specials& sp) {
  return std::max<size_t>(2, sp.max_len() + 1);
}

// [begin, end) pieces of t, about `parts` of them, cut only at safe cuts.
std::vector<std::pair<size_t, size_t>> chunks(std::string_view t, size_t parts, const Specials& sp) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0;
  const size_t step = t.size() / std::max<size_t>(parts, 1);
  while (begin < t.size()) {
    size_t cut = std::string_view::npos;
    if (step > 0 && begin + step < t.size()) cut = cut_forward(t, begin + step, 0, sp);
    const size_t end = cut == std::string_view::npos ? t.size() : cut;
    out.emplace_back(begin, end);
    begin = end;
  }
  return out;
}

// ---- merges ----

// (left id, right id) -> (rank, merged id): open addressing, keys packed in 64 bits.
class MergeTable {
 public:
  struct Value {
    int32_t rank;
    int32_t id;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, Value{-1, -1});
    shift_ = 64 - static_cast<int>(__builtin_ctzll(cap));
  }
  // Inserts unless the key is there (the first, lowest-ranked merge of a pair wins).
  void insert(int32_t a, int32_t b, Value v) {
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & (keys_.size() - 1)) {
      if (keys_[i] == k) return;
      if (keys_[i] == kEmpty) {
        keys_[i] = k;
        vals_[i] = v;
        return;
      }
    }
  }
  const Value* find(int32_t a, int32_t b) const {
    if (keys_.empty()) return nullptr;
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & (keys_.size() - 1)) {
      if (keys_[i] == k) return &vals_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<uint64_t> keys_;
  std::vector<Value> vals_;
  int shift_ = 60;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

struct Tokenizer::Impl {
  std::array<int32_t, 256> byte_id{};
  MergeTable merges;
  Specials specials;
  std::vector<int32_t> special_ids;
};

namespace {

// Pre-token -> ids for one thread: the ids of short pieces are kept (English text repeats them).
class PieceEncoder {
 public:
  explicit PieceEncoder(const Tokenizer::Impl& impl) : impl_(impl) {}

  void encode(std::string_view piece, std::vector<int32_t>& out) {
    const auto* u = reinterpret_cast<const unsigned char*>(piece.data());
    if (piece.size() == 1) {
      out.push_back(impl_.byte_id[u[0]]);
      return;
    }
    const bool cacheable = piece.size() <= kMaxCached;
    if (cacheable) {
      const auto it = cache_.find(piece);
      if (it != cache_.end()) {
        out.insert(out.end(), pool_.begin() + it->second.first,
                   pool_.begin() + it->second.first + it->second.second);
        return;
      }
    }
    if (piece.size() >= kCheckedPretoken)
      check_memory(
          kEncodeBytesPerPretokenByte * static_cast<double>(piece.size()), "text",
          fmt::format("encoding a pre-token of {}", units::format_bytes(static_cast<double>(piece.size()))),
          kLongPretokenHint);
    sym_.resize(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) sym_[i] = impl_.byte_id[u[i]];
    apply_merges(sym_);
    out.insert(out.end(), sym_.begin(), sym_.end());
    if (cacheable) {
      if (cache_.size() >= kMaxEntries) {
        cache_.clear();
        pool_.clear();
      }
      cache_.emplace(std::string(piece),
                     std::make_pair(static_cast<uint32_t>(pool_.size()), static_cast<uint32_t>(sym_.size())));
      pool_.insert(pool_.end(), sym_.begin(), sym_.end());
    }
  }

  // GPT-2's rule: while some adjacent pair has a merge, merge every occurrence (left to right) of the
  // pair whose merge has the lowest rank.
  void apply_merges(std::vector<int32_t>& s) const {
    while (s.size() > 1) {
      int32_t best = INT32_MAX, merged = -1;
      size_t at = 0;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const MergeTable::Value* v = impl_.merges.find(s[i], s[i + 1]);
        if (v && v->rank < best) {
          best = v->rank;
          merged = v->id;
          at = i;
        }
      }
      if (merged < 0) return;
      merge_pair(s, at, s[at], s[at + 1], merged);
    }
  }

 private:
  static constexpr size_t kMaxCached = 64;
  static constexpr size_t kMaxEntries = size_t{1} << 20;
  const Tokenizer::Impl& impl_;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> cache_;
  std::vector<int32_t> pool_;
  std::vector<int32_t> sym_;
};

// Every pre-token of `text` with its special-token id (-1 for ordinary pieces).
template <class F>
void for_each_piece(const Tokenizer::Impl& impl, Matcher& m, std::string_view text, F&& emit) {
  impl.specials.split(
      text, [&](std::string_view plain) { m.split_plain(plain, [&](std::string_view p) { emit(p, -1); }); },
      [&](size_t k, size_t) { emit(std::string_view(), impl.specials.id(k)); });
}

// Encodes a whole text in parallel chunks when it is large.
void encode_text(const Tokenizer::Impl& impl, std::string_view text, int threads, std::vector<int32_t>& out) {
  constexpr size_t kMinChunk = size_t{1} << 18;
  const size_t parts =
      threads <= 1 ? 1 : std::min<size_t>(static_cast<size_t>(threads) * 4, text.size() / kMinChunk);
  if (parts <= 1) {
    Matcher m;
    PieceEncoder enc(impl);
    for_each_piece(impl, m, text, [&](std::string_view p, int32_t special) {
      if (special >= 0)
        out.push_back(special);
      else
        enc.encode(p, out);
    });
    return;
  }
  const auto cuts = chunks(text, parts, impl.specials);
  std::vector<std::vector<int32_t>> results(cuts.size());
  std::vector<std::unique_ptr<Matcher>> matchers(static_cast<size_t>(threads));
  std::vector<std::unique_ptr<PieceEncoder>> encoders(static_cast<size_t>(threads));
  parallel_for(static_cast<int64_t>(cuts.size()), threads, [&](int64_t c) {
    const auto t = static_cast<size_t>(omp_get_thread_num());
    if (!matchers[t]) matchers[t] = std::make_unique<Matcher>();
    if (!encoders[t]) encoders[t] = std::make_unique<PieceEncoder>(impl);
    auto& r = results[static_cast<size_t>(c)];
    const auto [b, e] = cuts[static_cast<size_t>(c)];
    r.reserve((e - b) / 3);
    for_each_piece(impl, *matchers[t], text.substr(b, e - b), [&](std::string_view p, int32_t special) {
      if (special >= 0)
        r.push_back(special);
      else
        encoders[t]->encode(p, r);
    });
  });
  size_t total = out.size();
  for (const auto& r : results) total += r.size();
  out.reserve(total);
  for (const auto& r : results) out.insert(out.end(), r.begin(), r.end());
}

// Reads a regular file block by block, calling fn(block) (a view valid until the next call). Errors say
// "LABEL: why" about the function argument `argument` (none when it is empty).
void read_blocks(const std::string& path, const std::string& argument, const std::string& label, size_t block,
                 const std::function<void(std::string_view)>& fn) {
  auto fail_read = [&](const std::string& why) {
    if (argument.empty()) throw Error(label + ": " + why);
    throw Error(argument, label + ": " + why);
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail_read(fmt::format("cannot open it: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) fail_read("not a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail_read(fmt::format("cannot open it: {}", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::string buf(block, '\0');
  for (;;) {
    size_t got = 0;
    while (got < block) {
      const ssize_t n = ::read(fd, buf.data() + got, block - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_read(fmt::format("reading it failed: {}", std::strerror(errno)));
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    if (got == 0) return;
    fn(std::string_view(buf.data(), got));
    if (got < block) return;
  }
}

// A whole file; errors "LABEL 'PATH': why".
std::string read_whole(const std::string& path, const std::string& label) {
  std::string s;
  read_blocks(path, "", fmt::format("{} '{}'", label, path), size_t{1} << 20,
              [&](std::string_view b) { s.append(b); });
  return s;
}

// A JSON file of a tokenizer, parsed by input::parse_json (nesting deeper than input::kMaxJsonDepth is
// refused before the JSON library walks it); errors "WHAT: why", WHAT being "LABEL 'PATH'".
nlohmann::json parse_json_file(const std::string& path, const std::string& label, const std::string& what) {
  const std::string text = read_whole(path, label);
  try {
    return input::parse_json(text, what);
  } catch (const Error& e) {
    throw Error(e.what());  // about the file, not a function argument
  }
}

// Splits a stream of text into pieces that end at safe cuts: feed() returns the prefix of everything
// fed so far that can be encoded now (ending at the last safe cut, once at least `min_block` bytes are
// pending), finish() the rest.
class SafeBuffer {
 public:
  // `argument` names the text in the error when it offers no cut for longer than memory can hold.
  SafeBuffer(const Specials& sp, size_t min_block, std::string argument, std::string where)
      : sp_(sp), min_block_(min_block), argument_(std::move(argument)), where_(std::move(where)) {}
  // Appends `text`; calls ready(prefix) when a prefix can be handed on (then drops it).
  template <class F>
  void feed(std::string_view text, F&& ready) {
    pending_.append(text);
    if (pending_.size() < min_block_) return;
    const size_t margin = cut_margin(sp_);
    const size_t cut = cut_backward(pending_, checked_, margin, sp_);
    if (cut == std::string::npos) {
      // Nothing in [checked_, end - margin) can be a cut later either: its neighbours are all here.
      checked_ = pending_.size() > margin ? pending_.size() - margin : 0;
      check_held(pending_.size(), next_check_, argument_, where_);  // before the next block is appended
      return;
    }
    ready(std::string_view(pending_).substr(0, cut));
    pending_.erase(0, cut);
    checked_ = 0;
    next_check_ = kFirstHeldCheck;
  }
  template <class F>
  void finish(F&& ready) {
    if (!pending_.empty()) ready(std::string_view(pending_));
    pending_.clear();
    checked_ = 0;
  }

 private:
  const Specials& sp_;
  size_t min_block_;
  std::string argument_, where_;
  size_t next_check_ = kFirstHeldCheck;
  std::string pending_;
  size_t checked_ = 0;
};

// ---- building a tokenizer from its parts ----

struct Names {
  std::function<std::string()> vocab;        // "vocab" or "vocab file 'PATH'"
  std::function<std::string(size_t)> merge;  // "merges[i]" or "merges file 'PATH': line N"
  std::string specials = "special_tokens";
  std::function<std::string(std::string_view)> token = [](std::string_view t) { return shown(t); };
};

}  // namespace

namespace {

std::unique_ptr<Tokenizer::Impl> build_impl(std::vector<std::string>& vocab,
                                            const std::vector<std::pair<std::string, std::string>>& merges,
                                            const std::vector<std::string>& specials, const Names& names) {
  auto impl = std::make_unique<Tokenizer::Impl>();
  check(vocab.size() < static_cast<size_t>(INT32_MAX), "{}: {} tokens; at most 2^31 - 2", names.vocab(),
        vocab.size());
  // Special tokens: an id whose bytes are the token's, else a new id at the end (CS336's rule).
  std::unordered_set<std::string_view> seen_special;
  for (const auto& s : specials) {
    check(!s.empty(), "{}: an empty special token; each must be at least one byte", names.specials);
    check(valid_utf8(s), "{}: '{}' is not valid UTF-8", names.specials, shown(s));
    check(seen_special.insert(s).second, "{}: '{}' is given twice", names.specials, shown(s));
  }
  {
    std::unordered_map<std::string_view, int32_t, StringHash, std::equal_to<>> any_id;
    for (size_t i = 0; i < vocab.size(); ++i) any_id.emplace(vocab[i], static_cast<int32_t>(i));
    std::vector<std::string> appended;  // pushed after the lookups: `any_id` views `vocab`
    for (const auto& s : specials) {
      const auto it = any_id.find(std::string_view(s));
      if (it != any_id.end()) {
        impl->special_ids.push_back(it->second);
      } else {
        impl->special_ids.push_back(static_cast<int32_t>(vocab.size() + appended.size()));
        appended.push_back(s);
      }
    }
    for (auto& s : appended) vocab.push_back(std::move(s));
  }
  std::vector<bool> is_special(vocab.size(), false);
  for (int32_t id : impl->special_ids) is_special[static_cast<size_t>(id)] = true;
  // Ordinary tokens: bytes -> id, unique; a special token may share bytes with one (its id is then
  // reached only as a special token).
  std::unordered_map<std::string_view, int32_t, StringHash, std::equal_to<>> id_of;
  id_of.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    check(!vocab[i].empty(), "{}: token {} is empty; every token is at least one byte", names.vocab(), i);
    if (is_special[i]) continue;
    const auto [it, fresh] = id_of.emplace(vocab[i], static_cast<int32_t>(i));
    check(fresh, "{}: tokens {} and {} are the same bytes '{}'; each token must be distinct", names.vocab(),
          it->second, i, shown(vocab[i]));
  }
  for (size_t i = 0; i < vocab.size(); ++i)
    if (is_special[i]) id_of.emplace(vocab[i], static_cast<int32_t>(i));
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    const auto it = id_of.find(std::string_view(&c, 1));
    check(it != id_of.end(), "{}: no token for the byte 0x{:02x}; byte-level BPE needs all 256 bytes",
          names.vocab(), b);
    impl->byte_id[static_cast<size_t>(b)] = it->second;
  }
  impl->merges.reserve(merges.size());
  std::string joined;
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const auto ia = id_of.find(std::string_view(a));
    const auto ib = id_of.find(std::string_view(b));
    check(!a.empty() && !b.empty(), "{}: an empty side in a merge", names.merge(r));
    check(ia != id_of.end(), "{}: '{}' is not a token of the vocabulary", names.merge(r), names.token(a));
    check(ib != id_of.end(), "{}: '{}' is not a token of the vocabulary", names.merge(r), names.token(b));
    joined.assign(a).append(b);
    const auto im = id_of.find(std::string_view(joined));
    check(im != id_of.end(), "{}: the merged token '{}' is not a token of the vocabulary", names.merge(r),
          names.token(joined));
    impl->merges.insert(ia->second, ib->second, {static_cast<int32_t>(r), im->second});
  }
  impl->specials = Specials(specials, impl->special_ids);
  return impl;
}

}  // namespace

std::string gpt2_byte_to_unicode(uint8_t b) {
  std::string s;
  append_utf8(s, alphabet().code[b]);
  return s;
}

Tokenizer::Tokenizer(std::vector<std::string> vocab, std::vector<std::pair<std::string, std::string>> merges,
                     std::vector<std::string> special_tokens)
    : vocab_(std::move(vocab)), merges_(std::move(merges)), specials_(std::move(special_tokens)) {
  Names names;
  names.vocab = [] { return std::string("vocab"); };
  names.merge = [](size_t r) { return fmt::format("merges[{}]", r); };
  impl_ = build_impl(vocab_, merges_, specials_, names).release();
}

namespace {

// What load() read, before the checks build_impl makes.
struct Loaded {
  std::vector<std::string> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<size_t> merge_lines;
};

}  // namespace

Tokenizer Tokenizer::load(const std::string& vocab_json, const std::string& merges_txt,
                          std::vector<std::string> special_tokens) {
  const std::string vwhat = fmt::format("vocab file '{}'", vocab_json);
  const std::string mwhat = fmt::format("merges file '{}'", merges_txt);
  Loaded l;
  {
    // Through input::parse_json: its depth limit and its messages (line, column, what was wrong).
    const nlohmann::json j = parse_json_file(vocab_json, "vocab file", vwhat);
    check(j.is_object() && !j.empty(), "{}: expected a JSON object {{\"token\": id, ...}}", vwhat);
    const size_t n = j.size();
    std::unordered_set<std::string_view> raw_special(special_tokens.begin(), special_tokens.end());
    l.vocab.assign(n, std::string());
    std::vector<bool> seen(n, false);
    std::string bytes, why;
    for (const auto& [key, value] : j.items()) {
      check(value.is_number_integer(), "{}: token '{}' has the id {}; ids are integers", vwhat, shown(key),
            input::excerpt(value));
      const auto id = value.get<int64_t>();
      check(id >= 0 && static_cast<size_t>(id) < n && !seen[static_cast<size_t>(id)],
            "{}: token '{}' has the id {}; the {} ids must be 0..{}, each once", vwhat, shown(key), id, n,
            n - 1);
      seen[static_cast<size_t>(id)] = true;
      if (raw_special.count(key)) {
        l.vocab[static_cast<size_t>(id)] = key;
        continue;
      }
      check(decode_gpt2_token(key, bytes, why), "{}: token '{}' (id {}) {}", vwhat, shown(key), id, why);
      l.vocab[static_cast<size_t>(id)] = bytes;
    }
  }
  {
    const std::string text = read_whole(merges_txt, "merges file");
    size_t line_no = 0, pos = 0;
    std::string a, b, why;
    while (pos < text.size()) {
      size_t eol = text.find('\n', pos);
      if (eol == std::string::npos) eol = text.size();
      std::string_view line(text.data() + pos, eol - pos);
      pos = eol + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      if (line_no == 1 && line.starts_with("#version")) continue;
      const size_t sp = line.find(' ');
      check(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
                line.find(' ', sp + 1) == std::string_view::npos,
            "{}: line {}: '{}' is not a merge (two tokens separated by one space)", mwhat, line_no,
            shown(line));
      check(decode_gpt2_token(line.substr(0, sp), a, why), "{}: line {}: '{}' {}", mwhat, line_no,
            shown(line.substr(0, sp)), why);
      check(decode_gpt2_token(line.substr(sp + 1), b, why), "{}: line {}: '{}' {}", mwhat, line_no,
            shown(line.substr(sp + 1)), why);
      l.merges.emplace_back(a, b);
      l.merge_lines.push_back(line_no);
    }
  }
  Tokenizer t;
  t.vocab_ = std::move(l.vocab);
  t.merges_ = std::move(l.merges);
  t.specials_ = std::move(special_tokens);
  Names names;
  names.vocab = [&] { return vwhat; };
  names.merge = [&](size_t r) { return fmt::format("{}: line {}", mwhat, l.merge_lines[r]); };
  names.specials = "special tokens";
  names.token = [](std::string_view tok) { return encode_gpt2_token(tok); };  // as merges.txt writes it
  t.impl_ = build_impl(t.vocab_, t.merges_, t.specials_, names).release();
  return t;
}

const std::vector<std::string>& Tokenizer::file_names() {
  static const std::vector<std::string> names = {"vocab.json", "merges.txt", "special_tokens.json"};
  return names;
}

std::vector<std::string> Tokenizer::dir_files(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& n : file_names()) v.push_back((fs::path(dir) / n).string());
  return v;
}

namespace {
// The folder a path names (device, inode; zeros when none).
std::pair<dev_t, ino_t> folder_identity(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return {0, 0};
  return {st.st_dev, st.st_ino};
}
}  // namespace

// save_dir replaces a folder whole (files::write_folder swaps a new folder in, never changes one in
// place, and never puts an old one back), so files read from `dir` are of one version when `dir` names the
// same folder after the reading as before it. The folder is held open meanwhile, so that its inode
// cannot be freed and reused by a newer folder, which would look the same.
Tokenizer Tokenizer::load_dir(const std::string& dir) {
  for (int attempt = 1;; ++attempt) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return load_dir_files(dir);  // not a folder: its error
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    const std::pair<dev_t, ino_t> held =
        ::fstat(fd, &st) == 0 ? std::pair(st.st_dev, st.st_ino) : std::pair<dev_t, ino_t>{0, 0};
    try {
      Tokenizer t = load_dir_files(dir);
      if (folder_identity(dir) == held) return t;
    } catch (const Error&) {
      if (folder_identity(dir) == held) throw;
    }
    check(attempt < 20,
          "tokenizer '{}': the folder was replaced while being read, {} times over; read it again", dir,
          attempt);
  }
}

Tokenizer Tokenizer::load_dir_files(const std::string& dir) {
  std::error_code ec;
  check(fs::is_directory(dir, ec),
        "tokenizer '{}': not a directory (expected one holding vocab.json, merges.txt "
        "and special_tokens.json, as `ridge data train-bpe` writes)",
        dir);
  std::vector<std::string> specials;
  const std::string sp = (fs::path(dir) / "special_tokens.json").string();
  if (fs::exists(sp, ec)) {
    const nlohmann::json j =
        parse_json_file(sp, "special tokens file", fmt::format("special tokens file '{}'", sp));
    check(j.is_array(), "special tokens file '{}': expected a JSON array of strings", sp);
    for (const auto& s : j) {
      check(s.is_string(), "special tokens file '{}': expected a JSON array of strings, found {}", sp,
            input::excerpt(s));
      specials.push_back(s.get<std::string>());
    }
  }
  return load((fs::path(dir) / "vocab.json").string(), (fs::path(dir) / "merges.txt").string(),
              std::move(specials));
}

void Tokenizer::save_dir(const std::string& dir) const {
  files::check_folder_writable(dir, file_names(), "dir");  // before the work of building the files
  std::vector<bool> is_special(vocab_.size(), false);
  for (int32_t id : impl_->special_ids) is_special[static_cast<size_t>(id)] = true;
  // Written by hand in id order (GPT-2's layout); nlohmann's ordered_json looks keys up linearly.
  std::unordered_map<std::string, size_t> seen;
  std::string v = "{";
  for (size_t i = 0; i < vocab_.size(); ++i) {
    std::string key = is_special[i] ? vocab_[i] : encode_gpt2_token(vocab_[i]);
    const auto [it, fresh] = seen.emplace(key, i);
    check_arg(
        fresh, "dir",
        "cannot save: tokens {} and {} ('{}') have the same vocab.json entry (a special token whose text is "
        "also an ordinary token's)",
        it->second, i, shown(vocab_[i]));
    v += (i ? ", " : "") + nlohmann::json(std::move(key)).dump() + ": " + std::to_string(i);
  }
  v += "}\n";
  std::string m = "#version: 0.2\n";
  for (const auto& [a, b] : merges_) m += encode_gpt2_token(a) + " " + encode_gpt2_token(b) + "\n";
  const nlohmann::json s = specials_;
  const auto& names = file_names();
  files::write_folder(dir, {{names[0], std::move(v)}, {names[1], std::move(m)}, {names[2], s.dump() + "\n"}},
                      "dir");
}

int32_t Tokenizer::special_id(std::string_view token) const {
  for (size_t k = 0; k < specials_.size(); ++k)
    if (specials_[k] == token) return impl_->special_ids[k];
  return -1;
}

uint64_t Tokenizer::content_hash() const {
  uint64_t h = kFnv1aBasis;
  auto add = [&](std::string_view s) {
    const uint64_t n = s.size();
    h = fnv1a(&n, sizeof n, h);
    h = fnv1a(s.data(), s.size(), h);
  };
  add("ridge bpe v1 vocab");
  for (const auto& t : vocab_) add(t);
  add("merges");
  for (const auto& [a, b] : merges_) {
    add(a);
    add(b);
  }
  add("special tokens");
  for (const auto& s : specials_) add(s);
  return h;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, int threads) const {
  std::vector<int32_t> out;
  encode_text(*impl_, text, resolve_threads(threads), out);
  return out;
}

std::vector<int32_t> Tokenizer::encode_pretoken(std::string_view piece) const {
  std::vector<int32_t> s(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) s[i] = impl_->byte_id[static_cast<unsigned char>(piece[i])];
  PieceEncoder(*impl_).apply_merges(s);
  return s;
}

std::vector<std::string_view> Tokenizer::pretokenize(std::string_view text) const {
  std::vector<std::string_view> out;
  Matcher m;
  impl_->specials.split(
      text,
      [&](std::string_view plain) { m.split_plain(plain, [&](std::string_view p) { out.push_back(p); }); },
      [&](size_t k, size_t at) { out.push_back(text.substr(at, specials_[k].size())); });
  return out;
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids) const {
  size_t n = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    check_arg(ids[i] >= 0 && ids[i] < vocab_size(), "ids", "ids[{}] = {} is outside the vocabulary (0..{})",
              i, ids[i], vocab_size() - 1);
    n += vocab_[static_cast<size_t>(ids[i])].size();
  }
  std::string s;
  s.reserve(n);
  for (int32_t id : ids) s += vocab_[static_cast<size_t>(id)];
  return s;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  const std::string raw = decode_bytes(ids);
  std::string s;
  s.reserve(raw.size());
  const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
  for (size_t i = 0; i < raw.size();) {
    const Utf8Step st = utf8_step(p + i, raw.size() - i);
    if (st.ok)
      s.append(raw, i, static_cast<size_t>(st.len));
    else
      s += "\xEF\xBF\xBD";
    i += static_cast<size_t>(st.len);
  }
  return s;
}

Tokenizer::Tokenizer(const Tokenizer& o)
    : vocab_(o.vocab_),
      merges_(o.merges_),
      specials_(o.specials_),
      impl_(o.impl_ ? new Impl(*o.impl_) : nullptr) {}

Tokenizer& Tokenizer::operator=(const Tokenizer& o) {
  if (this != &o) {
    Tokenizer t(o);
    *this = std::move(t);
  }
  return *this;
}

Tokenizer::Tokenizer(Tokenizer&& o) noexcept
    : vocab_(std::move(o.vocab_)),
      merges_(std::move(o.merges_)),
      specials_(std::move(o.specials_)),
      impl_(std::exchange(o.impl_, nullptr)) {}

Tokenizer& Tokenizer::operator=(Tokenizer&& o) noexcept {
  if (this != &o) {
    delete impl_;
    vocab_ = std::move(o.vocab_);
    merges_ = std::move(o.merges_);
    specials_ = std::move(o.specials_);
    impl_ = std::exchange(o.impl_, nullptr);
  }
  return *this;
}

Tokenizer::~Tokenizer() {
  delete impl_;
}

// ---- streaming ----

EncodeStream::EncodeStream(const Tokenizer& tokenizer, int threads)
    : tok_(tokenizer), threads_(resolve_threads(threads)) {}

void EncodeStream::feed(std::string_view text, std::vector<int32_t>& out) {
  constexpr size_t kBlock = size_t{1} << 18;
  pending_.append(text);
  if (pending_.size() < kBlock) return;
  const Specials& sp = tok_.impl_->specials;
  const size_t margin = cut_margin(sp);
  const size_t cut = cut_backward(pending_, checked_, margin, sp);
  if (cut == std::string::npos) {
    checked_ = pending_.size() > margin ? pending_.size() - margin : 0;
    check_held(pending_.size(), next_check_, "text", "");
    return;
  }
  encode_text(*tok_.impl_, std::string_view(pending_).substr(0, cut), threads_, out);
  pending_.erase(0, cut);
  checked_ = 0;
  next_check_ = kFirstHeldCheck;
}

void EncodeStream::finish(std::vector<int32_t>& out) {
  encode_text(*tok_.impl_, pending_, threads_, out);
  pending_.clear();
  checked_ = 0;
  next_check_ = kFirstHeldCheck;
}

EncodeFileStats encode_file(const Tokenizer& tokenizer, const std::vector<std::string>& texts,
                            const std::string& out, int threads) {
  const auto t0 = Clock::now();
  check_arg(tokenizer.vocab_size() <= 65536, "out",
            "a vocabulary of {} tokens does not fit uint16 token files (at most 65536)",
            tokenizer.vocab_size());
  check_arg(!texts.empty(), "texts", "no text files given");
  const int nt = resolve_threads(threads);
  EncodeFileStats stats;
  std::vector<int32_t> ids;
  std::vector<uint16_t> packed;
  files::write_streamed(
      out,
      [&](const files::ByteSink& sink) {
        auto flush = [&] {
          packed.resize(ids.size());
          for (size_t i = 0; i < ids.size(); ++i) packed[i] = static_cast<uint16_t>(ids[i]);
          sink(std::as_bytes(std::span<const uint16_t>(packed)));
          stats.tokens += static_cast<int64_t>(ids.size());
          ids.clear();
        };
        for (const auto& path : texts) {
          EncodeStream stream(tokenizer, nt);
          try {
            read_blocks(path, "texts", fmt::format("'{}'", path), size_t{16} << 20,
                        [&](std::string_view block) {
                          stats.bytes += static_cast<int64_t>(block.size());
                          stream.feed(block, ids);
                          flush();
                        });
            stream.finish(ids);
          } catch (const Error& e) {
            // The stream's memory checks are about its `text`: here, this file.
            if (e.argument() != "text") throw;
            throw Error("texts", fmt::format("'{}': {}", path, std::string(e.what()).substr(6)));
          }
          flush();
        }
        check_arg(stats.tokens > 0, "texts", "no text to encode (the files are empty)");
      },
      "out");
  stats.seconds = seconds_since(t0);
  return stats;
}

// ---- training ----

namespace {

using CountMap = std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>>;

// Counts the pre-tokens of `text` (special tokens skipped) into per-thread maps.
// A pre-token of kCheckedPretoken or more is checked against the memory training it would take before
// it is copied (ridge::Error about `argument`, its message starting with `where`).
void count_pretokens(const Specials& sp, std::string_view text, int threads, std::vector<CountMap>& maps,
                     std::vector<std::unique_ptr<Matcher>>& matchers, const std::string& argument,
                     const std::string& where) {
  constexpr size_t kMinChunk = size_t{1} << 18;
  const size_t parts =
      threads <= 1
          ? 1
          : std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(threads) * 4, text.size() / kMinChunk));
  const auto cuts = chunks(text, parts, sp);
  parallel_for(static_cast<int64_t>(cuts.size()), threads, [&](int64_t c) {
    const auto t = static_cast<size_t>(omp_get_thread_num());
    if (!matchers[t]) matchers[t] = std::make_unique<Matcher>();
    CountMap& m = maps[t];
    const auto [b, e] = cuts[static_cast<size_t>(c)];
    sp.split(
        text.substr(b, e - b),
        [&](std::string_view plain) {
          matchers[t]->split_plain(plain, [&](std::string_view p) {
            const auto it = m.find(p);
            if (it != m.end()) {
              ++it->second;
              return;
            }
            if (p.size() >= kCheckedPretoken)
              check_memory(kTrainBytesPerPretokenByte * static_cast<double>(p.size()), argument,
                           fmt::format("{}training on a pre-token of {}", where,
                                       units::format_bytes(static_cast<double>(p.size()))),
                           kLongPretokenHint);
            m.emplace(std::string(p), 1);
          });
        },
        [](size_t, size_t) {});
  });
}

// What both trainers count pre-tokens with: the special tokens (ids 0, 1, ... in order), and one count
// map and one matcher per thread.
struct PretokenCounts {
  PretokenCounts(const std::vector<std::string>& special_tokens, int requested_threads)
      : threads(resolve_threads(requested_threads)),
        specials(special_tokens, first_ids(special_tokens.size())),
        maps(static_cast<size_t>(threads)),
        matchers(static_cast<size_t>(threads)) {}
  void add(std::string_view text, const std::string& argument, const std::string& where) {
    count_pretokens(specials, text, threads, maps, matchers, argument, where);
  }
  static std::vector<int32_t> first_ids(size_t n) {
    std::vector<int32_t> ids(n);
    for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(i);
    return ids;
  }

  int threads;
  Specials specials;
  std::vector<CountMap> maps;
  std::vector<std::unique_ptr<Matcher>> matchers;
};

struct Word {
  std::vector<int32_t> sym;
  int64_t count;
};

struct Pair {
  int32_t a, b;
  int64_t count = 0;
  std::vector<int32_t> words;  // words that held the pair when it was added (some may no longer)
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

class MergeLoop {
 public:
  MergeLoop(std::vector<std::string>& vocab, std::vector<Word>& words) : vocab_(vocab), words_(words) {}

  void run(size_t target, std::vector<std::pair<std::string, std::string>>& merges) {
    for (size_t w = 0; w < words_.size(); ++w) {
      const auto& s = words_[w].sym;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const int32_t p = pair_of(s[i], s[i + 1]);
        pairs_[static_cast<size_t>(p)].count += words_[w].count;
        auto& ws = pairs_[static_cast<size_t>(p)].words;
        if (ws.empty() || ws.back() != static_cast<int32_t>(w)) ws.push_back(static_cast<int32_t>(w));
      }
    }
    for (size_t p = 0; p < pairs_.size(); ++p)
      if (pairs_[p].count > 0) heap_.push_back({pairs_[p].count, static_cast<int32_t>(p)});
    std::make_heap(heap_.begin(), heap_.end(), Less{this});
    stamp_.assign(words_.size(), -1);
    while (vocab_.size() < target && !heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), Less{this});
      const Entry top = heap_.back();
      heap_.pop_back();
      const Pair& P = pairs_[static_cast<size_t>(top.pair)];
      if (P.count != top.count) {
        if (P.count > 0) push(top.pair);
        continue;
      }
      merge(top.pair, merges);
    }
  }

 private:
  struct Entry {
    int64_t count;
    int32_t pair;
  };
  // Heap order: by count, then the pair of byte strings (Python's tuple order), greatest on top.
  struct Less {
    const MergeLoop* m;
    bool operator()(const Entry& x, const Entry& y) const {
      if (x.count != y.count) return x.count < y.count;
      const Pair& p = m->pairs_[static_cast<size_t>(x.pair)];
      const Pair& q = m->pairs_[static_cast<size_t>(y.pair)];
      const int c = m->vocab_[static_cast<size_t>(p.a)].compare(m->vocab_[static_cast<size_t>(q.a)]);
      if (c != 0) return c < 0;
      return m->vocab_[static_cast<size_t>(p.b)] < m->vocab_[static_cast<size_t>(q.b)];
    }
  };

  int32_t pair_of(int32_t a, int32_t b) {
    const auto [it, fresh] = index_.try_emplace(pair_key(a, b), static_cast<int32_t>(pairs_.size()));
    if (fresh) pairs_.push_back(Pair{a, b, 0, {}});
    return it->second;
  }
  void push(int32_t p) {
    heap_.push_back({pairs_[static_cast<size_t>(p)].count, p});
    std::push_heap(heap_.begin(), heap_.end(), Less{this});
  }

  void merge(int32_t p, std::vector<std::pair<std::string, std::string>>& merges) {
    const int32_t a = pairs_[static_cast<size_t>(p)].a, b = pairs_[static_cast<size_t>(p)].b;
    const auto merged = static_cast<int32_t>(vocab_.size());
    merges.emplace_back(vocab_[static_cast<size_t>(a)], vocab_[static_cast<size_t>(b)]);
    vocab_.push_back(vocab_[static_cast<size_t>(a)] + vocab_[static_cast<size_t>(b)]);
    const std::vector<int32_t> ws = std::move(pairs_[static_cast<size_t>(p)].words);
    pairs_[static_cast<size_t>(p)].words = {};
    ++step_;
    for (int32_t w : ws) {
      if (stamp_[static_cast<size_t>(w)] == step_) continue;
      stamp_[static_cast<size_t>(w)] = step_;
      Word& word = words_[static_cast<size_t>(w)];
      std::vector<int32_t>& s = word.sym;
      bool holds = false;
      for (size_t i = 0; i + 1 < s.size() && !holds; ++i) holds = s[i] == a && s[i + 1] == b;
      if (!holds) continue;
      old_.clear();
      for (size_t i = 0; i + 1 < s.size(); ++i) old_.push_back(pair_key(s[i], s[i + 1]));
      merge_pair(s, 0, a, b, merged);
      new_.clear();
      for (size_t i = 0; i + 1 < s.size(); ++i) new_.push_back(pair_key(s[i], s[i + 1]));
      std::sort(old_.begin(), old_.end());
      std::sort(new_.begin(), new_.end());
      // Walk both sorted lists: for each pair, how often the word held it before and after.
      size_t i = 0, j = 0;
      while (i < old_.size() || j < new_.size()) {
        const uint64_t k = (j >= new_.size() || (i < old_.size() && old_[i] <= new_[j])) ? old_[i] : new_[j];
        int64_t before = 0, after = 0;
        while (i < old_.size() && old_[i] == k) ++before, ++i;
        while (j < new_.size() && new_[j] == k) ++after, ++j;
        if (before == after) continue;
        const int32_t q = pair_of(static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xFFFFFFFFu));
        Pair& Q = pairs_[static_cast<size_t>(q)];
        Q.count += (after - before) * word.count;
        if (before == 0) Q.words.push_back(w);
        if (after > before) push(q);
      }
    }
  }

  std::vector<std::string>& vocab_;
  std::vector<Word>& words_;
  std::vector<Pair> pairs_;
  std::unordered_map<uint64_t, int32_t> index_;
  std::vector<Entry> heap_;
  std::vector<int64_t> stamp_;
  int64_t step_ = 0;
  std::vector<uint64_t> old_, new_;
};

void check_train_args(int64_t vocab_size, const std::vector<std::string>& specials) {
  std::unordered_set<std::string_view> seen;
  for (const auto& s : specials) {
    check_arg(!s.empty(), "special_tokens", "an empty special token; each must be at least one byte");
    check_arg(valid_utf8(s), "special_tokens", "'{}' is not valid UTF-8", shown(s));
    check_arg(seen.insert(s).second, "special_tokens", "'{}' is given twice", shown(s));
  }
  for (const auto& s : specials)
    check_arg(
        s.size() > 1, "special_tokens",
        "'{}' is one byte, a token of the vocabulary already (the byte itself); a special token needs two "
        "bytes or more",
        shown(s));
  const int64_t least = 256 + static_cast<int64_t>(specials.size());
  check_arg(vocab_size >= least, "vocab_size",
            "{} is below 256 bytes + {} special token{} = {}; the vocabulary starts with those", vocab_size,
            specials.size(), specials.size() == 1 ? "" : "s", least);
  check_arg(vocab_size <= INT32_MAX - 1, "vocab_size", "{} is above 2^31 - 2", vocab_size);
}

Tokenizer train_counted(std::vector<CountMap>& maps, int64_t vocab_size,
                        const std::vector<std::string>& specials, BpeTrainStats& st,
                        const std::string& argument) {
  // Sum the per-thread counts into the first map.
  CountMap& all = maps[0];
  for (size_t t = 1; t < maps.size(); ++t) {
    for (auto& [k, c] : maps[t]) all[k] += c;
    CountMap().swap(maps[t]);
  }
  std::vector<std::string> vocab(specials.begin(), specials.end());
  std::array<int32_t, 256> byte_id{};
  for (size_t i = 0; i < 256; ++i) {
    const uint8_t b = alphabet().gpt2_order[i];
    byte_id[b] = static_cast<int32_t>(vocab.size());
    vocab.emplace_back(1, static_cast<char>(b));
  }
  std::vector<Word> words;
  words.reserve(all.size());
  // A fixed order (the pre-tokens' bytes) so that the words' numbering does not depend on the threads.
  std::vector<std::pair<std::string_view, int64_t>> sorted;
  sorted.reserve(all.size());
  for (const auto& [k, c] : all) {
    sorted.emplace_back(k, c);
    st.pretokens += c;
  }
  std::sort(sorted.begin(), sorted.end());
  // The merge loop's memory, from what was counted, before any of it is allocated: every distinct
  // pre-token's symbols and pair lists, and the longest one's rewrite on each merge.
  double distinct_bytes = 0, longest = 0;
  for (const auto& [k, c] : sorted) {
    distinct_bytes += static_cast<double>(k.size());
    longest = std::max(longest, static_cast<double>(k.size()));
  }
  check_memory(kTrainBytesPerDistinctByte * distinct_bytes +
                   (kTrainBytesPerPretokenByte - kTrainBytesPerDistinctByte) * longest +
                   64.0 * static_cast<double>(sorted.size()),
               argument,
               fmt::format("training on {} distinct pre-tokens of {} in all (the longest {})", sorted.size(),
                           units::format_bytes(distinct_bytes), units::format_bytes(longest)),
               "train on less text");
  for (const auto& [k, c] : sorted) {
    Word w{{}, c};
    w.sym.reserve(k.size());
    for (unsigned char ch : k) w.sym.push_back(byte_id[ch]);
    words.push_back(std::move(w));
  }
  st.distinct_pretokens = static_cast<int64_t>(words.size());
  std::vector<std::pair<std::string_view, int64_t>>().swap(sorted);  // views into `all`: freed first
  CountMap().swap(all);
  const auto t0 = Clock::now();
  std::vector<std::pair<std::string, std::string>> merges;
  MergeLoop(vocab, words).run(static_cast<size_t>(vocab_size), merges);
  st.merges = static_cast<int64_t>(merges.size());
  st.merge_seconds = seconds_since(t0);
  Tokenizer t(std::move(vocab), std::move(merges), specials);
  st.peak_rss_bytes = memory::peak_rss_bytes();
  return t;
}

}  // namespace

Tokenizer train_bpe(std::string_view text, int64_t vocab_size, const std::vector<std::string>& special_tokens,
                    int threads, BpeTrainStats* stats) {
  check_train_args(vocab_size, special_tokens);
  BpeTrainStats st;
  const auto t0 = Clock::now();
  PretokenCounts counts(special_tokens, threads);
  counts.add(text, "text", "");
  st.input_bytes = static_cast<int64_t>(text.size());
  st.pretokenize_seconds = seconds_since(t0);
  Tokenizer t = train_counted(counts.maps, vocab_size, special_tokens, st, "text");
  if (stats) *stats = st;
  return t;
}

Tokenizer train_bpe_files(const std::vector<std::string>& texts, int64_t vocab_size,
                          const std::vector<std::string>& special_tokens, int threads, BpeTrainStats* stats) {
  check_train_args(vocab_size, special_tokens);
  check_arg(!texts.empty(), "texts", "no text files given");
  BpeTrainStats st;
  const auto t0 = Clock::now();
  PretokenCounts counts(special_tokens, threads);
  for (const auto& path : texts) {
    const std::string where = fmt::format("'{}': ", path);
    SafeBuffer buf(counts.specials, size_t{32} << 20, "texts", where);
    auto count = [&](std::string_view piece) { counts.add(piece, "texts", where); };
    read_blocks(path, "texts", fmt::format("'{}'", path), size_t{32} << 20, [&](std::string_view block) {
      st.input_bytes += static_cast<int64_t>(block.size());
      buf.feed(block, count);
    });
    buf.finish(count);
  }
  st.pretokenize_seconds = seconds_since(t0);
  Tokenizer t = train_counted(counts.maps, vocab_size, special_tokens, st, "texts");
  if (stats) *stats = st;
  return t;
}

}  // namespace ridge::text
