// FlashAttention-2 entry points: argument checks, block sizes from the caches, and dispatch to
// the per-ISA kernels (flash_<isa>.cpp).
#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <span>
#include <type_traits>
#include <vector>

#include "attention/internal.hpp"
#include "core/dispatch.hpp"
#include "core/isa_paths.hpp"
#include "ridge/attention.hpp"
#include "ridge/core/cpu.hpp"
#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/threads.hpp"
#include "core/check.hpp"
#include "core/overlap.hpp"

namespace ridge::attention {
namespace detail {

void choose_blocks(int64_t d, int w, int want_q, int want_k, int& bq, int& bk) {
  const int unit = std::max(w, 16);
  auto round_to = [&](int x) { return std::max(unit, (x + unit - 1) / unit * unit); };
  // Queries per block: enough that every K/V element loaded is reused for 64 queries, few enough
  // that Q^T and O^T (2 * d * bq floats) stay in L1/L2 beside the key block.
  bq = want_q > 0 ? round_to(want_q) : 64;
  if (want_k > 0) {
    bk = round_to(want_k);
    return;
  }
  // Keys per block: the per-thread working set (Q^T, O^T, K, V blocks and S^T) within half of L2.
  const int64_t l2 = cpu::cache_sizes().l2;
  const int64_t budget = l2 / 2 / 4 - 2 * d * bq;
  int64_t k = budget / (2 * d + bq);
  // Capped at 256 keys (idle machine, 2 threads: 256 beat 128 by 2-5% in fp32 forward and backward
  // at n = 2048..4096, d = 64/128, neutral in bf16; docs/attention.md, experiment 6).
  k = std::clamp<int64_t>(k, unit, 256);
  bk = static_cast<int>(k / unit * unit);
}

std::vector<FwdItem> plan_forward(const Problem& p, int bq) {
  std::vector<FwdItem> items;
  std::vector<double> cost;
  for (int64_t b = 0; b < p.batch; ++b) {
    const Seq s = seq_of(p, b);
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i0 = 0; i0 < s.n_q; i0 += bq) {
        const int64_t mr = std::min<int64_t>(bq, s.n_q - i0);
        int64_t lo, hi;
        keys_seen(p, s, i0, i0 + mr - 1, lo, hi);
        items.push_back({b, h, i0});
        // Scores computed (the key blocks visited) plus the fixed cost of a block (loads, output).
        cost.push_back(static_cast<double>(mr) *
                       static_cast<double>(std::max<int64_t>(0, hi - lo) + 2 * p.d));
      }
  }
  // Costliest first (longest-processing-time order), ties in (sequence, head, block) order.
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<FwdItem> sorted(items.size());
  for (size_t x = 0; x < order.size(); ++x) sorted[x] = items[order[x]];
  return sorted;
}

double& backward_slice_scores() {
  // About 2^22 visible scores (times the heads of a kv group) per slice. A slice costs a fixed
  // O(n_q d) beside its work (its dQ partial zeroed and added into the accumulator in order, perhaps
  // after a wait for the slice before). At 2^20 a dense backward with few units paid it several times
  // per unit (b1 h4 n2048: 4 slices a unit, where the code before varlen had none), the suspect of
  // its 10-17% slowdown (docs/attention.md); at 2^22 those shapes are one slice again and a
  // 4096 x 4096 sequence is cut in 4 (causal: 2), still enough to spread one long sequence.
  static double scores = 4194304.0;
  return scores;
}

std::vector<BwdTask> plan_backward(const Problem& p, int bk, int64_t& units, int64_t& acc_floats,
                                   int64_t dp) {
  const double kSliceCost = backward_slice_scores();
  constexpr int64_t kMaxSlices = 64;
  const int64_t group = p.heads / p.kv_heads;
  struct Unit {
    std::vector<BwdTask> tasks;
    double slice_cost;
  };
  std::vector<Unit> list;
  units = 0;
  acc_floats = 0;
  std::vector<double> blk;
  for (int64_t b = 0; b < p.batch; ++b) {
    const Seq s = seq_of(p, b);
    if (s.n_q == 0 && s.n_k == 0) continue;
    const int64_t nkb = (s.n_k + bk - 1) / bk;
    // Visible scores per key block: key j is seen by the queries [lo, hi) of queries_seeing.
    blk.assign(static_cast<size_t>(nkb), 0.0);
    double total = 0.0;
    for (int64_t kb = 0; kb < nkb; ++kb) {
      const int64_t j0 = kb * bk, j1 = std::min<int64_t>(s.n_k, j0 + bk);
      double c = 0.0;
      for (int64_t j = j0; j < j1; ++j) {
        int64_t lo, hi;
        queries_seeing(p, s, j, j, lo, hi);
        c += static_cast<double>(std::max<int64_t>(0, hi - lo));
      }
      blk[static_cast<size_t>(kb)] = c * static_cast<double>(group);
      total += blk[static_cast<size_t>(kb)];
    }
    const int64_t slices =
        nkb == 0 ? 1 : std::clamp<int64_t>(std::llround(total / kSliceCost), 1, std::min(nkb, kMaxSlices));
    // Runs of consecutive key blocks, cut where the running cost passes k / slices of the total
    // (each run non-empty).
    std::vector<int64_t> cut(static_cast<size_t>(slices + 1), nkb);
    cut[0] = 0;
    {
      double run = 0.0;
      int64_t k = 1;
      for (int64_t kb = 0; kb < nkb && k < slices; ++kb) {
        run += blk[static_cast<size_t>(kb)];
        const int64_t left_after = nkb - (kb + 1);  // blocks still to share among slices k..
        if ((run >= total * static_cast<double>(k) / static_cast<double>(slices) ||
             left_after == slices - k) &&
            kb + 1 > cut[static_cast<size_t>(k - 1)]) {
          cut[static_cast<size_t>(k)] = kb + 1;
          ++k;
        }
      }
    }
    for (int64_t kvh = 0; kvh < p.kv_heads; ++kvh) {
      Unit u;
      u.slice_cost = 0.0;
      const int64_t acc = slices > 1 ? acc_floats : -1;
      if (slices > 1) acc_floats += group * s.n_q * dp;
      for (int64_t x = 0; x < slices; ++x) {
        BwdTask t;
        t.b = b;
        t.kvh = kvh;
        t.unit = units;
        t.kb0 = cut[static_cast<size_t>(x)];
        t.kb1 = cut[static_cast<size_t>(x + 1)];
        t.slice = x;
        t.slices = slices;
        t.acc = acc;
        double c = 0.0;
        for (int64_t kb = t.kb0; kb < t.kb1; ++kb) c += blk[static_cast<size_t>(kb)];
        u.slice_cost = std::max(u.slice_cost, c + static_cast<double>((t.kb1 - t.kb0) * bk + s.n_q) * p.d);
        u.tasks.push_back(t);
      }
      ++units;
      list.push_back(std::move(u));
    }
  }
  // Costliest units first. The sliced units' slices are dealt round-robin (slice 0 of each, then
  // slice 1 of each, ...), so a unit's consecutive slices are as far apart in the list as there are
  // sliced units and a slice rarely waits for its predecessor's add (with them adjacent, two threads
  // would run a unit's slices side by side and each add would wait for the other's slice to end).
  // Then the unsliced units, costliest first, which fill the tail.
  std::stable_sort(list.begin(), list.end(),
                   [](const Unit& a, const Unit& b) { return a.slice_cost > b.slice_cost; });
  std::vector<BwdTask> tasks;
  size_t most = 0;
  for (auto& u : list) most = std::max(most, u.tasks.size());
  for (size_t r = 0; r < most; ++r)
    for (auto& u : list)
      if (u.tasks.size() > 1 && r < u.tasks.size()) tasks.push_back(u.tasks[r]);
  for (auto& u : list)
    if (u.tasks.size() == 1) tasks.push_back(u.tasks[0]);
  return tasks;
}

}  // namespace detail

