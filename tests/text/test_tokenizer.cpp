// The byte-level BPE tokenizer, each part against an answer found another way: the pre-tokenizer
// against a hand-written matcher of GPT-2's pattern on ASCII text and against pieces written out by
// hand elsewhere; training against a deliberately naive trainer (every pair recounted at every step);
// encoding with GPT-2's own files against the naive application of merges.txt read by the test itself;
// decoding against Python's UTF-8 replacement rules worked out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/tmpdir.hpp"
#include "ridge/build_paths.h"
#include "ridge/core/error.hpp"
#include "ridge/text/data.hpp"
#include "ridge/text/tokenizer.hpp"
#include "common/expect_error.hpp"

namespace {

using namespace ridge;
using namespace ridge::text;
using ridge::test::TempDir;
using Merges = std::vector<std::pair<std::string, std::string>>;

const std::string kData = std::string(RIDGE_SOURCE_DIR) + "/tests/data/";

using ridge::test::expect_error;

// ---- independent pieces of GPT-2's tokenizer, written here from its definition ----

// bytes_to_unicode() of GPT-2's encoder.py: the printable Latin-1 bytes stand for themselves, the
// others for 256, 257, ... in byte order.
std::map<uint8_t, std::u32string::value_type> byte_to_char() {
  std::map<uint8_t, char32_t> m;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    m[static_cast<uint8_t>(b)] = keep ? static_cast<char32_t>(b) : next++;
  }
  return m;
}

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// The 256 bytes in the order of their characters (HF's BpeTrainer alphabet, CS336's fixture).
std::vector<std::string> bytes_in_gpt2_order() {
  std::vector<std::pair<char32_t, uint8_t>> v;
  for (const auto& [b, c] : byte_to_char()) v.emplace_back(c, b);
  std::sort(v.begin(), v.end());
  std::vector<std::string> out;
  for (const auto& [c, b] : v) out.emplace_back(1, static_cast<char>(b));
  return out;
}

// GPT-2's pattern on ASCII text, matched by hand: '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+|
// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ with \p{L} = [A-Za-z], \p{N} = [0-9], \s = [ \t\n\v\f\r].
std::vector<std::string> ascii_pretokens(const std::string& t) {
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  auto other = [&](char c) { return !letter(c) && !digit(c) && !space(c); };
  std::vector<std::string> out;
  const size_t n = t.size();
  size_t i = 0;
  while (i < n) {
    size_t len = 0;
    if (t[i] == '\'' && i + 1 < n && std::string("sdmt").find(t[i + 1]) != std::string::npos) {
      len = 2;
    } else if (t[i] == '\'' && i + 2 < n &&
               (t.compare(i + 1, 2, "ll") == 0 || t.compare(i + 1, 2, "ve") == 0 ||
                t.compare(i + 1, 2, "re") == 0)) {
      len = 3;
    }
    for (auto cls : {std::function<bool(char)>(letter), std::function<bool(char)>(digit),
                     std::function<bool(char)>(other)}) {
      if (len) break;
      size_t j = i + (t[i] == ' ' ? 1 : 0);
      if (j < n && cls(t[j])) {
        while (j < n && cls(t[j])) ++j;
        len = j - i;
      }
    }
    if (!len && space(t[i])) {
      size_t k = i;
      while (k < n && space(t[k])) ++k;
      // \s+(?!\S): the whole run at the end of the text, else the run less its last character when
      // that leaves one; otherwise \s+ takes the run.
      len = (k == n || k - i == 1) ? k - i : k - i - 1;
    }
    out.push_back(t.substr(i, len));
    i += len;
  }
  return out;
}

std::vector<std::string> as_strings(const std::vector<std::string_view>& v) {
  return std::vector<std::string>(v.begin(), v.end());
}

// A tokenizer with no merges: the pre-tokenizer and the special-token split of CS336's rules.
Tokenizer bytes_only(const std::vector<std::string>& specials = {}) {
  std::vector<std::string> vocab = bytes_in_gpt2_order();
  return Tokenizer(vocab, {}, specials);
}

// CS336's training, as plainly as it can be written: every pair recounted at every step.
struct NaiveResult {
  std::vector<std::string> vocab;
  Merges merges;
};
NaiveResult naive_train(const std::string& text, size_t vocab_size,
                        const std::vector<std::string>& specials) {
  std::map<std::string, int64_t> counts;
  const std::set<std::string> special_set(specials.begin(), specials.end());
  for (const auto& p : bytes_only(specials).pretokenize(text))
    if (!special_set.count(std::string(p))) ++counts[std::string(p)];
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [w, c] : counts) {
    std::vector<std::string> sym;
    for (char ch : w) sym.emplace_back(1, ch);
    words.emplace_back(sym, c);
  }
  NaiveResult r;
  r.vocab = specials;
  for (const auto& b : bytes_in_gpt2_order()) r.vocab.push_back(b);
  while (r.vocab.size() < vocab_size) {
    std::map<std::pair<std::string, std::string>, int64_t> pairs;
    for (const auto& [sym, c] : words)
      for (size_t i = 0; i + 1 < sym.size(); ++i) pairs[{sym[i], sym[i + 1]}] += c;
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (std::tie(it->second, it->first) > std::tie(best->second, best->first)) best = it;
    const auto [a, b] = best->first;
    r.merges.emplace_back(a, b);
    r.vocab.push_back(a + b);
    for (auto& [sym, c] : words) {
      std::vector<std::string> next;
      for (size_t i = 0; i < sym.size();) {
        if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
          next.push_back(a + b);
          i += 2;
        } else {
          next.push_back(sym[i++]);
        }
      }
      sym = next;
    }
  }
  return r;
}

