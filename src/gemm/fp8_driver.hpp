// The blocked FP8 GEMM driver, shared by the per-ISA files. Include it INSIDE an anonymous
// namespace of an ISA file (it instantiates templates with that file's ISA flags, which must not
// be merged with other TUs' copies) after defining a kernel traits type `K` with:
//   using Elem;                       panel element (uint16_t bf16 bits, or float)
//   static constexpr int MR, NR;      micro-tile
//   static constexpr int64_t kPad;    A rows in a packed block are padded with zeros to a multiple of kPad
//   static int64_t b_panel_elems(int64_t kc);    elements of one packed NR-row B panel of depth kc
//   static void pack_a(const Problem&, int64_t i0, int64_t mc, int64_t k0, int64_t kc, Elem* ap, int64_t ldap);
//   static void pack_b(const Problem&, int64_t j0, int64_t nc, int64_t k0, int64_t kc, Elem* bp);
//   static void ukernel(int mr, int64_t kc, const Elem* a, int64_t lda, const Elem* b, const float* sa,
//                       int64_t ldsa, const float* sb, float* c, int64_t ldc);   c[mr x NR] += tile
// Loops (per thread, over its own block of D): jc (NC columns; B packed over all of K here when the
// thread has several row blocks) -> ic (MC rows) -> pc (KC depth, a multiple of 128 so scale blocks
// never straddle it) -> jr (NR) -> ir (MR).

// The including file provides, before its namespaces: <omp.h>, <algorithm>, <cstring>, <vector>,
// "ridge/core/{cpu,format,memory,threads}.hpp" and "gemm/fp8_internal.hpp".

