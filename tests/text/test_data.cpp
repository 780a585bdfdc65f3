// Token files, the RNG, batch sampling, byte encoding and token statistics, each against an independent
// answer: bytes laid out by hand, generator outputs from a separate implementation, counts done by hand.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "common/tmpdir.hpp"
#include "ridge/core/error.hpp"
#include "ridge/text/data.hpp"
#include "common/expect_error.hpp"

namespace {

using namespace ridge;
using namespace ridge::text;
using ridge::test::TempDir;

using ridge::test::expect_error;

TEST(TokenFile, ReadsLittleEndianUint16AsNumpyWritesIt) {
  TempDir dir;
  const std::string path = dir.file("t.bin");
  // np.array([1, 258, 65535, 7], dtype=np.uint16).tofile(path)
  ridge::test::write_bytes(path, std::string("\x01\x00\x02\x01\xFF\xFF\x07\x00", 8));
  const TokenFile f = TokenFile::open(path);
  ASSERT_EQ(f.size(), 4);
  std::vector<uint16_t> t(4);
  f.read(0, 4, t.data());
  EXPECT_EQ(t, (std::vector<uint16_t>{1, 258, 65535, 7}));
  f.read(2, 1, t.data());
  EXPECT_EQ(t[0], 65535);
  EXPECT_EQ(f.max_token(), 65535);
  // FNV-1a of the eight bytes, folded by hand here.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char b : std::string("\x01\x00\x02\x01\xFF\xFF\x07\x00", 8)) h = (h ^ b) * 0x100000001b3ull;
  EXPECT_EQ(f.content_hash(), h);
  EXPECT_EQ(f.path(), path);
}

TEST(TokenFile, DefectsAreOneClearError) {
  TempDir dir;
  ridge::test::write_bytes(dir.file("empty"), "");
  ridge::test::write_bytes(dir.file("odd"), std::string("\x01\x00\x02", 3));
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  expect_error([&] { TokenFile::open(dir.file("absent")); },
               "token file '" + dir.file("absent") + "': cannot open");
  expect_error([&] { TokenFile::open(dir.path().string()); }, "not a regular file");
  expect_error([&] { TokenFile::open(dir.file("fifo")); }, "not a regular file");
  expect_error([&] { TokenFile::open(dir.file("empty")); }, "empty");
  expect_error([&] { TokenFile::open(dir.file("odd")); },
               "truncated: 3 bytes is not a whole number of uint16 tokens");
}

TEST(TokenFile, WriteTokensRoundTripsAndIsAtomic) {
  TempDir dir;
  const std::vector<uint16_t> toks = {0, 255, 256, 65535, 42};
  write_tokens(dir.file("w.bin"), toks);
  EXPECT_EQ(ridge::test::read_bytes(dir.file("w.bin")),
            std::string("\x00\x00\xFF\x00\x00\x01\xFF\xFF\x2A\x00", 10));
  const TokenFile f = TokenFile::open(dir.file("w.bin"));
  std::vector<uint16_t> back(toks.size());
  f.read(0, f.size(), back.data());
  EXPECT_EQ(back, toks);
  expect_error([&] { write_tokens(dir.file("missing/w.bin"), toks); },
               "write_tokens '" + dir.file("missing/w.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("missing")));
  expect_error([&] { write_tokens(dir.file("e.bin"), {}); }, "tokens is empty");
  EXPECT_FALSE(std::filesystem::exists(dir.file("e.bin")));
}

// Another program truncating the file while ridge reads it (training) is an error naming the file, never
// a SIGBUS: the file is read through its descriptor, and a short read says what happened.
TEST(TokenFile, ShrinkingUnderTheReaderIsAnErrorNamingTheFile) {
  TempDir dir;
  std::vector<uint16_t> toks(3000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint16_t>(i % 251);
  const std::string path = dir.file("shrink.bin");
  write_tokens(path, toks);
  const TokenFile f = TokenFile::open(path);
  ASSERT_EQ(::truncate(path.c_str(), 100), 0);  // 50 tokens left
  std::vector<uint16_t> out(100);
  f.read(10, 40, out.data());  // still there
  EXPECT_EQ(out[0], 10);
  expect_error(
      [&] { f.read(40, 100, out.data()); },
      "token file '" + path + "': it now ends before token 140 although it held 3000 tokens when opened");
  Rng rng(1);
  std::vector<int32_t> x(4 * 64), y(x.size());
  expect_error([&] { sample_batch(f, 4, 64, rng, x.data(), y.data()); }, "token file '" + path + "'");
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  expect_error([&] { token_stats(f); }, "it now ends before token");
}

// The file and the in-memory sampler draw the same batches from the same generator state.
TEST(TokenFile, SampleBatchFromTheFileEqualsTheInMemoryOne) {
  TempDir dir;
  std::vector<uint16_t> toks(777);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint16_t>((i * 7919) % 65536);
  write_tokens(dir.file("s.bin"), toks);
  const TokenFile f = TokenFile::open(dir.file("s.bin"));
  Rng a(42), b(42);
  std::vector<int32_t> xa(5 * 33), ya(xa.size()), xb(xa.size()), yb(xa.size());
  for (int round = 0; round < 4; ++round) {
    sample_batch(toks.data(), static_cast<int64_t>(toks.size()), 5, 33, a, xa.data(), ya.data());
    sample_batch(f, 5, 33, b, xb.data(), yb.data());
    EXPECT_EQ(xa, xb);
    EXPECT_EQ(ya, yb);
  }
  const TokenStats s = token_stats(f), m = token_stats(toks);
  EXPECT_EQ(s.count, m.count);
  EXPECT_EQ(s.distinct, m.distinct);
  EXPECT_EQ(s.max_token, m.max_token);
  EXPECT_EQ(s.entropy_bits, m.entropy_bits);
}

TEST(Rng, MatchesAnIndependentXoshiroImplementation) {
  // From a separate Python implementation of splitmix64 (seed 0: e220a8397b1dcdaf ..., the published
  // values) feeding xoshiro256**.
  Rng r(0);
  EXPECT_EQ(r.state(), (Rng::State{0xe220a8397b1dcdafull, 0x6e789e6aa1b965f4ull, 0x06c45d188009454full,
                                   0xf88bb8a8724c81ecull}));
  EXPECT_EQ(r.next(), 0x99ec5f36cb75f2b4ull);
  EXPECT_EQ(r.next(), 0xbf6e1f784956452aull);
  EXPECT_EQ(r.next(), 0x1a5f849d4933e6e0ull);
  EXPECT_EQ(r.next(), 0x6aa594f1262d2d2cull);
}

TEST(Rng, SavedStateResumesTheSameSequence) {
  Rng a(123);
  for (int i = 0; i < 10; ++i) a.normal();
  const Rng::State saved = a.state();
  std::vector<double> first;
  for (int i = 0; i < 20; ++i) first.push_back(i % 2 ? a.uniform() : a.normal());
  Rng b(999);
  b.set_state(saved);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(i % 2 ? b.uniform() : b.normal(), first[static_cast<size_t>(i)]);
  expect_error([&] { b.set_state({0, 0, 0, 0}); }, "all-zero");
  EXPECT_NE(Rng(1).next(), Rng(2).next());
}

TEST(Rng, DistributionsHaveTheirMoments) {
  // Fixed seed, so this is deterministic; the bounds are 5+ standard errors wide.
  Rng r(5);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0, mn = 1, mx = 0;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    mn = std::min(mn, u);
    mx = std::max(mx, u);
    su += u;
    const double z = r.normal();
    sn += z;
    sn2 += z * z;
  }
  EXPECT_GE(mn, 0.0);
  EXPECT_LT(mx, 1.0);
  EXPECT_NEAR(su / n, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(sn / n, 0.0, 5 / std::sqrt(n));
  EXPECT_NEAR(sn2 / n, 1.0, 5 * std::sqrt(2.0 / n));
  // below(n): every value in range, each of 7 buckets near 1/7.
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) ++counts[r.below(7)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 5 * std::sqrt(10000.0));
}

TEST(SampleBatch, WindowsAreConsecutiveAndStartsCoverTheInclusiveRange) {
  // tokens[i] = i, so a row's start is its first input and every window is checkable.
  const int64_t n = 20, context = 5, batch = 3;
  std::vector<uint16_t> toks(n);
  for (int64_t i = 0; i < n; ++i) toks[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  std::vector<int32_t> in(batch * context), tg(batch * context);
  Rng rng(1);
  std::set<int32_t> starts;
  for (int rep = 0; rep < 400; ++rep) {
    sample_batch(toks.data(), n, batch, context, rng, in.data(), tg.data());
    for (int64_t b = 0; b < batch; ++b) {
      const int32_t s = in[static_cast<size_t>(b * context)];
      starts.insert(s);
      for (int64_t t = 0; t < context; ++t) {
        EXPECT_EQ(in[static_cast<size_t>(b * context + t)], s + t);
        EXPECT_EQ(tg[static_cast<size_t>(b * context + t)], s + t + 1);
      }
    }
  }
  // CS336: starts uniform in [0, n - context - 1] inclusive; 1200 draws over 15 values hit them all.
  EXPECT_EQ(starts.size(), static_cast<size_t>(n - context));
  EXPECT_EQ(*starts.begin(), 0);
  EXPECT_EQ(*starts.rbegin(), n - context - 1);

  // The smallest data that fits: one window only.
  sample_batch(toks.data(), context + 1, 1, context, rng, in.data(), tg.data());
  EXPECT_EQ(in[0], 0);
  EXPECT_EQ(tg[static_cast<size_t>(context - 1)], context);
  expect_error([&] { sample_batch(toks.data(), context, 1, context, rng, in.data(), tg.data()); },
               "sample_batch: the data has 5 tokens; context 5 needs at least 6");
  expect_error([&] { sample_batch(toks.data(), n, 0, context, rng, in.data(), tg.data()); }, "batch is 0");
  expect_error([&] { sample_batch(toks.data(), n, 1, 0, rng, in.data(), tg.data()); }, "context is 0");
}

TEST(Encoding, BytesAndEntropy) {
  EXPECT_EQ(encode_bytes("h\xC3\xA9\n"), (std::vector<uint16_t>{0x68, 0xC3, 0xA9, 0x0A}));
  EXPECT_TRUE(encode_bytes("").empty());
  // "abracadabra": a 5, b 2, r 2, c 1, d 1 of 11.
  const auto s = token_stats(encode_bytes("abracadabra"));
  EXPECT_EQ(s.count, 11);
  EXPECT_EQ(s.distinct, 5);
  EXPECT_EQ(s.max_token, 'r');
  const double h = -(5.0 / 11 * std::log2(5.0 / 11) + 2 * (2.0 / 11) * std::log2(2.0 / 11) +
                     2 * (1.0 / 11) * std::log2(1.0 / 11));
  EXPECT_NEAR(s.entropy_bits, h, 1e-12);
  EXPECT_NEAR(s.entropy_nats, h * std::log(2.0), 1e-12);
  // Every byte once: exactly 8 bits; a single repeated token: 0.
  std::vector<uint16_t> all(256);
  for (int i = 0; i < 256; ++i) all[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  EXPECT_NEAR(unigram_entropy_bits(all), 8.0, 1e-12);
  EXPECT_EQ(unigram_entropy_bits(std::vector<uint16_t>(9, 3)), 0.0);
}

}  // namespace
