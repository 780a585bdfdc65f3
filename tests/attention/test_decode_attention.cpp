// Decode attention over a paged KV cache (flash_attn_with_kvcache) against the fp64 math path run on a
// dense gather of each sequence's keys, on every ISA path; split-KV against one split; the reference
// twin; kvcache_append read back by hand; argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "ridge/attention.hpp"
#include "ridge/core.hpp"
#include "core/check.hpp"
#include "core/dispatch.hpp"

namespace ridge::attention {
namespace {

bool small_tests() {
  const char* s = std::getenv("RIDGE_TEST_SMALL");
  return s && std::string(s) == "1";
}

template <typename T>
double get(T x) {
  if constexpr (std::is_same_v<T, bf16>)
    return to_float(x);
  else
    return static_cast<double>(x);
}

template <typename T>
T make(float x) {
  if constexpr (std::is_same_v<T, bf16>)
    return to_bf16(x);
  else
    return static_cast<T>(x);
}

template <typename T>
T& at(const TensorView<T>& t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return t.data[a * t.stride[0] + b * t.stride[1] + c * t.stride[2] + d * t.stride[3]];
}

// How the pool [num_blocks, block_size, kv_heads, d] lies in memory.
enum class Layout {
  contiguous,  // row-major
  head_major,  // stored [num_blocks, kv_heads, block_size, d + 8]: permuted and padded, rows read in place
  strided_d,   // stored [num_blocks, block_size, kv_heads, 2 d], every other element: rows packed first
};

// A strided 4-D tensor that owns its storage.
template <typename T>
struct Owned {
  std::vector<T> data;
  TensorView<T> view;
};

template <typename T>
Owned<T> pool_tensor(int64_t nb, int64_t bs, int64_t kvh, int64_t d, Layout layout) {
  Owned<T> t;
  t.view.rank = 4;
  t.view.shape = {nb, bs, kvh, d};
  if (layout == Layout::contiguous) {
    t.data.resize(static_cast<size_t>(nb * bs * kvh * d));
    t.view.stride = {bs * kvh * d, kvh * d, d, 1};
  } else if (layout == Layout::head_major) {
    const int64_t dp = d + 8;
    t.data.resize(static_cast<size_t>(nb * kvh * bs * dp));
    t.view.stride = {kvh * bs * dp, dp, bs * dp, 1};
  } else {
    t.data.resize(static_cast<size_t>(nb * bs * kvh * 2 * d));
    t.view.stride = {bs * kvh * 2 * d, kvh * 2 * d, 2 * d, 2};
  }
  t.view.data = t.data.data();
  return t;
}

// q or o [batch, seqlen_q, heads, d]; `transposed` stores it [batch, heads, seqlen_q, d].
template <typename T>
Owned<T> qo_tensor(int64_t b, int64_t s, int64_t h, int64_t d, bool transposed) {
  Owned<T> t;
  t.data.resize(static_cast<size_t>(b * s * h * d));
  t.view.data = t.data.data();
  t.view.rank = 4;
  t.view.shape = {b, s, h, d};
  t.view.stride = transposed ? std::array<int64_t, 4>{h * s * d, d, s * d, 1}
                             : std::array<int64_t, 4>{s * h * d, h * d, d, 1};
  return t;
}

template <typename T>
void fill(std::vector<T>& v, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> dist(0.0f, sigma);
  for (auto& x : v) x = make<T>(dist(rng));
}

struct Spec {
  std::vector<int32_t> lens;
  int64_t seqlen_q = 1, heads = 2, kv_heads = 2, d = 64, block_size = 16;
  bool causal = true;
  Layout layout = Layout::contiguous;
  bool q_transposed = false;
  int spare_blocks = 3;
};

std::string describe(const Spec& s) {
  std::string lens;
  for (auto l : s.lens) lens += std::to_string(l) + ",";
  return fmt::format("lens {} sq{} h{} kvh{} d{} bs{} {} layout {}{}", lens, s.seqlen_q, s.heads, s.kv_heads,
                     s.d, s.block_size, s.causal ? "causal" : "full", static_cast<int>(s.layout),
                     s.q_transposed ? " q transposed" : "");
}

// A batch of sequences in a shared pool: blocks dealt to the sequences in a random order, the pool
// holding more blocks than they use, table entries past a sequence's length set to -1 (never read).
template <typename T>
struct Paged {
  Spec s;
  int64_t batch, num_blocks, max_blocks;
  Owned<T> q, k, v, o;
  std::vector<int32_t> table;
  std::vector<float> lse;
  MatrixView<const int32_t> table_view() const { return {table.data(), batch, max_blocks, max_blocks}; }
  TensorView<float> lse_view() {
    return TensorView<float>::contiguous(lse.data(), {batch, s.heads, s.seqlen_q});
  }
  std::span<const int32_t> seqlens() const { return {s.lens.data(), s.lens.size()}; }