namespace {

template <typename T>
detail::Operand operand(const TensorView<T>& t) {
  detail::Operand o;
  o.data = const_cast<void*>(static_cast<const void*>(t.data));
  o.sb = t.stride[0];
  o.sh = t.stride[1];
  o.ss = t.stride[2];
  o.sd = t.stride[3];
  return o;
}

template <typename T>
void check_view(const TensorView<T>& t, const char* name, int64_t b, int64_t h, int64_t n, int64_t d) {
  check_tensor_view("attention", name, t.data, t.rank, t.shape, t.stride, {b, h, n, d});
}

// The largest |x_i| (Euclidean norm of a row of d elements) over every row of a [b, h, n, d] view.
template <typename T>
double max_row_norm(const TensorView<T>& t) {
  double best = 0.0;
  for (int64_t b = 0; b < t.shape[0]; ++b)
    for (int64_t h = 0; h < t.shape[1]; ++h)
      for (int64_t i = 0; i < t.shape[2]; ++i) {
        const T* row = t.data + b * t.stride[0] + h * t.stride[1] + i * t.stride[2];
        double acc = 0.0;
        for (int64_t c = 0; c < t.shape[3]; ++c) {
          double x;
          if constexpr (std::is_same_v<T, bf16>)
            x = to_float(row[c * t.stride[3]]);
          else
            x = static_cast<double>(row[c * t.stride[3]]);
          acc += x * x;
        }
        best = std::max(best, acc);
      }
  return std::sqrt(best);
}

// The kernels compute exp2(s * c - m) with c = scale * log2(e) in fp32. For a scale so large that
// s * c could overflow (scale * log2(e) itself overflows past 2.4e38), c is capped at 2^124 / bound,
// bound >= |s| by Cauchy-Schwarz (largest row norm of q times that of k), so |s * c| <= 2^124 and
// differences of two such values stay finite. At the cap the softmax is already a hard max for
// every pair of scores fp32 can tell apart (a gap of 2^-100 |s| is 2^24 in the exponent), so the
// cap changes nothing but lse, which lse_factor and l2_factor carry back to the user's scale.
// A scale up to 1024 / log2(e) skips the O((n_q + n_k) d) scan: there only scores beyond 2^114,
// from inputs near 10^17, could overflow.
template <typename T>
void log2_scale(detail::Problem& p, const TensorView<T>& q, const TensorView<T>& k) {
  constexpr double kLog2e = 1.4426950408889634;
  p.c = p.scale * static_cast<float>(kLog2e);
  p.lse_factor = static_cast<float>(1.0 / kLog2e);
  p.l2_factor = static_cast<float>(kLog2e);
  const double c = static_cast<double>(p.scale) * kLog2e;
  if (c <= 1024.0) return;
  const double bound = max_row_norm(q) * max_row_norm(k);
  const double cap = bound > 0.0 ? std::ldexp(1.0, 124) / bound : std::ldexp(1.0, 124);
  if (c <= cap && c <= static_cast<double>(std::numeric_limits<float>::max())) return;
  const float capped =
      static_cast<float>(std::min(cap, static_cast<double>(std::numeric_limits<float>::max())));
  p.c = capped;
  p.lse_factor = static_cast<float>(static_cast<double>(p.scale) / capped);
  p.l2_factor = static_cast<float>(capped / static_cast<double>(p.scale));
}

// The options every entry point shares: scale, window (causal folded in as right = 0), softcap.
void set_options(detail::Problem& p, const Options& options) {
  check(std::isfinite(options.scale) && options.scale >= 0.0f,
        "attention: scale must be finite and > 0 (0 means 1/sqrt(d)), got {}", options.scale);
  check(options.window_left >= -1,
        "attention: window_left must be >= 0, or -1 for no limit on the left, got {}", options.window_left);
  check(options.window_right >= -1,
        "attention: window_right must be >= 0, or -1 for no limit on the right, got {}",
        options.window_right);
  check(std::isfinite(options.softcap) && options.softcap >= 0.0f && options.softcap <= 1e30f,
        "attention: softcap must be finite, >= 0 and <= 1e30 (0 means off), got {}", options.softcap);
  p.causal = options.causal;
  p.left = options.window_left;
  p.right = options.causal ? 0 : options.window_right;
  p.scale =
      options.scale == 0.0f ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.d))) : options.scale;
  p.softcap = options.softcap;
  if (p.softcap > 0.0f) {
    // Capped scores are bounded by the cap: the plain log2 domain, scale applied inside the tanh.
    constexpr double kLog2e = 1.4426950408889634;
    p.cap_k = static_cast<float>(static_cast<double>(p.scale) / static_cast<double>(p.softcap));
    p.c = static_cast<float>(kLog2e);
    p.lse_factor = static_cast<float>(1.0 / kLog2e);
    p.l2_factor = static_cast<float>(kLog2e);
  }
}

