// The GEMM driver: argument checks, cache blocking from the machine's cache sizes, packing, and
// the loops around the micro-kernel, threaded with OpenMP.
//
// Loop order per thread (each thread owns a rectangle of D, so threads never synchronise):
//   jc (NC columns of B, packed over all of K)  ->  ic (MC rows of A)  ->  pc (KC deep, A block
//   packed here, sits in L2)  ->  jr (NR-wide B micro-panel, reused from L1 by every ir)  ->  ir.
// pc inside ic keeps a D block (MC x NC) warm while K is swept; a bf16 output accumulates across
// K blocks in an fp32 scratch of that size and is rounded once at the last block.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "gemm/kernel.hpp"
#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/threads.hpp"
#include "ridge/gemm.hpp"
#include "core/check.hpp"

namespace ridge::gemm {
namespace detail {

KernelInfo select_kernel(bool bf16_inputs, cpu::Isa isa) {
  switch (isa) {
    case cpu::Isa::avx512bf16:
      return bf16_inputs ? kernel_avx512bf16_bf16() : kernel_avx512_f32();
    case cpu::Isa::avx512:
      return kernel_avx512_f32();
    case cpu::Isa::avx2:
      return kernel_avx2_f32();
    case cpu::Isa::scalar:
      break;
  }
  return kernel_scalar_f32();
}

}  // namespace detail

namespace {

using detail::KernelInfo;
using detail::Panel;
using detail::Tile;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

size_t panel_elt(Panel p) { return p == Panel::f32 ? 4 : 2; }
// K as stored in a panel: bf16 pairs pad K to even.
int64_t panel_k(Panel p, int64_t k) { return p == Panel::f32 ? k : round_up(k, 2); }

Blocking derive_blocking(const KernelInfo& ki, int64_t k) {
  const auto caches = cpu::cache_sizes();
  const int64_t l1 = caches.l1d, l2 = caches.l2, l3 = caches.l3;
  const int64_t elt = static_cast<int64_t>(panel_elt(ki.panel));
  Blocking b;
  b.mr = ki.mr;
  b.nr = ki.nr;
  b.kernel = ki.name;
  // Deep K blocks: each micro-kernel call pays a D-tile epilogue, so KC should be large. The B
  // micro-panel (KC x NR) is sized to an eighth of L2 rather than half of L1: on Zen 5 the L2
  // streams it fast enough (experiment 2 in docs/gemm.md, dense GEMM experiments: KC 256 -> 2048 gained 1.3x).
  int64_t kc = std::clamp<int64_t>(l2 / 8 / (ki.nr * elt), std::max<int64_t>(64, l1 / 2 / (ki.nr * elt)), 4096);
  // Experiment knobs (docs/gemm.md, dense GEMM experiments): RIDGE_GEMM_KC / _MC / _NC override the sizes.
  if (const int64_t e = env::knobs().gemm_kc) kc = e;
  // Balance the K blocks so the last is not a sliver.
  const int64_t nblk = std::max<int64_t>(1, ceil_div(k, kc));
  kc = round_up(std::max<int64_t>(1, ceil_div(k, nblk)), 8);
  b.kc = kc;
  // The A block (MC x KC) takes half of L2.
  int64_t mc = std::max<int64_t>(ki.mr, l2 / 2 / (kc * elt) / ki.mr * ki.mr);
  if (const int64_t e = env::knobs().gemm_mc) mc = round_up(e, ki.mr);
  b.mc = mc;
  // The B block (all of K x NC) should stay in this thread's share of L3; at least 1024 columns
  // so repacking A per column block stays a small fraction of the work.
  const int threads = std::max(1, get_num_threads());
  const int64_t share = l3 / 2 / threads;
  int64_t nc = std::max<int64_t>(1024, share / (panel_k(ki.panel, k) * elt));
  if (const int64_t e = env::knobs().gemm_nc) nc = e;
  b.nc = round_up(nc, ki.nr);
  return b;
}

// Copies `count` rows of src (row-major, ld elements), columns [p0, p0 + kc), into panels of R
// rows: panel q holds rows [q*R, q*R + R) as [k][R] (f32) or [k/2][R][2] (bf16 pairs); rows past
// `count` and the odd-K pad are zero. Panel stride: R * panel_k(kc) elements.
void pack_panels(const void* src, bool src_bf16, int64_t ld, int64_t count, int64_t p0, int64_t kc, int R,
                 Panel panel, void* dst, detail::PackWords pack_words) {
  // K is walked in chunks so the R destination rows being transposed into stay in L1 (a whole
  // deep panel does not; experiment 3 in docs/gemm.md, dense GEMM experiments).
  constexpr int64_t kChunk = 64;
  const int64_t kp = panel_k(panel, kc);
  const int64_t npanels = ceil_div(count, R);
  for (int64_t q = 0; q < npanels; ++q) {
    const int64_t r0 = q * R;
    const int rows = static_cast<int>(std::min<int64_t>(R, count - r0));
    if (pack_words && panel == Panel::f32 && !src_bf16) {
      pack_words(static_cast<const float*>(src) + r0 * ld + p0, ld * 4, rows, kc, R,
                 reinterpret_cast<uint32_t*>(static_cast<float*>(dst) + q * R * kp));
      continue;
    }
    if (panel == Panel::f32) {
      float* out = static_cast<float*>(dst) + q * R * kp;
      for (int64_t c0 = 0; c0 < kc; c0 += kChunk) {
        const int64_t c1 = std::min(kc, c0 + kChunk);
        for (int r = 0; r < rows; ++r) {
          if (src_bf16) {
            const uint16_t* s = static_cast<const uint16_t*>(src) + (r0 + r) * ld + p0;
            for (int64_t p = c0; p < c1; ++p) {
              const uint32_t w = static_cast<uint32_t>(s[p]) << 16;
              std::memcpy(&out[p * R + r], &w, 4);
            }
          } else {
            const float* s = static_cast<const float*>(src) + (r0 + r) * ld + p0;
            for (int64_t p = c0; p < c1; ++p) out[p * R + r] = s[p];
          }
        }
        for (int r = rows; r < R; ++r)
          for (int64_t p = c0; p < c1; ++p) out[p * R + r] = 0.0f;
      }
    } else {
      // bf16 pairs: each (k, k+1) pair is one 32-bit word, so this is a 32-bit transpose.
      uint32_t* out = reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(dst) + q * R * kp);
      const int64_t full = kc / 2;
      if (pack_words) pack_words(static_cast<const uint16_t*>(src) + r0 * ld + p0, ld * 2, rows, full, R, out);
      for (int64_t c0 = 0; !pack_words && c0 < full; c0 += kChunk) {
        const int64_t c1 = std::min(full, c0 + kChunk);
        for (int r = 0; r < rows; ++r) {
          const uint16_t* s = static_cast<const uint16_t*>(src) + (r0 + r) * ld + p0;
          for (int64_t p = c0; p < c1; ++p) {
            uint32_t w;
            std::memcpy(&w, s + 2 * p, 4);
            out[p * R + r] = w;
          }
        }
        for (int r = rows; r < R; ++r)
          for (int64_t p = c0; p < c1; ++p) out[p * R + r] = 0;
      }
      if (kc & 1) {
        for (int r = 0; r < R; ++r)
          out[full * R + r] = r < rows ? static_cast<const uint16_t*>(src)[(r0 + r) * ld + p0 + kc - 1] : 0;
      }
    }
  }
}

// pack_panels for an operand stored K-major ([k, rows], ld elements: A of tn/tt, B of nn/tn), src
// at (k = 0, row = 0). The panels are [k][R] (or [k/2][R][2]), so each k step copies a contiguous
// run of rows: no transpose; bf16 pairs interleave two source rows. k is the outer loop so each
// source row is used up while in L1: panel by panel, a power-of-two ld would map every row's
// slice to one L1 set and an R = 14 panel would read each line from L3 about twice.
void pack_panels_kmajor(const void* src, bool src_bf16, int64_t ld, int64_t count, int64_t kc, int R,
                        Panel panel, void* dst) {
  const int64_t kp = panel_k(panel, kc);
  const int64_t npanels = ceil_div(count, R);
  const auto* s16 = static_cast<const uint16_t*>(src);
  const auto* s32 = static_cast<const float*>(src);
  if (panel == Panel::f32) {
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t q = 0; q < npanels; ++q) {
        const int64_t r0 = q * R;
        const int rows = static_cast<int>(std::min<int64_t>(R, count - r0));
        float* out = static_cast<float*>(dst) + q * R * kp + p * R;
        if (src_bf16) {
          const uint16_t* s = s16 + p * ld + r0;
          for (int r = 0; r < rows; ++r) {
            const uint32_t w = static_cast<uint32_t>(s[r]) << 16;
            std::memcpy(&out[r], &w, 4);
          }
        } else {
          std::memcpy(out, s32 + p * ld + r0, static_cast<size_t>(rows) * 4);
        }
        for (int r = rows; r < R; ++r) out[r] = 0.0f;
      }
    }
    return;
  }
  for (int64_t p = 0; p < kc; p += 2) {
    const uint16_t* lo = s16 + p * ld;
    const uint16_t* hi = p + 1 < kc ? lo + ld : nullptr;  // odd K: the pad half is 0
    for (int64_t q = 0; q < npanels; ++q) {
      const int64_t r0 = q * R;
      const int rows = static_cast<int>(std::min<int64_t>(R, count - r0));
      uint32_t* out = reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(dst) + q * R * kp) + p / 2 * R;
      if (hi) {
        for (int r = 0; r < rows; ++r) out[r] = lo[r0 + r] | static_cast<uint32_t>(hi[r0 + r]) << 16;
      } else {
        for (int r = 0; r < rows; ++r) out[r] = lo[r0 + r];
      }
      for (int r = rows; r < R; ++r) out[r] = 0;
    }
  }
}