  explicit Paged(const Spec& spec, uint32_t seed = 1)
      : s(spec), batch(static_cast<int64_t>(spec.lens.size())) {
    std::mt19937 rng(seed);
    max_blocks = 1;
    int64_t used = 0;
    for (auto l : s.lens) {
      const int64_t n = (l + s.block_size - 1) / s.block_size;
      max_blocks = std::max(max_blocks, n + 1);
      used += n;
    }
    num_blocks = used + s.spare_blocks;
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    table.assign(static_cast<size_t>(batch * max_blocks), -1);
    size_t next = 0;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t x = 0; x < (s.lens[b] + s.block_size - 1) / s.block_size; ++x)
        table[b * max_blocks + x] = ids[next++];
    q = qo_tensor<T>(batch, s.seqlen_q, s.heads, s.d, s.q_transposed);
    o = qo_tensor<T>(batch, s.seqlen_q, s.heads, s.d, false);
    k = pool_tensor<T>(num_blocks, s.block_size, s.kv_heads, s.d, s.layout);
    v = pool_tensor<T>(num_blocks, s.block_size, s.kv_heads, s.d, s.layout);
    fill(q.data, rng);
    fill(k.data, rng);
    fill(v.data, rng);
    lse.assign(static_cast<size_t>(batch * s.heads * s.seqlen_q), 0.0f);
  }

  void run(const KVCacheOptions& opt) {
    flash_attn_with_kvcache(q.view, k.view, v.view, seqlens(), table_view(), o.view, lse_view(), opt);
  }
  void run_reference(const KVCacheOptions& opt) {
    flash_attn_with_kvcache_reference(q.view, k.view, v.view, seqlens(), table_view(), o.view, lse_view(),
                                      opt);
  }
};

// The independent reference: for each sequence, its keys gathered into a dense [1, kv_heads, len, d]
// tensor and the fp64 math path (attention_reference_forward, causal aligned to the end) run on them.
struct Expected {
  std::vector<double> o;    // [batch, seqlen_q, heads, d]
  std::vector<double> lse;  // [batch, heads, seqlen_q]
};

template <typename T>
Expected expected(Paged<T>& c, float scale = 0.0f) {
  const Spec& s = c.s;
  Expected e;
  e.o.assign(static_cast<size_t>(c.batch * s.seqlen_q * s.heads * s.d), 0.0);
  e.lse.assign(static_cast<size_t>(c.batch * s.heads * s.seqlen_q), -std::numeric_limits<double>::infinity());
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t len = s.lens[b];
    if (len == 0) continue;  // no key: o = 0, lse = -inf
    std::vector<T> kd(static_cast<size_t>(s.kv_heads * len * s.d)), vd(kd.size());
    for (int64_t h = 0; h < s.kv_heads; ++h)
      for (int64_t j = 0; j < len; ++j) {
        const int32_t id = c.table[b * c.max_blocks + j / s.block_size];
        for (int64_t x = 0; x < s.d; ++x) {
          kd[(h * len + j) * s.d + x] = at(c.k.view, id, j % s.block_size, h, x);
          vd[(h * len + j) * s.d + x] = at(c.v.view, id, j % s.block_size, h, x);
        }
      }
    auto kv = TensorView<T>::contiguous(kd.data(), {1, s.kv_heads, len, s.d});
    auto vv = TensorView<T>::contiguous(vd.data(), {1, s.kv_heads, len, s.d});
    TensorView<T> qb = c.q.view;  // sequence b as [1, heads, seqlen_q, d]
    qb.data += b * qb.stride[0];
    qb.shape = {1, s.heads, s.seqlen_q, s.d};
    qb.stride = {qb.stride[0], c.q.view.stride[2], c.q.view.stride[1], c.q.view.stride[3]};
    std::vector<double> ob(static_cast<size_t>(s.heads * s.seqlen_q * s.d)),
        lb(static_cast<size_t>(s.heads * s.seqlen_q));
    attention_reference_forward<T, double>(
        qb, kv, vv, TensorView<double>::contiguous(ob.data(), {1, s.heads, s.seqlen_q, s.d}),
        TensorView<double>::contiguous(lb.data(), {1, s.heads, s.seqlen_q}), Options{s.causal, scale});
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.seqlen_q; ++i) {
        e.lse[(b * s.heads + h) * s.seqlen_q + i] = lb[h * s.seqlen_q + i];
        for (int64_t x = 0; x < s.d; ++x)
          e.o[((b * s.seqlen_q + i) * s.heads + h) * s.d + x] = ob[(h * s.seqlen_q + i) * s.d + x];
      }
  }
  return e;
}