template <typename T>
detail::Problem make_problem(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                             const TensorView<float>& lse, const Options& options) {
  check(q.rank == 4, "attention: q must be rank 4 [batch, heads, n_q, d], got rank {}", q.rank);
  check(k.rank == 4, "attention: k must be rank 4 [batch, kv_heads, n_k, d], got rank {}", k.rank);
  detail::Problem p;
  p.batch = q.shape[0];
  p.heads = q.shape[1];
  p.n_q = q.shape[2];
  p.d = q.shape[3];
  p.kv_heads = k.shape[1];
  p.n_k = k.shape[2];
  check(p.batch >= 1 && p.heads >= 1 && p.kv_heads >= 1, "attention: batch, heads and kv_heads must be >= 1");
  check(p.n_q >= 1, "attention: q's sequence length n_q must be >= 1, got {}", p.n_q);
  check(p.n_k >= 1, "attention: k's sequence length n_k must be >= 1, got {}", p.n_k);
  check(p.d >= 16 && p.d <= 256, "attention: head dimension d must be in 16..256, got {}", p.d);
  check(p.heads % p.kv_heads == 0, "attention: heads ({}) must be a multiple of kv_heads ({})", p.heads,
        p.kv_heads);
  p.bf16 = std::is_same_v<T, bf16>;
  check_view(q, "q", p.batch, p.heads, p.n_q, p.d);
  check_view(k, "k", p.batch, p.kv_heads, p.n_k, p.d);
  check_view(v, "v", p.batch, p.kv_heads, p.n_k, p.d);
  check_tensor_view("attention", "lse", lse.data, lse.rank, lse.shape, lse.stride, {p.batch, p.heads, p.n_q});
  set_options(p, options);
  if (p.softcap == 0.0f) log2_scale(p, q, k);
  p.q = operand(q);
  p.k = operand(k);
  p.v = operand(v);
  p.lse = lse.data;
  p.lse_sb = lse.stride[0];
  p.lse_sh = lse.stride[1];
  p.lse_ss = lse.stride[2];
  p.threads = get_num_threads();
  // Block-size experiments without a rebuild (docs/attention.md records them).
  p.block_q = env::knobs().attention_block_q;  // 0 when unset; checked where it is parsed
  p.block_k = env::knobs().attention_block_k;
  return p;
}

