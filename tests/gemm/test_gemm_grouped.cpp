// Grouped GEMMs with fp32 and bf16 inputs (ridge/gemm_grouped.hpp): M-grouped contiguous (nt, nn) and
// masked, K-grouped tn. Every path the machine runs against an fp64 product per group (the bound of
// test_gemm_layouts.cpp), with empty groups, a group holding every row, padding rows (never written;
// for the K-grouped GEMM never read: they hold NaN), masked_m 0 and m_max, odd n and k, bf16 outputs,
// strides, C and C = D; bitwise the same at 1, 2 and 3 threads and the same as a loop of the dense
// GEMMs, one call per group (the FP8 grouped GEMMs too); every argument check with its message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ridge/core.hpp"
#include "ridge/gemm.hpp"
#include "core/dispatch.hpp"
#include "common/expect_error.hpp"

namespace {

namespace gemm = ridge::gemm;
namespace dispatch = ridge::dispatch;
using Layout = gemm::Layout;
using ridge::bf16;
using ridge::MatrixView;
using ridge::TensorView;

// RIDGE_TEST_SMALL=1 (the QEMU tier runs): fewer and smaller shapes.
bool small() {
  static const bool on = [] {
    const char* s = std::getenv("RIDGE_TEST_SMALL");
    return s != nullptr && std::string(s) == "1";
  }();
  return on;
}

double as_double(float x) {
  return x;
}
double as_double(bf16 x) {
  return ridge::to_float(x);
}

template <typename T>
T from_float(float x) {
  if constexpr (std::is_same_v<T, bf16>)
    return ridge::to_bf16(x);
  else
    return x;
}

template <typename T>
std::vector<T> random_values(int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<T> v(static_cast<size_t>(std::max<int64_t>(count, 1)));
  for (auto& x : v) x = from_float<T>(u(rng));
  return v;
}

template <typename T>
bool same_bits(const std::vector<T>& x, const std::vector<T>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

// The contiguous layout of counts[g] rows per group, each group padded with -1 to the alignment.
std::vector<int32_t> layout_of(const std::vector<int64_t>& counts) {
  const int64_t align = gemm::m_alignment_for_contiguous_layout();
  std::vector<int32_t> idx;
  for (size_t g = 0; g < counts.size(); ++g) {
    const int64_t padded = (counts[g] + align - 1) / align * align;
    for (int64_t r = 0; r < padded; ++r) idx.push_back(r < counts[g] ? static_cast<int32_t>(g) : -1);
  }
  return idx;
}

// fp32 accumulation over k terms (+ C) is within (k + 2) 2^-24 sum|a b|; a bf16 output adds one rounding.
double tolerance(int64_t k, double mag, double ref, bool bf16_out) {
  double t = (k + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
  if (bf16_out) t += std::ldexp(1.0, -8) * std::fabs(ref) * 1.0001;
  return t;
}

// Accumulates the failures of one check, reporting the first few.
struct Mismatches {
  std::string what;
  int bad = 0;
  void close(double got, double ref, double mag, int64_t k, bool bf16_out, const std::string& where) {
    const double tol = tolerance(k, mag, ref, bf16_out);
    if (!(std::fabs(got - ref) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << " " << where << " = " << got << ", fp64 " << ref << ", tol " << tol;
  }
  void equal(double got, double want, const std::string& where) {
    if (!(got == want) && bad++ < 5)
      ADD_FAILURE() << what << " " << where << " = " << got << ", kept " << want;
  }
  ~Mismatches() { EXPECT_EQ(bad, 0) << what; }
};

constexpr float kSentinel = 7.0f;

// ---- the entry points, by input and output type ----

template <typename T, typename TD>
void m_contiguous(Layout l, MatrixView<const T> a, TensorView<const T> b, MatrixView<TD> d,
                  std::span<const int32_t> idx) {
  if constexpr (std::is_same_v<T, float>) {
    if (l == Layout::nn)
      gemm::m_grouped_f32_gemm_nn_contiguous(a, b, d, idx);
    else
      gemm::m_grouped_f32_gemm_nt_contiguous(a, b, d, idx);
  } else {
    if (l == Layout::nn)
      gemm::m_grouped_bf16_gemm_nn_contiguous(a, b, d, idx);
    else
      gemm::m_grouped_bf16_gemm_nt_contiguous(a, b, d, idx);
  }
}

template <typename T, typename TD>
void m_masked(TensorView<const T> a, TensorView<const T> b, TensorView<TD> d, std::span<const int32_t> masked,
              int64_t expected_m) {
  if constexpr (std::is_same_v<T, float>)
    gemm::m_grouped_f32_gemm_nt_masked(a, b, d, masked, expected_m);
  else
    gemm::m_grouped_bf16_gemm_nt_masked(a, b, d, masked, expected_m);
}

template <typename T>
void k_contiguous(MatrixView<const T> a, MatrixView<const T> b, TensorView<float> d,
                  std::span<const int32_t> idx, TensorView<const float> c = {}) {
  if constexpr (std::is_same_v<T, float>)
    gemm::k_grouped_f32_gemm_tn_contiguous(a, b, d, idx, c);
  else
    gemm::k_grouped_bf16_gemm_tn_contiguous(a, b, d, idx, c);
}

template <typename T, typename TD>
void dense(Layout l, MatrixView<const T> a, MatrixView<const T> b, MatrixView<TD> d,
           MatrixView<const TD> c = {}) {
  if constexpr (std::is_same_v<T, float>)
    gemm::f32_gemm(l, a, b, d, c);
  else
    gemm::bf16_gemm(l, a, b, d, c);
}

// ---- M-grouped, contiguous ----

// counts[g] rows per group, n columns, depth k; A and D strided (ld past their columns).
template <typename T>
struct MContiguous {
  Layout layout;
  int64_t groups, n, k, m_sum, lda, ldd;
  std::vector<int32_t> idx;
  std::vector<T> a, b;
  MContiguous(Layout l, const std::vector<int64_t>& counts, int64_t n_, int64_t k_, std::mt19937& rng)
      : layout(l), groups(static_cast<int64_t>(counts.size())), n(n_), k(k_), idx(layout_of(counts)) {
    m_sum = static_cast<int64_t>(idx.size());
    lda = k + 3;
    ldd = n + 2;
    a = random_values<T>(m_sum * lda, rng);
    b = random_values<T>(groups * n * k, rng);
  }
  MatrixView<const T> av() const { return {a.data(), m_sum, k, lda}; }
  TensorView<const T> bv() const {
    return TensorView<const T>::contiguous(
        b.data(), {groups, layout == Layout::nn ? k : n, layout == Layout::nn ? n : k});
  }
  double bval(int64_t g, int64_t j, int64_t p) const {
    return as_double(layout == Layout::nn ? b[(g * k + p) * n + j] : b[(g * n + j) * k + p]);
  }
  template <typename TD>
  std::vector<TD> run() const {
    std::vector<TD> d(static_cast<size_t>(m_sum * ldd), from_float<TD>(kSentinel));
    m_contiguous<T, TD>(layout, av(), bv(), MatrixView<TD>{d.data(), m_sum, n, ldd}, idx);
    return d;
  }
  // A loop of the dense GEMM, one call per run of a group's rows.
  template <typename TD>
  std::vector<TD> run_dense() const {
    std::vector<TD> d(static_cast<size_t>(m_sum * ldd), from_float<TD>(kSentinel));
    for (int64_t r = 0; r < m_sum;) {
      int64_t e = r + 1;
      while (e < m_sum && idx[e] == idx[r]) ++e;
      if (idx[r] >= 0) {
        const int64_t g = idx[r], brows = layout == Layout::nn ? k : n, bcols = layout == Layout::nn ? n : k;
        dense<T, TD>(layout, MatrixView<const T>{a.data() + r * lda, e - r, k, lda},
                     MatrixView<const T>{b.data() + g * n * k, brows, bcols, bcols},
                     MatrixView<TD>{d.data() + r * ldd, e - r, n, ldd});
      }
      r = e;
    }
    return d;
  }
  template <typename TD>
  void check(const std::vector<TD>& d, const std::string& what) const {
    Mismatches mm{what};
    for (int64_t r = 0; r < m_sum; ++r) {
      const int32_t g = idx[r];
      for (int64_t j = 0; j < ldd; ++j) {
        const double got = as_double(d[r * ldd + j]);
        const std::string where = "d(" + std::to_string(r) + "," + std::to_string(j) + ")";
        if (g < 0 || j >= n) {
          mm.equal(got, as_double(from_float<TD>(kSentinel)), where + (g < 0 ? " padding row" : " past n"));
          continue;
        }
        double acc = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = as_double(a[r * lda + p]) * bval(g, j, p);
          acc += x;
          mag += std::fabs(x);
        }
        mm.close(got, acc, mag, k, std::is_same_v<TD, bf16>, where);
      }
    }
  }
};

std::vector<std::vector<int64_t>> m_counts() {
  // Empty groups, single rows (the small-m path), a group past one aligned block, one group with every
  // row, and 17..64 rows (the small-m path's row blocks) with one past them.
  std::vector<std::vector<int64_t>> c = {{70, 0, 1, 5, 129}, {0, 150, 0}, {17, 33, 65, 32}};
  if (!small()) {
    c.push_back({16, 17, 200, 3, 64, 0, 64});
    c.push_back({31, 48, 64, 24});
  }
  return c;
}

template <typename T, typename TD>
void sweep_m_contiguous(uint32_t seed) {
  std::mt19937 rng(seed);
  for (const Layout l : {Layout::nt, Layout::nn})
    for (const auto& counts : m_counts()) {
      const MContiguous<T> o(l, counts, 37, small() ? 45 : 129, rng);
      for (const dispatch::Path& path : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
        dispatch::ScopedPath scope(path);
        o.check(o.template run<TD>(), std::string(gemm::layout_name(l)) + " " + dispatch::name(path) +
                                          " groups " + std::to_string(o.groups));
      }
    }
}

// fp32 and bf16 inputs, each with an fp32 and a bf16 output.
TEST(GemmGrouped, MContiguousAllPathsMatchFp64) {
  sweep_m_contiguous<float, float>(1);
  sweep_m_contiguous<float, bf16>(2);
  sweep_m_contiguous<bf16, float>(3);
  sweep_m_contiguous<bf16, bf16>(4);
}

// ---- M-grouped, masked ----

template <typename T>
struct MMasked {
  int64_t groups, m_max, n, k;
  std::vector<int32_t> masked;
  std::vector<T> a, b;
  MMasked(std::vector<int32_t> masked_m, int64_t m_max_, int64_t n_, int64_t k_, std::mt19937& rng)
      : groups(static_cast<int64_t>(masked_m.size())),
        m_max(m_max_),
        n(n_),
        k(k_),
        masked(std::move(masked_m)) {
    a = random_values<T>(groups * m_max * k, rng);
    b = random_values<T>(groups * n * k, rng);
  }
  TensorView<const T> av() const { return TensorView<const T>::contiguous(a.data(), {groups, m_max, k}); }
  TensorView<const T> bv() const { return TensorView<const T>::contiguous(b.data(), {groups, n, k}); }
  template <typename TD>
  std::vector<TD> run() const {
    std::vector<TD> d(static_cast<size_t>(groups * m_max * n), from_float<TD>(kSentinel));
    m_masked<T, TD>(av(), bv(), TensorView<TD>::contiguous(d.data(), {groups, m_max, n}), masked, m_max / 2);
    return d;
  }
  template <typename TD>
  std::vector<TD> run_dense() const {
    std::vector<TD> d(static_cast<size_t>(groups * m_max * n), from_float<TD>(kSentinel));
    for (int64_t g = 0; g < groups; ++g)
      if (masked[g] > 0)
        dense<T, TD>(Layout::nt, MatrixView<const T>{a.data() + g * m_max * k, masked[g], k, k},
                     MatrixView<const T>{b.data() + g * n * k, n, k, k},
                     MatrixView<TD>{d.data() + g * m_max * n, masked[g], n, n});
    return d;
  }
  template <typename TD>
  void check(const std::vector<TD>& d, const std::string& what) const {
    Mismatches mm{what};
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t i = 0; i < m_max; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const double got = as_double(d[(g * m_max + i) * n + j]);
          const std::string where =
              "d(" + std::to_string(g) + "," + std::to_string(i) + "," + std::to_string(j) + ")";
          if (i >= masked[g]) {
            mm.equal(got, as_double(from_float<TD>(kSentinel)), where + " past masked_m");
            continue;
          }
          double acc = 0, mag = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double x = as_double(a[(g * m_max + i) * k + p]) * as_double(b[(g * n + j) * k + p]);
            acc += x;
            mag += std::fabs(x);
          }
          mm.close(got, acc, mag, k, std::is_same_v<TD, bf16>, where);
        }
  }
};

template <typename T, typename TD>
void sweep_m_masked(uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t m_max = small() ? 40 : 65;
  // 0 rows, m_max rows, small-m counts (1..64 rows) and one past them.
  const MMasked<T> o({0, static_cast<int32_t>(m_max), 1, 7, 16, 17, 33}, m_max, 53, small() ? 67 : 131, rng);
  for (const dispatch::Path& path : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
    dispatch::ScopedPath scope(path);
    o.check(o.template run<TD>(), std::string("masked ") + dispatch::name(path));
  }
}

TEST(GemmGrouped, MMaskedAllPathsMatchFp64) {
  sweep_m_masked<float, float>(5);
  sweep_m_masked<float, bf16>(6);
  sweep_m_masked<bf16, float>(7);
  sweep_m_masked<bf16, bf16>(8);
}

// ---- K-grouped, contiguous ----

enum class WithC { none, apart, in_place };

// counts[g] rows of K per group; A [k_sum, m] and B [k_sum, n] strided, their padding rows NaN.
template <typename T>
struct KContiguous {
  int64_t groups, m, n, k_sum, lda, ldb;
  std::vector<int64_t> counts;
  std::vector<int32_t> idx;
  std::vector<T> a, b;
  std::vector<float> c;
  KContiguous(const std::vector<int64_t>& counts_, int64_t m_, int64_t n_, std::mt19937& rng)
      : groups(static_cast<int64_t>(counts_.size())), m(m_), n(n_), counts(counts_), idx(layout_of(counts_)) {
    k_sum = static_cast<int64_t>(idx.size());
    lda = m + 1;
    ldb = n + 5;
    a = random_values<T>(k_sum * lda, rng);
    b = random_values<T>(k_sum * ldb, rng);
    const T nan = from_float<T>(std::numeric_limits<float>::quiet_NaN());
    for (int64_t r = 0; r < k_sum; ++r)
      if (idx[r] < 0) {
        std::fill(a.begin() + r * lda, a.begin() + (r + 1) * lda, nan);
        std::fill(b.begin() + r * ldb, b.begin() + (r + 1) * ldb, nan);
      }
    c = random_values<float>(groups * m * n, rng);
  }
  MatrixView<const T> av() const { return {a.data(), k_sum, m, lda}; }
  MatrixView<const T> bv() const { return {b.data(), k_sum, n, ldb}; }
  std::vector<float> start(WithC with) const {
    return with == WithC::in_place ? c : std::vector<float>(static_cast<size_t>(groups * m * n), kSentinel);
  }
  std::vector<float> run(WithC with) const {
    std::vector<float> d = start(with);
    const auto dv = TensorView<float>::contiguous(d.data(), {groups, m, n});
    const float* cp = with == WithC::apart ? c.data() : with == WithC::in_place ? d.data() : nullptr;
    k_contiguous<T>(av(), bv(), dv, idx,
                    cp ? TensorView<const float>::contiguous(cp, {groups, m, n}) : TensorView<const float>{});
    return d;
  }
  // A loop of the dense tn GEMM, one call per group (k = 0 for a group without rows).
  std::vector<float> run_dense(WithC with) const {
    std::vector<float> d = start(with);
    int64_t r = 0;
    for (int64_t g = 0; g < groups; ++g) {
      float* dg = d.data() + g * m * n;
      const float* cg = with == WithC::apart ? c.data() + g * m * n : with == WithC::in_place ? dg : nullptr;
      dense<T, float>(Layout::tn, MatrixView<const T>{a.data() + r * lda, counts[g], m, lda},
                      MatrixView<const T>{b.data() + r * ldb, counts[g], n, ldb},
                      MatrixView<float>{dg, m, n, n},
                      cg ? MatrixView<const float>{cg, m, n, n} : MatrixView<const float>{});
      const int64_t align = gemm::m_alignment_for_contiguous_layout();
      r += (counts[g] + align - 1) / align * align;
    }
    return d;
  }
  void check(const std::vector<float>& d, WithC with, const std::string& what) const {
    Mismatches mm{what};
    int64_t r0 = 0;
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const size_t at = static_cast<size_t>((g * m + i) * n + j);
          double acc = with == WithC::none ? 0.0 : c[at], mag = std::fabs(acc);
          for (int64_t r = r0; r < r0 + counts[g]; ++r) {
            const double x = as_double(a[r * lda + i]) * as_double(b[r * ldb + j]);
            acc += x;
            mag += std::fabs(x);
          }
          const std::string where =
              "d(" + std::to_string(g) + "," + std::to_string(i) + "," + std::to_string(j) + ")";
          if (counts[g] == 0)
            mm.equal(d[at], acc, where + " of an empty group");  // exactly C, or 0
          else
            mm.close(d[at], acc, mag, counts[g], false, where);
        }
      const int64_t align = gemm::m_alignment_for_contiguous_layout();
      r0 += (counts[g] + align - 1) / align * align;
    }
  }
};