// o against the expected values: fp32 within 1e-5 of the largest |o| (the FlashAttention tests'
// bound); bf16 rounds the fp32 result once, so |o - ref| <= 2^-8 |ref| (half an ulp) plus the fp32
// error (1e-5 of the largest |o|, doubled for the rounding of that error). lse is fp32 either way.
template <typename T>
void expect_close(Paged<T>& c, const Expected& e, const char* what) {
  SCOPED_TRACE(what);
  const Spec& s = c.s;
  double top = 0.0;
  for (double x : e.o) top = std::max(top, std::abs(x));
  const bool is_bf16 = std::is_same_v<T, bf16>;
  int64_t bad = 0;
  double worst = 0.0;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < s.seqlen_q; ++i)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t x = 0; x < s.d; ++x) {
          const double got = get(at(c.o.view, b, i, h, x));
          const double want = e.o[((b * s.seqlen_q + i) * s.heads + h) * s.d + x];
          const double tol = is_bf16 ? std::ldexp(std::abs(want), -8) + 2e-5 * top : 1e-5 * top;
          if (!(std::abs(got - want) <= tol)) {
            if (bad++ < 5)
              ADD_FAILURE() << "o[" << b << "][" << i << "][" << h << "][" << x << "] = " << got
                            << ", expected " << want << " (tolerance " << tol << ")";
          }
          worst = std::max(worst, std::abs(got - want));
        }
  EXPECT_EQ(bad, 0) << "largest error " << worst << " of max |o| " << top;
  for (size_t x = 0; x < e.lse.size(); ++x) {
    if (std::isinf(e.lse[x])) {
      EXPECT_TRUE(std::isinf(c.lse[x]) && c.lse[x] < 0) << "lse " << x << " = " << c.lse[x];
    } else {
      EXPECT_NEAR(c.lse[x], e.lse[x], 1e-5 * std::max(1.0, std::abs(e.lse[x]))) << "lse " << x;
    }
  }
}

std::vector<int32_t> awkward_lengths(int64_t bs) {
  std::vector<int32_t> l = {
      0,  1,   static_cast<int32_t>(bs - 1), static_cast<int32_t>(bs), static_cast<int32_t>(bs + 1), 17,
      31, 127, small_tests() ? 300 : 1000};
  std::sort(l.begin(), l.end());
  l.erase(std::unique(l.begin(), l.end()), l.end());
  std::mt19937 rng(static_cast<uint32_t>(bs));
  std::shuffle(l.begin(), l.end(), rng);  // lengths in no order across the batch
  return l;
}

// Every ISA path the machine runs, and the fp64 twin, against the math path on the gathered keys.
template <typename T>
void check_everywhere(const Spec& s, float scale = 0.0f, int splits = 0) {
  SCOPED_TRACE(describe(s));
  const KVCacheOptions opt{scale, s.causal, splits};
  Paged<T> c(s);
  const Expected e = expected(c, opt.scale);
  c.run_reference(opt);
  expect_close(c, e, "reference twin");
  for (cpu::Isa isa : cpu::supported_isas()) {
    dispatch::ScopedPath scoped({.isa = isa});
    std::fill(c.o.data.begin(), c.o.data.end(), make<T>(99.0f));
    std::fill(c.lse.begin(), c.lse.end(), 99.0f);
    c.run(opt);
    expect_close(c, e, cpu::isa_name(isa));
  }
}

TEST(DecodeAttention, MatchesMathPathOnEveryPathFp32AndBf16) {
  int n = 0;
  for (int64_t bs : {1, 16, 64})
    for (int64_t group : {1, 4, 8})
      for (int64_t d : {32, 64, 80, 128})
        for (int64_t sq : {1, 4}) {
          Spec s;
          s.lens = awkward_lengths(bs);
          s.block_size = bs;
          s.kv_heads = 2;
          s.heads = 2 * group;
          s.d = d;
          s.seqlen_q = sq;
          s.layout = n % 3 == 0 ? Layout::contiguous : n % 3 == 1 ? Layout::head_major : Layout::strided_d;
          s.q_transposed = n % 2 == 1;
          ++n;
          check_everywhere<float>(s);
          check_everywhere<bf16>(s);
        }
}

