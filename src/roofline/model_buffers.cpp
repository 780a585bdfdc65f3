// The Transformer LM's buffers (ridge/roofline/model_buffers.hpp): the one place their shapes are
// written down.
#include "ridge/roofline/model_buffers.hpp"

#include <algorithm>
#include <limits>

#include "ridge/core/error.hpp"
#include "core/check.hpp"

namespace ridge::roofline {

int64_t kv_width(const ModelShape& m) {
  check(m.kv_heads >= 0, "model shape: kv_heads = {} must be >= 0 (0: equal to heads)", m.kv_heads);
  if (m.kv_head_count() == m.heads) return m.d_model;
  check(m.heads >= 1 && m.heads % m.kv_heads == 0 && m.d_model % m.heads == 0,
        "model shape: kv_heads {} must divide heads {}, and heads d_model {}", m.kv_heads, m.heads,
        m.d_model);
  return m.d_model / m.heads * m.kv_heads;
}

int64_t qkv_width(const ModelShape& m) {
  return m.d_model + 2 * kv_width(m);
}

std::vector<ParamSpec> model_parameters(const ModelShape& m) {
  const int64_t D = m.d_model, F = m.d_ff, V = m.vocab, Dkv = kv_width(m);
  std::vector<ParamSpec> out;
  int g = 0;
  out.push_back({"lm_head.weight", {V, D}, g++});
  out.push_back({"ln_final.weight", {D}, g++});
  for (int64_t l = m.layers - 1; l >= 0; --l, ++g) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (auto& [name, shape] : std::initializer_list<std::pair<const char*, std::vector<int64_t>>>{
             {"ffn.w2.weight", {D, F}},
             {"ffn.w1.weight", {F, D}},
             {"ffn.w3.weight", {F, D}},
             {"ln2.weight", {D}},
             {"attn.output_proj.weight", {D, D}},
             {"attn.q_proj.weight", {D, D}},
             {"attn.k_proj.weight", {Dkv, D}},
             {"attn.v_proj.weight", {Dkv, D}},
             {"ln1.weight", {D}}})
      out.push_back({p + name, shape, g});
  }
  out.push_back({"token_embeddings.weight", {V, D}, g});
  return out;
}

long double model_param_count(const ModelShape& m) {
  ModelShape one = m;
  one.layers = 1;
  long double once = 0, layer = 0;
  for (const ParamSpec& p : model_parameters(one)) {
    long double n = 1;
    for (int64_t d : p.shape) n *= static_cast<long double>(d);
    (p.name.rfind("layers.", 0) == 0 ? layer : once) += n;
  }
  return layer * static_cast<long double>(m.layers) + once;
}

std::optional<int64_t> try_model_parameter_elements(const ModelShape& m) {
  // model_param_count's sum is exact below 2^64 (every partial sum and product is at most the total, and
  // long double holds integers of 64 bits), so it answers for int64 too: a total of 2^63 or more
  // overflowed, and rounding never brings a larger one below 2^63, a power of two it represents.
  static_assert(std::numeric_limits<long double>::digits >= 64, "long double must hold 64-bit integers");
  const long double n = model_param_count(m);
  if (!(n >= 0 && n < 0x1p63L)) return std::nullopt;
  return static_cast<int64_t>(n);
}

int64_t model_parameter_elements(const ModelShape& m) {
  const auto n = try_model_parameter_elements(m);
  check(n.has_value(),
        "model shape: the parameter count overflows int64 (d_model {}, d_ff {}, vocab {}, layers {})",
        m.d_model, m.d_ff, m.vocab, m.layers);
  return *n;
}

const char* region_tag(Region r) {
  switch (r) {
    case Region::layer:
      return "activations/layers";
    case Region::final:
      return "activations/final";
    case Region::workspace:
      return "workspace";
  }
  return "?";
}

std::vector<int64_t> buffer_shape(Buf b, const ModelShape& m) {
  const int64_t N = m.batch * m.seq, D = m.d_model, F = m.d_ff, V = m.vocab, QKV = qkv_width(m);
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
      return {m.batch, m.heads, m.seq};
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
    case Buf::gemm:
      return {N, std::max({QKV, 2 * F, D})};
    case Buf::dtmp:
      return {N, std::max(F, D)};
    case Buf::dop:
      return {N, std::max({V, QKV, 2 * F, D})};
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

RegionLayout region_layout(Region r, const ModelShape& m, size_t state_bytes, size_t operand_bytes) {
  RegionLayout l;
  for (const BufferSpec& s : kModelBuffers) {
    if (s.region != r) continue;
    const size_t at = (l.bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    l.offset[static_cast<int>(s.id)] = at;
    l.bytes = at + static_cast<size_t>(buffer_elements(s.id, m)) *
                       (s.elem == Elem::state ? state_bytes : operand_bytes);
  }
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
  const auto bytes = [&](Region g) {
    return static_cast<double>(region_layout(g, m, 4, static_cast<size_t>(operand)).bytes);
  };
  r.per_layer = bytes(Region::layer);
  r.final = bytes(Region::final);
  r.workspace = bytes(Region::workspace);
  r.layers = m.layers;
  return r;
}

}  // namespace ridge::roofline