std::vector<std::vector<int64_t>> k_counts() {
  std::vector<std::vector<int64_t>> c = {{70, 0, 1, 5, 129}, {0, 130, 0}};
  if (!small()) c.push_back({16, 17, 300, 3, 64, 0, 64});
  return c;
}

template <typename T>
void sweep_k_contiguous(uint32_t seed) {
  std::mt19937 rng(seed);
  for (const auto& counts : k_counts()) {
    const KContiguous<T> o(counts, 37, small() ? 29 : 67, rng);
    for (const dispatch::Path& path : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
      dispatch::ScopedPath scope(path);
      for (const WithC with : {WithC::none, WithC::apart, WithC::in_place})
        o.check(o.run(with), with,
                std::string("k-grouped ") + dispatch::name(path) + " groups " + std::to_string(o.groups) +
                    (with == WithC::none    ? ""
                     : with == WithC::apart ? " +C"
                                            : " C=D"));
    }
  }
}

// The output is fp32 (dW), the inputs fp32 or bf16.
TEST(GemmGrouped, KContiguousAllPathsMatchFp64) {
  sweep_k_contiguous<float>(9);
  sweep_k_contiguous<bf16>(10);
}

// ---- bits: any thread count, and a loop of the dense GEMMs ----

// Runs `fn` at 1, 2 and 3 threads and expects the same bits each time, and the bits of `loop`.
template <typename V>
void expect_same_bits(const std::function<V()>& fn, const std::function<V()>& loop, const std::string& what) {
  const int saved = gemm::get_num_threads();
  gemm::set_num_threads(1);
  const V one = fn();
  for (int t : {2, 3}) {
    gemm::set_num_threads(t);
    EXPECT_TRUE(same_bits(fn(), one)) << what << ": " << t << " threads against 1";
  }
  gemm::set_num_threads(saved);
  EXPECT_TRUE(same_bits(loop(), one)) << what << ": against a loop of the dense GEMM, one call per group";
}