// Outputs written while the inputs are still read: an output sharing memory with an input (or with
// another output) would give silently wrong numbers, so it is refused, naming both arguments.
struct Named {
  const char* name;
  overlap::Bytes bytes;
};
template <typename T>
Named named(const char* name, const TensorView<T>& v) {
  return {name, overlap::bytes_of(v)};
}

void check_no_alias(std::initializer_list<Named> outputs, std::initializer_list<Named> inputs) {
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (const auto& i : inputs)
      check(!overlap::overlaps(o->bytes, i.bytes),
            "attention: output {} overlaps input {} in memory; an output must not alias an input", o->name,
            i.name);
    for (auto p = std::next(o); p != outputs.end(); ++p)
      check(!overlap::overlaps(o->bytes, p->bytes), "attention: outputs {} and {} overlap in memory", o->name,
            p->name);
  }
}

template <typename T>
TensorView<T> dense(Buffer<T>& buf, int64_t a, int64_t b, int64_t c, int64_t d) {
  return TensorView<T>::contiguous(buf.data(), {a, b, c, d});
}

// The kernels the dispatch policy chooses (core/dispatch.hpp), picked once per call: the path's table
// (bf16 on the FMAs: avx512's, whose kernels widen bf16 operands to fp32 as they load them), or the AMX
// kernels on the tile emulator.
detail::Kernels kernels(bool bf16) {
  const dispatch::Choice c =
      dispatch::choose(bf16 ? dispatch::Dtype::bf16 : dispatch::Dtype::f32, dispatch::Work::blocked);
  if (c.family == dispatch::Family::amx_emulated) return detail::kernels_amxemu();
  static constexpr isa::Paths<detail::Kernels> paths{detail::kernels_scalar, detail::kernels_avx2,
                                                     detail::kernels_avx512, detail::kernels_avx512bf16,
                                                     detail::kernels_amx};
  return isa::pick_path(paths, c.isa);
}

}  // namespace