// Packs rows [r0, r0 + count) and k [p0, p0 + kc) of an operand stored row-major by row (K
// contiguous, the nt case) or K-major.
void pack_operand(const void* base, bool kmajor, bool src_bf16, int64_t ld, int64_t r0, int64_t count,
                  int64_t p0, int64_t kc, int R, Panel panel, void* dst, detail::PackWords pack_words,
                  detail::PackKmajorPairs pack_pairs) {
  const size_t in_elt = src_bf16 ? 2 : 4;
  const std::byte* b = static_cast<const std::byte*>(base);
  if (kmajor && pack_pairs && panel == Panel::bf16pair) {
    pack_pairs(reinterpret_cast<const uint16_t*>(b + (p0 * ld + r0) * in_elt), ld, count, kc, R,
               static_cast<uint32_t*>(dst));
  } else if (kmajor) {
    pack_panels_kmajor(b + (p0 * ld + r0) * in_elt, src_bf16, ld, count, kc, R, panel, dst);
  } else {
    pack_panels(b + r0 * ld * in_elt, src_bf16, ld, count, p0, kc, R, panel, dst, pack_words);
  }
}

// One GEMM problem as the driver sees it, dtypes erased.
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  bool in_bf16 = false;  // A and B dtype
  void* d = nullptr;
  int64_t ldd = 0;
  bool out_bf16 = false;  // D and C dtype
  const void* c = nullptr;
  int64_t ldc = 0;
  const PackedB::Impl* packed = nullptr;
  bool a_kmajor = false;  // A stored [k, m] (tn, tt)
  bool b_kmajor = false;  // B stored [k, n] (nn, tn)
};

}  // namespace

