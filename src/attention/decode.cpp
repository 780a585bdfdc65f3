// Decode attention over a paged KV cache (flash_attn_with_kvcache), appending to the cache
// (kvcache_append) and the fp64 reference twin: argument checks, the split-KV plan (which keys each
// work item takes, where partials go), and dispatch to the per-ISA bodies (decode_<isa>.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention/internal.hpp"
#include "core/check.hpp"
#include "core/isa_paths.hpp"
#include "core/overlap.hpp"
#include "ridge/attention.hpp"
#include "ridge/core/cpu.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/threads.hpp"

namespace ridge::attention {
namespace {

constexpr const char* kFn = "flash_attn_with_kvcache";
constexpr const char* kAppend = "kvcache_append";
constexpr int kMaxSplits = kMaxKVCacheSplits;
// The heuristic's figures (docs/attention.md, "Decode attention over a paged KV cache").
constexpr int64_t kMinSplitKeys = 256;  // no heuristic split shorter than this
constexpr int64_t kItemsPerThread = 4;
constexpr int64_t kMaxHeuristicSplits = 64;
constexpr int64_t kSplitAlign = 16;  // split boundaries on multiples of 16 keys
constexpr int64_t kBytesPerThread = 64 * 1024;

template <typename T>
double as_double(T x) {
  if constexpr (std::is_same_v<T, bf16>)
    return static_cast<double>(to_float(x));
  else
    return static_cast<double>(x);
}

// Does no element of the view share memory with another? Sufficient test: sorted by stride, each
// stride passes the reach of the dimensions below it (every row-major view, padded or permuted).
bool injective(const std::array<int64_t, 4>& shape, const std::array<int64_t, 4>& stride, int rank) {
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (int i = 0; i < rank; ++i)
    if (shape[i] > 1) dims.emplace_back(stride[i], shape[i]);
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // largest offset the smaller-stride dimensions reach
  for (const auto& [s, n] : dims) {
    if (s <= reach) return false;
    reach += s * (n - 1);
  }
  return true;
}

template <typename T>
void check_written(const char* fn, const char* name, const TensorView<T>& t) {
  check(injective(t.shape, t.stride, t.rank),
        "{}: {} has strides {} {} {} {} under which two of its elements share memory; a view that is "
        "written needs distinct elements",
        fn, name, t.stride[0], t.stride[1], t.stride[2], t.stride[3]);
}

struct Named {
  const char* name;
  overlap::Bytes bytes;
};
template <typename V>
Named named(const char* name, const V& v) {
  return {name, overlap::bytes_of(v)};
}
Named named_span(const char* name, std::span<const int32_t> s) {
  overlap::Bytes b;
  b.origin = reinterpret_cast<intptr_t>(s.data());
  b.elem = 4;
  b.rank = 1;
  b.shape = {static_cast<int64_t>(s.size()), 1, 1, 1};
  b.stride = {4, 0, 0, 0};
  return {name, b};
}

void check_no_alias(const char* fn, std::initializer_list<Named> outputs,
                    std::initializer_list<Named> inputs) {
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (const auto& i : inputs)
      check(!overlap::overlaps(o->bytes, i.bytes),
            "{}: output {} overlaps input {} in memory; an output must not alias an input", fn, o->name,
            i.name);
    for (auto p = std::next(o); p != outputs.end(); ++p)
      check(!overlap::overlaps(o->bytes, p->bytes), "{}: outputs {} and {} overlap in memory", fn, o->name,
            p->name);
  }
}

struct Cache {
  int64_t num_blocks = 0, block_size = 0, kv_heads = 0, d = 0, max_blocks = 0;
};

// The cache, the lengths and the block table, checked for `batch` sequences of which each holds
// cache_seqlens[b] + extra keys once `extra` more are appended: shapes, strides, lengths within
// the table's capacity, and every block id those keys use within the pool.
template <typename T>
Cache check_cache(const char* fn, const TensorView<T>& k_cache, const TensorView<T>& v_cache, int64_t batch,
                  int64_t d, std::span<const int32_t> seqlens, MatrixView<const int32_t> table,
                  int64_t extra) {
  check_tensor_view(fn, "k_cache", k_cache.data, k_cache.rank, k_cache.shape, k_cache.stride, {-1, -1, -1, d},
                    Strides::positive);
  Cache c;
  c.num_blocks = k_cache.shape[0];
  c.block_size = k_cache.shape[1];
  c.kv_heads = k_cache.shape[2];
  c.d = d;
  check(c.num_blocks >= 1 && c.block_size >= 1 && c.kv_heads >= 1,
        "{}: k_cache is [{}, {}, {}, {}]; num_blocks, block_size and kv_heads must be >= 1", fn, c.num_blocks,
        c.block_size, c.kv_heads, d);
  check_tensor_view(fn, "v_cache", v_cache.data, v_cache.rank, v_cache.shape, v_cache.stride,
                    {c.num_blocks, c.block_size, c.kv_heads, d}, Strides::positive);
  check(static_cast<int64_t>(seqlens.size()) == batch,
        "{}: cache_seqlens has {} entries, expected batch = {}", fn, seqlens.size(), batch);
  check(seqlens.data() != nullptr || batch == 0, "{}: cache_seqlens is null", fn);
  check_matrix_view(fn, "block_table", table.data, table.rows, table.cols, table.ld, batch, -1);
  check(table.cols >= 1, "{}: block_table has 0 columns, expected max_blocks_per_seq >= 1", fn);
  c.max_blocks = table.cols;
  const int64_t capacity = table.cols * c.block_size;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = seqlens[b];
    check(len >= 0, "{}: cache_seqlens[{}] = {} is negative", fn, b, len);
    if (extra == 0)
      check(
          len <= capacity,
          "{}: cache_seqlens[{}] = {} passes the block table's capacity of {} keys (max_blocks_per_seq {} x "
          "block_size {})",
          fn, b, len, capacity, table.cols, c.block_size);
    else
      check(len + extra <= capacity,
            "{}: cache_seqlens[{}] = {} plus {} new keys passes the block table's capacity of {} keys "
            "(max_blocks_per_seq {} x block_size {})",
            fn, b, len, extra, capacity, table.cols, c.block_size);
    const int64_t used = (len + extra + c.block_size - 1) / c.block_size;
    for (int64_t x = 0; x < used; ++x) {
      const int64_t id = table(b, x);
      check(id >= 0 && id < c.num_blocks,
            "{}: block_table[{}][{}] = {} is not a block of the cache (expected 0..{}; sequence {} uses its "
            "first {} entries)",
            fn, b, x, id, c.num_blocks - 1, b, used);
    }
  }
  return c;
}