// GPT-2's files read by the test: token string -> id, and merges with their ranks, as bytes.
struct Gpt2Files {
  std::map<std::string, int32_t> id;  // bytes -> id
  std::map<std::pair<std::string, std::string>, int> rank;
};
const Gpt2Files& gpt2_files() {
  static const Gpt2Files f = [] {
    std::map<std::string, uint8_t> char_to_byte;
    for (const auto& [b, c] : byte_to_char()) char_to_byte[utf8(c)] = b;
    auto to_bytes = [&](const std::string& s) {
      std::string out;
      for (size_t i = 0; i < s.size();) {
        size_t len = 1;
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0xF0)
          len = 4;
        else if (c >= 0xE0)
          len = 3;
        else if (c >= 0xC0)
          len = 2;
        out += static_cast<char>(char_to_byte.at(s.substr(i, len)));
        i += len;
      }
      return out;
    };
    Gpt2Files g;
    const auto j = nlohmann::json::parse(ridge::test::read_bytes(kData + "gpt2_vocab.json"));
    for (const auto& [k, v] : j.items()) g.id[to_bytes(k)] = v.get<int32_t>();
    const std::string m = ridge::test::read_bytes(kData + "gpt2_merges.txt");
    size_t pos = 0;
    int r = 0;
    while (pos < m.size()) {
      size_t eol = m.find('\n', pos);
      if (eol == std::string::npos) eol = m.size();
      const std::string line = m.substr(pos, eol - pos);
      pos = eol + 1;
      if (line.empty() || line.rfind("#version", 0) == 0) continue;
      const size_t sp = line.find(' ');
      g.rank.emplace(std::make_pair(to_bytes(line.substr(0, sp)), to_bytes(line.substr(sp + 1))), r++);
    }
    return g;
  }();
  return f;
}

// GPT-2's bpe(): merge the lowest-ranked adjacent pair everywhere, until none has a rank.
std::vector<int32_t> naive_gpt2_ids(const std::string& piece) {
  const Gpt2Files& g = gpt2_files();
  std::vector<std::string> sym;
  for (char c : piece) sym.emplace_back(1, c);
  for (;;) {
    int best = -1;
    std::pair<std::string, std::string> bp;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      const auto it = g.rank.find({sym[i], sym[i + 1]});
      if (it != g.rank.end() && (best < 0 || it->second < best)) best = it->second, bp = it->first;
    }
    if (best < 0) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < sym.size();) {
      if (i + 1 < sym.size() && sym[i] == bp.first && sym[i + 1] == bp.second) {
        next.push_back(bp.first + bp.second);
        i += 2;
      } else {
        next.push_back(sym[i++]);
      }
    }
    sym = next;
  }
  std::vector<int32_t> ids;
  for (const auto& s : sym) ids.push_back(g.id.at(s));
  return ids;
}

const Tokenizer& gpt2() {
  static const Tokenizer t =
      Tokenizer::load(kData + "gpt2_vocab.json", kData + "gpt2_merges.txt", {"<|endoftext|>"});
  return t;
}

// Random text from a mix of scripts, whitespace runs, digits, contractions and (optionally) specials.
std::string random_text(std::mt19937& rng, size_t pieces, const std::vector<std::string>& specials = {}) {
  static const std::vector<std::string> parts = {
      "the",     " the", "cat",     " sat",  "'s",     "'ll",   "'re",  " don't",    "  ",      "   ",
      "\n",      "\n\n", " \n",     "\t",    "12",     " 345",  "6789", "!",         "?!",      " ...",
      ",",       "é",    "naïve",   " café", "日本語", " 中文", "😀",    " 👍🏽", "e\u0301", "\u00a0",
      "\u2003x", "Ω",    " Привет", "ﬁ",     "\r\n",   "x",     "y",    "z",         "ab",      "ba"};
  std::string s;
  for (size_t i = 0; i < pieces; ++i) {
    if (!specials.empty() && rng() % 17 == 0)
      s += specials[rng() % specials.size()];
    else
      s += parts[rng() % parts.size()];
  }
  return s;
}

// ---- pre-tokenizer ----

