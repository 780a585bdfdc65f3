// The Transformer LM's buffers (ridge/roofline/model_buffers.hpp): the one place their shapes are
// written down.
#include "ridge/roofline/model_buffers.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string_view>
#include <type_traits>

#include "ridge/core/error.hpp"
#include "core/check.hpp"

namespace ridge::roofline {

int64_t kv_width(const ModelArch& m) {
  check(m.num_kv_heads >= 0, "model shape: kv_heads = {} must be >= 0 (0: equal to heads)", m.num_kv_heads);
  if (m.kv_heads() == m.num_heads) return m.d_model;
  check(m.num_heads >= 1 && m.num_heads % m.kv_heads() == 0 && m.d_model % m.num_heads == 0,
        "model shape: kv_heads {} must divide heads {}, and heads d_model {}", m.num_kv_heads, m.num_heads,
        m.d_model);
  return m.d_head() * m.kv_heads();
}

int64_t qkv_width(const ModelArch& m) {
  return m.d_model + 2 * kv_width(m);
}

namespace {

using Dims = std::initializer_list<int64_t>;

// The description itself, f(layer, name, dims) for each tensor: dims is {rows} for a vector, {rows,
// cols} for a linear, {E, rows, cols} for a stack of routed experts. One layer's tensors (an MoE layer's
// or a dense one's, as `moe` says), in the flat buffers' order:
template <typename Visit>
void layer_tensors(const ModelArch& m, int64_t l, bool moe, Visit&& f) {
  const int64_t D = m.d_model, F = m.d_ff, Dkv = kv_width(m);
  if (moe) {
    const int64_t E = m.num_experts, De = m.expert_width(), S = m.shared_width();
    f(l, "ffn.experts.w2.weight", Dims{E, D, De});
    f(l, "ffn.experts.w1.weight", Dims{E, De, D});
    f(l, "ffn.experts.w3.weight", Dims{E, De, D});
    if (S > 0) {
      f(l, "ffn.shared.w2.weight", Dims{D, S});
      f(l, "ffn.shared.w1.weight", Dims{S, D});
      f(l, "ffn.shared.w3.weight", Dims{S, D});
    }
    f(l, "ffn.router.weight", Dims{E, D});
  } else {
    f(l, "ffn.w2.weight", Dims{D, F});
    f(l, "ffn.w1.weight", Dims{F, D});
    f(l, "ffn.w3.weight", Dims{F, D});
  }
  f(l, "ln2.weight", Dims{D});
  f(l, "attn.output_proj.weight", Dims{D, D});
  f(l, "attn.q_proj.weight", Dims{D, D});
  f(l, "attn.k_proj.weight", Dims{Dkv, D});
  f(l, "attn.v_proj.weight", Dims{Dkv, D});
  f(l, "ln1.weight", Dims{D});
}

// ...and the whole model's, layer -1 for those outside the layers: lm_head, ln_final, layers L-1 .. 0,
// token_embeddings.
template <typename Visit>
void each_tensor(const ModelArch& m, Visit&& f) {
  f(-1, "lm_head.weight", Dims{m.vocab_size, m.d_model});
  f(-1, "ln_final.weight", Dims{m.d_model});
  for (int64_t l = m.num_layers - 1; l >= 0; --l) layer_tensors(m, l, m.moe_layer(l), f);
  f(-1, "token_embeddings.weight", Dims{m.vocab_size, m.d_model});
}

}  // namespace

std::vector<ParamSpec> model_parameters(const ModelArch& m) {
  std::vector<ParamSpec> out;
  int g = 0;
  int64_t at = -1;  // the layer of the group g
  each_tensor(m, [&](int64_t l, const char* name, Dims dims) {
    // lm_head, ln_final, each layer and token_embeddings are the groups, in this order.
    if (!out.empty() && (l < 0 || l != at)) ++g;
    at = l;
    out.push_back({l < 0 ? name : "layers." + std::to_string(l) + "." + name, std::vector<int64_t>(dims), g});
  });
  return out;
}

ParamGroups model_param_groups(const ModelArch& m) {
  // Dense layers are alike and so are MoE layers: one of each kind is counted, times the number of its
  // kind. Every product and partial sum is at most the total, and long double holds integers of 64
  // bits, so the sums are exact below 2^64.
  ParamGroups r;
  long double times = 1;
  auto count = [&](int64_t, const char* name_, Dims dims) {
    const std::string_view name(name_);
    const int64_t* d = dims.begin();
    const long double rows = static_cast<long double>(d[dims.size() == 3 ? 1 : 0]);
    const long double cols = dims.size() == 1 ? 0 : static_cast<long double>(d[dims.size() - 1]);
    if (dims.size() == 1) {
      r.norms += rows * times;
    } else if (name == "lm_head.weight") {
      r.head += rows * cols;
    } else if (name == "token_embeddings.weight") {
      r.embedding += rows * cols;
    } else if (name == "ffn.router.weight") {
      r.router += rows * cols * times;
    } else if (dims.size() == 3) {
      const long double e = static_cast<long double>(d[0]);
      r.experts += e * rows * cols * times;
      r.expert_scale_blocks += e * weight_scale_blocks(rows, cols) * times;
    } else {
      r.linears += rows * cols * times;
      r.linear_scale_blocks += weight_scale_blocks(rows, cols) * times;
    }
  };
  count(-1, "lm_head.weight", Dims{m.vocab_size, m.d_model});
  count(-1, "ln_final.weight", Dims{m.d_model});
  count(-1, "token_embeddings.weight", Dims{m.vocab_size, m.d_model});
  const int64_t moe = m.num_moe_layers();
  times = static_cast<long double>(m.num_layers - moe);
  if (m.num_layers > moe) layer_tensors(m, 0, false, count);
  times = static_cast<long double>(moe);
  if (moe > 0) layer_tensors(m, 0, true, count);
  return r;
}

long double model_param_count(const ModelArch& m) {
  const ParamGroups g = model_param_groups(m);
  return g.linears + g.norms + g.head + g.embedding + g.router + g.experts;
}

long double model_active_param_count(const ModelArch& m) {
  const ParamGroups g = model_param_groups(m);
  const long double routed =
      m.is_moe() ? g.experts * static_cast<long double>(m.top_k) / static_cast<long double>(m.num_experts)
                 : 0;
  return g.linears + g.norms + g.head + g.embedding + g.router + routed;
}

std::optional<int64_t> try_model_parameter_elements(const ModelArch& m) {
  // model_param_count's sum is exact below 2^64 (model_param_groups), so it answers for int64 too: a
  // total of 2^63 or more overflowed, and rounding never brings a larger one below 2^63, a power of two
  // it represents.
  static_assert(std::numeric_limits<long double>::digits >= 64, "long double must hold 64-bit integers");
  const long double n = model_param_count(m);
  if (!(n >= 0 && n < 0x1p63L)) return std::nullopt;
  return static_cast<int64_t>(n);
}

int64_t model_parameter_elements(const ModelArch& m) {
  const auto n = try_model_parameter_elements(m);
  check(n.has_value(),
        "model shape: the parameter count overflows int64 (d_model {}, d_ff {}, vocab {}, layers {})",
        m.d_model, m.d_ff, m.vocab_size, m.num_layers);
  return *n;
}

long double weight_scale_blocks(long double rows, long double cols) {
  return std::ceil(rows / 128) * std::ceil(cols / 128);
}

long double weight_bytes(long double rows, long double cols, DType dtype) {
  const long double elements = rows * cols * static_cast<long double>(dtype_size(dtype));
  return dtype == DType::fp8_e4m3 ? elements + 4 * weight_scale_blocks(rows, cols) : elements;
}

const char* region_tag(Region r) {
  switch (r) {
    case Region::layer:
      return "activations/layers";
    case Region::final:
      return "activations/final";
    case Region::workspace:
      return "workspace";
    case Region::moe_layer:
      return "activations/layers";  // an MoE layer is tagged as any layer
  }
  return "?";
}

int64_t expert_rows(const ModelShape& m) {
  if (!m.is_moe()) return 0;
  const int64_t choices = m.batch * m.seq * m.top_k;
  return choices + std::min(m.num_experts, choices) * (kExpertRowAlignment - 1);
}

std::vector<int64_t> buffer_shape(Buf b, const ModelShape& m) {
  const int64_t N = m.batch * m.seq, D = m.d_model, V = m.vocab_size, QKV = qkv_width(m);
  // The workspace serves the dense feed-forward only where a layer has one.
  const int64_t F = m.d_ff, Fw = m.num_moe_layers() < m.num_layers ? F : 0;
  // MoE: experts, expert width, shared width, layout rows (all 0 for a dense model).
  const int64_t E = m.is_moe() ? m.num_experts : 0, De = m.is_moe() ? m.expert_width() : 0,
                S = m.is_moe() ? m.shared_width() : 0, R = expert_rows(m);
  switch (b) {
    case Buf::x:
    case Buf::x_mid:
    case Buf::h1:
    case Buf::o:
    case Buf::h2:
    case Buf::final_x:
    case Buf::final_h:
    case Buf::dx:
    case Buf::dout:
      return {N, D};
    case Buf::rstd1:
    case Buf::rstd2:
    case Buf::final_rstd:
    case Buf::final_lse:
      return {N};
    case Buf::lse:
      return {m.batch, m.num_heads, m.seq};
    case Buf::qkv:
    case Buf::dattn:
    case Buf::dqkv:
      return {N, QKV};
    case Buf::ab:
      return {N, 2 * F};
    case Buf::g:
      return {N, F};
    case Buf::logits:
      return {N, V};
    case Buf::router_logits:
    case Buf::router_dlogits:
      return {N, E};
    case Buf::moe_x:
    case Buf::moe_y:
      return {R, D};
    case Buf::moe_ab:
      return {R, 2 * De};
    case Buf::moe_g:
      return {R, De};
    case Buf::shared_ab:
      return {N, 2 * S};
    case Buf::shared_g:
      return {N, S};
    case Buf::gemm:
      return {N, std::max({QKV, 2 * Fw, D, 2 * S})};
    case Buf::dtmp:
      return {N, std::max({Fw, D, S})};
    case Buf::dop:
      return {N, std::max({V, QKV, 2 * Fw, D, 2 * S})};
    case Buf::moe_gemm:
      return {R, R > 0 ? std::max(2 * De, 2 * D) : 0};
    case Buf::moe_dop:
      return {R, R > 0 ? std::max(2 * De, D) : 0};
    case Buf::count:
      break;
  }
  fail("buffer_shape: no buffer {}", static_cast<int>(b));
}

int64_t buffer_elements(Buf b, const ModelShape& m) {
  int64_t n = 1;
  for (int64_t d : buffer_shape(b, m)) n *= d;
  return n;
}

namespace {

// Whether region r's block holds buffer s: its own buffers, and an MoE layer's those every layer has
// but the dense feed-forward's.
bool holds(Region r, const BufferSpec& s) {
  if (s.region == r) return true;
  return r == Region::moe_layer && s.region == Region::layer && s.id != Buf::ab && s.id != Buf::g;
}

// A region's buffers one after another, each aligned to kBufferAlignment bytes, counted in T: size_t for
// the offsets the model carves its memory at, double for model_memory, an estimate that must answer for
// sizes whose bytes do not fit 64 bits (a batch no machine holds is refused for its size, not wrapped).
// A buffer without elements (an MoE one of a dense model) takes no place, not even its alignment.
template <typename T>
T lay_out(Region r, const ModelShape& m, T state_bytes, T operand_bytes, size_t* offset) {
  const T align = static_cast<T>(kBufferAlignment);
  T bytes = 0;
  for (const BufferSpec& s : kModelBuffers) {
    if (!holds(r, s)) continue;
    T n = 1;
    for (int64_t d : buffer_shape(s.id, m)) n *= static_cast<T>(d);
    if (n == 0) continue;
    T at;
    if constexpr (std::is_integral_v<T>)
      at = (bytes + align - 1) / align * align;
    else
      at = std::ceil(bytes / align) * align;
    if (offset) offset[static_cast<int>(s.id)] = static_cast<size_t>(at);
    bytes = at + n * (s.elem == Elem::state ? state_bytes : operand_bytes);
  }
  return bytes;
}

}  // namespace

RegionLayout region_layout(Region r, const ModelShape& m, size_t state_bytes, size_t operand_bytes) {
  RegionLayout l;
  l.bytes = lay_out<size_t>(r, m, state_bytes, operand_bytes, l.offset);
  return l;
}

ModelMemory model_memory(const ModelShape& m) {
  const double state = 4, operand = static_cast<double>(dtype_size(m.storage.value_or(m.operand)));
  const double P = static_cast<double>(model_parameter_elements(m));
  ModelMemory r;
  r.parameters = state * P;
  r.gradients = state * P;
  r.optimizer_state = 2 * state * P;
  // The model keeps an operand copy of the weights whenever operands are rounded (bf16, or fp16
  // values in fp32 storage); fp32 operands read the parameters themselves.
  r.operand_copy = m.operand == DType::f32 ? 0 : operand * P;
  const auto bytes = [&](Region g) { return lay_out<double>(g, m, state, operand, nullptr); };
  r.per_layer = bytes(Region::layer);
  r.final = bytes(Region::final);
  r.workspace = bytes(Region::workspace);
  r.layers = m.num_layers;
  if (m.is_moe()) {
    r.moe_layers = m.num_moe_layers();
    r.per_moe_layer = bytes(Region::moe_layer);
    // Per MoE layer: the choices (int32 expert, a state-type weight and the int64 row of each), the
    // counts and offsets (int64, E and E + 1), the rows' experts (int32, at most R) and the router bias
    // (E, state type, balance bias only); once, the backward's gradients of the gate weights (one per
    // choice).
    const double choices =
        static_cast<double>(m.batch) * static_cast<double>(m.seq) * static_cast<double>(m.top_k);
    const double E = static_cast<double>(m.num_experts), R = static_cast<double>(expert_rows(m));
    const double bias = m.balance == MoeBalance::bias ? E * state : 0;
    r.routing =
        static_cast<double>(r.moe_layers) * (choices * (4 + state + 8) + (2 * E + 1) * 8 + R * 4 + bias) +
        choices * state;
  }
  return r;
}

}  // namespace ridge::roofline