// The largest Euclidean norm of a row of d elements at `row(i)`, i < n, element stride sd.
template <typename T, typename Row>
double max_norm(int64_t n, int64_t d, int64_t sd, Row row) {
  double best = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const T* r = row(i);
    double acc = 0.0;
    for (int64_t c = 0; c < d; ++c) {
      const double x = as_double(r[c * sd]);
      acc += x * x;
    }
    best = std::max(best, acc);
  }
  return std::sqrt(best);
}

template <typename T>
struct Checked {
  detail::DecodeProblem p;
  Cache cache;
  double scale = 0.0;
};

template <typename T>
Checked<T> check_decode(const TensorView<T>& q, const TensorView<T>& k_cache, const TensorView<T>& v_cache,
                        std::span<const int32_t> seqlens, MatrixView<const int32_t> table,
                        const TensorView<T>& o, const TensorView<float>& lse, const KVCacheOptions& options) {
  check(q.rank == 4, "{}: q must be rank 4 [batch, seqlen_q, heads, d], got rank {}", kFn, q.rank);
  const int64_t batch = q.shape[0], seqlen_q = q.shape[1], heads = q.shape[2], d = q.shape[3];
  check(batch >= 1 && seqlen_q >= 1 && heads >= 1,
        "{}: q is [{}, {}, {}, {}]; batch, seqlen_q and heads must be >= 1", kFn, batch, seqlen_q, heads, d);
  check(d >= 16 && d <= 256, "{}: head dimension d must be in 16..256, got {}", kFn, d);
  check_tensor_view(kFn, "q", q.data, q.rank, q.shape, q.stride, {batch, seqlen_q, heads, d},
                    Strides::positive);
  Checked<T> r;
  r.cache = check_cache(kFn, k_cache, v_cache, batch, d, seqlens, table, 0);
  check(heads % r.cache.kv_heads == 0, "{}: heads ({}) must be a multiple of kv_heads ({})", kFn, heads,
        r.cache.kv_heads);
  check_tensor_view(kFn, "o", o.data, o.rank, o.shape, o.stride, {batch, seqlen_q, heads, d},
                    Strides::positive);
  check_written(kFn, "o", o);
  const bool want_lse = lse.data != nullptr;
  if (want_lse) {
    check_tensor_view(kFn, "lse", lse.data, lse.rank, lse.shape, lse.stride, {batch, heads, seqlen_q},
                      Strides::positive);
    check_written(kFn, "lse", lse);
    check_no_alias(kFn, {named("o", o), named("lse", lse)},
                   {named("q", q), named("k_cache", k_cache), named("v_cache", v_cache),
                    named("block_table", table), named_span("cache_seqlens", seqlens)});
  } else {
    check_no_alias(kFn, {named("o", o)},
                   {named("q", q), named("k_cache", k_cache), named("v_cache", v_cache),
                    named("block_table", table), named_span("cache_seqlens", seqlens)});
  }
  check(std::isfinite(options.scale) && options.scale >= 0.0f,
        "{}: scale must be finite and > 0 (0 means 1/sqrt(d)), got {}", kFn, options.scale);
  check(options.num_splits >= 0 && options.num_splits <= kMaxSplits,
        "{}: num_splits must be in 0..{} (0 = chosen by the heuristic), got {}", kFn, kMaxSplits,
        options.num_splits);

  detail::DecodeProblem& p = r.p;
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.heads = heads;
  p.kv_heads = r.cache.kv_heads;
  p.d = d;
  p.num_blocks = r.cache.num_blocks;
  p.block_size = r.cache.block_size;
  p.bf16 = std::is_same_v<T, bf16>;
  p.causal = options.causal;
  const auto operand = [](const TensorView<T>& t) {
    detail::Operand x;
    x.data = const_cast<void*>(static_cast<const void*>(t.data));
    x.sb = t.stride[0];
    x.ss = t.stride[1];
    x.sh = t.stride[2];
    x.sd = t.stride[3];
    return x;
  };
  p.q = operand(q);
  p.o = operand(o);
  p.k = k_cache.data;
  p.v = v_cache.data;
  p.k_blk = k_cache.stride[0];
  p.k_row = k_cache.stride[1];
  p.k_h = k_cache.stride[2];
  p.k_d = k_cache.stride[3];
  p.v_blk = v_cache.stride[0];
  p.v_row = v_cache.stride[1];
  p.v_h = v_cache.stride[2];
  p.v_d = v_cache.stride[3];
  p.seqlens = seqlens.data();
  p.block_table = table.data;
  p.table_ld = table.ld;
  if (want_lse) {
    p.lse = lse.data;
    p.lse_sb = lse.stride[0];
    p.lse_sh = lse.stride[1];
    p.lse_ss = lse.stride[2];
  }
  r.scale =
      options.scale == 0.0f ? 1.0 / std::sqrt(static_cast<double>(d)) : static_cast<double>(options.scale);
  return r;
}