struct PackedB::Impl {
  Buffer<std::byte> data;
  int64_t n = 0, k = 0, kp = 0;
  DType dtype = DType::f32;
  cpu::Isa isa = cpu::Isa::scalar;
  KernelInfo ki;
  // Panel q (NR columns, all of K) starts at q * nr * kp elements.
  const std::byte* panel(int64_t q) const {
    return data.data() + static_cast<size_t>(q * ki.nr * kp) * panel_elt(ki.panel);
  }
};

namespace {

template <typename T>
int64_t extent(const MatrixView<T>& v) {
  return v.rows == 0 || v.cols == 0 ? 0 : (v.rows - 1) * v.ld + v.cols;
}

template <typename T>
void check_view(const char* fn, const char* name, const MatrixView<T>& v) {
  check_matrix_view(fn, name, v.data, v.rows, v.cols, v.ld);
}

template <typename T, typename U>
bool overlaps(const MatrixView<T>& x, const MatrixView<U>& y) {
  const int64_t ex = extent(x), ey = extent(y);
  if (ex == 0 || ey == 0) return false;
  const auto x0 = reinterpret_cast<uintptr_t>(x.data), y0 = reinterpret_cast<uintptr_t>(y.data);
  const auto x1 = x0 + static_cast<uintptr_t>(ex) * sizeof(T), y1 = y0 + static_cast<uintptr_t>(ey) * sizeof(U);
  return x0 < y1 && y0 < x1;
}

// n and k as B gives them; a_kmajor: A is stored [k, m] (tn, tt), b_kmajor: B is stored [k, n].
template <typename TA, typename TD>
void check_ad_c(const char* fn, const MatrixView<const TA>& a, const MatrixView<TD>& d,
                const MatrixView<const TD>& c, int64_t n, int64_t k, bool a_kmajor = false,
                bool b_kmajor = false) {
  check_view(fn, "a", a);
  check_view(fn, "d", d);
  const int64_t m = a_kmajor ? a.cols : a.rows, ka = a_kmajor ? a.rows : a.cols;
  check(ka == k, "{}: a has {} {} but b has {} {} (both are K)", fn, ka, a_kmajor ? "rows" : "columns", k,
        b_kmajor ? "rows" : "columns");
  check(d.rows == m && d.cols == n, "{}: d is [{}, {}], expected [m, n] = [{}, {}]", fn, d.rows, d.cols, m,
        n);
  check(c.rows >= 0 && c.cols >= 0, "{}: c has negative shape [{}, {}]", fn, c.rows, c.cols);
  if (c.data == nullptr) {
    check(c.rows == 0 && c.cols == 0, "{}: c is null but has shape [{}, {}] (pass an empty view for no C)", fn,
          c.rows, c.cols);
  } else {
    check(c.rows == d.rows && c.cols == d.cols, "{}: c is [{}, {}], expected d's shape [{}, {}]", fn, c.rows,
          c.cols, d.rows, d.cols);
    check(c.ld >= c.cols, "{}: c.ld = {} is smaller than its {} columns (expected ld >= cols)", fn, c.ld, c.cols);
    const bool same = static_cast<const void*>(c.data) == static_cast<const void*>(d.data) && c.ld == d.ld;
    check(same || !overlaps(c, d), "{}: c overlaps d without being the same matrix (same pointer and ld)", fn);
  }
  check(!overlaps(a, d), "{}: d overlaps a", fn);
}

bool a_kmajor(Layout l) {
  return l == Layout::tn || l == Layout::tt;
}
bool b_kmajor(Layout l) {
  return l == Layout::nn || l == Layout::tn;
}

template <typename TA, typename TD>
Problem make_problem(const char* fn, Layout layout, MatrixView<const TA> a, MatrixView<const TA> b,
                     MatrixView<TD> d, MatrixView<const TD> c) {
  const bool akm = a_kmajor(layout), bkm = b_kmajor(layout);
  check_view(fn, "b", b);
  check_ad_c(fn, a, d, c, bkm ? b.cols : b.rows, bkm ? b.rows : b.cols, akm, bkm);
  check(!overlaps(b, d), "{}: d overlaps b", fn);
  Problem p;
  p.m = d.rows;
  p.n = d.cols;
  p.k = akm ? a.rows : a.cols;
  p.a_kmajor = akm;
  p.b_kmajor = bkm;
  p.a = a.data;
  p.lda = a.ld;
  p.b = b.data;
  p.ldb = b.ld;
  p.in_bf16 = std::is_same_v<TA, bf16>;
  p.d = d.data;
  p.ldd = d.ld;
  p.out_bf16 = std::is_same_v<TD, bf16>;
  p.c = c.data;
  p.ldc = c.ld;
  return p;
}

template <typename TA, typename TD>
Problem make_problem(const char* fn, MatrixView<const TA> a, const PackedB& b, MatrixView<TD> d,
                     MatrixView<const TD> c) {
  check(!b.empty(), "{}: b is an empty PackedB (use PackedB::pack)", fn);
  const auto& impl = b.impl();
  check(impl.dtype == dtype_of<TA>(), "{}: b was packed from {} but a is {}", fn, dtype_name(impl.dtype),
        dtype_name(dtype_of<TA>()));
  check(impl.isa == cpu::active_isa(), "{}: b was packed for the {} path but the active path is {} (pack again)",
        fn, cpu::isa_name(impl.isa), cpu::isa_name(cpu::active_isa()));
  check_ad_c(fn, a, d, c, impl.n, impl.k);
  Problem p;
  p.m = a.rows;
  p.n = impl.n;
  p.k = impl.k;
  p.a = a.data;
  p.lda = a.ld;
  p.in_bf16 = std::is_same_v<TA, bf16>;
  p.d = d.data;
  p.ldd = d.ld;
  p.out_bf16 = std::is_same_v<TD, bf16>;
  p.c = c.data;
  p.ldc = c.ld;
  p.packed = &impl;
  return p;
}

// K = 0: D = C (or 0).
void fill_k0(const Problem& p) {
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      float v = 0.0f;
      if (p.c) v = p.out_bf16 ? to_float(static_cast<const bf16*>(p.c)[i * p.ldc + j])
                              : static_cast<const float*>(p.c)[i * p.ldc + j];
      if (p.out_bf16) static_cast<bf16*>(p.d)[i * p.ldd + j] = to_bf16(v);
      else static_cast<float*>(p.d)[i * p.ldd + j] = v;
    }
  }
}