template <typename T>
void flash_attention_forward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                             const TensorView<T>& o, const TensorView<float>& lse, const Options& options) {
  detail::Problem p = make_problem(q, k, v, lse, options);
  check_view(o, "o", p.batch, p.heads, p.n_q, p.d);
  check_no_alias({named("o", o), named("lse", lse)}, {named("q", q), named("k", k), named("v", v)});
  p.o = operand(o);
  kernels(p.bf16).forward(p);
}

template <typename T>
void flash_attention_backward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                              const TensorView<T>& o, const TensorView<T>& d_o, const TensorView<float>& lse,
                              const TensorView<T>& dq, const TensorView<T>& dk, const TensorView<T>& dv,
                              const Options& options) {
  detail::Problem p = make_problem(q, k, v, lse, options);
  check_view(o, "o", p.batch, p.heads, p.n_q, p.d);
  check_view(d_o, "do", p.batch, p.heads, p.n_q, p.d);
  check_view(dq, "dq", p.batch, p.heads, p.n_q, p.d);
  check_view(dk, "dk", p.batch, p.kv_heads, p.n_k, p.d);
  check_view(dv, "dv", p.batch, p.kv_heads, p.n_k, p.d);
  check_no_alias(
      {named("dq", dq), named("dk", dk), named("dv", dv)},
      {named("q", q), named("k", k), named("v", v), named("o", o), named("do", d_o), named("lse", lse)});
  p.o = operand(o);
  p.d_o = operand(d_o);
  p.dq = operand(dq);
  p.dk = operand(dk);
  p.dv = operand(dv);
  kernels(p.bf16).backward(p);
}

namespace {

// A packed [total, heads, d] view as an operand: sequence offsets go into the position (sb = 0).
template <typename T>
detail::Operand packed_operand(const TensorView<T>& t) {
  detail::Operand o;
  o.data = const_cast<void*>(static_cast<const void*>(t.data));
  o.sb = 0;
  o.sh = t.stride[1];
  o.ss = t.stride[0];
  o.sd = t.stride[2];
  return o;
}

// cu_seqlens as flash-attn takes it: batch + 1 offsets from 0, never decreasing, ending at the total.
int64_t check_cu_seqlens(std::span<const int32_t> cu, const char* name, int64_t total, int64_t max_seqlen,
                         const char* max_name, const char* total_of) {
  check(cu.size() >= 2, "attention: {} must hold batch + 1 >= 2 offsets, got {}", name, cu.size());
  check(cu[0] == 0, "attention: {}[0] must be 0, got {}", name, cu[0]);
  int64_t longest = 0;
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    check(cu[b + 1] >= cu[b], "attention: {} must not decrease, got {}[{}] = {} after {}", name, name, b + 1,
          cu[b + 1], cu[b]);
    longest = std::max<int64_t>(longest, cu[b + 1] - cu[b]);
  }
  check(cu.back() == total, "attention: {}'s last entry ({}) must be the number of rows of {} ({})", name,
        cu.back(), total_of, total);
  check(max_seqlen >= longest, "attention: {} ({}) is less than the longest sequence in {} ({})", max_name,
        max_seqlen, name, longest);
  return longest;
}