// As flash.cpp's log2_scale: c = scale * log2(e), capped for a scale so large that s * c could
// overflow fp32 (bound >= |s| from the largest row norms of q and of the keys in use); the cap
// changes nothing but lse, which lse_factor carries back to the user's scale.
template <typename T>
void log2_scale(detail::DecodeProblem& p, double scale, const TensorView<T>& q, const TensorView<T>& k_cache,
                std::span<const int32_t> seqlens, MatrixView<const int32_t> table) {
  constexpr double kLog2e = 1.4426950408889634;
  const double c = scale * kLog2e;
  p.c = static_cast<float>(c);
  p.lse_factor = static_cast<float>(1.0 / kLog2e);
  if (c <= 1024.0) return;
  double qn = 0.0, kn = 0.0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.seqlen_q; ++i)
      qn = std::max(qn, max_norm<T>(p.heads, p.d, q.stride[3], [&](int64_t h) {
                      return q.data + b * q.stride[0] + i * q.stride[1] + h * q.stride[2];
                    }));
    for (int64_t j = 0; j < seqlens[b]; ++j) {
      const int64_t id = table(b, j / p.block_size);
      kn = std::max(kn, max_norm<T>(p.kv_heads, p.d, k_cache.stride[3], [&](int64_t h) {
                      return k_cache.data + id * k_cache.stride[0] + (j % p.block_size) * k_cache.stride[1] +
                             h * k_cache.stride[2];
                    }));
    }
  }
  const double bound = qn * kn;
  const double cap = bound > 0.0 ? std::ldexp(1.0, 124) / bound : std::ldexp(1.0, 124);
  if (c <= cap && c <= static_cast<double>(std::numeric_limits<float>::max())) return;
  const double capped = std::min(cap, static_cast<double>(std::numeric_limits<float>::max()));
  p.c = static_cast<float>(capped);
  p.lse_factor = static_cast<float>(scale / static_cast<double>(p.c));
}