// Splits `threads` into a tm x tn grid over the micro-tiles so the busiest thread has the fewest
// tiles; ties go to splitting N (each thread then packs a disjoint part of B).
void thread_grid(int64_t mtiles, int64_t ntiles, int threads, int& tm, int& tn) {
  int64_t best = -1;
  tm = 1;
  tn = 1;
  for (int x = 1; x <= threads; ++x) {
    if (threads % x) continue;
    const int y = threads / x;  // x along M, y along N
    if (x > mtiles || y > ntiles) continue;
    const int64_t load = ceil_div(mtiles, x) * ceil_div(ntiles, y);
    if (best < 0 || load < best || (load == best && y > tn)) {
      best = load;
      tm = x;
      tn = y;
    }
  }
}

// The tile of D at (gi, gj) for one micro-kernel call: read C on the first K block (or the
// previous partial sum), write D on the last (bf16 output keeps fp32 partial sums in `stile`).
Tile make_tile(const Problem& p, int64_t gi, int64_t gj, bool first, bool last, bool need_scratch, float* stile,
               int64_t lds) {
  const size_t out_elt = p.out_bf16 ? 2 : 4;
  void* dtile = static_cast<std::byte*>(p.d) + (gi * p.ldd + gj) * out_elt;
  Tile t;
  if (first) {
    if (p.c) {
      t.src = static_cast<const std::byte*>(p.c) + (gi * p.ldc + gj) * out_elt;
      t.lds = p.ldc;
      t.src_bf16 = p.out_bf16;
    }
  } else if (need_scratch) {
    t.src = stile;
    t.lds = lds;
  } else {
    t.src = dtile;
    t.lds = p.ldd;
  }
  if (last || !need_scratch) {
    t.dst = dtile;
    t.ldd = p.ldd;
    t.dst_bf16 = p.out_bf16;
  } else {
    t.dst = stile;
    t.ldd = lds;
  }
  return t;
}

// A thread's packing buffers: A block, B block, fp32 scratch, each 64-byte aligned. They persist
// per thread and only grow: a fresh allocation per call costs page faults on every touch of a
// multi-MiB B block (experiment 5 in docs/gemm.md, dense GEMM experiments).
struct Workspace {
  std::byte* a;
  std::byte* b;
  float* scratch;
};
Workspace thread_workspace(size_t a_bytes, size_t b_bytes, size_t s_bytes) {
  thread_local Buffer<std::byte> ws;
  const size_t need = a_bytes + b_bytes + s_bytes + 192;
  if (ws.size() < need) ws = Buffer<std::byte>(need, "gemm.workspace");
  Workspace w;
  w.a = ws.data();
  w.b = w.a + round_up(static_cast<int64_t>(a_bytes), 64);
  w.scratch = reinterpret_cast<float*>(w.b + round_up(static_cast<int64_t>(b_bytes), 64));
  return w;
}

