// Cost models: FLOPs and bytes per operand for each operation, and the bound on a chip.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ridge/core/error.hpp"
#include "ridge/roofline.hpp"
#include "roofline/json.hpp"
#include "core/check.hpp"

namespace ridge::roofline {
namespace {

constexpr long double kMaxDim = 0x1p40L;
constexpr long double kMaxElements = 0x1p60L;

long double dim(int64_t v, const char* what) {
  check_arg(v >= 1, what, "{} is not a positive size", v);
  check_arg(static_cast<long double>(v) <= kMaxDim, what, "{} is too large (at most 2^40)", v);
  return static_cast<long double>(v);
}

long double esize(DType t) {
  return static_cast<long double>(dtype_size(t));
}

Traffic tensor(const std::string& name, DType t, long double elements, bool write = false) {
  check_arg(elements <= kMaxElements, "shape", "tensor {} would hold {:.3g} elements (at most 2^60)", name,
            static_cast<double>(elements));
  return {name, dtype_name(t), elements, elements * esize(t), write};
}

Traffic fp32_scales(const std::string& name, long double elements) {
  return tensor(name, DType::f32, elements);
}

long double ceil_div(long double a, long double b) {
  return std::ceil(a / b);
}

std::string dt_label(const MatmulDtypes& dt) {
  if (dt.x == dt.w && dt.w == dt.out) return dtype_name(dt.x);
  return fmt::format("{}x{}->{}", dtype_name(dt.x), dtype_name(dt.w), dtype_name(dt.out));
}

double nan() {
  return std::numeric_limits<double>::quiet_NaN();
}

nlohmann::json num_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json traffic_json(const std::vector<Traffic>& v) {
  auto a = nlohmann::json::array();
  for (const auto& t : v)
    a.push_back({{"name", t.name},
                 {"dtype", t.dtype},
                 {"elements", static_cast<double>(t.elements)},
                 {"bytes", static_cast<double>(t.bytes)},
                 {"direction", t.write ? "write" : "read"}});
  return a;
}

void check_chips(int64_t chips) {
  check_arg(chips >= 2 && chips <= (int64_t{1} << 20), "chips",
            "{} is not a chip count (accepted: 2 to 2^20)", chips);
}

}  // namespace

long double Cost::memory_bytes() const {
  long double s = 0;
  for (const auto& t : memory) s += t.bytes;
  return s;
}

long double Cost::link_bytes() const {
  long double s = 0;
  for (const auto& t : link) s += t.bytes;
  return s;
}

double Cost::intensity() const {
  const long double b = memory_bytes();
  return b > 0 ? static_cast<double>(flops / b) : nan();
}

nlohmann::json to_json(const Cost& self) {
  return {{"op", self.op},
          {"shape", self.shape},
          {"compute_dtype", self.compute},
          {"flops", static_cast<double>(self.flops)},
          {"memory_bytes", static_cast<double>(self.memory_bytes())},
          {"link_bytes", static_cast<double>(self.link_bytes())},
          {"intensity", num_or_null(self.intensity())},
          {"memory", traffic_json(self.memory)},
          {"link", traffic_json(self.link)}};
}

nlohmann::json to_json(const Bound& self) {
  return {{"chip", self.chip},
          {"level", self.level},
          {"link", self.link.empty() ? nlohmann::json(nullptr) : nlohmann::json(self.link)},
          {"peak_flops", self.peak},
          {"bandwidth", self.bandwidth},
          {"link_bandwidth", self.link_bandwidth},
          {"flops", self.flops},
          {"memory_bytes", self.memory_bytes},
          {"link_bytes", self.link_bytes},
          {"intensity", num_or_null(self.intensity)},
          {"ridge_intensity", self.ridge_intensity},
          {"t_math_s", self.t_math},
          {"t_memory_s", self.t_memory},
          {"t_link_s", self.t_link},
          {"t_comm_s", self.t_comm},
          {"t_lower_s", self.t_lower},
          {"t_upper_s", self.t_upper},
          {"binding", self.binding},
          {"attainable_flops", self.attainable_flops},
          {"fraction_of_peak", self.fraction_of_peak}};
}

Bound bound(const Cost& cost, const Chip& chip, const BoundOptions& opt) {
  Bound b;
  b.chip = chip.id;
  const auto& ml = chip.memory_level(opt.level);
  b.level = ml.level;
  b.peak = chip.peak(cost.compute);
  b.bandwidth = ml.bandwidth.value;
  b.flops = static_cast<double>(cost.flops);
  b.memory_bytes = static_cast<double>(cost.memory_bytes());
  b.link_bytes = static_cast<double>(cost.link_bytes());
  b.intensity = cost.intensity();
  b.ridge_intensity = b.peak / b.bandwidth;
  b.t_math = static_cast<double>(cost.flops / b.peak);
  b.t_memory = static_cast<double>(cost.memory_bytes() / b.bandwidth);
  if (!cost.link.empty()) {
    b.link = opt.link;
    b.link_bandwidth = chip.link_bandwidth(opt.link);
    b.t_link = static_cast<double>(cost.link_bytes() / b.link_bandwidth);
  }
  b.t_comm = std::max(b.t_memory, b.t_link);
  b.t_lower = std::max(b.t_math, b.t_comm);
  b.t_upper = b.t_math + b.t_comm;
  if (b.t_math >= b.t_comm)
    b.binding = "compute";
  else
    b.binding = b.t_link > b.t_memory ? "link" : "memory";
  b.attainable_flops = b.t_lower > 0 ? b.flops / b.t_lower : 0;
  b.fraction_of_peak = b.t_lower > 0 ? b.t_math / b.t_lower : 0;
  return b;
}

std::string MatmulDtypes::compute_key() const {
  if (!compute.empty()) return compute;
  // The narrower operand is upcast to the wider one's type before the multiply (bf16 x int8
  // weights runs bf16 FLOPs), so the wider input decides which peak applies.
  return peak_key(dtype_size(w) > dtype_size(x) ? w : x);
}

Cost dot(int64_t n, DType t) {
  const long double N = dim(n, "n");
  Cost c;
  c.op = "dot";
  c.shape = fmt::format("N={} {}", n, dtype_name(t));
  c.compute = peak_key(t);
  c.flops = 2 * N - 1;
  c.memory = {tensor("x", t, N), tensor("y", t, N), tensor("x.y", t, 1, true)};
  return c;
}

Cost elementwise(int64_t n, DType t, int inputs, double flops_per_element) {
  const long double N = dim(n, "n");
  check_arg(inputs >= 1 && inputs <= 16, "inputs", "{} is not an input count (accepted: 1 to 16)", inputs);
  check_arg(std::isfinite(flops_per_element) && flops_per_element >= 0 && flops_per_element <= 1e6,
            "flops_per_element", "{} is not accepted (0 to 1e6)", flops_per_element);
  Cost c;
  c.op = "elementwise";
  c.shape = fmt::format("N={} inputs={} {}", n, inputs, dtype_name(t));
  c.compute = peak_key(t);
  c.flops = N * static_cast<long double>(flops_per_element);
  for (int i = 0; i < inputs; ++i) c.memory.push_back(tensor(fmt::format("in{}", i), t, N));
  c.memory.push_back(tensor("out", t, N, true));
  return c;
}

Cost matmul(int64_t b, int64_t d, int64_t f, const MatmulDtypes& dt) {
  const long double B = dim(b, "b"), D = dim(d, "d"), F = dim(f, "f");
  Cost c;
  c.op = "matmul";
  c.shape = fmt::format("B={} D={} F={} {}", b, d, f, dt_label(dt));
  c.compute = dt.compute_key();
  c.flops = 2 * B * D * F;
  c.memory = {tensor("X[B,D]", dt.x, B * D), tensor("W[D,F]", dt.w, D * F),
              tensor("Y[B,F]", dt.out, B * F, true)};
  return c;
}

Cost batched_matmul(int64_t count, int64_t m, int64_t k, int64_t n, const MatmulDtypes& dt) {
  const long double G = dim(count, "count"), M = dim(m, "m"), K = dim(k, "k"), N = dim(n, "n");
  Cost c;
  c.op = "batched-matmul";
  c.shape = fmt::format("batch={} M={} K={} N={} {}", count, m, k, n, dt_label(dt));
  c.compute = dt.compute_key();
  c.flops = 2 * G * M * K * N;
  c.memory = {tensor("A[b,M,K]", dt.x, G * M * K), tensor("B[b,K,N]", dt.w, G * K * N),
              tensor("C[b,M,N]", dt.out, G * M * N, true)};
  return c;
}

Cost matmul_per_example(int64_t b, int64_t d, int64_t f, const MatmulDtypes& dt) {
  const long double B = dim(b, "b"), D = dim(d, "d"), F = dim(f, "f");
  Cost c;
  c.op = "matmul-per-example";
  c.shape = fmt::format("B={} D={} F={} {}", b, d, f, dt_label(dt));
  c.compute = dt.compute_key();
  c.flops = 2 * B * D * F;
  c.memory = {tensor("X[B,D]", dt.x, B * D), tensor("W[B,D,F]", dt.w, B * D * F),
              tensor("Y[B,F]", dt.out, B * F, true)};
  return c;
}

Cost softmax(int64_t rows, int64_t cols, DType t) {
  const long double R = dim(rows, "rows"), C = dim(cols, "cols");
  Cost c;
  c.op = "softmax";
  c.shape = fmt::format("rows={} cols={} {}", rows, cols, dtype_name(t));
  c.compute = peak_key(t);
  c.flops = 5 * R * C;
  c.memory = {tensor("x", t, R * C), tensor("y", t, R * C, true)};
  return c;
}

namespace {

Cost attention_common(const AttentionShape& s, const char* op) {
  const long double Bt = dim(s.batch, "s.batch"), H = dim(s.heads, "s.heads"), Sq = dim(s.seq_q, "s.seq_q"),
                    Skv = dim(s.seq_kv, "s.seq_kv"), Dh = dim(s.head_dim, "s.head_dim");
  check_arg(!s.causal || s.seq_q <= s.seq_kv, "s.seq_q",
            "causal attention: seq_q {} must not exceed seq_kv {}", s.seq_q, s.seq_kv);
  check_arg(s.kv_heads >= 0 && (s.kv_heads == 0 || s.heads % s.kv_heads == 0), "s.kv_heads",
            "{} must divide heads {} (0: equal to heads)", s.kv_heads, s.heads);
  // K and V have the kv heads only (grouped-query attention): their bytes shrink, the FLOPs do not.
  const long double KV = s.kv_heads > 0 ? static_cast<long double>(s.kv_heads) : H;
  Cost c;
  c.op = op;
  c.shape = fmt::format("batch={} heads={}{} seq={}{} d={} {}{}{}", s.batch, s.heads,
                        KV == H ? std::string() : fmt::format(" kv_heads={}", s.kv_heads), s.seq_q,
                        s.seq_q == s.seq_kv ? std::string() : fmt::format("x{}", s.seq_kv), s.head_dim,
                        dtype_name(s.dtype), s.causal ? " causal" : "", s.backward ? " fwd+bwd" : "");
  c.compute = peak_key(s.dtype);
  // QK^T and PV, 2 FLOPs per multiply-add each; causal masking skips about half the pairs (a
  // kernel that skips masked tiles; the naive path computes them all and we count what it does).
  const long double pairs = Bt * H * Sq * Skv;
  const long double fwd = 4 * pairs * Dh;
  // Backward recomputes nothing for the naive path but still does 5 matmuls to the forward's 2.
  c.flops = s.backward ? fwd * 3.5L : fwd;
  const long double q = Bt * H * Sq * Dh, kv = Bt * KV * Skv * Dh;
  c.memory = {tensor("Q", s.dtype, q), tensor("K", s.dtype, kv), tensor("V", s.dtype, kv),
              tensor("O", s.dtype, q, true)};
  if (s.backward) {
    c.memory.push_back(tensor("O (bwd)", s.dtype, q));
    c.memory.push_back(tensor("dO", s.dtype, q));
    c.memory.push_back(tensor("Q,K,V (bwd)", s.dtype, q + 2 * kv));
    c.memory.push_back(tensor("dQ", s.dtype, q, true));
    c.memory.push_back(tensor("dK,dV", s.dtype, 2 * kv, true));
  }
  return c;
}

}  // namespace

Cost attention_naive(const AttentionShape& s) {
  Cost c = attention_common(s, "attention-naive");
  const long double pairs = static_cast<long double>(s.batch) * s.heads * s.seq_q * s.seq_kv;
  // The N x N scores go through memory: S written by QK^T and read by softmax, P written by
  // softmax and read by PV. The naive path materialises them whole even when causal.
  c.memory.push_back(tensor("S (write)", s.dtype, pairs, true));
  c.memory.push_back(tensor("S (read)", s.dtype, pairs));
  c.memory.push_back(tensor("P (write)", s.dtype, pairs, true));
  c.memory.push_back(tensor("P (read)", s.dtype, pairs));
  c.flops += 5 * pairs * (s.backward ? 2 : 1);  // softmax (and its backward)
  if (s.backward) {
    // dV = P^T dO reads P; dP = dO V^T is written; softmax backward reads dP and P, writes dS;
    // dQ = dS K and dK = dS^T Q read dS twice.
    c.memory.push_back(tensor("P (bwd read)", s.dtype, 2 * pairs));
    c.memory.push_back(tensor("dP (write)", s.dtype, pairs, true));
    c.memory.push_back(tensor("dP (read)", s.dtype, pairs));
    c.memory.push_back(tensor("dS (write)", s.dtype, pairs, true));
    c.memory.push_back(tensor("dS (read)", s.dtype, 2 * pairs));
  }
  return c;
}

Cost attention_flash(const AttentionShape& s) {
  Cost c = attention_common(s, "attention-flash");
  if (s.causal) c.flops /= 2;
  const long double rows = static_cast<long double>(s.batch) * s.heads * s.seq_q;
  // The log-sum-exp per query row is all that flash keeps of the softmax, for the backward pass.
  c.memory.push_back(tensor("logsumexp", DType::f32, rows, true));
  if (s.backward) c.memory.push_back(tensor("logsumexp (bwd)", DType::f32, rows));
  return c;
}

Cost fp8_gemm(int64_t m, int64_t n, int64_t k, DType in, DType out) {
  const long double M = dim(m, "m"), N = dim(n, "n"), K = dim(k, "k");
  check_arg(dtype_size(in) == 1, "in",
            "fp8-gemm: input dtype {} is not an 8-bit type (accepted: fp8_e4m3, fp8_e5m2, int8)",
            dtype_name(in));
  Cost c;
  c.op = "fp8-gemm";
  c.shape = fmt::format("M={} N={} K={} {}->{}", m, n, k, dtype_name(in), dtype_name(out));
  c.compute = peak_key(in);
  c.flops = 2 * M * N * K;
  const long double kb = ceil_div(K, 128);
  c.memory = {tensor("A[M,K]", in, M * K), fp32_scales("scale A [M,K/128]", M * kb),
              tensor("B[N,K]", in, N * K), fp32_scales("scale B [N/128,K/128]", ceil_div(N, 128) * kb),
              tensor("D[M,N]", out, M * N, true)};
  return c;
}

namespace {

// `rows_arg` names the caller's argument that holds one row count per group.
Cost grouped(const char* op, const std::vector<int64_t>& rows, const char* rows_arg, int64_t n, int64_t k,
             DType in, DType out) {
  check_arg(!rows.empty() && rows.size() <= 4096, rows_arg, "{} groups (accepted: 1 to 4096)", rows.size());
  const long double N = dim(n, "n"), K = dim(k, "k");
  const bool scaled = dtype_size(in) == 1;
  Cost c;
  c.op = op;
  c.compute = peak_key(in);
  long double valid = 0, active = 0;
  for (long double r : rows) {
    valid += r;
    if (r > 0) active += 1;
  }
  const long double kb = ceil_div(K, 128);
  c.flops = 2 * valid * N * K;
  c.memory = {tensor("A (valid rows)", in, valid * K)};
  if (scaled) c.memory.push_back(fp32_scales("scale A", valid * kb));
  c.memory.push_back(tensor("B[g,N,K] (groups with rows)", in, active * N * K));
  if (scaled) c.memory.push_back(fp32_scales("scale B", active * ceil_div(N, 128) * kb));
  c.memory.push_back(tensor("D (valid rows)", out, valid * N, true));
  return c;
}

}  // namespace

Cost grouped_gemm_contiguous(const std::vector<int64_t>& m_per_group, int64_t n, int64_t k, DType in,
                             DType out) {
  for (auto m : m_per_group) dim(m, "m_per_group");
  Cost c = grouped("grouped-gemm-contiguous", m_per_group, "m_per_group", n, k, in, out);
  long double total = 0;
  for (auto m : m_per_group) total += m;
  c.shape = fmt::format("groups={} M={} N={} K={} {}->{}", m_per_group.size(), static_cast<double>(total), n,
                        k, dtype_name(in), dtype_name(out));
  return c;
}

Cost grouped_gemm_masked(int64_t max_m, const std::vector<int64_t>& valid_m, int64_t n, int64_t k, DType in,
                         DType out) {
  dim(max_m, "max_m");
  long double total = 0;
  for (auto m : valid_m) {
    check(m >= 0 && m <= max_m, "masked m: {} valid rows is outside [0, max m = {}]", m, max_m);
    total += m;
  }
  check_arg(total > 0, "valid_m", "masked m: no group has a valid row (at least one must)");
  Cost c = grouped("grouped-gemm-masked", valid_m, "valid_m", n, k, in, out);
  c.shape = fmt::format("groups={} max_m={} valid={} N={} K={} {}->{}", valid_m.size(), max_m,
                        static_cast<double>(total), n, k, dtype_name(in), dtype_name(out));
  return c;
}

namespace {

Cost collective(const char* op, int64_t bytes, long double factor, long double reduce_factor, DType t,
                int64_t chips) {
  check_arg(bytes >= 1 && bytes <= (int64_t{1} << 60), "bytes", "{} is not a byte count (1 to 2^60)", bytes);
  const long double S = static_cast<long double>(bytes);
  Cost c;
  c.op = op;
  c.shape = chips > 1 ? fmt::format("S={} chips={} {}", bytes, chips, dtype_name(t))
                      : fmt::format("S={} {}", bytes, dtype_name(t));
  c.compute = peak_key(t);
  const long double elements = S / esize(t);
  c.flops = reduce_factor * elements;
  c.link = {tensor("sent per chip", t, factor * elements)};
  return c;
}

}  // namespace

Cost send(int64_t bytes, DType t) {
  return collective("send", bytes, 1, 0, t, 1);
}

Cost all_reduce(int64_t bytes, int64_t chips, DType t) {
  check_chips(chips);
  const long double n = static_cast<long double>(chips);
  // Ring: a reduce-scatter then an all-gather, each moving (n-1)/n of the buffer per chip; the
  // reduce-scatter half adds (n-1)/n of the elements.
  return collective("all-reduce", bytes, 2 * (n - 1) / n, (n - 1) / n, t, chips);
}

Cost all_gather(int64_t bytes, int64_t chips, DType t) {
  check_chips(chips);
  const long double n = static_cast<long double>(chips);
  return collective("all-gather", bytes, (n - 1) / n, 0, t, chips);
}

Cost reduce_scatter(int64_t bytes, int64_t chips, DType t) {
  check_chips(chips);
  const long double n = static_cast<long double>(chips);
  return collective("reduce-scatter", bytes, (n - 1) / n, (n - 1) / n, t, chips);
}

Cost matmul_split_d(int64_t b, int64_t d, int64_t f, int64_t chips, const MatmulDtypes& dt) {
  check_chips(chips);
  const long double B = dim(b, "b"), D = dim(d, "d"), F = dim(f, "f"), n = static_cast<long double>(chips);
  check_arg(d >= chips, "D", "{} is smaller than the chip count {}", d, chips);
  Cost c;
  c.op = "matmul-split-d";
  c.shape = fmt::format("B={} D={} F={} chips={} {}", b, d, f, chips, dt_label(dt));
  c.compute = dt.compute_key();
  c.flops = 2 * B * (D / n) * F;
  c.link = {tensor("partial sum Y[B,F]", dt.out, 2 * (n - 1) / n * B * F)};
  return c;
}

nlohmann::json to_json(const CriticalBatch& self) {
  return {{"chip", self.chip},
          {"compute_dtype", self.compute},
          {"level", self.level},
          {"peak_flops", self.peak},
          {"bandwidth", self.bandwidth},
          {"d", self.d},
          {"f", self.f},
          {"asymptotic_batch", self.asymptotic},
          {"exact_batch", self.exact ? nlohmann::json(*self.exact) : nlohmann::json(nullptr)}};
}

CriticalBatch critical_batch(const Chip& chip, int64_t d, int64_t f, const MatmulDtypes& dt,
                             const std::string& level) {
  const long double D = dim(d, "d"), F = dim(f, "f");
  CriticalBatch r;
  r.chip = chip.id;
  r.compute = dt.compute_key();
  r.level = chip.memory_level(level).level;
  r.peak = chip.peak(r.compute);
  r.bandwidth = chip.bandwidth(level);
  r.d = d;
  r.f = f;
  const long double ratio = static_cast<long double>(r.peak) / r.bandwidth;
  const long double sx = esize(dt.x), sw = esize(dt.w), so = esize(dt.out);
  r.asymptotic = static_cast<double>(ratio * sw / 2);
  // Compute-bound: 2BDF / peak >= (sx BD + sw DF + so BF) / bw, i.e.
  // B (2DF - ratio (sx D + so F)) >= ratio sw DF.
  const long double denom = 2 * D * F - ratio * (sx * D + so * F);
  if (denom > 0) {
    const long double x = ratio * sw * D * F / denom;
    if (x <= kMaxDim) {
      auto bound_ok = [&](long double B) {
        return 2 * B * D * F >= ratio * (sx * B * D + sw * D * F + so * B * F);
      };
      long double B = std::max(1.0L, std::ceil(x));
      // The closed form is rounded; settle the integer by the inequality itself.
      while (B > 1 && bound_ok(B - 1)) B -= 1;
      while (!bound_ok(B)) B += 1;
      r.exact = static_cast<int64_t>(B);
    }
  }
  return r;
}

nlohmann::json to_json(const CriticalSplit& self) {
  return {{"chip", self.chip},
          {"compute_dtype", self.compute},
          {"link", self.link},
          {"peak_flops", self.peak},
          {"link_bandwidth", self.link_bandwidth},
          {"chips", self.chips},
          {"threshold_d", self.threshold},
          {"exact_d", self.exact}};
}

CriticalSplit critical_split_d(const Chip& chip, int64_t chips, const MatmulDtypes& dt,
                               const std::string& link) {
  check_chips(chips);
  CriticalSplit r;
  r.chip = chip.id;
  r.compute = dt.compute_key();
  r.link = link;
  r.peak = chip.peak(r.compute);
  r.link_bandwidth = chip.link_bandwidth(link);
  r.chips = chips;
  const long double n = static_cast<long double>(chips);
  // 2 B (D/n) F / peak >= 2 (n-1)/n so B F / bw  <=>  D >= (n-1) so peak / bw; B and F cancel.
  const long double t = (n - 1) * esize(dt.out) * static_cast<long double>(r.peak) / r.link_bandwidth;
  r.threshold = static_cast<double>(t);
  check(t <= kMaxDim, "critical D {:.3g} is beyond any shape (at most 2^40)", r.threshold);
  r.exact = static_cast<int64_t>(std::ceil(t));
  return r;
}

}  // namespace ridge::roofline