detail::DecodeKernels decode_kernels() {
  static constexpr isa::Paths<detail::DecodeKernels> paths{
      detail::decode_kernels_scalar, detail::decode_kernels_avx2, detail::decode_kernels_avx512,
      detail::decode_kernels_avx512bf16};
  return isa::pick_path(paths, cpu::active_isa());
}

}  // namespace

int kvcache_num_splits(int64_t seqlen_k, int64_t units, int threads) {
  check(seqlen_k >= 0 && units >= 1 && threads >= 1,
        "kvcache_num_splits: seqlen_k must be >= 0, units and threads >= 1 (got {}, {}, {})", seqlen_k, units,
        threads);
  const int64_t target = kItemsPerThread * threads;
  if (units >= target) return 1;
  const int64_t want = (target + units - 1) / units;
  const int64_t most = std::min(seqlen_k / kMinSplitKeys, kMaxHeuristicSplits);
  return static_cast<int>(std::max<int64_t>(1, std::min(want, most)));
}

template <typename T>
void flash_attn_with_kvcache(const TensorView<T>& q, const TensorView<T>& k_cache,
                             const TensorView<T>& v_cache, std::span<const int32_t> cache_seqlens,
                             MatrixView<const int32_t> block_table, const TensorView<T>& o,
                             const TensorView<float>& lse, const KVCacheOptions& options) {
  Checked<T> ch = check_decode(q, k_cache, v_cache, cache_seqlens, block_table, o, lse, options);
  detail::DecodeProblem& p = ch.p;
  log2_scale(p, ch.scale, q, k_cache, cache_seqlens, block_table);

  // The plan: each (sequence, kv head) split into n_b chunks of keys (multiples of 16 keys); a unit
  // with n_b > 1 gets n_b partial slots and a combine. Items run longest first, so the dynamic
  // schedule ends with the short ones (lengths differ across the batch and across splits).
  const int threads = get_num_threads();
  const int64_t rows = p.heads / p.kv_heads * p.seqlen_q;
  p.slot = checked_product({rows, p.d + 2}, "flash_attn_with_kvcache: partial slot");
  std::vector<detail::DecodeItem> items;
  std::vector<detail::DecodeUnit> units;
  int64_t partial_floats = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len = cache_seqlens[b];
    const int64_t n =
        options.num_splits > 0 ? options.num_splits : kvcache_num_splits(len, p.batch * p.kv_heads, threads);
    const int64_t chunk = n > 1 ? ((len + n - 1) / n + kSplitAlign - 1) / kSplitAlign * kSplitAlign : len;
    for (int64_t h = 0; h < p.kv_heads; ++h) {
      int64_t base = -1;
      if (n > 1) {
        base = partial_floats;
        partial_floats += checked_product({n, p.slot}, "flash_attn_with_kvcache: partials");
        checked_product({partial_floats, 4}, "flash_attn_with_kvcache: partials");
        units.push_back({b, h, n, base});
      }
      for (int64_t s = 0; s < n; ++s) {
        const int64_t k0 = std::min(len, s * chunk), k1 = std::min(len, k0 + chunk);
        items.push_back({b, h, k0, n > 1 ? k1 : len, n > 1 ? base + s * p.slot : -1});
      }
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const detail::DecodeItem& a, const detail::DecodeItem& b) {
    return a.k1 - a.k0 > b.k1 - b.k0;
  });
  Buffer<float> partials(static_cast<size_t>(partial_floats), "attention.decode.partials");
  p.items = items.data();
  p.n_items = static_cast<int64_t>(items.size());
  p.units = units.data();
  p.n_units = static_cast<int64_t>(units.size());
  p.partials = partials.data();
  // No more threads than items, nor than the cache bytes give each ~kBytesPerThread to read: waking
  // a thread costs microseconds, the reading of a short context about as much.
  double kv_bytes = 0.0;  // a double: lengths of sequences that share blocks may sum past int64 in bytes
  for (int64_t b = 0; b < p.batch; ++b) kv_bytes += static_cast<double>(cache_seqlens[b]);
  kv_bytes *= static_cast<double>(2 * p.kv_heads * p.d * static_cast<int64_t>(sizeof(T)));
  const int64_t by_bytes = static_cast<int64_t>(std::min(kv_bytes / kBytesPerThread, 1e9)) + 1;
  p.threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({threads, p.n_items, by_bytes})));
  decode_kernels().decode(p);
}