// A thread whose rows fit one A block (m up to ~MC: the m = 64..192 shapes of a prefill or a
// decode batch): packing a K x NC block of B, as the general loop does, would read B, write a
// copy, and read the copy again, for only a few row tiles of work per B element. Here A (all of
// K, small) is packed once, and B is packed one KC x NR micro-panel at a time into a buffer that
// stays in L2 and is used at once by every row tile: B crosses memory once.
void run_rect_narrow(const Problem& p, const KernelInfo& ki, const Blocking& bk, int64_t m0, int64_t m1, int64_t n0,
                     int64_t n1, detail::PackWords pack_words) {
  const size_t elt = panel_elt(ki.panel);
  const int64_t rows = m1 - m0;
  const detail::PackKmajorPairs pack_pairs = pack_words ? ki.pack_kmajor_pairs : nullptr;
  const int64_t mp = round_up(rows, ki.mr);
  const int64_t kc_max = std::min<int64_t>(bk.kc, p.k);
  const int64_t kp_max = panel_k(ki.panel, kc_max);
  const int64_t kblocks = ceil_div(p.k, bk.kc);
  const bool need_scratch = p.out_bf16 && kblocks > 1;
  const size_t a_block = static_cast<size_t>(mp * kp_max) * elt;
  const size_t a_bytes = a_block * static_cast<size_t>(kblocks);
  const size_t b_bytes = static_cast<size_t>(ki.nr * kp_max) * elt;
  const size_t s_bytes = need_scratch ? static_cast<size_t>(mp * ki.nr) * 4 : 0;
  const Workspace ws = thread_workspace(a_bytes, b_bytes, s_bytes);
  std::byte* abuf = ws.a;
  std::byte* bbuf = ws.b;
  float* scratch = ws.scratch;
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const int64_t pc = kb * bk.kc, kc = std::min<int64_t>(bk.kc, p.k - pc);
    pack_operand(p.a, p.a_kmajor, p.in_bf16, p.lda, m0, rows, pc, kc, ki.mr, ki.panel, abuf + kb * a_block,
                 pack_words, pack_pairs);
  }
  for (int64_t jr = n0; jr < n1; jr += ki.nr) {
    const int nr = static_cast<int>(std::min<int64_t>(ki.nr, n1 - jr));
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      const int64_t pc = kb * bk.kc, kc = std::min<int64_t>(bk.kc, p.k - pc);
      const int64_t kp = panel_k(ki.panel, kc);
      pack_operand(p.b, p.b_kmajor, p.in_bf16, p.ldb, jr, nr, pc, kc, ki.nr, ki.panel, bbuf, pack_words,
                   pack_pairs);
      const bool first = kb == 0, last = kb + 1 == kblocks;
      for (int64_t ir = 0; ir < rows; ir += ki.mr) {
        const int mr = static_cast<int>(std::min<int64_t>(ki.mr, rows - ir));
        const std::byte* apanel = abuf + kb * a_block + static_cast<size_t>((ir / ki.mr) * ki.mr * kp) * elt;
        const Tile t = make_tile(p, m0 + ir, jr, first, last, need_scratch, scratch + ir * ki.nr, ki.nr);
        ki.ukernel(kc, apanel, bbuf, mr, nr, t);
      }
    }
  }
}

