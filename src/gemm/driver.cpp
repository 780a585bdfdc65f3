// The one GEMM driver, for fp32, bf16 and FP8 alike: cache blocking from the machine's cache sizes,
// the thread grid, the per-thread workspace, the loops around the micro-kernel, the narrow and
// small-m paths, threaded with OpenMP. What a dtype supplies (packers, micro-kernel, K granule,
// small-m kernel) is data in its KernelInfo (kernel.hpp); which KernelInfo serves the blocked work and
// which the small-m work is the dispatch policy's choice (core/dispatch.hpp), one each.
//
// Loop order per thread (each thread owns a rectangle of D, so threads never synchronise):
//   jc (NC columns of B, packed over all of K)  ->  ic (MC rows of A)  ->  pc (KC deep, A block
//   packed here, sits in L2)  ->  jr (NR-wide B micro-panel, reused from L1 by every ir)  ->  ir.
// pc inside ic keeps a D block (MC x NC) warm while K is swept; a bf16 output accumulates across
// K blocks in an fp32 scratch of that size and is rounded once at the last block. C is added at the
// first K block. FP8 promotes each 128-wide K block with its two scales inside the micro-kernel, so
// KC is a multiple of 128 (the kernel's k_granule) and every K block starts on a scale block.
#include "gemm/driver.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <vector>

#include "core/dispatch.hpp"
#include "core/isa_paths.hpp"
#include "gemm/jit_decode.hpp"
#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/threads.hpp"

namespace ridge::gemm::detail {

namespace {

dispatch::Dtype dtype_of(Elem e) {
  return e == Elem::fp8    ? dispatch::Dtype::fp8
         : e == Elem::bf16 ? dispatch::Dtype::bf16
                           : dispatch::Dtype::f32;
}

}  // namespace

KernelInfo kernel_for(Elem in, const dispatch::Choice& c) {
  // What each path provides per input type (the per-ISA convention, core/isa_paths.hpp): bf16 inputs
  // below avx512bf16 take the fp32 kernels (packing widens them).
  static constexpr ridge::isa::Paths<KernelInfo> f32_paths{kernel_f32_scalar, kernel_f32_avx2,
                                                           kernel_f32_avx512, nullptr};
  static constexpr ridge::isa::Paths<KernelInfo> bf16_paths{
      kernel_f32_scalar, kernel_bf16_avx2, kernel_f32_avx512, kernel_bf16_avx512bf16, kernel_bf16_amx};
  static constexpr ridge::isa::Paths<KernelInfo> fp8_paths{
      kernel_fp8_scalar, kernel_fp8_avx2, kernel_fp8_avx512, kernel_fp8_avx512bf16, kernel_fp8_amx};
  if (c.family == dispatch::Family::amx_emulated)
    return in == Elem::fp8 ? kernel_fp8_amxemu() : kernel_bf16_amxemu();
  if (c.family == dispatch::Family::vbmi) return kernel_fp8_avx512bf16vbmi();
  KernelInfo ki = ridge::isa::pick_path(in == Elem::fp8    ? fp8_paths
                                        : in == Elem::bf16 ? bf16_paths
                                                           : f32_paths,
                                        c.isa);
  // bf16 on the FMAs: avx512's fp32 kernel (c.isa), whose packers widen bf16 operands.
  if (c.family == dispatch::Family::bf16_on_fma) ki.name = "f32_avx512_14x32_widened";
  return ki;
}

KernelInfo select_kernel(Elem in, dispatch::Work work, cpu::Isa isa) {
  dispatch::Switches s = dispatch::current();
  s.isa = isa;
  return kernel_for(in, dispatch::choose(dtype_of(in), work, s));
}

namespace {

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}
int64_t ceil_div(int64_t x, int64_t m) {
  return (x + m - 1) / m;
}

}  // namespace

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
  // streams it fast enough (experiment 2 in docs/gemm.md, dense GEMM experiments: KC 256 -> 2048
  // gained 1.3x).
  int64_t kc =
      std::clamp<int64_t>(l2 / 8 / (ki.nr * elt), std::max<int64_t>(64, l1 / 2 / (ki.nr * elt)), 4096);
  // FP8 (kc_l1): the B micro-panel in half of L1, where it is widened just before use (as tuned
  // for the FP8 kernels; docs/gemm.md, FP8 experiments).
  if (ki.kc_l1) kc = std::max<int64_t>(ki.k_granule, l1 / 2 / (ki.nr * elt) / ki.k_granule * ki.k_granule);
  // Experiment knobs (docs/gemm.md, dense GEMM experiments): RIDGE_GEMM_KC / _MC / _NC override the sizes.
  if (const int64_t e = env::knobs().gemm_kc) kc = e;
  // Balance the K blocks so the last is not a sliver; each a multiple of the kernel's K granule.
  const int64_t nblk = std::max<int64_t>(1, ceil_div(k, kc));
  kc = round_up(std::max<int64_t>(1, ceil_div(k, nblk)), ki.k_granule);
  b.kc = kc;
  // The A block (MC x KC) takes half of L2 (kc_l1: a quarter, the D block takes half).
  int64_t mc = std::max<int64_t>(ki.mr, l2 / (ki.kc_l1 ? 4 : 2) / (kc * elt) / ki.mr * ki.mr);
  if (const int64_t e = env::knobs().gemm_mc) mc = round_up(e, ki.mr);
  b.mc = mc;
  int64_t nc;
  if (ki.kc_l1) {
    // Many K blocks sweep the fp32 D block (MC x NC: a bf16 D's scratch, or an fp32 D): half of L2.
    nc = std::max<int64_t>(ki.nr, l2 / 2 / (mc * 4));
  } else {
    // The B block (all of K x NC) should stay in this thread's share of L3; at least 1024 columns
    // so repacking A per column block stays a small fraction of the work.
    const int threads = std::max(1, get_num_threads());
    const int64_t share = l3 / 2 / threads;
    nc = std::max<int64_t>(1024, share / (panel_k(ki.panel, k) * elt));
  }
  if (const int64_t e = env::knobs().gemm_nc) nc = e;
  b.nc = round_up(nc, ki.nr);
  return b;
}