template <typename T>
void kvcache_append(const TensorView<T>& k_new, const TensorView<T>& v_new, const TensorView<T>& k_cache,
                    const TensorView<T>& v_cache, std::span<const int32_t> cache_seqlens,
                    MatrixView<const int32_t> block_table) {
  check(k_new.rank == 4, "{}: k_new must be rank 4 [batch, seqlen_new, kv_heads, d], got rank {}", kAppend,
        k_new.rank);
  const int64_t batch = k_new.shape[0], n = k_new.shape[1], d = k_new.shape[3];
  check(batch >= 1, "{}: k_new's batch must be >= 1, got {}", kAppend, batch);
  check(d >= 1, "{}: k_new's head dimension must be >= 1, got {}", kAppend, d);
  const Cache c = check_cache(kAppend, k_cache, v_cache, batch, d, cache_seqlens, block_table, n);
  check_tensor_view(kAppend, "k_new", k_new.data, k_new.rank, k_new.shape, k_new.stride,
                    {batch, n, c.kv_heads, d}, Strides::positive);
  check_tensor_view(kAppend, "v_new", v_new.data, v_new.rank, v_new.shape, v_new.stride,
                    {batch, n, c.kv_heads, d}, Strides::positive);
  check_written(kAppend, "k_cache", k_cache);
  check_written(kAppend, "v_cache", v_cache);
  check_no_alias(kAppend, {named("k_cache", k_cache), named("v_cache", v_cache)},
                 {named("k_new", k_new), named("v_new", v_new), named("block_table", block_table),
                  named_span("cache_seqlens", cache_seqlens)});
  // Two sequences writing one cache row (a block shared by both tables) would leave whichever came
  // last: refused, naming both.
  std::vector<std::pair<int64_t, int64_t>> slots;  // (block * block_size + row, sequence)
  slots.reserve(static_cast<size_t>(batch * n));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = cache_seqlens[b] + t;
      slots.emplace_back(block_table(b, pos / c.block_size) * c.block_size + pos % c.block_size, b);
    }
  std::sort(slots.begin(), slots.end());
  for (size_t x = 1; x < slots.size(); ++x) {
    if (slots[x].first != slots[x - 1].first) continue;
    const int64_t blk = slots[x].first / c.block_size, row = slots[x].first % c.block_size;
    if (slots[x].second == slots[x - 1].second)
      fail(
          "{}: block_table: sequence {} would write row {} of cache block {} twice (its row of the table "
          "lists the block twice)",
          kAppend, slots[x].second, row, blk);
    fail(
        "{}: block_table: sequences {} and {} would both write row {} of cache block {}; a block being "
        "appended to must belong to one sequence",
        kAppend, slots[x - 1].second, slots[x].second, row, blk);
  }

  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = cache_seqlens[b] + t;
      const int64_t id = block_table(b, pos / c.block_size), row = pos % c.block_size;
      for (int64_t h = 0; h < c.kv_heads; ++h) {
        const T* ks = k_new.data + b * k_new.stride[0] + t * k_new.stride[1] + h * k_new.stride[2];
        const T* vs = v_new.data + b * v_new.stride[0] + t * v_new.stride[1] + h * v_new.stride[2];
        T* kd = k_cache.data + id * k_cache.stride[0] + row * k_cache.stride[1] + h * k_cache.stride[2];
        T* vd = v_cache.data + id * v_cache.stride[0] + row * v_cache.stride[1] + h * v_cache.stride[2];
        for (int64_t x = 0; x < d; ++x) {
          kd[x * k_cache.stride[3]] = ks[x * k_new.stride[3]];
          vd[x * v_cache.stride[3]] = vs[x * v_new.stride[3]];
        }
      }
    }
}