// seqlen_q > 1 with causal: query i sees j <= i + len - seqlen_q, so with seqlen_q > len the first
// queries see nothing (o = 0, lse = -inf); without causal every query sees every key. 8 heads on one
// kv head with seqlen_q 9 makes 72 rows: more than one pass of 64 rows over the keys.
TEST(DecodeAttention, CausalAndFullWithSeveralQueries) {
  for (bool causal : {true, false})
    for (int64_t sq : {2, 5, 9}) {
      Spec s;
      s.lens = {0, 1, 3, 8, 40, 200};
      s.seqlen_q = sq;
      s.heads = 8;
      s.kv_heads = 1;
      s.d = 32;
      s.block_size = 16;
      s.causal = causal;
      check_everywhere<float>(s);
      check_everywhere<bf16>(s);
    }
}

// Head dimensions that are not a multiple of 16 take the packed path.
TEST(DecodeAttention, HeadDimensionsOffTheVectorWidth) {
  for (int64_t d : {16, 40, 72, 136, 256}) {
    Spec s;
    s.lens = {5, 33, 300};
    s.d = d;
    s.heads = 4;
    s.kv_heads = 1;
    s.seqlen_q = 2;
    check_everywhere<float>(s);
    check_everywhere<bf16>(s);
  }
}

TEST(DecodeAttention, CustomHugeAndTinyScales) {
  Spec s;
  s.lens = {1, 20, 150};
  s.heads = 4;
  s.kv_heads = 2;
  s.d = 32;
  s.seqlen_q = 3;
  for (float scale : {0.37f, 1e9f, 1e30f, 1e-30f}) {
    SCOPED_TRACE(scale);
    check_everywhere<float>(s, scale, 0);
    check_everywhere<bf16>(s, scale, 3);
  }
  // 3e38: q and k shrunk so that lse = scale * the largest score stays below FLT_MAX; scale * log2(e)
  // overflows fp32, so the kernels cap it (as flash_attention_forward does).
  Paged<float> c(s, 5);
  for (auto& x : c.q.data) x /= 64.0f;
  for (auto& x : c.k.data) x /= 64.0f;
  const KVCacheOptions opt{3e38f, true, 2};
  const Expected e = expected(c, opt.scale);
  for (cpu::Isa isa : cpu::supported_isas()) {
    dispatch::ScopedPath scoped({.isa = isa});
    c.run(opt);
    expect_close(c, e, cpu::isa_name(isa));
  }
}

// Splitting the keys changes nothing but rounding: every split count against one split, within 1e-6
// of the largest |o| (fp32) or one bf16 ulp, lse within 1e-6; split counts past the number of keys
// leave empty splits, which the combine must skip.
template <typename T>
void check_splits(const Spec& s) {
  SCOPED_TRACE(describe(s));
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    dispatch::ScopedPath scoped({.isa = isa});
    Paged<T> one(s, 3);
    one.run({0.0f, s.causal, 1});
    double top = 0.0;
    for (const auto& x : one.o.data) top = std::max(top, std::abs(get(x)));
    for (int splits : {0, 2, 3, 7, 16, 64, 256}) {
      SCOPED_TRACE(splits);
      Paged<T> c(s, 3);
      c.run({0.0f, s.causal, splits});
      int64_t bad = 0;
      for (size_t x = 0; x < c.o.data.size(); ++x) {
        const double a = get(c.o.data[x]), b = get(one.o.data[x]);
        const double tol = std::is_same_v<T, bf16> ? std::ldexp(std::abs(b), -7) + 1e-6 * top : 1e-6 * top;
        if (!(std::abs(a - b) <= tol)) ++bad;
      }
      EXPECT_EQ(bad, 0);
      for (size_t x = 0; x < c.lse.size(); ++x) {
        if (std::isinf(one.lse[x]))
          EXPECT_EQ(c.lse[x], one.lse[x]);
        else
          EXPECT_NEAR(c.lse[x], one.lse[x], 1e-6 * std::max(1.0f, std::abs(one.lse[x])));
      }
    }
  }
}

TEST(DecodeAttention, SplitKvEqualsOneSplit) {
  Spec s;
  s.lens = {0, 1, 15, 16, 17, 257, small_tests() ? 700 : 2500};
  s.heads = 8;
  s.kv_heads = 2;
  s.d = 64;
  check_splits<float>(s);
  check_splits<bf16>(s);
  s.seqlen_q = 3;
  s.block_size = 7;
  s.d = 80;
  check_splits<float>(s);
}