// Every form with one pair of input and output types: bits at 1, 2 and 3 threads against a dense loop,
// and the result against fp64.
template <typename T, typename TD>
void bits_of_every_form(std::mt19937& rng, const std::string& path) {
  const std::string types = std::string(std::is_same_v<T, bf16> ? "bf16" : "f32") + "->" +
                            (std::is_same_v<TD, bf16> ? "bf16 " : "f32 ") + path;
  for (const Layout l : {Layout::nt, Layout::nn}) {
    const MContiguous<T> o(l, {40, 0, 3, 150, 16, 1}, 300, 77, rng);
    const std::string what = std::string("contiguous ") + gemm::layout_name(l) + " " + types;
    expect_same_bits<std::vector<TD>>([&] { return o.template run<TD>(); },
                                      [&] { return o.template run_dense<TD>(); }, what);
    o.check(o.template run<TD>(), what);
  }
  const MMasked<T> mo({5, 0, 16, 33, 1, 12}, 33, 300, 77, rng);
  expect_same_bits<std::vector<TD>>([&] { return mo.template run<TD>(); },
                                    [&] { return mo.template run_dense<TD>(); }, "masked " + types);
  mo.check(mo.template run<TD>(), "masked " + types);
  // 17..65 rows over several chunks of k (small_m_lanes.inc), and a 64-row group the work list cuts along
  // N (the rest of the call is small beside it).
  const MMasked<T> rows({17, 64, 31, 65, 48}, 65, 70, 301, rng);
  expect_same_bits<std::vector<TD>>([&] { return rows.template run<TD>(); },
                                    [&] { return rows.template run_dense<TD>(); },
                                    "masked 17..65 rows " + types);
  rows.check(rows.template run<TD>(), "masked 17..65 rows " + types);
  const MMasked<T> wide({64, 0, 1}, 64, 520, 33, rng);
  expect_same_bits<std::vector<TD>>([&] { return wide.template run<TD>(); },
                                    [&] { return wide.template run_dense<TD>(); },
                                    "masked, cut along N " + types);
  if constexpr (std::is_same_v<TD, float>) {
    const KContiguous<T> ko({40, 0, 3, 150, 16, 1}, 45, 70, rng);
    for (const WithC with : {WithC::none, WithC::in_place}) {
      expect_same_bits<std::vector<float>>([&] { return ko.run(with); }, [&] { return ko.run_dense(with); },
                                           "k-grouped " + types);
      ko.check(ko.run(with), with, "k-grouped " + types);
    }
  }
}