TEST(BpePretokenize, MatchesAHandWrittenMatcherOnRandomAscii) {
  std::mt19937 rng(7);
  const std::string alphabet = "aZ09 '\t\n\r\x0b\x0c.,!-sdmtlvre\x01\x7f";
  const Tokenizer t = bytes_only();
  for (int trial = 0; trial < 3000; ++trial) {
    std::string s(1 + rng() % 40, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    ASSERT_EQ(as_strings(t.pretokenize(s)), ascii_pretokens(s)) << "text: '" << s << "'";
  }
}

TEST(BpePretokenize, UnicodeClassesAndInvalidBytes) {
  const Tokenizer t = bytes_only({"<|endoftext|>"});
  using V = std::vector<std::string>;
  EXPECT_EQ(as_strings(t.pretokenize("Hello world's  end\n\n")),
            (V{"Hello", " world", "'s", " ", " end", "\n\n"}));
  EXPECT_EQ(as_strings(t.pretokenize("héllo wörld 日本語 text")), (V{"héllo", " wörld", " 日本語", " text"}));
  // No-break space is \s (UCP); a combining acute is neither a letter nor a digit.
  EXPECT_EQ(as_strings(t.pretokenize("x\u00a0y")), (V{"x", "\u00a0", "y"}));
  EXPECT_EQ(as_strings(t.pretokenize("e\u0301t")), (V{"e", "\u0301", "t"}));
  EXPECT_EQ(as_strings(t.pretokenize("½ 23 ²")), (V{"½", " 23", " ²"}));  // both are \p{N}
  EXPECT_EQ(as_strings(t.pretokenize(" 😀😀 !")), (V{" 😀😀", " !"}));
  // Invalid UTF-8: each run of invalid bytes is a piece, the valid text around it is cut on its own.
  EXPECT_EQ(as_strings(t.pretokenize("abc\xff\xfe def")), (V{"abc", "\xff\xfe", " def"}));
  EXPECT_EQ(as_strings(t.pretokenize("a  \xff b")), (V{"a", "  ", "\xff", " b"}));
  EXPECT_EQ(as_strings(t.pretokenize("\xe6\x97 x")), (V{"\xe6\x97", " x"}));
  // Special tokens are whole pieces and cut the text around them.
  EXPECT_EQ(as_strings(t.pretokenize("a <|endoftext|> b")), (V{"a", " ", "<|endoftext|>", " b"}));
}

TEST(BpePretokenize, OverlappingSpecialTokensMatchLongestFirst) {
  const Tokenizer t = bytes_only({"<s>", "<s><s>", "s><"});
  using V = std::vector<std::string>;
  EXPECT_EQ(as_strings(t.pretokenize("a<s><s><s>b")), (V{"a", "<s><s>", "<s>", "b"}));
  EXPECT_EQ(as_strings(t.pretokenize("s><s>")), (V{"s><", "s", ">"}));
}

TEST(BpePretokenize, LongWhitespaceRunsAndLongWords) {
  const Tokenizer t = bytes_only();
  const std::string spaces(200000, ' ');
  using V = std::vector<std::string>;
  EXPECT_EQ(as_strings(t.pretokenize("a" + spaces + "b")), (V{"a", spaces.substr(1), " b"}));
  EXPECT_EQ(as_strings(t.pretokenize(spaces)), (V{spaces}));
  const std::string word(300000, 'q');
  EXPECT_EQ(as_strings(t.pretokenize(word + "!")), (V{word, "!"}));
}

// ---- training ----

void expect_trains_like_naive(const std::string& text, size_t merges,
                              const std::vector<std::string>& specials) {
  const size_t size = 256 + specials.size() + merges;
  const NaiveResult want = naive_train(text, size, specials);
  for (int threads : {1, 2}) {
    BpeTrainStats st;
    const Tokenizer got = train_bpe(text, static_cast<int64_t>(size), specials, threads, &st);
    ASSERT_EQ(got.merges(), want.merges) << "threads " << threads;
    ASSERT_EQ(got.vocab(), want.vocab) << "threads " << threads;
    EXPECT_EQ(got.special_tokens(), specials);
    EXPECT_EQ(st.merges, static_cast<int64_t>(want.merges.size()));
    EXPECT_EQ(st.input_bytes, static_cast<int64_t>(text.size()));
  }
}

TEST(BpeTrain, CS336HandoutExample) {
  // The handout's example (with GPT-2's pattern instead of whitespace splitting).
  const std::string text =
      "low low low low low lower lower widest widest widest newest newest newest newest newest newest";
  expect_trains_like_naive(text, 12, {"<|endoftext|>"});
  const Tokenizer t = train_bpe(text, 256 + 1 + 3, {"<|endoftext|>"});
  // " newest" x6, " widest" x3: "s"+"t" and "e"+"st" come first; ties go to the greater pair.
  EXPECT_EQ(t.merges()[0], (std::pair<std::string, std::string>{"s", "t"}));
  EXPECT_EQ(t.vocab()[0], "<|endoftext|>");
  EXPECT_EQ(t.vocab()[1], "!");  // the bytes in GPT-2's order follow the special tokens
}

TEST(BpeTrain, MatchesNaiveOnUnicodeDigitsWhitespaceAndSpecials) {
  std::mt19937 rng(11);
  expect_trains_like_naive(random_text(rng, 3000), 200, {});
  expect_trains_like_naive(random_text(rng, 3000, {"<|endoftext|>", "<pad>"}), 150,
                           {"<|endoftext|>", "<pad>"});
  std::string digits;
  for (int i = 0; i < 4000; ++i) digits += std::to_string(rng() % 100000) + (rng() % 3 ? " " : "\n");
  expect_trains_like_naive(digits, 120, {});
  std::string ws;
  for (int i = 0; i < 3000; ++i)
    ws += std::string(rng() % 6, ' ') + (rng() % 2 ? "\n" : "\t") + "ab"[rng() % 2];
  expect_trains_like_naive(ws, 60, {});
}

TEST(BpeTrain, TiesAreBrokenByTheGreaterPairOfBytes) {
  // Every pair occurs equally often: the order is decided by the tie-break alone, comparing the
  // pairs as (bytes, bytes) tuples, so ("b", "a") beats ("a", "b") and longer tokens that extend a
  // prefix beat the prefix.
  expect_trains_like_naive("ab ba cd dc ab ba cd dc xy yx", 12, {});
  std::mt19937 rng(3);
  std::string s;
  for (int i = 0; i < 5000; ++i)
    s += std::string(1, "abc"[rng() % 3]) + "abc"[rng() % 3] + (rng() % 4 ? "" : " ");
  expect_trains_like_naive(s, 80, {});
  // Bytes >= 0x80 compare above ASCII (unsigned), as Python compares bytes.
  expect_trains_like_naive("\xc3\xa9z \xc3\xa9z za za", 4, {});
}

TEST(BpeTrain, InvalidUtf8IsTrainedOnAsBytes) {
  std::mt19937 rng(5);
  std::string s = random_text(rng, 2000);
  for (int i = 0; i < 300; ++i) s.insert(rng() % s.size(), 1, static_cast<char>(0x80 + rng() % 128));
  expect_trains_like_naive(s, 100, {});
}

TEST(BpeTrain, ChunkedParallelCountingMatchesOneThread) {
  // Large enough to be cut into chunks (several hundred KiB), with special tokens among the cuts.
  std::mt19937 rng(9);
  const std::vector<std::string> specials = {"<|endoftext|>"};
  const std::string text = random_text(rng, 400000, specials);
  BpeTrainStats s1, s2;
  const Tokenizer a = train_bpe(text, 600, specials, 1, &s1);
  const Tokenizer b = train_bpe(text, 600, specials, 2, &s2);
  EXPECT_EQ(a.merges(), b.merges());
  EXPECT_EQ(s1.pretokens, s2.pretokens);
  EXPECT_EQ(s1.distinct_pretokens, s2.distinct_pretokens);
  EXPECT_EQ(static_cast<int64_t>(bytes_only(specials).pretokenize(text).size()),
            s1.pretokens + static_cast<int64_t>(std::count(text.begin(), text.end(), '|')) / 2);
  // From a file, read block by block: the same tokenizer.
  TempDir dir;
  ridge::test::write_bytes(dir.file("t.txt"), text);
  EXPECT_EQ(train_bpe_files({dir.file("t.txt")}, 600, specials, 2).content_hash(), a.content_hash());
}

TEST(BpeTrain, StopsWhenNoPairIsLeft) {
  const Tokenizer t = train_bpe("ab ab", 1000, {});
  EXPECT_EQ(t.merges(), (Merges{{"a", "b"}, {" ", "ab"}}));
  EXPECT_EQ(t.vocab_size(), 258);
}

TEST(BpeTrain, BadArgumentsAreOneLine) {
  expect_error([] { train_bpe("abc", 256, {"<|endoftext|>"}); },
               "vocab_size: 256 is below 256 bytes + 1 special token = 257");
  expect_error([] { train_bpe("abc", 100, {}); }, "vocab_size: 100");
  expect_error([] { train_bpe("abc", 300, {""}); }, "special_tokens: an empty special token");
  expect_error([] { train_bpe("abc", 300, {"<a>", "<a>"}); }, "special_tokens: '<a>' is given twice");
  expect_error([] { train_bpe("abc", 300, {"x"}); }, "special_tokens: 'x' is one byte");
  expect_error([] { train_bpe_files({"/nonexistent/x.txt"}, 300, {}); },
               "'/nonexistent/x.txt': cannot open it");
}

// ---- encoding ----

TEST(BpeEncode, Gpt2KnownIds) {
  EXPECT_EQ(gpt2().encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(gpt2().encode("<|endoftext|>"), (std::vector<int32_t>{50256}));
  EXPECT_EQ(gpt2().encode(" the"), (std::vector<int32_t>{262}));
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().special_id("<|endoftext|>"), 50256);
}

TEST(BpeEncode, Gpt2MatchesNaiveMergesOnRandomText) {
  std::mt19937 rng(21);
  const Tokenizer& t = gpt2();
  for (int trial = 0; trial < 200; ++trial) {
    std::string s = random_text(rng, 1 + rng() % 60, {"<|endoftext|>"});
    if (trial % 4 == 0) s.insert(rng() % (s.size() + 1), 1, static_cast<char>(0x80 + rng() % 128));
    std::vector<int32_t> want;
    for (const auto& p : t.pretokenize(s)) {
      if (p == "<|endoftext|>") {
        want.push_back(50256);
        continue;
      }
      const auto ids = naive_gpt2_ids(std::string(p));
      want.insert(want.end(), ids.begin(), ids.end());
    }
    ASSERT_EQ(t.encode(s), want) << "text: '" << s << "'";
    ASSERT_EQ(t.decode_bytes(want), s);
  }
}

TEST(BpeEncode, LongPiecesAndTheCache) {
  const Tokenizer& t = gpt2();
  const std::string spaces(50000, ' ');
  const std::string s = "x" + spaces + "y" + std::string(20000, 'a') + " aaaa aaaa";
  std::vector<int32_t> want;
  for (const auto& p : t.pretokenize(s)) {
    const auto ids = naive_gpt2_ids(std::string(p));
    want.insert(want.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(t.encode(s), want);
  EXPECT_EQ(t.encode_pretoken(" aaaa"), naive_gpt2_ids(" aaaa"));
}

TEST(BpeEncode, RoundTripsValidUtf8AndAnyBytes) {
  std::mt19937 rng(4);
  const std::vector<std::string> specials = {"<|endoftext|>", "<pad>"};
  const Tokenizer trained = train_bpe(random_text(rng, 20000, specials), 600, specials);
  for (const Tokenizer* t : {&trained, &gpt2()}) {
    for (int trial = 0; trial < 300; ++trial) {
      const std::string s = random_text(rng, rng() % 80, specials);
      ASSERT_EQ(t->decode(t->encode(s)), s);
    }
    for (int trial = 0; trial < 100; ++trial) {
      std::string b(rng() % 64, '\0');
      for (char& c : b) c = static_cast<char>(rng());
      ASSERT_EQ(t->decode_bytes(t->encode(b)), b);
    }
  }
  // A special token is one id, both ways.
  const auto ids = trained.encode("x<pad>y<|endoftext|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), trained.special_id("<pad>")), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), trained.special_id("<|endoftext|>")), 1);
  EXPECT_EQ(trained.special_id("<pad>"), 1);
  EXPECT_EQ(trained.decode(std::vector<int32_t>{1, 0}), "<pad><|endoftext|>");
}

TEST(BpeEncode, ChunksThreadsAndStreamsGiveTheSameIds) {
  std::mt19937 rng(8);
  const std::vector<std::string> specials = {"<|endoftext|>"};
  std::string text = random_text(rng, 600000, specials);
  for (int i = 0; i < 200; ++i) text.insert(rng() % text.size(), 1, static_cast<char>(0x80 + rng() % 128));
  const Tokenizer& t = gpt2();
  const auto one = t.encode(text, 1);
  EXPECT_EQ(t.encode(text, 2), one);
  EXPECT_EQ(t.encode(text, 3), one);
  // Fed in pieces of random sizes, some cutting multi-byte characters and special tokens.
  EncodeStream stream(t, 2);
  std::vector<int32_t> streamed;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::min<size_t>(text.size() - pos, 1 + rng() % 70000);
    stream.feed(std::string_view(text).substr(pos, n), streamed);
    pos += n;
  }
  stream.finish(streamed);
  EXPECT_EQ(streamed, one);
}

TEST(BpeEncode, EncodeFileWritesUint16AndRefusesLargeVocabularies) {
  TempDir dir;
  std::mt19937 rng(2);
  const std::string a = random_text(rng, 5000), b = random_text(rng, 3000);
  ridge::test::write_bytes(dir.file("a.txt"), a);
  ridge::test::write_bytes(dir.file("b.txt"), b);
  const auto st = encode_file(gpt2(), {dir.file("a.txt"), dir.file("b.txt")}, dir.file("t.bin"));
  std::vector<int32_t> want = gpt2().encode(a);
  const auto wb = gpt2().encode(b);
  want.insert(want.end(), wb.begin(), wb.end());
  const TokenFile f = TokenFile::open(dir.file("t.bin"));
  ASSERT_EQ(f.size(), static_cast<int64_t>(want.size()));
  std::vector<uint16_t> got(want.size());
  f.read(0, f.size(), got.data());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()));
  EXPECT_EQ(st.tokens, static_cast<int64_t>(want.size()));
  EXPECT_EQ(st.bytes, static_cast<int64_t>(a.size() + b.size()));
  // 65,537 tokens do not fit uint16: refused before anything is read or written.
  std::vector<std::string> specials;
  for (int i = 0; i < 65537 - 256; ++i)
    specials.push_back(std::string("<").append(std::to_string(i)).append(">"));
  const Tokenizer big(bytes_in_gpt2_order(), {}, specials);
  ridge::test::write_bytes(dir.file("keep.bin"), "kept");
  expect_error([&] { encode_file(big, {dir.file("a.txt")}, dir.file("keep.bin")); },
               "out: a vocabulary of 65537 tokens does not fit uint16 token files (at most 65536)");
  EXPECT_EQ(ridge::test::read_bytes(dir.file("keep.bin")), "kept");
  expect_error([&] { encode_file(gpt2(), {dir.file("absent.txt")}, dir.file("keep.bin")); }, "absent.txt");
  EXPECT_EQ(ridge::test::read_bytes(dir.file("keep.bin")), "kept");
}

// ---- decoding ----

TEST(BpeDecode, InvalidUtf8BecomesReplacementCharactersAsPythonDoes) {
  const Tokenizer t = bytes_only();
  auto ids = [&](const std::string& bytes) { return t.encode(bytes); };
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  // Each maximal ill-formed subpart is one U+FFFD (Python's bytes.decode("utf-8", "replace")).
  EXPECT_EQ(t.decode(ids("a\xff"
                         "b")),
            "a" + r + "b");
  EXPECT_EQ(t.decode(ids("a\xe4\xb8"
                         "b")),
            "a" + r + "b");                                     // a truncated 3-byte sequence
  EXPECT_EQ(t.decode(ids("\xed\xa0\x80")), r + r + r);          // a surrogate: three
  EXPECT_EQ(t.decode(ids("\xf0\x9f\x98")), r);                  // a truncated emoji
  EXPECT_EQ(t.decode(ids("\xc0\xaf")), r + r);                  // an overlong form
  EXPECT_EQ(t.decode(ids("\xf4\x90\x80\x80")), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(t.decode(ids("caf\xc3\xa9")), "caf\xc3\xa9");
  expect_error(
      [&] {
        t.decode(std::vector<int32_t>{3, 256});
      },
      "ids: ids[1] = 256 is outside the vocabulary (0..255)");
  expect_error([&] { t.decode(std::vector<int32_t>{-1}); }, "ids[0] = -1");
}

// ---- files ----

TEST(BpeFiles, SaveAndLoadRoundTripInGpt2Format) {
  TempDir dir;
  std::mt19937 rng(12);
  const std::vector<std::string> specials = {"<|endoftext|>", "<my pad>"};
  const Tokenizer t = train_bpe(random_text(rng, 20000, specials), 500, specials);
  t.save_dir(dir.file("tok"));
  const Tokenizer u = Tokenizer::load_dir(dir.file("tok"));
  EXPECT_EQ(u.vocab(), t.vocab());
  EXPECT_EQ(u.merges(), t.merges());
  EXPECT_EQ(u.special_tokens(), specials);
  EXPECT_EQ(u.content_hash(), t.content_hash());
  // The files themselves: GPT-2's alphabet in both, the special tokens written as their text.
  const auto v = nlohmann::json::parse(ridge::test::read_bytes(dir.file("tok/vocab.json")));
  EXPECT_EQ(v.at("<my pad>"), 1);
  EXPECT_EQ(v.at("!"), 2);
  EXPECT_EQ(v.at(utf8(byte_to_char().at(' '))), 2 + 220);  // ' ' is U+0120 'Ġ', the 221st byte in order
  const std::string m = ridge::test::read_bytes(dir.file("tok/merges.txt"));
  EXPECT_EQ(m.substr(0, 14), "#version: 0.2\n");
  EXPECT_EQ(std::count(m.begin(), m.end(), '\n'), static_cast<long>(t.merges().size()) + 1);
  EXPECT_EQ(nlohmann::json::parse(ridge::test::read_bytes(dir.file("tok/special_tokens.json"))),
            nlohmann::json(specials));
  // GPT-2's own files, saved and read back: the same tokenizer.
  gpt2().save_dir(dir.file("gpt2"));
  const Tokenizer g = Tokenizer::load_dir(dir.file("gpt2"));
  EXPECT_EQ(g.content_hash(), gpt2().content_hash());
  EXPECT_EQ(g.encode("Hello world<|endoftext|>"), (std::vector<int32_t>{15496, 995, 50256}));
  EXPECT_NE(t.content_hash(), gpt2().content_hash());
}

// save_dir replaces the folder as one set: a save that cannot finish (a file its owner made read-only,
// a folder where a file goes) leaves the old tokenizer whole, where saving file by file had replaced
// vocab.json before failing on the next file and left a mix that loads as neither.
TEST(BpeFiles, ASaveThatCannotFinishLeavesTheOldFolderWhole) {
  TempDir dir;
  std::mt19937 rng(7);
  const std::string text = random_text(rng, 3000, {"<|endoftext|>"});
  const Tokenizer a = train_bpe(text, 400, {}), b = train_bpe(text, 300, {"<|endoftext|>"});
  const std::string tok = dir.file("tok"), special = dir.file("tok/special_tokens.json");
  a.save_dir(tok);
  const std::string vocab = ridge::test::read_bytes(tok + "/vocab.json");
  std::filesystem::permissions(special, std::filesystem::perms::owner_read);
  expect_error([&] { b.save_dir(tok); }, "dir: '" + special + "' is read-only");
  EXPECT_EQ(Tokenizer::load_dir(tok).content_hash(), a.content_hash());
  std::filesystem::permissions(special,
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::filesystem::remove(tok + "/merges.txt");
  std::filesystem::create_directory(tok + "/merges.txt");
  expect_error([&] { b.save_dir(tok); }, "holds a folder 'merges.txt'");
  EXPECT_TRUE(ridge::test::read_bytes(tok + "/vocab.json") == vocab) << "vocab.json was replaced";
  std::filesystem::remove(tok + "/merges.txt");
  b.save_dir(tok);  // a folder missing a file of the set is replaced whole
  EXPECT_EQ(Tokenizer::load_dir(tok).content_hash(), b.content_hash());
}

// The files a command reads from a tokenizer folder (its inputs, which no output may name).
TEST(BpeFiles, DirFilesAreTheFilesOfTheFolder) {
  EXPECT_EQ(Tokenizer::dir_files("t"),
            (std::vector<std::string>{"t/vocab.json", "t/merges.txt", "t/special_tokens.json"}));
}

// A reader loading the folder while it is saved over, again and again, loads one whole version or the
// other: never a mix of two (which fails to load or, worse, loads as a third tokenizer).
TEST(BpeFiles, AReaderLoadsOneWholeVersionWhileTheFolderIsSavedOver) {
  TempDir dir;
  std::mt19937 rng(5);
  const std::string text = random_text(rng, 3000, {"<|endoftext|>"});
  const Tokenizer a = train_bpe(text, 400, {}), b = train_bpe(text, 300, {"<|endoftext|>"});
  const std::string tok = dir.file("tok");
  a.save_dir(tok);
  std::atomic<bool> done{false};
  std::string writer_error;
  std::thread writer([&] {
    try {
      for (int i = 0; i < 80; ++i) (i % 2 ? a : b).save_dir(tok);
    } catch (const Error& e) {
      writer_error = e.what();
    }
    done = true;
  });
  int loads = 0, mixed = 0, outrun = 0;
  std::string first;
  while (!done || loads < 20) {
    ++loads;
    try {
      const uint64_t h = Tokenizer::load_dir(tok).content_hash();
      if (h != a.content_hash() && h != b.content_hash() && ++mixed == 1) first = "a third tokenizer";
    } catch (const Error& e) {
      // A reader outrun by a writer that never pauses (swapped 20 times within one load: under
      // AddressSanitizer a load is that slow) says so and loads nothing: a clean error, not a mix.
      if (std::string(e.what()).find("was replaced while being read") != std::string::npos)
        ++outrun;
      else if (++mixed == 1)
        first = e.what();
    }
  }
  EXPECT_LT(outrun, loads) << "no load got through";
  writer.join();
  EXPECT_EQ(writer_error, "");
  EXPECT_EQ(mixed, 0) << "of " << loads << " loads; the first: " << first;
  EXPECT_EQ(
      std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()),
      1)
      << "no temporary and no old set left";
}

TEST(BpeFiles, ContentHashFollowsTheContent) {
  const Tokenizer a(bytes_in_gpt2_order(), {}, {});
  std::vector<std::string> v = bytes_in_gpt2_order();
  v.push_back("ab");
  const Tokenizer b(v, {{"a", "b"}}, {});
  const Tokenizer c(v, {{"a", "b"}}, {"<s>"});
  EXPECT_NE(a.content_hash(), b.content_hash());
  EXPECT_NE(b.content_hash(), c.content_hash());
  EXPECT_EQ(Tokenizer(v, {{"a", "b"}}, {}).content_hash(), b.content_hash());
  EXPECT_EQ(c.vocab_size(), 258);  // the special token appended (CS336's rule)
}

TEST(BpeFiles, DefectsAreOneClearError) {
  TempDir dir;
  const std::string vocab = kData + "gpt2_vocab.json", merges = kData + "gpt2_merges.txt";
  expect_error([&] { Tokenizer::load(dir.file("absent.json"), merges); }, "absent.json': cannot open it");
  expect_error([&] { Tokenizer::load(vocab, dir.file("absent.txt")); }, "absent.txt': cannot open it");
  ridge::test::write_bytes(dir.file("bad.json"), "{\"a\": 0,");
  expect_error([&] { Tokenizer::load(dir.file("bad.json"), merges); },
               "vocab file '" + dir.file("bad.json") + "': not valid JSON");
  ridge::test::write_bytes(dir.file("arr.json"), "[1, 2]");
  expect_error([&] { Tokenizer::load(dir.file("arr.json"), merges); }, "expected a JSON object");
  ridge::test::write_bytes(dir.file("gap.json"), "{\"a\": 0, \"b\": 2}");
  expect_error([&] { Tokenizer::load(dir.file("gap.json"), merges); }, "the 2 ids must be 0..1, each once");
  ridge::test::write_bytes(dir.file("str.json"), "{\"a\": \"0\"}");
  expect_error([&] { Tokenizer::load(dir.file("str.json"), merges); }, "ids are integers");
  ridge::test::write_bytes(dir.file("alien.json"), "{\"a\": 0, \"\u4e2d\": 1}");
  expect_error([&] { Tokenizer::load(dir.file("alien.json"), merges); },
               "has the character U+4E2D, outside GPT-2's byte-to-unicode alphabet");
  ridge::test::write_bytes(dir.file("few.json"), "{\"a\": 0, \"b\": 1}");
  expect_error([&] { Tokenizer::load(dir.file("few.json"), merges); }, "no token for the byte 0x00");
  ridge::test::write_bytes(dir.file("m1.txt"), "#version: 0.2\nĠ t\nĠt he e\n");
  expect_error([&] { Tokenizer::load(vocab, dir.file("m1.txt")); },
               "merges file '" + dir.file("m1.txt") + "': line 3: 'Ġt he e' is not a merge");
  ridge::test::write_bytes(dir.file("m2.txt"), "Ġ t\nĠtttttttttt he\n");
  expect_error([&] { Tokenizer::load(vocab, dir.file("m2.txt")); },
               "line 2: 'Ġtttttttttt' is not a token of the vocabulary");
  ridge::test::write_bytes(dir.file("m3.txt"), "Ġ t\nq zqxjzqxj\n");
  expect_error([&] { Tokenizer::load(vocab, dir.file("m3.txt")); }, "line 2: 'zqxjzqxj' is not a token");
  expect_error([&] { Tokenizer::load_dir(dir.file("absent")); }, "not a directory");
  expect_error(
      [&] {
        Tokenizer(bytes_in_gpt2_order(), {{"a", "b"}}, {});
      },
      "merges[0]: the merged token 'ab' is not a token of the vocabulary");
  std::vector<std::string> dup = bytes_in_gpt2_order();
  dup.push_back("a");
  expect_error([&] { Tokenizer(dup, {}, {}); }, "vocab: tokens");
}

// A tokenizer's JSON nested 300,000 deep (a token's id, vocab.json itself, special_tokens.json) was a
// SIGSEGV: the message about the bad value called dump() on it, which recursed until the stack ran out,
// and these files skipped input::parse_json's depth limit. Now one error each, and a value deep or long
// but within the limit is shown as a short excerpt.
TEST(BpeFiles, NestingPastTheLimitIsOneErrorNotACrash) {
  TempDir dir;
  const std::string merges = kData + "gpt2_merges.txt";
  const std::string deep = std::string(300000, '[') + std::string(300000, ']');
  auto folder = [&](const std::string& name, const std::string& vocab, const std::string& specials) {
    std::filesystem::create_directory(dir.file(name));
    ridge::test::write_bytes(dir.file(name + "/vocab.json"), vocab);
    ridge::test::write_bytes(dir.file(name + "/merges.txt"), "#version: 0.2\n");
    if (!specials.empty()) ridge::test::write_bytes(dir.file(name + "/special_tokens.json"), specials);
    return dir.file(name);
  };
  const std::string id = folder("id", "{\"a\": " + deep + "}", "");
  expect_error([&] { Tokenizer::load_dir(id); },
               "vocab file '" + id + "/vocab.json': nested deeper than 256 levels at line 1, column 262");
  const std::string whole = folder("whole", deep, "");
  expect_error([&] { Tokenizer::load_dir(whole); }, "vocab file '" + whole + "/vocab.json': nested deeper");
  const std::string sp = folder("sp", "{\"a\": 0}", "[" + deep + "]");
  expect_error([&] { Tokenizer::load_dir(sp); },
               "special tokens file '" + sp + "/special_tokens.json': nested deeper than 256 levels");
  // Within the limit, but deep and megabytes long: the message shows 40 characters of it.
  const std::string long_value =
      std::string(200, '[') + "1, \"" + std::string(4 << 20, 'x') + "\"" + std::string(200, ']');
  for (const std::string& d : {folder("long_id", "{\"a\": " + long_value + "}", ""),
                               folder("long_sp", "{\"a\": 0}", "[" + long_value + "]")}) {
    try {
      Tokenizer::load_dir(d);
      ADD_FAILURE() << "accepted " << d;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_LT(msg.size(), 300u) << msg.substr(0, 400);
      EXPECT_NE(msg.find("[[[[[[[["), std::string::npos) << msg.substr(0, 400);
    }
  }
}

}  // namespace