template <typename T>
void flash_attn_with_kvcache_reference(const TensorView<T>& q, const TensorView<T>& k_cache,
                                       const TensorView<T>& v_cache, std::span<const int32_t> cache_seqlens,
                                       MatrixView<const int32_t> block_table, const TensorView<T>& o,
                                       const TensorView<float>& lse, const KVCacheOptions& options) {
  const Checked<T> ch = check_decode(q, k_cache, v_cache, cache_seqlens, block_table, o, lse, options);
  const detail::DecodeProblem& p = ch.p;
  const int64_t group = p.heads / p.kv_heads, d = p.d;
  std::vector<double> s, acc(static_cast<size_t>(d));
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len = cache_seqlens[b];
    s.resize(static_cast<size_t>(len));
    for (int64_t i = 0; i < p.seqlen_q; ++i)
      for (int64_t h = 0; h < p.heads; ++h) {
        const int64_t kvh = h / group;
        const int64_t visible = p.causal ? std::clamp<int64_t>(i + len - p.seqlen_q + 1, 0, len) : len;
        const T* qr = q.data + b * q.stride[0] + i * q.stride[1] + h * q.stride[2];
        const auto at = [&](const TensorView<T>& cache, int64_t j) {
          const int64_t id = block_table(b, j / p.block_size);
          return cache.data + id * cache.stride[0] + (j % p.block_size) * cache.stride[1] +
                 kvh * cache.stride[2];
        };
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < visible; ++j) {
          const T* kr = at(k_cache, j);
          double dot = 0.0;
          for (int64_t c = 0; c < d; ++c)
            dot += as_double(qr[c * q.stride[3]]) * as_double(kr[c * k_cache.stride[3]]);
          s[j] = dot * ch.scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < visible; ++j) {
          const double pj = std::exp(s[j] - mx);
          sum += pj;
          const T* vr = at(v_cache, j);
          for (int64_t c = 0; c < d; ++c) acc[c] += pj * as_double(vr[c * v_cache.stride[3]]);
        }
        T* out = o.data + b * o.stride[0] + i * o.stride[1] + h * o.stride[2];
        for (int64_t c = 0; c < d; ++c) {
          const double x = visible > 0 ? acc[c] / sum : 0.0;
          if constexpr (std::is_same_v<T, bf16>)
            out[c * o.stride[3]] = to_bf16(static_cast<float>(x));
          else
            out[c * o.stride[3]] = static_cast<T>(x);
        }
        if (lse.data)
          lse.data[b * lse.stride[0] + h * lse.stride[1] + i * lse.stride[2]] =
              visible > 0 ? static_cast<float>(mx + std::log(sum)) : -std::numeric_limits<float>::infinity();
      }
  }
}

#define RIDGE_INSTANTIATE(T)                                                                             \
  template void flash_attn_with_kvcache<T>(                                                              \
      const TensorView<T>&, const TensorView<T>&, const TensorView<T>&, std::span<const int32_t>,        \
      MatrixView<const int32_t>, const TensorView<T>&, const TensorView<float>&, const KVCacheOptions&); \
  template void kvcache_append<T>(const TensorView<T>&, const TensorView<T>&, const TensorView<T>&,      \
                                  const TensorView<T>&, std::span<const int32_t>,                        \
                                  MatrixView<const int32_t>);                                            \
  template void flash_attn_with_kvcache_reference<T>(                                                    \
      const TensorView<T>&, const TensorView<T>&, const TensorView<T>&, std::span<const int32_t>,        \
      MatrixView<const int32_t>, const TensorView<T>&, const TensorView<float>&, const KVCacheOptions&);
RIDGE_INSTANTIATE(float)
RIDGE_INSTANTIATE(bf16)
#undef RIDGE_INSTANTIATE

}  // namespace ridge::attention