void bits_of_every_type(std::mt19937& rng, const std::string& what) {
  for (const dispatch::Path& path : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
    dispatch::ScopedPath scope(path);
    const std::string name = what + dispatch::name(path);
    bits_of_every_form<float, float>(rng, name);
    bits_of_every_form<float, bf16>(rng, name);
    bits_of_every_form<bf16, float>(rng, name);
    bits_of_every_form<bf16, bf16>(rng, name);
  }
}

TEST(GemmGrouped, ThreadCountDoesNotChangeBitsAndEqualsADenseLoop) {
  std::mt19937 rng(11);
  bits_of_every_type(rng, "");
}

// The driver's blocking knobs set small for one scope, so the groups cross several MC, NC and KC blocks
// (a bf16 D's partial sums in the fp32 scratch, ragged last blocks) on every path.
struct ScopedBlocking {
  ScopedBlocking() {
    setenv("RIDGE_GEMM_KC", "40", 1);
    setenv("RIDGE_GEMM_MC", "30", 1);
    setenv("RIDGE_GEMM_NC", "70", 1);
  }
  ~ScopedBlocking() {
    unsetenv("RIDGE_GEMM_KC");
    unsetenv("RIDGE_GEMM_MC");
    unsetenv("RIDGE_GEMM_NC");
  }
};