template <typename T>
detail::Problem make_varlen_problem(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                                    const TensorView<float>& lse, std::span<const int32_t> cu_q,
                                    std::span<const int32_t> cu_k, int64_t max_q, int64_t max_k,
                                    const Options& options) {
  check(q.rank == 3, "attention: q must be rank 3 [total_q, heads, d], got rank {}", q.rank);
  check(k.rank == 3, "attention: k must be rank 3 [total_k, kv_heads, d], got rank {}", k.rank);
  detail::Problem p;
  const int64_t total_q = q.shape[0], total_k = k.shape[0];
  p.heads = q.shape[1];
  p.d = q.shape[2];
  p.kv_heads = k.shape[1];
  check(p.heads >= 1 && p.kv_heads >= 1, "attention: heads and kv_heads must be >= 1");
  check(p.d >= 16 && p.d <= 256, "attention: head dimension d must be in 16..256, got {}", p.d);
  check(p.heads % p.kv_heads == 0, "attention: heads ({}) must be a multiple of kv_heads ({})", p.heads,
        p.kv_heads);
  check_tensor_view("attention", "q", q.data, q.rank, q.shape, q.stride, {total_q, p.heads, p.d});
  check_tensor_view("attention", "k", k.data, k.rank, k.shape, k.stride, {total_k, p.kv_heads, p.d});
  check_tensor_view("attention", "v", v.data, v.rank, v.shape, v.stride, {total_k, p.kv_heads, p.d});
  check_tensor_view("attention", "lse", lse.data, lse.rank, lse.shape, lse.stride, {p.heads, total_q});
  check(cu_k.size() == cu_q.size(),
        "attention: cu_seqlens_q and cu_seqlens_k must have the same size, got {} and {}", cu_q.size(),
        cu_k.size());
  p.n_q = check_cu_seqlens(cu_q, "cu_seqlens_q", total_q, max_q, "max_seqlen_q", "q");
  p.n_k = check_cu_seqlens(cu_k, "cu_seqlens_k", total_k, max_k, "max_seqlen_k", "k");
  p.batch = static_cast<int64_t>(cu_q.size()) - 1;
  p.cu_q = cu_q.data();
  p.cu_k = cu_k.data();
  p.bf16 = std::is_same_v<T, bf16>;
  set_options(p, options);
  if (p.softcap == 0.0f) {
    // log2_scale reads [b, h, n, d] views: the packed ones as one sequence.
    auto as4 = [](const TensorView<T>& t) {
      return TensorView<T>{
          t.data, 4, {1, t.shape[1], t.shape[0], t.shape[2]}, {0, t.stride[1], t.stride[0], t.stride[2]}};
    };
    log2_scale(p, as4(q), as4(k));
  }
  p.q = packed_operand(q);
  p.k = packed_operand(k);
  p.v = packed_operand(v);
  p.lse = lse.data;
  p.lse_sb = 0;
  p.lse_sh = lse.stride[0];
  p.lse_ss = lse.stride[1];
  p.threads = get_num_threads();
  p.block_q = env::knobs().attention_block_q;
  p.block_k = env::knobs().attention_block_k;
  return p;
}

}  // namespace