// One thread's rectangle: rows [m0, m1), columns [n0, n1) (n0 a multiple of NR).
void run_rect(const Problem& p, const KernelInfo& ki, const Blocking& bk, int64_t m0, int64_t m1, int64_t n0,
              int64_t n1) {
  if (m0 >= m1 || n0 >= n1) return;
  const size_t elt = panel_elt(ki.panel);
  const int64_t kp_full = panel_k(ki.panel, p.k);
  const int64_t nc_max = std::min<int64_t>(bk.nc, round_up(n1 - n0, ki.nr));
  // Row blocks balanced over this thread's rows, rounding to the nearest count rather than up: a
  // last block of a few rows would stream the whole B block again for them (m = 128 with MC = 126
  // did; experiment 7 in docs/gemm.md, dense GEMM experiments).
  const int64_t mblocks = std::max<int64_t>(1, (m1 - m0 + bk.mc / 2) / bk.mc);
  const int64_t mc_t = round_up(ceil_div(m1 - m0, mblocks), ki.mr);
  const int64_t mc_max = std::min<int64_t>(mc_t, round_up(m1 - m0, ki.mr));
  const int64_t kc_max = std::min<int64_t>(bk.kc, p.k);
  const bool multi_k = p.k > bk.kc;
  const bool need_scratch = p.out_bf16 && multi_k;
  const detail::PackWords pack_words = env::knobs().gemm_scalar_pack ? nullptr : ki.pack_words;
  if (!p.packed && mblocks == 1 && !env::knobs().gemm_no_narrow) {
    run_rect_narrow(p, ki, bk, m0, m1, n0, n1, pack_words);
    return;
  }

  const detail::PackKmajorPairs pack_pairs = pack_words ? ki.pack_kmajor_pairs : nullptr;
  const size_t a_bytes = static_cast<size_t>(mc_max * panel_k(ki.panel, kc_max)) * elt;
  const size_t b_bytes = p.packed ? 0 : static_cast<size_t>(nc_max * kp_full) * elt;
  const size_t s_bytes = need_scratch ? static_cast<size_t>(mc_max * nc_max) * 4 : 0;
  const Workspace ws = thread_workspace(a_bytes, b_bytes, s_bytes);
  std::byte* abuf = ws.a;
  std::byte* bbuf = ws.b;
  float* scratch = ws.scratch;
  const int64_t lds = nc_max;

  for (int64_t jc = n0; jc < n1; jc += bk.nc) {
    const int64_t nc = std::min<int64_t>(bk.nc, n1 - jc);
    const std::byte* bblock;
    if (p.packed) {
      bblock = p.packed->panel(jc / ki.nr);
    } else {
      pack_operand(p.b, p.b_kmajor, p.in_bf16, p.ldb, jc, nc, 0, p.k, ki.nr, ki.panel, bbuf, pack_words,
                   pack_pairs);
      bblock = bbuf;
    }
    for (int64_t ic = m0; ic < m1; ic += mc_t) {
      const int64_t mc = std::min<int64_t>(mc_t, m1 - ic);
      for (int64_t pc = 0; pc < p.k; pc += bk.kc) {
        const int64_t kc = std::min<int64_t>(bk.kc, p.k - pc);
        const int64_t kp = panel_k(ki.panel, kc);
        pack_operand(p.a, p.a_kmajor, p.in_bf16, p.lda, ic, mc, pc, kc, ki.mr, ki.panel, abuf, pack_words,
                     pack_pairs);
        const bool first = pc == 0, last = pc + kc >= p.k;
        for (int64_t jr = 0; jr < nc; jr += ki.nr) {
          const int nr = static_cast<int>(std::min<int64_t>(ki.nr, nc - jr));
          const std::byte* bpanel =
              bblock + static_cast<size_t>((jr / ki.nr) * ki.nr * kp_full + pc * ki.nr) * elt;
          for (int64_t ir = 0; ir < mc; ir += ki.mr) {
            const int mr = static_cast<int>(std::min<int64_t>(ki.mr, mc - ir));
            const std::byte* apanel = abuf + static_cast<size_t>((ir / ki.mr) * ki.mr * kp) * elt;
            const Tile t = make_tile(p, ic + ir, jc + jr, first, last, need_scratch, scratch + ir * lds + jr, lds);
            ki.ukernel(kc, apanel, bpanel, mr, nr, t);
          }
        }
      }
    }
  }
}

// Decode shapes (m <= kSmallM) are bound by reading B; packing it would read it twice.
constexpr int64_t kSmallM = 16;

void run_small_m(const Problem& p, const KernelInfo& ki) {
  Tile t;
  t.dst = p.d;
  t.ldd = p.ldd;
  t.dst_bf16 = p.out_bf16;
  if (p.c) {
    t.src = p.c;
    t.lds = p.ldc;
    t.src_bf16 = p.out_bf16;
  }
  const int threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), ceil_div(p.n, 64))));
  const int64_t blocks = ceil_div(p.n, 4);
#pragma omp parallel num_threads(threads)
  {
    const int id = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t n0 = std::min(p.n, blocks * id / nt * 4), n1 = std::min(p.n, blocks * (id + 1) / nt * 4);
    if (n0 < n1) ki.small_m(p.m, n0, n1, p.k, p.a, p.lda, p.b, p.ldb, t);
  }
}

void run(const Problem& p) {
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) {
    fill_k0(p);
    return;
  }
  const cpu::Isa isa = p.packed ? p.packed->isa : cpu::active_isa();
  const KernelInfo ki = p.packed ? p.packed->ki : detail::select_kernel(p.in_bf16, isa);
  if (!p.packed && !p.a_kmajor && !p.b_kmajor && p.m <= kSmallM && ki.small_m &&
      (ki.panel == Panel::bf16pair) == p.in_bf16) {
    run_small_m(p, ki);
    return;
  }
  const Blocking bk = derive_blocking(ki, p.k);
  const int64_t mtiles = ceil_div(p.m, ki.mr), ntiles = ceil_div(p.n, ki.nr);
  const int threads = std::max(1, get_num_threads());
  int tm = 1, tn = 1;
  thread_grid(mtiles, ntiles, threads, tm, tn);
  const int used = tm * tn;
  std::exception_ptr error;