TEST(GemmGrouped, SmallBlocksAllPaths) {
  const ScopedBlocking blocks;
  std::mt19937 rng(13);
  bits_of_every_type(rng, "small blocks ");
}

// The FP8 grouped GEMMs run the same grouped path: the same bits at any thread count as a loop of
// fp8_gemm_nt, one call per group, with DeepGEMM's bf16 D and with the fp32 D generation reads.
template <typename TD>
void fp8_grouped_bits(std::mt19937& rng, const dispatch::Path& path) {
  const std::string what = (std::is_same_v<TD, bf16> ? "bf16 d " : "f32 d ") + dispatch::name(path);
  const std::vector<int64_t> counts = {40, 0, 3, 150, 16, 1};
  const std::vector<int32_t> idx = layout_of(counts);
  const int64_t G = static_cast<int64_t>(counts.size()), n = 300, k = 260, kb = gemm::fp8_scale_blocks(k),
                nb = gemm::fp8_scale_blocks(n), m_sum = static_cast<int64_t>(idx.size());
  std::uniform_int_distribution<int> code(0, 0x7E);  // finite e4m3 magnitudes
  std::uniform_real_distribution<float> scale(0.5f, 2.0f);
  auto fp8s = [&](int64_t count) {
    std::vector<ridge::fp8_e4m3> v(static_cast<size_t>(count));
    for (auto& x : v) x = ridge::fp8_e4m3{static_cast<uint8_t>(code(rng) | (rng() & 1 ? 0x80 : 0))};
    return v;
  };
  auto scales = [&](int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (auto& x : v) x = scale(rng);
    return v;
  };
  const auto a = fp8s(m_sum * k), b = fp8s(G * n * k);
  const auto sa = scales(m_sum * kb), sb = scales(G * nb * kb);
  const auto bt = TensorView<const ridge::fp8_e4m3>::contiguous(b.data(), {G, n, k});
  const auto sbt = TensorView<const float>::contiguous(sb.data(), {G, nb, kb});
  auto grouped = [&] {
    std::vector<TD> d(static_cast<size_t>(m_sum * n), from_float<TD>(kSentinel));
    gemm::m_grouped_fp8_gemm_nt_contiguous(MatrixView<const ridge::fp8_e4m3>{a.data(), m_sum, k, k},
                                           MatrixView<const float>{sa.data(), m_sum, kb, kb}, bt, sbt,
                                           MatrixView<TD>{d.data(), m_sum, n, n}, idx);
    return d;
  };
  auto loop = [&] {
    std::vector<TD> d(static_cast<size_t>(m_sum * n), from_float<TD>(kSentinel));
    for (int64_t r = 0; r < m_sum;) {
      int64_t e = r + 1;
      while (e < m_sum && idx[e] == idx[r]) ++e;
      if (idx[r] >= 0)
        gemm::fp8_gemm_nt(MatrixView<const ridge::fp8_e4m3>{a.data() + r * k, e - r, k, k},
                          MatrixView<const float>{sa.data() + r * kb, e - r, kb, kb},
                          MatrixView<const ridge::fp8_e4m3>{b.data() + idx[r] * n * k, n, k, k},
                          MatrixView<const float>{sb.data() + idx[r] * nb * kb, nb, kb, kb},
                          MatrixView<TD>{d.data() + r * n, e - r, n, n});
      r = e;
    }
    return d;
  };
  expect_same_bits<std::vector<TD>>(grouped, loop, "fp8 contiguous " + what);
  // Masked: the first rows of each group's aligned block as its slab.
  const int64_t m_max = 64;
  const std::vector<int32_t> masked = {40, 0, 3, 64, 16, 1};
  auto grouped_masked = [&] {
    std::vector<TD> d(static_cast<size_t>(G * m_max * n), from_float<TD>(kSentinel));
    gemm::m_grouped_fp8_gemm_nt_masked(TensorView<const ridge::fp8_e4m3>::contiguous(a.data(), {G, m_max, k}),
                                       TensorView<const float>::contiguous(sa.data(), {G, m_max, kb}), bt,
                                       sbt, TensorView<TD>::contiguous(d.data(), {G, m_max, n}), masked, 16);
    return d;
  };
  auto loop_masked = [&] {
    std::vector<TD> d(static_cast<size_t>(G * m_max * n), from_float<TD>(kSentinel));
    for (int64_t g = 0; g < G; ++g)
      if (masked[g] > 0)
        gemm::fp8_gemm_nt(MatrixView<const ridge::fp8_e4m3>{a.data() + g * m_max * k, masked[g], k, k},
                          MatrixView<const float>{sa.data() + g * m_max * kb, masked[g], kb, kb},
                          MatrixView<const ridge::fp8_e4m3>{b.data() + g * n * k, n, k, k},
                          MatrixView<const float>{sb.data() + g * nb * kb, nb, kb, kb},
                          MatrixView<TD>{d.data() + g * m_max * n, masked[g], n, n});
    return d;
  };
  expect_same_bits<std::vector<TD>>(grouped_masked, loop_masked, "fp8 masked " + what);
}