template <typename T>
void flash_attention_varlen_forward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                                    std::span<const int32_t> cu_seqlens_q,
                                    std::span<const int32_t> cu_seqlens_k, int64_t max_seqlen_q,
                                    int64_t max_seqlen_k, const TensorView<T>& o,
                                    const TensorView<float>& lse, const Options& options) {
  detail::Problem p =
      make_varlen_problem(q, k, v, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, options);
  check_tensor_view("attention", "o", o.data, o.rank, o.shape, o.stride, {q.shape[0], p.heads, p.d});
  check_no_alias({named("o", o), named("lse", lse)}, {named("q", q), named("k", k), named("v", v)});
  p.o = packed_operand(o);
  if (q.shape[0] == 0) return;
  kernels(p.bf16).forward(p);
}

template <typename T>
void flash_attention_varlen_backward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                                     const TensorView<T>& o, const TensorView<T>& d_o,
                                     const TensorView<float>& lse, std::span<const int32_t> cu_seqlens_q,
                                     std::span<const int32_t> cu_seqlens_k, int64_t max_seqlen_q,
                                     int64_t max_seqlen_k, const TensorView<T>& dq, const TensorView<T>& dk,
                                     const TensorView<T>& dv, const Options& options) {
  detail::Problem p =
      make_varlen_problem(q, k, v, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, options);
  const int64_t tq = q.shape[0], tk = k.shape[0];
  check_tensor_view("attention", "o", o.data, o.rank, o.shape, o.stride, {tq, p.heads, p.d});
  check_tensor_view("attention", "do", d_o.data, d_o.rank, d_o.shape, d_o.stride, {tq, p.heads, p.d});
  check_tensor_view("attention", "dq", dq.data, dq.rank, dq.shape, dq.stride, {tq, p.heads, p.d});
  check_tensor_view("attention", "dk", dk.data, dk.rank, dk.shape, dk.stride, {tk, p.kv_heads, p.d});
  check_tensor_view("attention", "dv", dv.data, dv.rank, dv.shape, dv.stride, {tk, p.kv_heads, p.d});
  check_no_alias(
      {named("dq", dq), named("dk", dk), named("dv", dv)},
      {named("q", q), named("k", k), named("v", v), named("o", o), named("do", d_o), named("lse", lse)});
  p.o = packed_operand(o);
  p.d_o = packed_operand(d_o);
  p.dq = packed_operand(dq);
  p.dk = packed_operand(dk);
  p.dv = packed_operand(dv);
  if (tq == 0 && tk == 0) return;
  kernels(p.bf16).backward(p);
}

double attention_visible_scores(int64_t n_q, int64_t n_k, const Options& options) {
  detail::Problem p;
  p.left = options.window_left;
  p.right = options.causal ? 0 : options.window_right;
  const detail::Seq s{0, n_q, 0, n_k};
  // Row i sees keys [lo, hi): a sum of clamped linear functions of i, done row by row (O(n_q)).
  double total = 0.0;
  for (int64_t i = 0; i < n_q; ++i) {
    int64_t lo, hi;
    detail::keys_seen(p, s, i, i, lo, hi);
    total += static_cast<double>(std::max<int64_t>(0, hi - lo));
  }
  return total;
}

template <typename T>
ForwardResult<T> flash_attention_forward(const TensorView<T>& q, const TensorView<T>& k,
                                         const TensorView<T>& v, const Options& options) {
  check(q.rank == 4, "attention: q must be rank 4 [batch, heads, n_q, d], got rank {}", q.rank);
  const int64_t b = q.shape[0], h = q.shape[1], n = q.shape[2], d = q.shape[3];
  ForwardResult<T> r;
  r.o_storage = Buffer<T>(static_cast<size_t>(std::max<int64_t>(0, b * h * n * d)), "attention.o");
  r.lse_storage = Buffer<float>(static_cast<size_t>(std::max<int64_t>(0, b * h * n)), "attention.lse");
  r.o = dense(r.o_storage, b, h, n, d);
  r.lse = TensorView<float>::contiguous(r.lse_storage.data(), {b, h, n});
  flash_attention_forward(q, k, v, r.o, r.lse, options);
  return r;
}