#pragma omp parallel num_threads(used)
  {
    // The team can be smaller than asked (nested inside another parallel region): the threads
    // that exist take the rectangles in turn.
    try {
      for (int t = omp_get_thread_num(); t < used; t += omp_get_num_threads()) {
        const int tx = t / tn, ty = t % tn;
        const int64_t m0 = std::min(p.m, ceil_div(mtiles * tx, tm) * ki.mr);
        const int64_t m1 = std::min(p.m, ceil_div(mtiles * (tx + 1), tm) * ki.mr);
        const int64_t n0 = std::min(p.n, ceil_div(ntiles * ty, tn) * ki.nr);
        const int64_t n1 = std::min(p.n, ceil_div(ntiles * (ty + 1), tn) * ki.nr);
        run_rect(p, ki, bk, m0, m1, n0, n1);
      }
    } catch (...) {
#pragma omp critical(ridge_gemm_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

template <typename TB>
PackedB::Impl* pack_impl(MatrixView<const TB> b) {
  check_view("PackedB::pack", "b", b);
  auto* impl = new PackedB::Impl;
  impl->n = b.rows;
  impl->k = b.cols;
  impl->dtype = dtype_of<TB>();
  impl->isa = cpu::active_isa();
  impl->ki = detail::select_kernel(std::is_same_v<TB, bf16>, impl->isa);
  impl->kp = panel_k(impl->ki.panel, b.cols);
  const int64_t npanels = ceil_div(b.rows, impl->ki.nr);
  const size_t panel_bytes = static_cast<size_t>(impl->ki.nr * impl->kp) * panel_elt(impl->ki.panel);
  impl->data = Buffer<std::byte>(static_cast<size_t>(npanels) * panel_bytes + 64, "gemm.packed_b");
  const KernelInfo ki = impl->ki;
#pragma omp parallel for num_threads(get_num_threads()) schedule(static)
  for (int64_t q = 0; q < npanels; ++q) {
    const int64_t cnt = std::min<int64_t>(ki.nr, b.rows - q * ki.nr);
    pack_panels(b.data + q * ki.nr * b.ld, std::is_same_v<TB, bf16>, b.ld, cnt, 0, b.cols, ki.nr, ki.panel,
                impl->data.data() + q * panel_bytes, ki.pack_words);
  }
  return impl;
}

template <typename TA, typename TB, typename TD>
void reference(const char* fn, Layout layout, MatrixView<const TA> a, MatrixView<const TB> b,
               MatrixView<TD> d, MatrixView<const TD> c) {
  const bool akm = a_kmajor(layout), bkm = b_kmajor(layout);
  check_view(fn, "b", b);
  check_ad_c(fn, a, d, c, bkm ? b.cols : b.rows, bkm ? b.rows : b.cols, akm, bkm);
  auto f = [](auto x) {
    if constexpr (std::is_same_v<decltype(x), bf16>) return to_float(x);
    else return static_cast<float>(x);
  };
  const int64_t k = akm ? a.rows : a.cols;
  for (int64_t i = 0; i < d.rows; ++i) {
    for (int64_t j = 0; j < d.cols; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc += f(akm ? a(p, i) : a(i, p)) * f(bkm ? b(p, j) : b(j, p));
      if (c.data) acc += f(c(i, j));
      d(i, j) = acc;
    }
  }
}

}  // namespace

PackedB::PackedB() = default;
PackedB::~PackedB() = default;
PackedB::PackedB(PackedB&&) noexcept = default;
PackedB& PackedB::operator=(PackedB&&) noexcept = default;
PackedB PackedB::pack(MatrixView<const float> b) {
  PackedB p;
  p.impl_.reset(pack_impl(b));
  return p;
}
PackedB PackedB::pack(MatrixView<const bf16> b) {
  PackedB p;
  p.impl_.reset(pack_impl(b));
  return p;
}
int64_t PackedB::n() const { return impl_ ? impl_->n : 0; }
int64_t PackedB::k() const { return impl_ ? impl_->k : 0; }
DType PackedB::dtype() const { return impl_ ? impl_->dtype : DType::f32; }
cpu::Isa PackedB::isa() const { return impl_ ? impl_->isa : cpu::Isa::scalar; }
bool PackedB::empty() const { return !impl_; }
const PackedB::Impl& PackedB::impl() const {
  check(impl_ != nullptr, "PackedB: empty (use PackedB::pack)");
  return *impl_;
}

namespace {

// Names for error messages, by input dtype and layout (static: the nt decode path is too short to
// pay for building a string per call).
const char* gemm_name(bool bf16_in, Layout layout, bool ref) {
  static const char* const names[2][2][4] = {
      {{"f32_gemm_nt", "f32_gemm_nn", "f32_gemm_tn", "f32_gemm_tt"},
       {"f32_gemm_nt_reference", "f32_gemm_nn_reference", "f32_gemm_tn_reference", "f32_gemm_tt_reference"}},
      {{"bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt"},
       {"bf16_gemm_nt_reference", "bf16_gemm_nn_reference", "bf16_gemm_tn_reference",
        "bf16_gemm_tt_reference"}}};
  const auto l = static_cast<unsigned>(layout);
  check(l < 4, "{}_gemm: layout {} (expected Layout::nt, nn, tn or tt)", bf16_in ? "bf16" : "f32", l);
  return names[bf16_in][ref][l];
}

template <typename TA, typename TD>
void gemm_any(Layout layout, MatrixView<const TA> a, MatrixView<const TA> b, MatrixView<TD> d,
              MatrixView<const TD> c) {
  run(make_problem(gemm_name(std::is_same_v<TA, bf16>, layout, false), layout, a, b, d, c));
}

}  // namespace

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::nt:
      return "nt";
    case Layout::nn:
      return "nn";
    case Layout::tn:
      return "tn";
    case Layout::tt:
      return "tt";
  }
  return "?";
}

Layout parse_layout(const std::string& text, const char* what) {
  for (Layout l : {Layout::nt, Layout::nn, Layout::tn, Layout::tt})
    if (text == layout_name(l)) return l;
  fail("{}: '{}' is not a GEMM layout (expected nt, nn, tn or tt)", what, text);
}