TEST(GemmGrouped, Fp8GroupedBitsEqualADenseLoopAtAnyThreadCount) {
  std::mt19937 rng(12);
  for (const dispatch::Path& path : dispatch::paths({dispatch::Dtype::fp8})) {
    dispatch::ScopedPath scope(path);
    fp8_grouped_bits<bf16>(rng, path);
    fp8_grouped_bits<float>(rng, path);
  }
}

// ---- bad arguments: each check with its message ----

using ridge::test::expect_error;

TEST(GemmGrouped, BadArgumentsAreErrorsNamingThem) {
  const int64_t align = gemm::m_alignment_for_contiguous_layout(), k = 8, n = 3, G = 2;
  std::vector<float> in(4096, 1.0f), out(4096);
  using CV = MatrixView<const float>;
  using V = MatrixView<float>;
  const auto b3 = TensorView<const float>::contiguous(in.data() + 1024, {G, n, k});
  const auto b3nn = TensorView<const float>::contiguous(in.data() + 1024, {G, k, n});
  const CV a{in.data(), align, k, k};
  const V d{out.data(), align, n, n};
  std::vector<int32_t> idx(static_cast<size_t>(align), 0);
  gemm::m_grouped_f32_gemm_nt_contiguous(a, b3, d, idx);
  gemm::m_grouped_f32_gemm_nn_contiguous(a, b3nn, d, idx);
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_contiguous(a, TensorView<const float>::contiguous(in.data(), {n, k}), d,
                                               idx);
      },
      "b: expected a rank-3 tensor [groups, n, k], got rank 2");
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_contiguous(a, TensorView<const float>::contiguous(in.data(), {0, n, k}),
                                               d, idx);
      },
      "b: expected at least one group, got 0");
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_contiguous(
            a, TensorView<const float>::contiguous(in.data(), {G, n, k + 1}), d, idx);
      },
      "b: expected k = 8 (the columns of a) as its third dimension, got 9");
  expect_error([&] { gemm::m_grouped_f32_gemm_nn_contiguous(a, b3, d, idx); },
               "b: expected k = 8 (the columns of a) as its second dimension, got 3");
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_contiguous(a, b3, V{out.data(), align, n + 1, n + 1}, idx);
      },
      "d is [64, 4], expected [64, 3]");
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_contiguous(CV{in.data(), align, k, k - 1}, b3, d, idx);
      },
      "a.ld = 7 is smaller than its 8 columns");
  expect_error(
      [&] { gemm::m_grouped_f32_gemm_nt_contiguous(a, b3, d, std::span<const int32_t>(idx).first(5)); },
      "m_indices: expected 64 entries (rows of a), got 5");
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_contiguous(CV{in.data(), 5, k, k}, b3, V{out.data(), 5, n, n},
                                               std::span<const int32_t>(idx).first(5));
      },
      "a: m_sum=5 is not a multiple of the contiguous-layout alignment 64");
  idx[3] = 2;
  expect_error([&] { gemm::m_grouped_f32_gemm_nt_contiguous(a, b3, d, idx); },
               "m_indices[3] = 2: expected a group in [0, 2) or -1 for padding");
  idx[3] = 1;
  expect_error([&] { gemm::m_grouped_f32_gemm_nt_contiguous(a, b3, d, idx); },
               "m_indices: rows 0..63 (one aligned block of 64) mix groups 0 and 1");
  idx[3] = 0;
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_contiguous(a, b3, V{const_cast<float*>(in.data()) + 8, align, n, n}, idx);
      },
      "d: overlaps an input (a)");
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_contiguous(a, b3, V{const_cast<float*>(in.data()) + 1030, align, n, n},
                                               idx);
      },
      "d: overlaps an input (b)");
  std::vector<bf16> hb(4096);
  expect_error(
      [&] {
        gemm::m_grouped_bf16_gemm_nn_contiguous(
            MatrixView<const bf16>{hb.data(), align, k, k},
            TensorView<const bf16>::contiguous(hb.data() + 1024, {G, k, n}),
            MatrixView<bf16>{hb.data() + 2048, align, n, n}, std::span<const int32_t>(idx).first(63));
      },
      "m_indices: expected 64 entries (rows of a), got 63");

  // masked: a [G, 4, k], b [G, n, k], d [G, 4, n]
  const auto am = TensorView<const float>::contiguous(in.data(), {G, 4, k});
  const auto dm = TensorView<float>::contiguous(out.data(), {G, 4, n});
  std::vector<int32_t> mm = {4, 0};
  gemm::m_grouped_f32_gemm_nt_masked(am, b3, dm, mm, 4);
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_masked(TensorView<const float>::contiguous(in.data(), {4, k}), b3, dm, mm,
                                           4);
      },
      "a, b: expected rank-3 tensors [groups, m_max, k] and [groups, n, k]");
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_masked(am, b3, TensorView<float>::contiguous(out.data(), {G, 5, n}), mm,
                                           4);
      },
      "d is [2, 5, 3], expected [2, 4, 3]");
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_masked(
            am, TensorView<const float>::contiguous(in.data() + 1024, {G, n, k + 1}), dm, mm, 4);
      },
      "b is [2, 3, 9], expected [2, 3, 8]");
  expect_error([&] { gemm::m_grouped_f32_gemm_nt_masked(am, b3, dm, std::vector<int32_t>{4}, 4); },
               "masked_m: expected 2 entries (one per group), got 1");
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_masked(am, b3, dm, std::vector<int32_t>{5, 0}, 4);
      },
      "masked_m[0] = 5: expected 0 <= masked_m <= m_max = 4");
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_masked(am, b3, dm, std::vector<int32_t>{0, -1}, 4);
      },
      "masked_m[1] = -1: expected 0 <= masked_m <= m_max = 4");
  expect_error([&] { gemm::m_grouped_f32_gemm_nt_masked(am, b3, dm, mm, -1); },
               "expected_m: must be >= 0, got -1");
  expect_error(
      [&] {
        gemm::m_grouped_f32_gemm_nt_masked(
            am, b3, TensorView<float>::contiguous(const_cast<float*>(in.data()) + 1030, {G, 4, n}), mm, 4);
      },
      "d: overlaps an input (b)");

  // K-grouped: a [64, 4], b [64, 3], d [G, 4, 3]
  const CV ak{in.data(), align, 4, 4}, bk{in.data() + 1024, align, n, n};
  const auto dk = TensorView<float>::contiguous(out.data(), {G, 4, n});
  gemm::k_grouped_f32_gemm_tn_contiguous(ak, bk, dk, idx);
  gemm::k_grouped_f32_gemm_tn_contiguous(ak, bk, dk, idx,
                                         TensorView<const float>::contiguous(out.data(), {G, 4, n}));
  expect_error(
      [&] {
        gemm::k_grouped_f32_gemm_tn_contiguous(ak, bk, TensorView<float>::contiguous(out.data(), {4, n}),
                                               idx);
      },
      "d: expected a rank-3 tensor [groups, m, n], got rank 2");
  expect_error(
      [&] {
        gemm::k_grouped_f32_gemm_tn_contiguous(ak, bk, TensorView<float>::contiguous(out.data(), {0, 4, n}),
                                               idx);
      },
      "d: expected at least one group, got 0");
  expect_error(
      [&] {
        gemm::k_grouped_f32_gemm_tn_contiguous(ak, CV{in.data() + 1024, align - 1, n, n}, dk, idx);
      },
      "b: expected 64 rows (k_sum, the rows of a), got 63");
  expect_error(
      [&] {
        gemm::k_grouped_f32_gemm_tn_contiguous(ak, bk, TensorView<float>::contiguous(out.data(), {G, 5, n}),
                                               idx);
      },
      "d is [2, 5, 3], expected [2, 4, 3]");
  expect_error(
      [&] {
        gemm::k_grouped_f32_gemm_tn_contiguous(
            ak, bk, dk, idx, TensorView<const float>::contiguous(out.data() + 2048, {G, 4, n + 1}));
      },
      "c is [2, 4, 4], expected [2, 4, 3]");
  expect_error(
      [&] {
        gemm::k_grouped_f32_gemm_tn_contiguous(
            ak, bk, dk, idx, TensorView<const float>::contiguous(out.data() + 1, {G, 4, n}));
      },
      "c: overlaps d without being the same tensor (same pointer and strides)");
  expect_error(
      [&] { gemm::k_grouped_f32_gemm_tn_contiguous(ak, bk, dk, std::span<const int32_t>(idx).first(3)); },
      "k_indices: expected 64 entries (rows of a), got 3");
  expect_error(
      [&] {
        gemm::k_grouped_f32_gemm_tn_contiguous(CV{in.data(), 5, 4, 4}, CV{in.data() + 1024, 5, n, n}, dk,
                                               std::span<const int32_t>(idx).first(5));
      },
      "a: k_sum=5 is not a multiple of the contiguous-layout alignment 64");
  idx[5] = 7;
  expect_error([&] { gemm::k_grouped_f32_gemm_tn_contiguous(ak, bk, dk, idx); },
               "k_indices[5] = 7: expected a group in [0, 2) or -1 for padding");
  idx[5] = -1;
  expect_error(
      [&] { gemm::k_grouped_f32_gemm_tn_contiguous(ak, bk, dk, idx); },
      "k_indices: group 0 has rows 0..4 and 6..63; the K-grouped GEMM takes each group's rows as one run");
  idx[5] = 0;
  expect_error(
      [&] {
        gemm::k_grouped_f32_gemm_tn_contiguous(
            ak, bk, TensorView<float>::contiguous(const_cast<float*>(in.data()) + 4, {G, 4, n}), idx);
      },
      "d: overlaps an input (a)");
  expect_error(
      [&] {
        gemm::k_grouped_bf16_gemm_tn_contiguous(
            MatrixView<const bf16>{hb.data(), align, 4, 4},
            MatrixView<const bf16>{hb.data() + 1024, align, n, n},
            TensorView<float>::contiguous(reinterpret_cast<float*>(hb.data() + 1024), {G, 4, n}), idx);
      },
      "d: overlaps an input (b)");
}

}  // namespace