namespace {

// K = 0: D = C (or 0), over rows [m0, m1) and columns [n0, n1).
void fill_k0(const Problem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  for (int64_t i = m0; i < m1; ++i) {
    for (int64_t j = n0; j < n1; ++j) {
      float v = 0.0f;
      if (p.c)
        v = p.c_bf16 ? to_float(static_cast<const bf16*>(p.c)[i * p.ldc + j])
                     : static_cast<const float*>(p.c)[i * p.ldc + j];
      if (p.d_bf16)
        static_cast<bf16*>(p.d)[i * p.ldd + j] = to_bf16(v);
      else
        static_cast<float*>(p.d)[i * p.ldd + j] = v;
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
Tile make_tile(const Problem& p, int64_t gi, int64_t gj, bool first, bool last, bool need_scratch,
               float* stile, int64_t lds) {
  void* dtile = static_cast<std::byte*>(p.d) + (gi * p.ldd + gj) * (p.d_bf16 ? 2 : 4);
  Tile t;
  if (first) {
    if (p.c) {
      t.src = static_cast<const std::byte*>(p.c) + (gi * p.ldc + gj) * (p.c_bf16 ? 2 : 4);
      t.lds = p.ldc;
      t.src_bf16 = p.c_bf16;
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
    t.dst_bf16 = p.d_bf16;
  } else {
    t.dst = stile;
    t.ldd = lds;
  }
  return t;
}

// FP8 scales for the tile at (gi, gj) and the K block starting at pc (a multiple of 128).
Scales scales_at(const Problem& p, int64_t gi, int64_t gj, int64_t pc) {
  Scales s;
  if (!p.sa) return s;
  s.a = p.sa + gi * p.ldsa + pc / 128;
  s.lda = p.ldsa;
  s.b = p.sb + (gj / 128) * p.ldsb + pc / 128;
  return s;
}

// A thread's workspace: one buffer per thread that persists and only grows: a fresh allocation per
// call costs page faults on every touch of a multi-MiB B block (experiment 5 in docs/gemm.md, dense
// GEMM experiments). Every path takes its packing buffers and scratch from it.
std::byte* grow_workspace(size_t need) {
  thread_local Buffer<std::byte> ws;
  if (ws.size() < need) ws = Buffer<std::byte>(need, "gemm.workspace");
  return ws.data();
}

// The packing buffers: A block, B block, fp32 scratch, each 64-byte aligned.
struct Workspace {
  std::byte* a;
  std::byte* b;
  float* scratch;
};
Workspace thread_workspace(size_t a_bytes, size_t b_bytes, size_t s_bytes) {
  Workspace w;
  w.a = grow_workspace(a_bytes + b_bytes + s_bytes + 192);
  w.b = w.a + round_up(static_cast<int64_t>(a_bytes), 64);
  w.scratch = reinterpret_cast<float*>(w.b + round_up(static_cast<int64_t>(b_bytes), 64));
  return w;
}

// A thread whose rows fit one A block (m up to ~MC: the m = 64..192 shapes of a prefill or a
// decode batch): packing a K x NC block of B, as the general loop does, would read B, write a
// copy, and read the copy again, for only a few row tiles of work per B element. Here A (all of
// K, small) is packed once, and B is packed one KC x NR micro-panel at a time into a buffer that
// stays in L2 (FP8: one half-L1 chunk, so the widening of the next chunk overlaps this one's
// products) and is used at once by every row tile: B crosses memory once.
void run_rect_narrow(const Problem& p, const KernelInfo& ki, const Blocking& bk, int64_t m0, int64_t m1,
                     int64_t n0, int64_t n1, bool fast) {
  const size_t elt = panel_elt(ki.panel);
  const int64_t rows = m1 - m0;
  const int64_t kstep = bk.kc;
  // Row tiles of balanced height (16 rows: two of 8, not 14 and a latency-bound 2).
  const int64_t tiles = ceil_div(rows, ki.mr);
  const int64_t tile_h = ki.narrow_max_rows ? ceil_div(rows, tiles) : ki.mr;
  const int64_t mp = round_up(rows, ki.mr) + ki.mr;
  const int64_t kc_max = std::min<int64_t>(kstep, p.k);
  const int64_t kp_max = panel_k(ki.panel, kc_max);
  const int64_t kblocks = ceil_div(p.k, kstep);
  const bool need_scratch = p.d_bf16 && kblocks > 1;
  const size_t a_block = static_cast<size_t>(mp * kp_max) * elt;
  const size_t a_bytes = a_block * static_cast<size_t>(kblocks);
  const size_t b_bytes = static_cast<size_t>(ki.nr * kp_max) * elt;
  const size_t s_bytes = need_scratch ? static_cast<size_t>(mp * ki.nr) * 4 : 0;
  const Workspace ws = thread_workspace(a_bytes, b_bytes, s_bytes);
  std::byte* abuf = ws.a;
  std::byte* bbuf = ws.b;
  float* scratch = ws.scratch;
  // A, in row tiles of tile_h rows (each its own panel of MR-row stride).
  const int64_t ntile = ceil_div(rows, tile_h);
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const int64_t pc = kb * kstep, kc = std::min<int64_t>(kstep, p.k - pc);
    const int64_t kp = panel_k(ki.panel, kc);
    for (int64_t t = 0; t < ntile; ++t) {
      const int64_t i0 = t * tile_h, h = std::min<int64_t>(tile_h, rows - i0);
      ki.pack_a(ki, p.a, m0 + i0, h, pc, kc, ki.mr,
                abuf + kb * a_block + static_cast<size_t>(t * ki.mr * kp) * elt, fast);
    }
  }
  for (int64_t jr = n0; jr < n1; jr += ki.nr) {
    const int nr = static_cast<int>(std::min<int64_t>(ki.nr, n1 - jr));
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      const int64_t pc = kb * kstep, kc = std::min<int64_t>(kstep, p.k - pc);
      const int64_t kp = panel_k(ki.panel, kc);
      ki.pack_b(ki, p.b, jr, nr, pc, kc, ki.nr, bbuf, fast);
      const bool first = kb == 0, last = kb + 1 == kblocks;
      for (int64_t t = 0; t < ntile; ++t) {
        const int64_t ir = t * tile_h;
        const int mr = static_cast<int>(std::min<int64_t>(tile_h, rows - ir));
        const std::byte* apanel = abuf + kb * a_block + static_cast<size_t>(t * ki.mr * kp) * elt;
        const Tile tl = make_tile(p, m0 + ir, jr, first, last, need_scratch, scratch + ir * ki.nr, ki.nr);
        ki.ukernel(kc, apanel, bbuf, mr, nr, scales_at(p, m0 + ir, jr, pc), tl);
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
  // Row blocks balanced over this thread's rows, rounding to the nearest count rather than up: a
  // last block of a few rows would stream the whole B block again for them (m = 128 with MC = 126
  // did; experiment 7 in docs/gemm.md, dense GEMM experiments).
  const int64_t mblocks = std::max<int64_t>(1, (m1 - m0 + bk.mc / 2) / bk.mc);
  const int64_t mc_t = round_up(ceil_div(m1 - m0, mblocks), ki.mr);
  const int64_t mc_max = std::min<int64_t>(mc_t, round_up(m1 - m0, ki.mr));
  const int64_t kc_max = std::min<int64_t>(bk.kc, p.k);
  const bool need_scratch = p.d_bf16 && p.k > bk.kc;
  const bool fast = !env::knobs().gemm_scalar_pack;
  const bool direct_b = p.b_panels != nullptr;
  const bool a_in_l2 = ki.narrow_a_in_l2 && !env::knobs().gemm_mc &&
                       (m1 - m0) * kp_full * static_cast<int64_t>(elt) <= cpu::cache_sizes().l2;
  if (!direct_b && (mblocks == 1 || a_in_l2) && !env::knobs().gemm_no_narrow &&
      (ki.narrow_max_rows == 0 || m1 - m0 <= ki.narrow_max_rows)) {
    run_rect_narrow(p, ki, bk, m0, m1, n0, n1, fast);
    return;
  }
  // B over all of K per column block when several row blocks reuse it; with one row block (more rows
  // than the kernel's narrow path takes), one KC x NR micro-panel at a time, packed just before every
  // row tile uses it while the A block sits in L2: B crosses memory once and is never re-read.
  const bool b_panels = !direct_b && mblocks == 1;
  int64_t ncb = bk.nc;
  // kc_l1: NC keeps the fp32 D block in half of L2; a single row block shorter than MC leaves room
  // for more columns, so A is re-packed for fewer column blocks.
  if (b_panels && ki.kc_l1 && !env::knobs().gemm_nc)
    ncb = std::max<int64_t>(ncb, cpu::cache_sizes().l2 / 2 / (mc_max * 4) / ki.nr * ki.nr);
  const int64_t nc_max = std::min<int64_t>(ncb, round_up(n1 - n0, ki.nr));
  const size_t a_bytes = static_cast<size_t>(mc_max * panel_k(ki.panel, kc_max)) * elt;
  const size_t b_bytes = direct_b   ? 0
                         : b_panels ? static_cast<size_t>(ki.nr * panel_k(ki.panel, kc_max)) * elt
                                    : static_cast<size_t>(nc_max * kp_full) * elt;
  const size_t s_bytes = need_scratch ? static_cast<size_t>(mc_max * nc_max) * 4 : 0;
  const Workspace ws = thread_workspace(a_bytes, b_bytes, s_bytes);
  std::byte* abuf = ws.a;
  std::byte* bbuf = ws.b;
  float* scratch = ws.scratch;
  const int64_t lds = nc_max;

  for (int64_t jc = n0; jc < n1; jc += ncb) {
    const int64_t nc = std::min<int64_t>(ncb, n1 - jc);
    const std::byte* bblock = bbuf;
    if (direct_b)
      bblock = p.b_panels + static_cast<size_t>((jc / ki.nr) * ki.nr * kp_full) * elt;
    else if (!b_panels)
      ki.pack_b(ki, p.b, jc, nc, 0, p.k, ki.nr, bbuf, fast);
    for (int64_t ic = m0; ic < m1; ic += mc_t) {
      const int64_t mc = std::min<int64_t>(mc_t, m1 - ic);
      for (int64_t pc = 0; pc < p.k; pc += bk.kc) {
        const int64_t kc = std::min<int64_t>(bk.kc, p.k - pc);
        const int64_t kp = panel_k(ki.panel, kc);
        ki.pack_a(ki, p.a, ic, mc, pc, kc, ki.mr, abuf, fast);
        const bool first = pc == 0, last = pc + kc >= p.k;
        for (int64_t jr = 0; jr < nc; jr += ki.nr) {
          const int nr = static_cast<int>(std::min<int64_t>(ki.nr, nc - jr));
          const std::byte* bpanel =
              bblock + static_cast<size_t>((jr / ki.nr) * ki.nr * kp_full + pc * ki.nr) * elt;
          if (b_panels) {
            ki.pack_b(ki, p.b, jc + jr, nr, pc, kc, ki.nr, bbuf, fast);
            bpanel = bbuf;
          }
          for (int64_t ir = 0; ir < mc; ir += ki.mr) {
            const int mr = static_cast<int>(std::min<int64_t>(ki.mr, mc - ir));
            const std::byte* apanel = abuf + static_cast<size_t>((ir / ki.mr) * ki.mr * kp) * elt;
            const Tile t =
                make_tile(p, ic + ir, jc + jr, first, last, need_scratch, scratch + ir * lds + jr, lds);
            ki.ukernel(kc, apanel, bpanel, mr, nr, scales_at(p, ic + ir, jc + jr, pc), t);
          }
        }
      }
    }
  }
}

// Runs body(thread) on `used` threads; the first exception is rethrown on the caller's thread. The
// team can be smaller than asked (nested inside another parallel region): the threads that exist
// take the slots in turn.
template <typename Body>
void parallel(int used, const Body& body) {
  std::exception_ptr error;
#pragma omp parallel num_threads(used)
  {
    try {
      for (int t = omp_get_thread_num(); t < used; t += omp_get_num_threads()) body(t);
    } catch (...) {
#pragma omp critical(ridge_gemm_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// The small-m kernel's view of p: A, B and the scales as SmallM, D (and C) as a Tile at D's origin.
void small_m_args(const Problem& p, SmallM& s, Tile& t) {
  t.dst = p.d;
  t.ldd = p.ldd;
  t.dst_bf16 = p.d_bf16;
  if (p.c) {
    t.src = p.c;
    t.lds = p.ldc;
    t.src_bf16 = p.c_bf16;
  }
  s.m = p.m;
  s.k = p.k;
  s.a = p.a.data;
  s.lda = p.a.ld;
  s.b = p.b.data;
  s.ldb = p.b.ld;
  s.sa = p.sa;
  s.ldsa = p.ldsa;
  s.sb = p.sb;
  s.ldsb = p.ldsb;
  s.b_finite = p.b.fp8_finite;
}

void run_small_m(const Problem& p, SmallMKernel kernel, int64_t g) {
  SmallM s;
  Tile t;
  small_m_args(p, s, t);
  const int used =
      static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), ceil_div(p.n, 64))));
  const int64_t blocks = ceil_div(p.n, g);
  parallel(used, [&](int id) {
    const int64_t n0 = std::min(p.n, blocks * id / used * g),
                  n1 = std::min(p.n, blocks * (id + 1) / used * g);
    if (n0 < n1) kernel(s, n0, n1, t);
  });
}

// The small-m kernels' rows where the blocked work runs on another engine (plan(), below).
constexpr int64_t kSmallMOtherEngine = 16;

// How the driver runs one problem (m, n, k >= 1): the small-m kernel the dispatch policy chooses for
// decode rows, where it takes them, else the blocked kernel (or the PackedB's) with its blocking. A
// problem's plan depends on the problem alone, never on the thread count or on the other problems of a
// grouped call, so its bits do not either.
struct Plan {
  SmallMKernel small_m = nullptr;  // set: the small-m path, splitting N in multiples of small_m_cols
  int64_t small_m_cols = 0;
  KernelInfo ki;  // otherwise: the blocked path
  Blocking bk;
};

Plan plan(const Problem& p, const dispatch::Switches& path) {
  Plan pl;
  const dispatch::Dtype dtype = dtype_of(p.a.elem);
  if (!p.b_panels && !p.a.kmajor && p.m <= kSmallMMaxRows) {
    const dispatch::Choice c = dispatch::choose(dtype, dispatch::Work::small_m, path);
    const KernelInfo sm = kernel_for(p.a.elem, c);
    // Where the blocked work runs on another engine than the small-m kernel, rows past 16 stay with it:
    // the tiles (where they overtake the small-m kernels has not been measured: no AMX host yet), and bf16
    // on the FMAs (Intel issues vdpbf16ps at half their rate: the blocked vdpbf16ps kernel ran 1.4-1.6x
    // slower at m = 64; docs/gemm.md, "bf16 on Intel without AMX").
    const dispatch::Family blocked = dispatch::choose(dtype, dispatch::Work::blocked, path).family;
    const bool other = blocked == dispatch::Family::amx || blocked == dispatch::Family::bf16_on_fma;
    const int64_t rows = other ? std::min<int64_t>(kSmallMOtherEngine, sm.small_m_rows) : sm.small_m_rows;
    if (!p.b.fp8_panels && !p.b.kmajor && p.m <= rows && sm.small_m && sm.small_m_elem == p.a.elem) {
      // With the JIT on, the same kernel with this call's m and k compiled in, where it serves them.
      const SmallMKernel jit = jit_small_m(sm, p.m, p.k, c.jit);
      pl.small_m = jit ? jit : sm.small_m;
      pl.small_m_cols = sm.small_m_cols;
      return pl;
    }
    if (p.b.fp8_panels && p.m <= 4 && sm.small_m_fp8_panels) {
      pl.small_m = sm.small_m_fp8_panels;
      pl.small_m_cols = kFp8PanelRows;
      return pl;
    }
  }
  pl.ki = p.packed_ki ? *p.packed_ki
                      : kernel_for(p.a.elem, dispatch::choose(dtype, dispatch::Work::blocked, path));
  pl.bk = derive_blocking(pl.ki, p.k);
  return pl;
}

// The kernel's end-of-thread step (AMX: release the tiles), run however the thread leaves, so a throw
// cannot leave the thread's tile configuration cached as loaded.
struct ThreadDone {
  void (*f)() = nullptr;
  ~ThreadDone() {
    if (f) f();
  }
};

}  // namespace

std::byte* thread_scratch(size_t bytes) {
  return grow_workspace(bytes + 64);
}

void run(const Problem& p) {
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) {
    fill_k0(p, 0, p.m, 0, p.n);
    return;
  }
  // The small-m and the blocked kernels, each as the dispatch policy chooses it (core/dispatch.hpp).
  const Plan pl = plan(p, dispatch::current());
  if (pl.small_m) {
    run_small_m(p, pl.small_m, pl.small_m_cols);
    return;
  }
  const KernelInfo& ki = pl.ki;
  const int64_t mtiles = ceil_div(p.m, ki.mr), ntiles = ceil_div(p.n, ki.nr);
  int tm = 1, tn = 1;
  thread_grid(mtiles, ntiles, std::max(1, get_num_threads()), tm, tn);
  parallel(tm * tn, [&](int t) {
    const int tx = t / tn, ty = t % tn;
    const int64_t m0 = std::min(p.m, ceil_div(mtiles * tx, tm) * ki.mr);
    const int64_t m1 = std::min(p.m, ceil_div(mtiles * (tx + 1), tm) * ki.mr);
    const int64_t n0 = std::min(p.n, ceil_div(ntiles * ty, tn) * ki.nr);
    const int64_t n1 = std::min(p.n, ceil_div(ntiles * (ty + 1), tn) * ki.nr);
    const ThreadDone done{ki.thread_done};
    run_rect(p, ki, pl.bk, m0, m1, n0, n1);
  });
}

namespace {

// The grouped path's work list: rectangles of D, each one problem's rows [m0, m1) and columns [n0, n1),
// computed whole by whichever thread takes it.
struct Piece {
  size_t problem = 0;
  int64_t m0 = 0, m1 = 0, n0 = 0, n1 = 0;
};

// Pieces per thread the work list aims at: small enough that the thread that ends last waits at most
// about 1/8 of its share, large enough that each piece keeps the packing of its operands a small part of
// its work.
constexpr int64_t kPiecesPerThread = 8;
// The narrowest piece (in micro-panels of B) and the shortest (rows) a problem is cut into: A is packed
// once per piece and B once per row chunk, so each is at most about a quarter (a 64th) of the piece's
// micro-kernel work.
constexpr int64_t kMinPanels = 4;
constexpr int64_t kMinRows = 64;

// Cuts one problem into about `pieces` rectangles: columns first, in whole units of `nr` columns
// (micro-panels: each piece packs its own part of B), at least kMinPanels wide, then rows, in units of
// `mr` rows, at least kMinRows high.
void cut(size_t problem, int64_t m, int64_t n, int64_t mr, int64_t nr, int64_t pieces,
         std::vector<Piece>& out) {
  const int64_t mtiles = ceil_div(m, mr), ntiles = ceil_div(n, nr);
  const int64_t cn = std::clamp<int64_t>(pieces, 1, std::max<int64_t>(1, ntiles / kMinPanels));
  const int64_t cm =
      std::clamp<int64_t>(ceil_div(pieces, cn), 1, std::max<int64_t>(1, mtiles / ceil_div(kMinRows, mr)));
  for (int64_t x = 0; x < cm; ++x)
    for (int64_t y = 0; y < cn; ++y)
      out.push_back({problem, std::min(m, ceil_div(mtiles * x, cm) * mr),
                     std::min(m, ceil_div(mtiles * (x + 1), cm) * mr),
                     std::min(n, ceil_div(ntiles * y, cn) * nr),
                     std::min(n, ceil_div(ntiles * (y + 1), cn) * nr)});
}

}  // namespace

void run_grouped(std::span<const Problem> problems) {
  const dispatch::Switches path = dispatch::current();
  const int threads = std::max(1, get_num_threads());
  // Each problem's plan, as run() would make it, and an estimate of its time: multiply-adds for the
  // blocked path; a decode group streams B once, about as long as 8 more rows of blocked work on it.
  std::vector<Plan> plans(problems.size());
  std::vector<double> cost(problems.size(), 0.0);
  double total = 0;
  void (*thread_done)() = nullptr;
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    if (p.m == 0 || p.n == 0) continue;
    const double mn = static_cast<double>(p.m) * static_cast<double>(p.n);
    if (p.k == 0) {
      cost[i] = mn;
    } else {
      plans[i] = plan(p, path);
      if (plans[i].small_m) {
        cost[i] = static_cast<double>(p.m + 8) * static_cast<double>(p.n) * static_cast<double>(p.k);
      } else {
        cost[i] = mn * static_cast<double>(p.k);
        thread_done = plans[i].ki.thread_done;  // one blocked kernel serves every problem of a call
      }
    }
    total += cost[i];
  }
  // One work list over every group: a problem is cut only where it is larger than a piece should be
  // (never on one thread), so many small groups stay whole and a few large ones are shared.
  const double target = threads == 1 ? total : total / static_cast<double>(threads * kPiecesPerThread);
  std::vector<Piece> work;
  for (size_t i = 0; i < problems.size(); ++i) {
    if (cost[i] == 0) continue;
    const Problem& p = problems[i];
    const int64_t pieces = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(cost[i] / target - 1e-9)));
    if (p.k == 0)
      cut(i, p.m, p.n, 1, 64, pieces, work);
    else if (plans[i].small_m)
      cut(i, p.m, p.n, p.m, plans[i].small_m_cols * 16, pieces, work);  // all rows; B streamed per column run
    else
      cut(i, p.m, p.n, plans[i].ki.mr, plans[i].ki.nr, pieces, work);
  }
  if (work.empty()) return;
  // One parallel region: each thread takes the next piece of any group until none is left.
  std::atomic<size_t> next{0};
  const int used = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), work.size()));
  parallel(used, [&](int) {
    const ThreadDone done{thread_done};
    for (size_t w = next.fetch_add(1, std::memory_order_relaxed); w < work.size();
         w = next.fetch_add(1, std::memory_order_relaxed)) {
      const Piece& pc = work[w];
      const Problem& p = problems[pc.problem];
      const Plan& pl = plans[pc.problem];
      if (p.k == 0) {
        fill_k0(p, pc.m0, pc.m1, pc.n0, pc.n1);
      } else if (pl.small_m) {
        SmallM s;
        Tile t;
        small_m_args(p, s, t);
        pl.small_m(s, pc.n0, pc.n1, t);
      } else {
        run_rect(p, pl.ki, pl.bk, pc.m0, pc.m1, pc.n0, pc.n1);
      }
    }
  });
}

}  // namespace ridge::gemm::detail