void f32_gemm(Layout layout, MatrixView<const float> a, MatrixView<const float> b, MatrixView<float> d,
              MatrixView<const float> c) {
  gemm_any(layout, a, b, d, c);
}
void f32_gemm(Layout layout, MatrixView<const float> a, MatrixView<const float> b, MatrixView<bf16> d,
              MatrixView<const bf16> c) {
  gemm_any(layout, a, b, d, c);
}
void bf16_gemm(Layout layout, MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<float> d,
               MatrixView<const float> c) {
  gemm_any(layout, a, b, d, c);
}
void bf16_gemm(Layout layout, MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<bf16> d,
               MatrixView<const bf16> c) {
  gemm_any(layout, a, b, d, c);
}

// The named entry points, one per input dtype, output dtype and layout.
#define RIDGE_GEMM_NAMED(FN, LAYOUT, TA, TD)                                                          \
  void FN(MatrixView<const TA> a, MatrixView<const TA> b, MatrixView<TD> d, MatrixView<const TD> c) { \
    run(make_problem(#FN, Layout::LAYOUT, a, b, d, c));                                               \
  }
RIDGE_GEMM_NAMED(f32_gemm_nt, nt, float, float)
RIDGE_GEMM_NAMED(f32_gemm_nt, nt, float, bf16)
RIDGE_GEMM_NAMED(f32_gemm_nn, nn, float, float)
RIDGE_GEMM_NAMED(f32_gemm_nn, nn, float, bf16)
RIDGE_GEMM_NAMED(f32_gemm_tn, tn, float, float)
RIDGE_GEMM_NAMED(f32_gemm_tn, tn, float, bf16)
RIDGE_GEMM_NAMED(f32_gemm_tt, tt, float, float)
RIDGE_GEMM_NAMED(f32_gemm_tt, tt, float, bf16)
RIDGE_GEMM_NAMED(bf16_gemm_nt, nt, bf16, float)
RIDGE_GEMM_NAMED(bf16_gemm_nt, nt, bf16, bf16)
RIDGE_GEMM_NAMED(bf16_gemm_nn, nn, bf16, float)
RIDGE_GEMM_NAMED(bf16_gemm_nn, nn, bf16, bf16)
RIDGE_GEMM_NAMED(bf16_gemm_tn, tn, bf16, float)
RIDGE_GEMM_NAMED(bf16_gemm_tn, tn, bf16, bf16)
RIDGE_GEMM_NAMED(bf16_gemm_tt, tt, bf16, float)
RIDGE_GEMM_NAMED(bf16_gemm_tt, tt, bf16, bf16)
#undef RIDGE_GEMM_NAMED

void f32_gemm_nt(MatrixView<const float> a, const PackedB& b, MatrixView<float> d, MatrixView<const float> c) {
  run(make_problem("f32_gemm_nt", a, b, d, c));
}
void f32_gemm_nt(MatrixView<const float> a, const PackedB& b, MatrixView<bf16> d, MatrixView<const bf16> c) {
  run(make_problem("f32_gemm_nt", a, b, d, c));
}
void bf16_gemm_nt(MatrixView<const bf16> a, const PackedB& b, MatrixView<float> d, MatrixView<const float> c) {
  run(make_problem("bf16_gemm_nt", a, b, d, c));
}
void bf16_gemm_nt(MatrixView<const bf16> a, const PackedB& b, MatrixView<bf16> d, MatrixView<const bf16> c) {
  run(make_problem("bf16_gemm_nt", a, b, d, c));
}

void f32_gemm_reference(Layout layout, MatrixView<const float> a, MatrixView<const float> b,
                        MatrixView<float> d, MatrixView<const float> c) {
  reference(gemm_name(false, layout, true), layout, a, b, d, c);
}
void bf16_gemm_reference(Layout layout, MatrixView<const bf16> a, MatrixView<const bf16> b,
                         MatrixView<float> d, MatrixView<const float> c) {
  reference(gemm_name(true, layout, true), layout, a, b, d, c);
}
#define RIDGE_GEMM_REFERENCE(DT, LAYOUT, TA)                                                               \
  void DT##_gemm_##LAYOUT##_reference(MatrixView<const TA> a, MatrixView<const TA> b, MatrixView<float> d, \
                                      MatrixView<const float> c) {                                         \
    DT##_gemm_reference(Layout::LAYOUT, a, b, d, c);                                                       \
  }
RIDGE_GEMM_REFERENCE(f32, nt, float)
RIDGE_GEMM_REFERENCE(f32, nn, float)
RIDGE_GEMM_REFERENCE(f32, tn, float)
RIDGE_GEMM_REFERENCE(f32, tt, float)
RIDGE_GEMM_REFERENCE(bf16, nt, bf16)
RIDGE_GEMM_REFERENCE(bf16, nn, bf16)
RIDGE_GEMM_REFERENCE(bf16, tn, bf16)
RIDGE_GEMM_REFERENCE(bf16, tt, bf16)
#undef RIDGE_GEMM_REFERENCE

Blocking blocking(DType input, cpu::Isa isa, int64_t k) {
  check(input == DType::f32 || input == DType::bf16, "gemm::blocking: input dtype {} (expected f32 or bf16)",
        dtype_name(input));
  check(k >= 0, "gemm::blocking: k = {} (expected >= 0)", k);
  return derive_blocking(detail::select_kernel(input == DType::bf16, isa), std::max<int64_t>(k, 1));
}

int get_num_threads() { return ridge::get_num_threads(); }
void set_num_threads(int n) { ridge::set_num_threads(n); }

}  // namespace ridge::gemm