// One long sequence on one kv head: the case split-KV exists for (the heuristic splits it).
TEST(DecodeAttention, OneLongSequenceSplitByTheHeuristic) {
  Spec s;
  s.lens = {small_tests() ? 2000 : 8191};
  s.heads = 8;
  s.kv_heads = 1;
  s.d = 128;
  s.block_size = 64;
  EXPECT_GT(kvcache_num_splits(s.lens[0], 1, 2), 1);
  check_everywhere<float>(s);
  check_everywhere<bf16>(s);
}

// At a fixed split count, the thread count does not change a bit (the work items and the combine
// do not depend on it).
TEST(DecodeAttention, ThreadCountDoesNotChangeTheBits) {
  const int threads = get_num_threads();
  Spec s;
  s.lens = {3, 100, 600};
  s.heads = 4;
  s.kv_heads = 2;
  for (int splits : {1, 4}) {
    set_num_threads(1);
    Paged<float> a(s, 9);
    a.run({0.0f, true, splits});
    set_num_threads(2);
    Paged<float> b(s, 9);
    b.run({0.0f, true, splits});
    set_num_threads(3);
    Paged<float> c(s, 9);
    c.run({0.0f, true, splits});
    EXPECT_EQ(a.o.data, b.o.data);
    EXPECT_EQ(a.o.data, c.o.data);
    EXPECT_EQ(a.lse, b.lse);
    EXPECT_EQ(a.lse, c.lse);
  }
  set_num_threads(threads);
}

TEST(DecodeAttention, LseIsOptional) {
  Spec s;
  s.lens = {7, 70};
  Paged<float> a(s), b(s);
  a.run({});
  flash_attn_with_kvcache(b.q.view, b.k.view, b.v.view, b.seqlens(), b.table_view(), b.o.view);
  EXPECT_EQ(a.o.data, b.o.data);
}

// The heuristic as documented: ~4 items per thread, splits of >= 256 keys, at most 64, none when the
// (sequence, kv head) pairs alone are that many.
TEST(DecodeAttention, SplitHeuristic) {
  EXPECT_EQ(kvcache_num_splits(4096, 1, 2), 8);  // 8 items for 2 threads
  EXPECT_EQ(kvcache_num_splits(4096, 3, 2), 3);  // ceil(8 / 3)
  EXPECT_EQ(kvcache_num_splits(1000, 1, 2), 3);  // 1000 keys hold three splits of >= 256
  EXPECT_EQ(kvcache_num_splits(255, 1, 16), 1);  // too short to split
  EXPECT_EQ(kvcache_num_splits(1 << 20, 1, 64), 64);
  EXPECT_EQ(kvcache_num_splits(1 << 20, 8, 2), 1);  // 8 pairs >= 4 x 2 threads
  EXPECT_EQ(kvcache_num_splits(0, 1, 2), 1);
}

// Extra memory is a per-thread workspace and the partials of the splits, never a function of the
// context length: the allocator's high-water mark above what was live, at 512 and 4096 keys. One
// thread: with more, the peak depends on whether one thread frees its workspace before another
// allocates its own.
TEST(DecodeAttention, ExtraMemoryDoesNotGrowWithTheContext) {
  const int threads = get_num_threads();
  set_num_threads(1);
  auto extra = [](int32_t len, int splits) {
    Spec s;
    s.lens = {len};
    s.heads = 8;
    s.kv_heads = 2;
    Paged<float> c(s);
    c.run({0.0f, true, splits});
    memory::reset_peak();
    const int64_t base = memory::current_bytes();
    c.run({0.0f, true, splits});
    return memory::peak_bytes() - base;
  };
  for (int splits : {1, 8}) {
    SCOPED_TRACE(splits);
    const int64_t small = extra(512, splits), large = extra(4096, splits);
    EXPECT_GT(small, 0);
    EXPECT_EQ(small, large);
  }
  set_num_threads(threads);
}

// ---- kvcache_append ----

