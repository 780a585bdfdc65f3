// The roofline of generation (ridge/roofline/decode.hpp): what one decode step and one prefill move and
// compute, their bound on a chip, and the critical batch with the KV cache counted. The byte counts follow
// what an implementation that keeps every intermediate in memory moves between its kernels; docs/roofline.md
// lists them with the formulas.
#include "ridge/roofline/decode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "ridge/core/error.hpp"
#include "ridge/core/units.hpp"
#include "ridge/roofline/model_buffers.hpp"
#include "ridge/roofline/moe.hpp"
#include "core/check.hpp"
#include "roofline/json.hpp"

namespace ridge::roofline {
namespace {

constexpr long double kMaxDim = 0x1p40L;
constexpr long double kMaxElements = 0x1p60L;
constexpr int64_t kMaxSweepBatch = int64_t{1} << 20;

long double dim(int64_t v, const char* what) {
  check_arg(v >= 1, what, "{} is not a positive size", v);
  check_arg(static_cast<long double>(v) <= kMaxDim, what, "{} is too large (at most 2^40)", v);
  return static_cast<long double>(v);
}

Traffic tensor(const std::string& name, DType t, long double elements, bool write = false) {
  check_arg(elements <= kMaxElements, "shape", "tensor {} would hold {:.3g} elements (at most 2^60)", name,
            static_cast<double>(elements));
  return {name, dtype_name(t), elements, elements * static_cast<long double>(dtype_size(t)), write};
}

long double sum_bytes(const std::vector<Traffic>& v) {
  long double s = 0;
  for (const auto& t : v) s += t.bytes;
  return s;
}

// The shape's sizes, checked, as long double, and its parameters by kind (model_param_groups).
struct Sizes {
  long double V, D, L, H, dh, kd, F;  // kd = kv_heads * d_head: the width of K (and of V)
  ParamGroups w;
  // Mixture of Experts (0 for a dense model): the MoE layers, the routed experts, top_k, an expert's width
  // and the shared experts' (num_shared_experts x d_expert).
  bool moe = false;
  long double Lm = 0, E = 0, k = 0, De = 0, S = 0;
};

// How a step's tokens reach the routed experts: uniform routing (no shares), a measured histogram
// (routing_shares' form), the dense model of the same active size (every token's k experts are the same
// k, read always: the same FLOPs and active weights, bytes linear in the batch), or the experts a step
// did read (`read`: their mean over the MoE layers, counted from its routing).
struct Route {
  std::vector<double> shares;
  bool dense_equivalent = false;
  std::optional<double> read;
};

// The routing of a histogram argument: uniform when empty; else its shares (an MoE model's only).
Route route_of(const ModelArch& s, const std::vector<double>& histogram) {
  Route r;
  if (histogram.empty()) return r;
  check_arg(s.is_moe(), "expert_histogram", "a routing histogram needs an MoE model (this one is dense)");
  r.shares = routing_shares(histogram, s.num_experts, s.top_k);
  return r;
}

// The expected distinct routed experts `tokens` tokens read in one MoE layer.
double experts_read(const ModelArch& s, const Route& r, long double tokens) {
  if (r.read) return *r.read;
  if (r.dense_equivalent) return static_cast<double>(s.top_k);
  const double t = static_cast<double>(tokens);
  return r.shares.empty() ? expected_distinct_experts(s.num_experts, s.top_k, t)
                          : expected_distinct_experts(r.shares, s.top_k, t);
}

Sizes sizes(const ModelArch& s) {
  Sizes z;
  z.V = dim(s.vocab_size, "vocab");
  z.D = dim(s.d_model, "d_model");
  z.L = dim(s.num_layers, "layers");
  z.H = dim(s.num_heads, "heads");
  z.F = dim(s.d_ff, "d_ff");
  check_arg(s.num_kv_heads >= 0, "kv_heads", "{} is negative (0 means heads)", s.num_kv_heads);
  check_arg(s.d_model % s.num_heads == 0, "heads", "{} heads do not divide d_model {}", s.num_heads,
            s.d_model);
  const int64_t kv = s.kv_heads();
  check_arg(kv <= s.num_heads && s.num_heads % kv == 0, "kv_heads",
            "{} kv heads do not divide the {} query heads (each kv head serves heads / kv_heads of them)", kv,
            s.num_heads);
  z.dh = z.D / z.H;
  z.kd = static_cast<long double>(kv) * z.dh;
  if (s.is_moe()) {
    z.moe = true;
    z.E = dim(s.num_experts, "experts");
    check_arg(s.top_k >= 1 && s.top_k <= s.num_experts, "top_k", "{} is not in 1 .. experts = {}", s.top_k,
              s.num_experts);
    check_arg(s.d_expert >= 0, "d_expert", "{} is negative (0 means d_ff)", s.d_expert);
    check_arg(s.num_shared_experts >= 0, "shared_experts", "{} is negative", s.num_shared_experts);
    for (size_t i = 0; i < s.moe_layers.size(); ++i)
      check_arg(s.moe_layers[i] >= 0 && s.moe_layers[i] < s.num_layers &&
                    (i == 0 || s.moe_layers[i] > s.moe_layers[i - 1]),
                "moe_layers", "{} at position {} is not an ascending layer index in [0, layers = {})",
                s.moe_layers[i], i, s.num_layers);
    z.Lm = static_cast<long double>(s.num_moe_layers());
    z.k = static_cast<long double>(s.top_k);
    z.De = dim(s.expert_width(), "d_expert");
    z.S = static_cast<long double>(s.shared_width());
    check_arg(z.S <= kMaxDim, "shared_experts", "{} shared experts of width {} are too wide (at most 2^40)",
              s.num_shared_experts, s.expert_width());
  }
  z.w = model_param_groups(s);
  return z;
}

// One routed expert of one layer in the weights' dtype: w1, w3 [d_expert, D] and w2 [D, d_expert], each
// with its fp8 scales.
long double expert_bytes(const Sizes& z, DType w) {
  return 2 * weight_bytes(z.De, z.D, w) + weight_bytes(z.D, z.De, w);
}

bool is_fp8(DType t) {
  return t == DType::fp8_e4m3;
}

// Activation traffic of `tokens` tokens through the layers and of `final_tokens` of them through the final
// norm and lm_head (each intermediate written once by the kernel that makes it and read once by the one that
// uses it; per layer and token, with kd = kv_heads * d_head):
//   residual stream (fp32): read x by ln1, residual, ln2, residual (4D); written by the two residuals (2D);
//                           the embedding writes x (D per token) and the final norm reads it (D per final
//                           token)
//   GEMM inputs (the weights' dtype; fp8 with fp32 1x128 scales): h1, o, h2 (D each) and g (F), written by
//                           ln1, attention, ln2 and SwiGLU, read by the qkv, output, w1|w3 and w2 GEMMs
//   the rest (fp32 for fp32 weights, else bf16): written: q|k|v (D + 2kd), rotated q (D), the output
//                           projection (D), w1|w3 (2F), w2 (D); read: RoPE's q, k (D + kd), attention's q
//                           (D), v on its way to the cache (kd), the two residuals' inputs (2D), SwiGLU's
//                           (2F)
//   lm_head input (its dtype; fp8 with scales): D per final token, written and read; logits (fp32): V per
//   final
//                           token, written by lm_head and read by the sampler
std::vector<Traffic> activations(const Sizes& z, const InferenceDtypes& dt, long double tokens,
                                 long double final_tokens) {
  // A GEMM reads its activations in its weights' dtype (fp8 ones cast per token with 1x128 scales).
  const DType a = dt.activation_dtype(), g = dt.weights, h = dt.head_dtype();
  const long double T = tokens, Tf = final_tokens, D = z.D, F = z.F, L = z.L, kd = z.kd;
  // An MoE layer's feed-forward is k experts of width De and the shared experts (S) per token, in place of
  // F: its g and its w1|w3 outputs are that wide (Lm of the L layers).
  const long double Lm = z.Lm, k = z.k, De = z.De, S = z.S;
  const long double FW = (L - Lm) * F + Lm * (k * De + S);
  std::vector<Traffic> v;
  v.push_back(tensor("residual stream", DType::f32, T * L * 4 * D + Tf * D));
  v.push_back(tensor("residual stream", DType::f32, T * (L * 2 * D + D), true));
  const long double gin = z.moe ? T * (L * 3 * D + FW) : T * L * (3 * D + F);
  v.push_back(tensor("layer GEMM inputs", g, gin));
  v.push_back(tensor("layer GEMM inputs", g, gin, true));
  if (is_fp8(g)) {
    const long double s = z.moe ? T * (L * 3 * std::ceil(D / 128) + (L - Lm) * std::ceil(F / 128) +
                                       Lm * (k * std::ceil(De / 128) + std::ceil(S / 128)))
                                : T * L * (3 * std::ceil(D / 128) + std::ceil(F / 128));
    v.push_back(tensor("layer GEMM input scales (1x128)", DType::f32, s));
    v.push_back(tensor("layer GEMM input scales (1x128)", DType::f32, s, true));
  }
  const long double rest = z.moe ? T * (L * (4 * D + 2 * kd) + 2 * FW) : T * L * (4 * D + 2 * kd + 2 * F);
  v.push_back(tensor("GEMM outputs, q, k, v", a, rest));
  v.push_back(tensor("GEMM outputs, q, k, v", a, rest, true));
  if (z.moe) {
    // The router's fp32 logits (written by its GEMM, read by the top-k); each token's h2 copied once per
    // expert it chose (the permute writes them, the experts' w1|w3 GEMM reads them); the experts' w2 rows
    // (written by the GEMM, read by the combine, which writes the output the residual reads).
    v.push_back(tensor("router logits", DType::f32, T * Lm * z.E));
    v.push_back(tensor("router logits", DType::f32, T * Lm * z.E, true));
    v.push_back(tensor("dispatched rows (k per token)", g, T * Lm * k * D));
    v.push_back(tensor("dispatched rows (k per token)", g, T * Lm * k * D, true));
    if (is_fp8(g)) {
      v.push_back(tensor("dispatched row scales (1x128)", DType::f32, T * Lm * k * std::ceil(D / 128)));
      v.push_back(tensor("dispatched row scales (1x128)", DType::f32, T * Lm * k * std::ceil(D / 128), true));
    }
    v.push_back(tensor("expert output rows (k per token)", a, T * Lm * k * D, true));
    v.push_back(tensor("expert output rows (k per token)", a, T * Lm * k * D));
  }
  v.push_back(tensor("lm_head input", h, Tf * D));
  v.push_back(tensor("lm_head input", h, Tf * D, true));
  if (is_fp8(h)) {
    v.push_back(tensor("lm_head input scales (1x128)", DType::f32, Tf * std::ceil(D / 128)));
    v.push_back(tensor("lm_head input scales (1x128)", DType::f32, Tf * std::ceil(D / 128), true));
  }
  v.push_back(tensor("logits", DType::f32, Tf * z.V, true));
  v.push_back(tensor("logits (sampler)", DType::f32, Tf * z.V));
  return v;
}

// Every weight a step reads once whatever the batch, and the `rows` embedding rows the batch looks up:
// the model's parameters by kind (model_param_groups: q, k, v, o, w1, w2, w3 quantized one by one).
// An MoE model's layers add the routers (fp32, as training runs them and generation keeps them: an error
// in the logits would move the choice of experts) and the `experts` routed experts each MoE layer reads
// (their expected count, or the count a step read).
std::vector<Traffic> weights(const Sizes& z, const InferenceDtypes& dt, long double rows, double experts) {
  std::vector<Traffic> v;
  v.push_back(tensor(z.moe ? "linears (q,k,v,o; dense/shared FFN)" : "layer linears (q,k,v,o,w1,w2,w3)",
                     dt.weights, z.w.linears));
  if (is_fp8(dt.weights))
    v.push_back(tensor("layer linear scales (128x128)", DType::f32, z.w.linear_scale_blocks));
  if (z.moe) {
    const long double x = static_cast<long double>(experts);
    v.push_back(tensor("routers [E,D]", DType::f32, z.w.router));
    v.push_back(
        tensor(fmt::format("routed experts ({:.4g} of {:.0f} per layer)", experts, static_cast<double>(z.E)),
               dt.weights, z.Lm * x * 3 * z.De * z.D));
    if (is_fp8(dt.weights))
      v.push_back(tensor("routed expert scales (128x128)", DType::f32,
                         z.Lm * x * (2 * weight_scale_blocks(z.De, z.D) + weight_scale_blocks(z.D, z.De))));
  }
  v.push_back(tensor("norm weights", DType::f32, z.w.norms));
  v.push_back(tensor("lm_head [V,D]", dt.head_dtype(), z.w.head));
  if (is_fp8(dt.head_dtype()))
    v.push_back(tensor("lm_head scales (128x128)", DType::f32, weight_scale_blocks(z.V, z.D)));
  v.push_back(tensor("embedding rows", dt.embedding_dtype(), rows * z.D));
  return v;
}

// 2 per multiply-add of the layers' GEMMs for `tokens` rows: every linear weight once per row (q [D,D],
// k, v [kd,D], o [D,D], w1, w3 [F,D], w2 [D,F]).
long double layer_gemm_flops(const Sizes& z, long double tokens) {
  return 2 * tokens * z.w.linears;
}

InferenceDtypes resolved(const InferenceDtypes& dt) {
  dt.validate();
  InferenceDtypes r = dt;
  r.head = dt.head_dtype();
  r.embedding = dt.embedding_dtype();
  return r;
}

InferenceCost make_cost(const ModelArch& shape, const InferenceDtypes& dtypes, int64_t batch, int64_t context,
                        int64_t prompt, const Route& route) {
  const Sizes z = sizes(shape);
  const InferenceDtypes dt = resolved(dtypes);
  const long double B = dim(batch, "batch");
  const bool decode = prompt == 0;
  const long double C = decode ? dim(context, "context") : 0, P = decode ? 1 : dim(prompt, "prompt");
  const long double T = B * P;  // tokens through the layers
  InferenceCost c;
  c.phase = decode ? "decode" : "prefill";
  c.batch = batch;
  c.context = decode ? context : 0;
  c.prompt = decode ? 0 : prompt;
  const long double attention =
      decode ? 4 * B * z.H * z.dh * C * z.L : 4 * B * z.H * z.dh * z.L * P * (P + 1) / 2;
  c.flops = {{"layer GEMMs", peak_key(dt.weights), layer_gemm_flops(z, T)},
             {"lm_head", peak_key(dt.head_dtype()), 2 * B * z.D * z.V},
             {"attention", peak_key(dt.kv), attention}};
  if (z.moe) {
    // Every token passes through k experts (w1, w3, w2: 3 D De multiply-adds each) and the router (E D).
    c.experts_read = experts_read(shape, route, T);
    c.flops.insert(c.flops.begin() + 1,
                   {{"routed experts", peak_key(dt.weights), 2 * T * z.Lm * z.k * 3 * z.D * z.De},
                    {"router", peak_key(DType::f32), 2 * T * z.w.router}});
  }
  c.weights = weights(z, dt, T, c.experts_read);
  const long double per_token_kv = z.L * 2 * z.kd;
  if (decode) {
    c.kv_read = {tensor("K/V cache [B,C,L,2,kv_heads,d_head]", dt.kv, B * C * per_token_kv)};
    c.kv_write = {tensor("K/V of the new tokens", dt.kv, B * per_token_kv, true)};
  } else {
    c.kv_read = {tensor("K/V of the prompts (attention)", dt.kv, T * per_token_kv)};
    c.kv_write = {tensor("K/V of the prompts (to the cache)", dt.kv, T * per_token_kv, true)};
  }
  c.activations = activations(z, dt, T, B);
  return c;
}

// The peak key a part runs at on `chip`: its own, or the next wider one the chip has.
std::string usable_key(const Chip& chip, const std::string& key, const std::string& part,
                       std::vector<std::string>& notes) {
  std::vector<std::string> chain{key};
  if (key == "fp8") chain = {"fp8", "bf16", "fp32"};
  if (key == "bf16") chain = {"bf16", "fp32"};
  for (const auto& k : chain)
    if (chip.has_peak(k)) {
      if (k != key)
        notes.push_back(
            fmt::format("chip {} has no {} peak: {} at its {} peak{}", chip.id, key, part, k,
                        key == "fp8" && k == "bf16" ? " (ridge's CPU FP8 GEMM widens fp8 to bf16)" : ""));
      return k;
    }
  chip.peak(chain.back());  // throws, naming the chip and the peaks it has
  return chain.back();
}

nlohmann::json traffic_json(const std::vector<Traffic>& v, const char* category) {
  auto a = nlohmann::json::array();
  for (const auto& t : v)
    a.push_back({{"category", category},
                 {"name", t.name},
                 {"dtype", t.dtype},
                 {"elements", static_cast<double>(t.elements)},
                 {"bytes", static_cast<double>(t.bytes)},
                 {"direction", t.write ? "write" : "read"}});
  return a;
}

nlohmann::json step_json(const InferenceCost& c, const InferenceBound& b) {
  auto parts = nlohmann::json::array();
  for (const auto& r : b.roofs)
    parts.push_back({{"name", r.name},
                     {"compute_dtype", r.compute},
                     {"peak_flops", r.peak},
                     {"flops", r.flops},
                     {"t_math_s", r.t_math}});
  auto memory = nlohmann::json::array();
  for (auto [v, cat] : {std::pair{&c.weights, "weights"}, std::pair{&c.kv_read, "kv_read"},
                        std::pair{&c.kv_write, "kv_write"}, std::pair{&c.activations, "activations"}})
    for (auto& t : traffic_json(*v, cat)) memory.push_back(t);
  return {{"phase", c.phase},
          {"batch", c.batch},
          {"context", c.context},
          {"prompt", c.prompt},
          {"flops", b.flops},
          {"flops_parts", parts},
          {"bytes",
           {{"weights", static_cast<double>(c.weight_bytes())},
            {"kv_read", static_cast<double>(c.kv_read_bytes())},
            {"kv_write", static_cast<double>(c.kv_write_bytes())},
            {"activations", static_cast<double>(c.activation_bytes())},
            {"total", b.bytes}}},
          {"memory", memory},
          {"intensity", b.intensity},
          {"chip", b.chip},
          {"level", b.level},
          {"bandwidth", b.bandwidth},
          {"ridge_intensity", b.ridge_intensity},
          {"t_math_s", b.t_math},
          {"t_memory_s", b.t_memory},
          {"t_lower_s", b.t_lower},
          {"binding", b.binding},
          {"tokens_per_s", b.tokens_per_s},
          {"resident_bytes", b.resident_bytes},
          {"fits_level", b.fits_level.empty() ? nlohmann::json(nullptr) : nlohmann::json(b.fits_level)},
          {"exceeds_memory", b.exceeds_memory},
          {"notes", b.notes}};
}

nlohmann::json opt_int(const std::optional<int64_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json num_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

DType InferenceDtypes::head_dtype() const {
  return head ? *head : (is_fp8(weights) ? DType::bf16 : weights);
}

DType InferenceDtypes::embedding_dtype() const {
  return embedding ? *embedding : (is_fp8(weights) ? DType::bf16 : weights);
}

DType InferenceDtypes::activation_dtype() const {
  return weights == DType::f32 ? DType::f32 : DType::bf16;
}

void InferenceDtypes::validate() const {
  auto linear = [](DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::fp8_e4m3; };
  auto plain = [](DType t) { return t == DType::f32 || t == DType::bf16; };
  check_arg(linear(weights), "weights", "{} is not a weight dtype (accepted: fp32, bf16, fp8_e4m3)",
            dtype_name(weights));
  if (head)
    check_arg(linear(*head), "head", "{} is not an lm_head dtype (accepted: fp32, bf16, fp8_e4m3)",
              dtype_name(*head));
  if (embedding)
    check_arg(plain(*embedding), "embedding",
              "{} is not an embedding dtype (accepted: fp32, bf16; the table is a row lookup, never a GEMM)",
              dtype_name(*embedding));
  check_arg(plain(kv), "kv", "{} is not a KV cache dtype (accepted: fp32, bf16)", dtype_name(kv));
}

long double InferenceCost::total_flops() const {
  long double s = 0;
  for (const auto& p : flops) s += p.flops;
  return s;
}
long double InferenceCost::weight_bytes() const {
  return sum_bytes(weights);
}
long double InferenceCost::kv_read_bytes() const {
  return sum_bytes(kv_read);
}
long double InferenceCost::kv_write_bytes() const {
  return sum_bytes(kv_write);
}
long double InferenceCost::activation_bytes() const {
  return sum_bytes(activations);
}
long double InferenceCost::memory_bytes() const {
  return weight_bytes() + kv_read_bytes() + kv_write_bytes() + activation_bytes();
}
double InferenceCost::intensity() const {
  return static_cast<double>(total_flops() / memory_bytes());
}
long double InferenceCost::resident_bytes() const {
  return weight_bytes() + (phase == "decode" ? kv_read_bytes() : kv_write_bytes());
}
std::string InferenceCost::label() const {
  return phase == "decode" ? fmt::format("decode B={} C={}", batch, context)
                           : fmt::format("prefill B={} P={}", batch, prompt);
}

InferenceCost decode_cost(const ModelArch& shape, const InferenceDtypes& dtypes, int64_t batch,
                          int64_t context, const std::vector<double>& expert_histogram) {
  dim(context, "context");
  return make_cost(shape, dtypes, batch, context, 0, route_of(shape, expert_histogram));
}

InferenceCost decode_cost_read(const ModelArch& shape, const InferenceDtypes& dtypes, int64_t batch,
                               int64_t context, double experts_read) {
  dim(batch, "batch");
  dim(context, "context");
  check_arg(shape.is_moe(), "experts_read", "a count of experts read needs an MoE model (this one is dense)");
  const double k = static_cast<double>(shape.top_k),
               most = std::min(static_cast<double>(shape.num_experts),
                               static_cast<double>(batch) * static_cast<double>(shape.top_k));
  check_arg(std::isfinite(experts_read) && experts_read >= k && experts_read <= most, "experts_read",
            "{} is not in top_k = {} .. min(experts, batch x top_k) = {} (each token reads top_k distinct "
            "experts)",
            experts_read, k, most);
  Route r;
  r.read = experts_read;
  return make_cost(shape, dtypes, batch, context, 0, r);
}

InferenceCost prefill_cost(const ModelArch& shape, const InferenceDtypes& dtypes, int64_t batch,
                           int64_t prompt, const std::vector<double>& expert_histogram) {
  dim(prompt, "prompt");
  return make_cost(shape, dtypes, batch, 0, prompt, route_of(shape, expert_histogram));
}

InferenceBound inference_bound(const InferenceCost& cost, const Chip& chip, const std::string& level) {
  InferenceBound b;
  b.chip = chip.id;
  // Where the resident bytes fit: the innermost level with a capacity that holds them.
  b.resident_bytes = static_cast<double>(cost.resident_bytes());
  for (auto it = chip.memory.rbegin(); it != chip.memory.rend(); ++it)
    if (it->capacity && it->capacity->value >= b.resident_bytes) {
      b.fits_level = it->level;
      break;
    }
  const auto& outer = chip.memory_level();
  b.exceeds_memory = outer.capacity && b.resident_bytes > outer.capacity->value;
  const MemoryLevel& ml = level == "auto"
                              ? chip.memory_level(b.fits_level.empty() ? std::string() : b.fits_level)
                              : chip.memory_level(level);
  b.level = ml.level;
  b.bandwidth = ml.bandwidth.value;

  long double t_math = 0;
  for (const auto& p : cost.flops) {
    ComputeRoof r;
    r.name = p.name;
    r.compute = usable_key(chip, p.compute, p.name, b.notes);
    r.peak = chip.peak(r.compute);
    r.flops = static_cast<double>(p.flops);
    r.t_math = static_cast<double>(p.flops / r.peak);
    t_math += p.flops / r.peak;
    b.roofs.push_back(r);
  }
  const long double bytes = cost.memory_bytes();
  b.flops = static_cast<double>(cost.total_flops());
  b.bytes = static_cast<double>(bytes);
  b.intensity = cost.intensity();
  b.t_math = static_cast<double>(t_math);
  b.t_memory = static_cast<double>(bytes / b.bandwidth);
  b.ridge_intensity = static_cast<double>(cost.total_flops() / t_math / b.bandwidth);
  b.t_lower = std::max(b.t_math, b.t_memory);
  b.binding = b.t_math >= b.t_memory ? "compute" : "memory";
  const double tokens =
      static_cast<double>(cost.batch) * (cost.phase == "decode" ? 1.0 : double(cost.prompt));
  b.tokens_per_s = tokens / b.t_lower;

  const std::string resident = units::format_bytes(b.resident_bytes);
  const char* what =
      cost.phase == "decode" ? "the weights and the KV cache" : "the weights and the prompts' K/V";
  if (b.exceeds_memory)
    b.notes.push_back(fmt::format("{} ({}) exceed the {} capacity ({}): this step does not fit on one chip",
                                  what, resident, outer.level, units::format_bytes(outer.capacity->value)));
  else if (!b.fits_level.empty() && b.fits_level != outer.level)
    b.notes.push_back(fmt::format(
        "{} ({}) fit in {} ({}): steps that follow one another can find them there{}", what, resident,
        b.fits_level, units::format_bytes(chip.memory_level(b.fits_level).capacity->value),
        b.level == b.fits_level ? fmt::format(", so the bound uses its {}", units::format_rate(b.bandwidth))
                                : fmt::format(" (level 'auto' bounds at its {})",
                                              units::format_rate(chip.bandwidth(b.fits_level)))));
  if (ml.capacity && b.resident_bytes > ml.capacity->value && &ml != &outer)
    b.notes.push_back(fmt::format("{} ({}) do not fit in {} ({}): a bound at its bandwidth is optimistic",
                                  what, resident, ml.level, units::format_bytes(ml.capacity->value)));
  return b;
}

namespace {

// The real B > 0 at which B slope = fixed + varying(B), for `varying` concave, increasing and at most
// `ceiling` (the routed experts a batch reads): the difference is convex and negative at 0, so it crosses
// once, at or below (fixed + ceiling) / slope. Bisection to long double's precision; +inf for slope <= 0.
long double crossing(long double slope, long double fixed, long double ceiling,
                     const std::function<long double(long double)>& varying) {
  if (!(slope > 0)) return std::numeric_limits<long double>::infinity();
  long double lo = 0, hi = (fixed + ceiling) / slope;
  for (int i = 0; i < 128; ++i) {
    const long double mid = (lo + hi) / 2;
    (mid * slope < fixed + varying(mid) ? lo : hi) = mid;
  }
  return hi;
}

DecodeCriticalBatch critical_batch_of(const ModelArch& shape, const InferenceDtypes& dtypes, int64_t context,
                                      const Chip& chip, const std::string& level, const Route& route) {
  check_arg(level != "auto", "level",
            "'auto' names no single level for every batch (the level the bytes come from moves as the KV "
            "cache grows); name one (hbm, dram, l3, ...) or leave it empty for the outermost");
  dim(context, "context");
  const InferenceCost c1 = make_cost(shape, dtypes, 1, context, 0, route),
                      c2 = make_cost(shape, dtypes, 2, context, 0, route);
  const InferenceBound b1 = inference_bound(c1, chip, level);
  DecodeCriticalBatch r;
  r.chip = chip.id;
  r.level = b1.level;
  r.context = context;
  r.bandwidth = b1.bandwidth;
  // The routed experts' bytes of a step: Lm x experts_read(B) x one expert's; varying with B unless every
  // token reads the same k (the dense equivalent), where they are part of W.
  const Sizes z = sizes(shape);
  const bool varying = z.moe && !route.dense_equivalent;
  const long double e1 = z.moe ? z.Lm * expert_bytes(z, resolved(dtypes).weights) : 0;
  const auto experts_bytes = [&](long double B) {
    return varying ? e1 * static_cast<long double>(experts_read(shape, route, B)) : 0;
  };
  // Bytes are W + B k (+ X(B)) exactly (every count is an integer below 2^64, which long double holds).
  const long double x1 = experts_bytes(1), x2 = experts_bytes(2);
  const long double k = (c2.memory_bytes() - x2) - (c1.memory_bytes() - x1), W = c1.memory_bytes() - x1 - k;
  const long double kv = c1.kv_read_bytes() + c1.kv_write_bytes();
  long double m1 = 0, m1_attention = 0;  // T_math of one sequence, and its attention part
  for (size_t i = 0; i < c1.flops.size(); ++i) {
    const long double t = c1.flops[i].flops / b1.roofs[i].peak;
    m1 += t;
    if (c1.flops[i].name == "attention") m1_attention += t;
  }
  const long double bw = b1.bandwidth, f1 = c1.total_flops();
  r.weight_bytes = static_cast<double>(W);
  r.bytes_per_sequence = static_cast<double>(k);
  r.kv_bytes_per_sequence = static_cast<double>(kv);
  r.flops_per_sequence = static_cast<double>(f1);
  r.limit_intensity = static_cast<double>(f1 / k);
  r.ridge_intensity = static_cast<double>(f1 / m1 / bw);
  r.asymptotic = std::numeric_limits<double>::infinity();
  if (varying) {
    r.expert_bytes_one = static_cast<double>(x1);
    r.expert_bytes_all = static_cast<double>(e1 * z.E);
  }

  // Compute-bound at B when B m1 >= (W + B k + X(B)) / bw, i.e. B (m1 bw - k) >= W + X(B).
  const long double denom = m1 * bw - k;
  const long double x = varying ? crossing(denom, W, e1 * z.E, experts_bytes) : denom > 0 ? W / denom : 0;
  if (denom > 0 && std::isfinite(x)) {
    r.asymptotic = static_cast<double>(x);
    if (x <= kMaxDim) {
      // The closed form is rounded; settle the integer on the bound itself, as a scan over B would see it.
      auto compute_bound = [&](int64_t B) {
        return inference_bound(make_cost(shape, dtypes, B, context, 0, route), chip, level).binding ==
               "compute";
      };
      int64_t B = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(x)));
      while (B > 1 && compute_bound(B - 1)) --B;
      while (!compute_bound(B)) ++B;
      r.batch = B;
      const InferenceCost cb = make_cost(shape, dtypes, B, context, 0, route);
      const InferenceBound at = inference_bound(cb, chip, level);
      r.resident_bytes = at.resident_bytes;
      r.exceeds_memory = at.exceeds_memory;
      r.experts_read_at_batch = cb.experts_read;
    }
  }
  // Weights only: B (m1 - attention) bw >= W (+ X(B)). (W / (m1 bw) is at most W / (f1 / peak) bw: bounded by
  // sizes; the experts add at most every expert's bytes.)
  const long double gemm_bw = (m1 - m1_attention) * bw;
  r.batch_weights_only = std::max<int64_t>(
      1,
      static_cast<int64_t>(std::ceil(varying ? crossing(gemm_bw, W, e1 * z.E, experts_bytes) : W / gemm_bw)));
  return r;
}

}  // namespace

DecodeCriticalBatch decode_critical_batch(const ModelArch& shape, const InferenceDtypes& dtypes,
                                          int64_t context, const Chip& chip, const std::string& level,
                                          const std::vector<double>& expert_histogram) {
  return critical_batch_of(shape, dtypes, context, chip, level, route_of(shape, expert_histogram));
}

DecodeReport decode_report(const ModelArch& shape, const InferenceDtypes& dtypes, int64_t batch,
                           int64_t context, const Chip& chip, const std::string& level, int64_t prompt,
                           bool sweep, const std::vector<double>& expert_histogram) {
  check_arg(prompt >= 0, "prompt", "{} is negative (0: no prefill)", prompt);
  const Route route = route_of(shape, expert_histogram);
  DecodeReport r;
  r.shape = shape;
  r.dtypes = resolved(dtypes);
  r.chip = chip.id;
  r.chip_name = chip.name;
  r.step = decode_cost(shape, dtypes, batch, context, expert_histogram);
  r.bound = inference_bound(r.step, chip, level);
  r.params = static_cast<double>(model_param_count(shape));
  if (prompt > 0) {
    r.prefill = prefill_cost(shape, dtypes, batch, prompt, expert_histogram);
    r.prefill_bound = inference_bound(*r.prefill, chip, level);
  }
  const std::string fixed = level == "auto" ? r.bound.level : level;
  r.critical = critical_batch_of(shape, dtypes, context, chip, fixed, route);
  if (shape.is_moe()) {
    MoeDecode m;
    m.params_total = r.params;
    m.params_active = static_cast<double>(model_active_param_count(shape));
    m.shares = route.shares;
    m.expert_bytes = static_cast<double>(expert_bytes(sizes(shape), r.dtypes.weights));
    Route dense = route;
    dense.dense_equivalent = true;
    m.dense_equivalent = critical_batch_of(shape, dtypes, context, chip, fixed, dense);
    r.moe = std::move(m);
  }
  if (sweep) {
    for (int64_t B = 1; B <= kMaxSweepBatch; B *= 2) {
      const InferenceCost cb = make_cost(shape, dtypes, B, context, 0, route);
      r.sweep.push_back(inference_bound(cb, chip, fixed));
      r.sweep_batches.push_back(B);
      if (r.moe) r.moe->sweep_experts_read.push_back(cb.experts_read);
      if (r.critical.batch ? B >= *r.critical.batch
                           : r.sweep.back().intensity >= 0.99 * r.critical.limit_intensity)
        break;
    }
  }
  return r;
}

namespace {

// The document of a dense model; to_json adds an MoE model's keys to it.
nlohmann::json dense_json(const DecodeReport& r) {
  const auto& s = r.shape;
  nlohmann::json sweep = nlohmann::json::array();
  for (size_t i = 0; i < r.sweep.size(); ++i) {
    const auto& b = r.sweep[i];
    sweep.push_back(
        {{"batch", r.sweep_batches[i]},
         {"flops", b.flops},
         {"bytes", b.bytes},
         {"intensity", b.intensity},
         {"t_math_s", b.t_math},
         {"t_memory_s", b.t_memory},
         {"t_lower_s", b.t_lower},
         {"binding", b.binding},
         {"tokens_per_s", b.tokens_per_s},
         {"resident_bytes", b.resident_bytes},
         {"fits_level", b.fits_level.empty() ? nlohmann::json(nullptr) : nlohmann::json(b.fits_level)},
         {"exceeds_memory", b.exceeds_memory}});
  }
  const auto& c = r.critical;
  return {{"shape",
           {{"vocab", s.vocab_size},
            {"d_model", s.d_model},
            {"layers", s.num_layers},
            {"heads", s.num_heads},
            {"kv_heads", s.kv_heads()},
            {"d_head", s.d_head()},
            {"d_ff", s.d_ff},
            {"params", r.params}}},
          {"dtypes",
           {{"weights", dtype_name(r.dtypes.weights)},
            {"head", dtype_name(r.dtypes.head_dtype())},
            {"embedding", dtype_name(r.dtypes.embedding_dtype())},
            {"kv", dtype_name(r.dtypes.kv)},
            {"activations", dtype_name(r.dtypes.activation_dtype())}}},
          {"chip", r.chip},
          {"chip_name", r.chip_name},
          {"decode", step_json(r.step, r.bound)},
          {"prefill", r.prefill ? step_json(*r.prefill, *r.prefill_bound) : nlohmann::json(nullptr)},
          {"critical_batch",
           {{"level", c.level},
            {"context", c.context},
            {"bandwidth", c.bandwidth},
            {"batch", opt_int(c.batch)},
            {"asymptotic", num_or_null(c.asymptotic)},
            {"limit_intensity", c.limit_intensity},
            {"ridge_intensity", c.ridge_intensity},
            {"batch_weights_only", c.batch_weights_only},
            {"resident_bytes_at_batch", c.resident_bytes},
            {"exceeds_memory_at_batch", c.exceeds_memory},
            {"weight_bytes", c.weight_bytes},
            {"bytes_per_sequence", c.bytes_per_sequence},
            {"kv_bytes_per_sequence", c.kv_bytes_per_sequence},
            {"flops_per_sequence", c.flops_per_sequence}}},
          {"sweep", sweep}};
}

// An MoE step's added keys.
void add_moe_step(nlohmann::json& j, const InferenceCost& c, const InferenceBound& b) {
  j["experts_read"] = c.experts_read;
  j["bytes_per_token"] =
      b.bytes / (static_cast<double>(c.batch) * (c.phase == "decode" ? 1.0 : double(c.prompt)));
}

}  // namespace

nlohmann::json to_json(const DecodeReport& r) {
  nlohmann::json j = dense_json(r);
  if (!r.moe) return j;
  const auto& s = r.shape;
  const auto& m = *r.moe;
  auto& sh = j["shape"];
  sh["experts"] = s.num_experts;
  sh["top_k"] = s.top_k;
  sh["shared_experts"] = s.num_shared_experts;
  sh["d_expert"] = s.expert_width();
  sh["moe_layers"] = s.moe_layers.empty() ? nlohmann::json("all") : nlohmann::json(s.moe_layers);
  sh["params_active"] = m.params_active;
  add_moe_step(j["decode"], r.step, r.bound);
  if (r.prefill) add_moe_step(j["prefill"], *r.prefill, *r.prefill_bound);
  for (size_t i = 0; i < r.sweep.size(); ++i) j["sweep"][i]["experts_read"] = m.sweep_experts_read[i];
  auto& c = j["critical_batch"];
  c["expert_bytes_one_sequence"] = r.critical.expert_bytes_one;
  c["expert_bytes_all"] = r.critical.expert_bytes_all;
  c["experts_read_at_batch"] = r.critical.experts_read_at_batch;
  // The dense model of the same active size: its critical batch, and what it is made of.
  const auto& d = m.dense_equivalent;
  j["moe"] = {{"routing", m.shares.empty() ? "uniform" : "histogram"},
              {"expert_shares", m.shares.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.shares)},
              {"expert_bytes", m.expert_bytes},
              {"params_total", m.params_total},
              {"params_active", m.params_active},
              {"dense_equivalent_critical_batch",
               {{"batch", opt_int(d.batch)},
                {"asymptotic", num_or_null(d.asymptotic)},
                {"batch_weights_only", d.batch_weights_only},
                {"weight_bytes", d.weight_bytes},
                {"bytes_per_sequence", d.bytes_per_sequence}}}};
  return j;
}

std::string decode_report_json(const DecodeReport& r, int indent) {
  return to_json(r).dump(indent);
}

}  // namespace ridge::roofline