template <typename T>
BackwardResult<T> flash_attention_backward(const TensorView<T>& q, const TensorView<T>& k,
                                           const TensorView<T>& v, const TensorView<T>& o,
                                           const TensorView<T>& d_o, const TensorView<float>& lse,
                                           const Options& options) {
  check(q.rank == 4 && k.rank == 4, "attention: q and k must be rank 4 [batch, heads, seq, d]");
  BackwardResult<T> r;
  const auto qs = q.shape, ks = k.shape;
  r.dq_storage =
      Buffer<T>(static_cast<size_t>(std::max<int64_t>(0, qs[0] * qs[1] * qs[2] * qs[3])), "attention.dq");
  r.dk_storage =
      Buffer<T>(static_cast<size_t>(std::max<int64_t>(0, ks[0] * ks[1] * ks[2] * ks[3])), "attention.dk");
  r.dv_storage =
      Buffer<T>(static_cast<size_t>(std::max<int64_t>(0, ks[0] * ks[1] * ks[2] * ks[3])), "attention.dv");
  r.dq = dense(r.dq_storage, qs[0], qs[1], qs[2], qs[3]);
  r.dk = dense(r.dk_storage, ks[0], ks[1], ks[2], ks[3]);
  r.dv = dense(r.dv_storage, ks[0], ks[1], ks[2], ks[3]);
  flash_attention_backward(q, k, v, o, d_o, lse, r.dq, r.dk, r.dv, options);
  return r;
}

double attention_flops(int64_t batch, int64_t heads, int64_t n_q, int64_t n_k, int64_t d, bool causal,
                       bool backward) {
  double f = 4.0 * static_cast<double>(batch) * static_cast<double>(heads) * static_cast<double>(n_q) *
             static_cast<double>(n_k) * static_cast<double>(d);
  if (causal) f *= 0.5;
  if (backward) f *= 2.5;
  return f;
}

#define RIDGE_INSTANTIATE(T)                                                                                 \
  template void flash_attention_forward<T>(const TensorView<T>&, const TensorView<T>&, const TensorView<T>&, \
                                           const TensorView<T>&, const TensorView<float>&, const Options&);  \
  template void flash_attention_backward<T>(                                                                 \
      const TensorView<T>&, const TensorView<T>&, const TensorView<T>&, const TensorView<T>&,                \
      const TensorView<T>&, const TensorView<float>&, const TensorView<T>&, const TensorView<T>&,            \
      const TensorView<T>&, const Options&);                                                                 \
  template ForwardResult<T> flash_attention_forward<T>(const TensorView<T>&, const TensorView<T>&,           \
                                                       const TensorView<T>&, const Options&);                \
  template BackwardResult<T> flash_attention_backward<T>(                                                    \
      const TensorView<T>&, const TensorView<T>&, const TensorView<T>&, const TensorView<T>&,                \
      const TensorView<T>&, const TensorView<float>&, const Options&);                                       \
  template void flash_attention_varlen_forward<T>(                                                           \
      const TensorView<T>&, const TensorView<T>&, const TensorView<T>&, std::span<const int32_t>,            \
      std::span<const int32_t>, int64_t, int64_t, const TensorView<T>&, const TensorView<float>&,            \
      const Options&);                                                                                       \
  template void flash_attention_varlen_backward<T>(                                                          \
      const TensorView<T>&, const TensorView<T>&, const TensorView<T>&, const TensorView<T>&,                \
      const TensorView<T>&, const TensorView<float>&, std::span<const int32_t>, std::span<const int32_t>,    \
      int64_t, int64_t, const TensorView<T>&, const TensorView<T>&, const TensorView<T>&, const Options&);
RIDGE_INSTANTIATE(float)
RIDGE_INSTANTIATE(bf16)
#undef RIDGE_INSTANTIATE

}  // namespace ridge::attention