template <typename T>
void check_append(const Spec& s, int64_t n_new, bool strided_new) {
  SCOPED_TRACE(describe(s) + fmt::format(" new {}", n_new));
  Spec full = s;  // the table sized for the lengths after the append
  for (auto& l : full.lens) l += static_cast<int32_t>(n_new);
  Paged<T> c(full, 4);
  std::mt19937 rng(8);
  const int64_t batch = c.batch;
  // k_new, v_new [batch, n_new, kv_heads, d]; strided: slices of one packed [batch, n_new, 2, kv_heads, d].
  std::vector<T> store(static_cast<size_t>(batch * n_new * 2 * s.kv_heads * s.d));
  fill(store, rng);
  TensorView<T> kn, vn;
  kn.rank = vn.rank = 4;
  kn.shape = vn.shape = {batch, n_new, s.kv_heads, s.d};
  if (strided_new) {
    kn.stride = vn.stride = {n_new * 2 * s.kv_heads * s.d, 2 * s.kv_heads * s.d, s.d, 1};
    kn.data = store.data();
    vn.data = store.data() + s.kv_heads * s.d;
  } else {
    kn.stride = vn.stride = {n_new * s.kv_heads * s.d, s.kv_heads * s.d, s.d, 1};
    kn.data = store.data();
    vn.data = store.data() + batch * n_new * s.kv_heads * s.d;
  }
  const std::vector<T> k_before = c.k.data, v_before = c.v.data;
  kvcache_append(kn, vn, c.k.view, c.v.view, std::span<const int32_t>(s.lens.data(), s.lens.size()),
                 c.table_view());
  // By hand: every new key where the block table says, every other element of the pools untouched.
  std::vector<T> k_want = k_before, v_want = v_before;
  const auto index = [&](const TensorView<T>& t, int64_t blk, int64_t row, int64_t h, int64_t x) {
    return static_cast<size_t>(blk * t.stride[0] + row * t.stride[1] + h * t.stride[2] + x * t.stride[3]);
  };
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < n_new; ++t) {
      const int64_t pos = s.lens[b] + t;
      const int32_t blk = c.table[b * c.max_blocks + pos / s.block_size];
      ASSERT_GE(blk, 0);
      for (int64_t h = 0; h < s.kv_heads; ++h)
        for (int64_t x = 0; x < s.d; ++x) {
          const size_t i = index(c.k.view, blk, pos % s.block_size, h, x);
          k_want[i] = at(kn, b, t, h, x);
          v_want[i] = at(vn, b, t, h, x);
          EXPECT_EQ(get(c.k.data[i]), get(at(kn, b, t, h, x)));
          EXPECT_EQ(get(c.v.data[i]), get(at(vn, b, t, h, x)));
        }
    }
  for (size_t i = 0; i < k_want.size(); ++i) {
    ASSERT_EQ(std::memcmp(&c.k.data[i], &k_want[i], sizeof(T)), 0) << "k_cache element " << i << " changed";
    ASSERT_EQ(std::memcmp(&c.v.data[i], &v_want[i], sizeof(T)), 0) << "v_cache element " << i << " changed";
  }
  // Attention over the grown cache is attention over the gathered keys, new ones included.
  Expected e = expected(c);
  c.run({});
  expect_close(c, e, "after append");
}

TEST(DecodeAttention, AppendWritesWhereTheBlockTableSays) {
  for (int64_t bs : {1, 16, 5}) {
    Spec s;
    s.lens = {0, 1, 4, 15, 16, 40};
    s.block_size = bs;
    s.heads = 4;
    s.kv_heads = 2;
    s.d = 32;
    for (int64_t n : {1, 3, 17}) {
      s.seqlen_q = n;
      s.layout = bs == 5 ? Layout::head_major : Layout::contiguous;
      check_append<float>(s, n, n == 3);
      check_append<bf16>(s, n, n != 3);
    }
  }
  Spec s;
  s.lens = {3, 9};
  s.layout = Layout::strided_d;
  check_append<float>(s, 2, false);
}

// ---- argument errors ----