// Local helpers: templates and inline functions from shared headers (std::min, ridge::Buffer,
// ridge::to_bf16) instantiated here would be compiled with this file's ISA flags and could be
// merged by the linker into callers on machines without that ISA.
inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// Per-thread scratch blocks from ridge's allocator, freed on scope exit.
class Scratch {
 public:
  explicit Scratch(int count) : count_(count) {
    ptrs_ = static_cast<void**>(ridge::memory::allocate(sizeof(void*) * static_cast<size_t>(count), "gemm.fp8.scratch"));
    for (int i = 0; i < count_; ++i) ptrs_[i] = nullptr;
  }
  ~Scratch() {
    for (int i = 0; i < count_; ++i) ridge::memory::deallocate(ptrs_[i]);
    ridge::memory::deallocate(ptrs_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* alloc(int i, int64_t bytes, const char* tag) {
    ptrs_[i] = ridge::memory::allocate(static_cast<size_t>(bytes), tag);
    return ptrs_[i];
  }
  void* get(int i) const { return ptrs_[i]; }

 private:
  void** ptrs_;
  int count_;
};

struct Blocks {
  int64_t kc, mc, nc;
};

template <class K>
Blocks choose_blocks(const ridge::gemm::fp8::Problem& p) {
  const auto caches = ridge::cpu::cache_sizes();
  const int64_t l1 = caches.l1d, l2 = caches.l2;
  const int64_t e = static_cast<int64_t>(sizeof(typename K::Elem));
  // The B micro-panel (kc x NR) stays in half of L1 while a column of micro-tiles reuses it.
  int64_t kc = imax(128, (l1 / 2 / (K::NR * e)) / 128 * 128);
  kc = imin(kc, (p.k + 127) / 128 * 128);
  // The packed A block (mc x kc) in a quarter of L2, the fp32 accumulator block (mc x nc) in half.
  int64_t mc = imax(K::MR, (l2 / 4 / (kc * e)) / K::MR * K::MR);
  const int64_t m_hint = p.expected_m > 0 ? imin(p.m, p.expected_m) : p.m;
  mc = imin(mc, (imax(m_hint, 1) + K::MR - 1) / K::MR * K::MR);
  int64_t nc = imin(l2 / 4 / (kc * e), l2 / 2 / (mc * 4));
  nc = imax(K::NR, nc / K::NR * K::NR);
  return {kc, mc, nc};
}

template <class K>
void run_panel(const ridge::gemm::fp8::Problem& p) {
  using Elem = typename K::Elem;
  Blocks bl = choose_blocks<K>(p);
  const int threads = static_cast<int>(imax(1, ridge::get_num_threads()));
  const int64_t n_tiles = (p.n + K::NR - 1) / K::NR;
  const int64_t m_tiles = (p.m + K::MR - 1) / K::MR;
  // Split D among threads: by columns when there are enough of them (B, the bigger operand for
  // the shapes that matter, is then read by one thread only), else by rows.
  int tn = threads, tm = 1;
  if (n_tiles < 4 * threads && m_tiles >= 4 * threads) {
    tn = 1;
    tm = threads;
  }
  tn = static_cast<int>(imin(tn, n_tiles));
  tm = static_cast<int>(imin(tm, m_tiles));
  const int used = tn * tm;
  // A thread with several row blocks packs its NC columns of B over all of K once and reuses them
  // for every row block (re-packing B per row block cost ~10% at m = 4096); with one row block, B is
  // packed one KC slice at a time, just before use, while it is still in L1/L2. With B over all of K
  // held in this thread's share of L3, NC can grow (and MC shrink, the fp32 accumulator block staying
  // in half of L2), so A is re-packed for fewer column blocks (pack_a was 8.5% of the samples at
  // m = 4096 with NC = 256).
  const int64_t rows_per_thread = (m_tiles + tm - 1) / tm * K::MR;
  const bool whole_b = rows_per_thread > bl.mc;
  if (whole_b) {
    const auto caches = ridge::cpu::cache_sizes();
    const int64_t l2 = caches.l2, l3 = caches.l3;
    const int64_t cols = (n_tiles + tn - 1) / tn * K::NR;
    const int64_t kpad = (p.k + bl.kc - 1) / bl.kc * bl.kc;
    int64_t nc = imin(cols, l3 / 2 / threads / (kpad * static_cast<int64_t>(sizeof(Elem))));
    nc = imax(bl.nc, nc / K::NR * K::NR);
    const int64_t mc = imax(K::MR, l2 / 2 / (nc * 4) / K::MR * K::MR);
    if (mc >= 8 * K::MR) {  // keep row blocks tall enough to amortise B's L3 reads
      bl.nc = nc;
      bl.mc = mc;
    }
  }
  const int64_t ldap = (bl.kc + K::kPad - 1) / K::kPad * K::kPad;
  const int64_t panel = K::b_panel_elems(bl.kc);
  const int64_t ldw = bl.nc;
  const int64_t kblocks = whole_b ? (p.k + bl.kc - 1) / bl.kc : 1;
  const int64_t b_slice = (bl.nc / K::NR) * panel;  // one KC slice of the NC columns
  Scratch scratch(3 * used);
  for (int t = 0; t < used; ++t) {
    scratch.alloc(3 * t, bl.mc * ldap * static_cast<int64_t>(sizeof(Elem)), "gemm.fp8.pack_a");
    scratch.alloc(3 * t + 1, kblocks * b_slice * static_cast<int64_t>(sizeof(Elem)), "gemm.fp8.pack_b");
    scratch.alloc(3 * t + 2, bl.mc * ldw * 4, "gemm.fp8.acc");
  }
#pragma omp parallel num_threads(used)
  {
    const int t = omp_get_thread_num();
    const int ti = t / tn, tj = t % tn;
    const int64_t m0 = imin(p.m, (m_tiles * ti / tm) * K::MR), m1 = imin(p.m, (m_tiles * (ti + 1) / tm) * K::MR);
    const int64_t n0 = imin(p.n, (n_tiles * tj / tn) * K::NR), n1 = imin(p.n, (n_tiles * (tj + 1) / tn) * K::NR);
    Elem* ap = static_cast<Elem*>(scratch.get(3 * t));
    Elem* bp = static_cast<Elem*>(scratch.get(3 * t + 1));
    float* w = static_cast<float*>(scratch.get(3 * t + 2));
    for (int64_t jc = n0; jc < n1; jc += bl.nc) {
      const int64_t nc = imin(bl.nc, n1 - jc);
      if (whole_b)
        for (int64_t pc = 0; pc < p.k; pc += bl.kc) K::pack_b(p, jc, nc, pc, imin(bl.kc, p.k - pc), bp + (pc / bl.kc) * b_slice);
      for (int64_t ic = m0; ic < m1; ic += bl.mc) {
        const int64_t mc = imin(bl.mc, m1 - ic);
        std::memset(w, 0, sizeof(float) * static_cast<size_t>(mc * ldw));
        for (int64_t pc = 0; pc < p.k; pc += bl.kc) {
          const int64_t kc = imin(bl.kc, p.k - pc);
          K::pack_a(p, ic, mc, pc, kc, ap, ldap);
          const Elem* bslice = whole_b ? bp + (pc / bl.kc) * b_slice : bp;
          if (!whole_b) K::pack_b(p, jc, nc, pc, kc, bp);
          for (int64_t jr = 0; jr < nc; jr += K::NR) {
            const float* sb = p.sb + ((jc + jr) / 128) * p.ldsb + pc / 128;
            const Elem* bpanel = bslice + (jr / K::NR) * K::b_panel_elems(kc);
            for (int64_t ir = 0; ir < mc; ir += K::MR) {
              const int mr = static_cast<int>(imin(K::MR, mc - ir));
              K::ukernel(mr, kc, ap + ir * ldap, ldap, bpanel, p.sa + (ic + ir) * p.ldsa + pc / 128, p.ldsa, sb,
                         w + ir * ldw + jr, ldw);
            }
          }
        }
        for (int64_t i = 0; i < mc; ++i) {
          float* row = w + i * ldw;
          if (p.c) {
            const float* c = p.c + (ic + i) * p.ldc + jc;
            for (int64_t j = 0; j < nc; ++j) row[j] += c[j];
          }
          if (p.d_bf16) {
            ridge::convert(row, static_cast<ridge::bf16*>(p.d) + (ic + i) * p.ldd + jc, static_cast<size_t>(nc));
          } else {
            std::memcpy(static_cast<float*>(p.d) + (ic + i) * p.ldd + jc, row, sizeof(float) * static_cast<size_t>(nc));
          }
        }
      }
    }
  }
}