template <typename Fn>
void expect_error(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(DecodeAttention, BadArgumentsAreErrorsNamingThem) {
  Spec s;
  s.lens = {5, 20};
  s.heads = 4;
  s.kv_heads = 2;
  s.d = 32;
  s.block_size = 8;
  Paged<float> c(s);
  auto run = [&](auto q, auto k, auto v, std::span<const int32_t> lens, MatrixView<const int32_t> table,
                 auto o, TensorView<float> lse,
                 KVCacheOptions opt) { flash_attn_with_kvcache(q, k, v, lens, table, o, lse, opt); };
  const auto q = c.q.view, k = c.k.view, v = c.v.view, o = c.o.view;
  const auto lens = c.seqlens();
  const auto table = c.table_view();
  const auto lse = c.lse_view();
  const KVCacheOptions opt;
  const std::string fn = "flash_attn_with_kvcache: ";

  auto rank3 = q;
  rank3.rank = 3;
  expect_error([&] { run(rank3, k, v, lens, table, o, lse, opt); }, fn + "q must be rank 4");
  auto small_d = q, small_kd = k, small_vd = v, small_od = o;
  small_d.shape[3] = small_kd.shape[3] = small_vd.shape[3] = small_od.shape[3] = 8;
  expect_error([&] { run(small_d, small_kd, small_vd, lens, table, small_od, lse, opt); },
               fn + "head dimension d must be in 16..256, got 8");
  auto heads3 = k;
  heads3.shape[2] = 3;
  auto heads3v = v;
  heads3v.shape[2] = 3;
  expect_error([&] { run(q, heads3, heads3v, lens, table, o, lse, opt); },
               fn + "heads (4) must be a multiple of kv_heads (3)");
  auto kd = k;
  kd.shape[3] = 16;
  expect_error([&] { run(q, kd, v, lens, table, o, lse, opt); }, fn + "k_cache is [");
  auto vb = v;
  vb.shape[1] = 7;
  expect_error([&] { run(q, k, vb, lens, table, o, lse, opt); }, fn + "v_cache is [");
  auto null_v = v;
  null_v.data = nullptr;
  expect_error([&] { run(q, k, null_v, lens, table, o, lse, opt); }, fn + "v_cache is null");
  auto bcast = k;
  bcast.stride[1] = 0;
  expect_error([&] { run(q, bcast, v, lens, table, o, lse, opt); }, fn + "k_cache.stride[1] = 0");
  const std::vector<int32_t> one = {5};
  expect_error([&] { run(q, k, v, one, table, o, lse, opt); },
               fn + "cache_seqlens has 1 entries, expected batch = 2");
  const std::vector<int32_t> negative = {5, -1};
  expect_error([&] { run(q, k, v, negative, table, o, lse, opt); }, fn + "cache_seqlens[1] = -1 is negative");
  const std::vector<int32_t> too_long = {5, static_cast<int32_t>(c.max_blocks * 8 + 1)};
  expect_error(
      [&] { run(q, k, v, too_long, table, o, lse, opt); },
      fn + fmt::format("cache_seqlens[1] = {} passes the block table's capacity", c.max_blocks * 8 + 1));
  std::vector<int32_t> past_pool = c.table, negative_id = c.table;
  past_pool[c.max_blocks + 2] = static_cast<int32_t>(c.num_blocks);
  negative_id[0] = -3;
  expect_error(
      [&] {
        run(q, k, v, lens, {past_pool.data(), 2, c.max_blocks, c.max_blocks}, o, lse, opt);
      },
      fn + fmt::format("block_table[1][2] = {} is not a block of the cache", c.num_blocks));
  expect_error(
      [&] {
        run(q, k, v, lens, {negative_id.data(), 2, c.max_blocks, c.max_blocks}, o, lse, opt);
      },
      fn + "block_table[0][0] = -3");
  expect_error(
      [&] {
        run(q, k, v, lens, MatrixView<const int32_t>{c.table.data(), 1, c.max_blocks, c.max_blocks}, o, lse,
            opt);
      },
      fn + "block_table is [1, ");
  expect_error(
      [&] {
        run(q, k, v, lens, MatrixView<const int32_t>{nullptr, 2, c.max_blocks, c.max_blocks}, o, lse, opt);
      },
      fn + "block_table is null");
  expect_error(
      [&] {
        run(q, k, v, lens, MatrixView<const int32_t>{c.table.data(), 2, 0, 0}, o, lse, opt);
      },
      fn + "block_table has 0 columns");
  auto ob = o;
  ob.shape[1] = 2;
  expect_error([&] { run(q, k, v, lens, table, ob, lse, opt); },
               fn + "o is [2, 2, 4, 32], expected [2, 1, 4, 32]");
  auto lb = lse;
  lb.shape[1] = 2;
  expect_error([&] { run(q, k, v, lens, table, o, lb, opt); }, fn + "lse is [2, 2, 1], expected [2, 4, 1]");
  auto overlapping = o;
  overlapping.stride[2] = 8;  // heads 8 elements apart, 32 wide
  expect_error([&] { run(q, k, v, lens, table, overlapping, lse, opt); }, fn + "o has strides");
  for (float bad : {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
    expect_error(
        [&] {
          run(q, k, v, lens, table, o, lse, {bad, true, 0});
        },
        fn + "scale must be finite and > 0");
  for (int bad : {-1, 257})
    expect_error(
        [&] {
          run(q, k, v, lens, table, o, lse, {0.0f, true, bad});
        },
        fn + "num_splits must be in 0..256");
  expect_error([&] { run(q, k, v, lens, table, q, lse, opt); }, fn + "output o overlaps input q in memory");
  auto o_in_k = o;
  o_in_k.data = c.k.data.data() + 3;
  expect_error([&] { run(q, k, v, lens, table, o_in_k, lse, opt); }, fn + "output o overlaps input k_cache");
  auto lse_in_o = TensorView<float>::contiguous(c.o.data.data(), {2, 4, 1});
  expect_error([&] { run(q, k, v, lens, table, o, lse_in_o, opt); },
               fn + "outputs o and lse overlap in memory");
  auto lse_in_table = TensorView<float>::contiguous(reinterpret_cast<float*>(c.table.data()), {2, 4, 1});
  expect_error([&] { run(q, k, v, lens, table, o, lse_in_table, opt); },
               fn + "output lse overlaps input block_table");
  // The reference twin checks the same way.
  expect_error([&] { flash_attn_with_kvcache_reference(q, k, v, negative, table, o, lse, opt); },
               fn + "cache_seqlens[1] = -1 is negative");
}

TEST(DecodeAttention, BadAppendIsAnErrorAndWritesNothing) {
  Spec s;
  s.lens = {5, 20};
  s.kv_heads = 2;
  s.d = 32;
  s.block_size = 8;
  Paged<float> c(s);
  std::vector<float> kn_store(2 * 2 * 2 * 32, 1.0f), vn_store(kn_store.size(), 2.0f);
  auto kn = TensorView<float>::contiguous(kn_store.data(), {2, 2, 2, 32});
  auto vn = TensorView<float>::contiguous(vn_store.data(), {2, 2, 2, 32});
  const auto k_before = c.k.data, v_before = c.v.data;
  const std::string fn = "kvcache_append: ";
  auto append = [&](const TensorView<float>& k_new, const TensorView<float>& v_new,
                    const TensorView<float>& kc, const TensorView<float>& vc, std::span<const int32_t> lens,
                    MatrixView<const int32_t> table) { kvcache_append(k_new, v_new, kc, vc, lens, table); };
  // Sequence 1 holds 20 keys in a table of max_blocks blocks of 8: 2 more fit only when 22 <= capacity.
  const std::vector<int32_t> full = {5, static_cast<int32_t>(c.max_blocks * 8 - 1)};
  expect_error([&] { append(kn, vn, c.k.view, c.v.view, full, c.table_view()); },
               fn + fmt::format("cache_seqlens[1] = {} plus 2 new keys passes", c.max_blocks * 8 - 1));
  // Sequence 1's table lists 3 blocks (its 20 keys): appending at 23 and 24 needs a 4th, and entry 3 is -1.
  const std::vector<int32_t> past_table = {5, 23};
  expect_error([&] { append(kn, vn, c.k.view, c.v.view, past_table, c.table_view()); },
               fn + "block_table[1][3] = -1 is not a block of the cache");
  std::vector<int32_t> shared = c.table;
  shared[c.max_blocks + 2] = shared[0];       // sequence 1's next block is sequence 0's first
  const std::vector<int32_t> lens = {0, 16};  // both write rows 0 and 1 of that block
  expect_error(
      [&] {
        append(kn, vn, c.k.view, c.v.view, lens, {shared.data(), 2, c.max_blocks, c.max_blocks});
      },
      fn + "block_table: sequences 0 and 1 would both write row 0 of cache block");
  auto bad_v = vn;
  bad_v.shape[3] = 16;
  expect_error([&] { append(kn, bad_v, c.k.view, c.v.view, lens, c.table_view()); },
               fn + "v_new is [2, 2, 2, 16]");
  auto bad_k = kn;
  bad_k.shape[2] = 1;
  expect_error([&] { append(bad_k, vn, c.k.view, c.v.view, lens, c.table_view()); },
               fn + "k_new is [2, 2, 1, 32]");
  expect_error([&] { append(kn, vn, c.k.view, c.k.view, lens, c.table_view()); },
               fn + "outputs k_cache and v_cache overlap in memory");
  auto kn_in_cache = kn;
  kn_in_cache.data = c.v.data.data();
  expect_error([&] { append(kn_in_cache, vn, c.k.view, c.v.view, lens, c.table_view()); },
               fn + "output v_cache overlaps input k_new");
  auto overlapping = c.k.view;
  overlapping.stride[0] = 1;
  expect_error([&] { append(kn, vn, overlapping, c.v.view, lens, c.table_view()); },
               fn + "k_cache has strides");
  EXPECT_EQ(c.k.data, k_before);
  EXPECT_EQ(c.v.data, v_before);
}

}  // namespace
}  // namespace ridge::attention
