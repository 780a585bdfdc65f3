// Inference for the Transformer LM: weights in their format, the paged KV cache, prefill, decode and
// generation (ridge/generate/generate.hpp). The math is the training forward's (src/model/model.cpp), row by
// row, with each row at its own position, through the training layers themselves (model/layers.hpp).
#include "ridge/generate/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <fmt/format.h>
#include <map>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "model/layers.hpp"
#include "ridge/attention.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/units.hpp"
#include "ridge/model/roofline.hpp"
#include "ridge/gemm.hpp"
#include "ridge/gemm_fp8.hpp"
#include "ridge/gemm_grouped.hpp"
#include "ridge/model/moe.hpp"
#include "ridge/model/ranges.hpp"
#include "ridge/roofline/model_buffers.hpp"
#include "core/check.hpp"

namespace ridge::generate {

using namespace ridge::model;  // generation runs over the model's own layers and shapes
using text::Rng;

WeightFormat parse_weight_format(const std::string& name, const char* what) {
  if (name == "fp32" || name == "f32") return WeightFormat::fp32;
  if (name == "bf16") return WeightFormat::bf16;
  if (name == "fp8") return WeightFormat::fp8;
  if (name == "fp8-ue8m0") return WeightFormat::fp8_ue8m0;
  fail("{}: '{}' is not one of fp32, bf16, fp8, fp8-ue8m0", what, name);
}
const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::fp32:
      return "fp32";
    case WeightFormat::bf16:
      return "bf16";
    case WeightFormat::fp8:
      return "fp8";
    case WeightFormat::fp8_ue8m0:
      return "fp8-ue8m0";
  }
  return "?";
}

void InferenceOptions::validate() const {
  check_arg(block_size >= 1 && block_size <= 1024, "block_size", "{} is outside 1..1024", block_size);
  check_arg(prefill_tokens >= 1, "prefill_tokens", "{} must be >= 1", prefill_tokens);
}

void GenerateOptions::validate() const {
  sampling.validate();
  check_arg(max_tokens >= 1, "max_tokens", "{} must be >= 1", max_tokens);
  check_arg(eos >= -1, "eos", "{} must be a token id or -1 (none)", eos);
  check_arg(cache_tokens >= 0, "cache_tokens", "{} must be >= 0 (0: enough for every prompt)", cache_tokens);
  check_arg(num_splits >= 0 && num_splits <= attention::kMaxKVCacheSplits, "num_splits",
            "{} is outside 0..{} (0: the kernel's heuristic)", num_splits, attention::kMaxKVCacheSplits);
}

namespace {

bool is_fp8(WeightFormat f);

}  // namespace

InferenceMemory inference_memory(const ModelConfig& c, const InferenceOptions& o, int64_t cache_tokens) {
  const double L = static_cast<double>(c.num_layers), KV = static_cast<double>(c.kv_heads()),
               dh = static_cast<double>(c.d_head());
  // Bytes per weight: FP8's are one, and its cast holds another copy while it packs them.
  auto per = [](WeightFormat f) { return f == WeightFormat::fp32 ? 4.0 : 2.0; };
  const WeightFormat head = o.head ? *o.head : (is_fp8(o.weights) ? WeightFormat::bf16 : o.weights);
  // The linears in their format, lm_head in its own, the embedding table and the norms in fp32.
  const roofline::ParamGroups w = roofline::model_param_groups(c);
  // An MoE model's routers in fp32 (the training forward's), its routed experts in the format: FP8's
  // quantized and packed one expert at a time, one byte each with their 128x128 blocks' fp32 scales.
  const double experts = is_fp8(o.weights)
                             ? static_cast<double>(w.experts) + 4 * static_cast<double>(w.expert_scale_blocks)
                             : static_cast<double>(w.experts) * per(o.weights);
  InferenceMemory m;
  m.weights = static_cast<double>(w.linears) * per(o.weights) + static_cast<double>(w.head) * per(head) +
              4 * static_cast<double>(w.embedding) + 4 * static_cast<double>(w.norms) +
              4 * static_cast<double>(w.router) + experts;
  m.rope = 4.0 * static_cast<double>(c.context_length) * dh;  // cos and sin: [context, dh / 2] floats each
  m.kv_cache =
      static_cast<double>(cache_tokens) * 2 * L * KV * dh * (o.weights == WeightFormat::fp32 ? 4 : 2);
  return m;
}

namespace {

// The thread count decode attention's splits are sized for (see decode_step).
constexpr int kSplitThreads = 16;

bool is_fp8(WeightFormat f) {
  return f == WeightFormat::fp8 || f == WeightFormat::fp8_ue8m0;
}

// The dtype the roofline counts a format as: FP8 with either kind of scale is fp8_e4m3 with fp32 scales.
DType weight_dtype(WeightFormat f) {
  return f == WeightFormat::fp32 ? DType::f32 : (f == WeightFormat::bf16 ? DType::bf16 : DType::fp8_e4m3);
}

// Per-call scratch of the linears: the activations in the weights' operand type.
struct Scratch {
  Buffer<bf16> b16;
  Buffer<fp8_e4m3> q8;
  Buffer<float> s8;
  template <typename T>
  static T* room(Buffer<T>& b, size_t n, const char* tag) {
    if (b.size() < n) b = Buffer<T>(n, tag);
    return b.data();
  }
};

// `count` weights as fp32 or bf16 (FP8's layouts are the callers': a linear's packed panels, an expert
// stack's packed panels per expert).
// The scales an FP8 format quantizes with: fp32, or DeepSeek's powers of two (UE8M0).
gemm::Fp8Scales fp8_scales(WeightFormat f) {
  return f == WeightFormat::fp8 ? gemm::Fp8Scales::fp32 : gemm::Fp8Scales::ue8m0;
}

// An [n, k] weight in an FP8 format: quantized in 128x128 blocks, then packed as the FP8 kernels read it (a
// dense linear's weights, and each routed expert's).
gemm::PackedFp8B pack_fp8(const float* w, int64_t n, int64_t k, WeightFormat f) {
  const auto q = gemm::per_block_cast_to_fp8(MatrixView<const float>{w, n, k, k}, fp8_scales(f));
  return gemm::PackedFp8B::pack(q.view(), q.scale_view());
}

void store_weights(const float* w, size_t count, WeightFormat f, Buffer<float>& w32, Buffer<bf16>& w16) {
  if (f == WeightFormat::fp32) {
    w32 = Buffer<float>(count, "inference/weights");
    std::copy_n(w, count, w32.data());
  } else {
    w16 = Buffer<bf16>(count, "inference/weights");
    convert(w, w16.data(), count);
  }
}

// One linear layer y = x w^T, w [n, k], in its format.
struct Linear {
  WeightFormat fmt = WeightFormat::fp32;
  int64_t n = 0, k = 0;
  Buffer<float> w32;
  Buffer<bf16> w16;
  gemm::PackedFp8B w8;

  void set(const float* w, int64_t rows, int64_t cols, WeightFormat f) {
    fmt = f;
    n = rows;
    k = cols;
    if (!is_fp8(f)) return store_weights(w, static_cast<size_t>(n * k), f, w32, w16);
    w8 = pack_fp8(w, n, k, f);
  }
  // Bytes one call reads of the weights (with FP8, the 128x128 blocks' fp32 scales too), as the decode
  // roofline counts them.
  double bytes() const {
    return static_cast<double>(
        roofline::weight_bytes(static_cast<long double>(n), static_cast<long double>(k), weight_dtype(fmt)));
  }
  // y[rows, n] = (residual +) x[rows, k] w^T; residual may be y itself.
  void apply(const float* x, int64_t rows, float* y, const float* residual, Scratch& s) const {
    if (rows == 0) return;
    const MatrixView<float> d{y, rows, n, n};
    const MatrixView<const float> c =
        residual ? MatrixView<const float>{residual, rows, n, n} : MatrixView<const float>{};
    switch (fmt) {
      case WeightFormat::fp32:
        gemm::f32_gemm_nt(MatrixView<const float>{x, rows, k, k},
                          MatrixView<const float>{w32.data(), n, k, k}, d, c);
        return;
      case WeightFormat::bf16: {
        bf16* a = Scratch::room(s.b16, static_cast<size_t>(rows * k), "inference/activations");
        convert(x, a, static_cast<size_t>(rows * k));
        apply(a, rows, y, residual);
        return;
      }
      default: {
        const int64_t kb = gemm::fp8_scale_blocks(k);
        fp8_e4m3* a = Scratch::room(s.q8, static_cast<size_t>(rows * k), "inference/activations");
        float* sa = Scratch::room(s.s8, static_cast<size_t>(rows * kb), "inference/activations");
        gemm::per_token_cast_to_fp8(MatrixView<const float>{x, rows, k, k},
                                    MatrixView<fp8_e4m3>{a, rows, k, k}, MatrixView<float>{sa, rows, kb, kb},
                                    fp8_scales(fmt));
        gemm::fp8_gemm_nt(MatrixView<const fp8_e4m3>{a, rows, k, k},
                          MatrixView<const float>{sa, rows, kb, kb}, w8, d, c);
        return;
      }
    }
  }
  // The same from an x already rounded to bf16 (bf16 weights only).
  void apply(const bf16* x, int64_t rows, float* y, const float* residual) const {
    check(fmt == WeightFormat::bf16, "Linear::apply: bf16 activations need bf16 weights");
    if (rows == 0) return;
    gemm::bf16_gemm_nt(MatrixView<const bf16>{x, rows, k, k}, MatrixView<const bf16>{w16.data(), n, k, k},
                       MatrixView<float>{y, rows, n, n},
                       residual ? MatrixView<const float>{residual, rows, n, n} : MatrixView<const float>{});
  }
};

// Where an MoE layer's routed rows sit in the step's buffers (rows of their own width, one after another):
// DeepGEMM's contiguous layout (a prefill: expert e's rows one run from offset[e], padded to the grouped
// GEMMs' alignment) or its masked one (a decode step: expert e's rows first in its slab of max_m rows).
struct ExpertRows {
  const moe::Routing* routing = nullptr;
  const moe::ContiguousLayout* contiguous = nullptr;  // or
  const moe::MaskedLayout* masked = nullptr;

  int64_t experts() const { return routing->experts; }
  int64_t rows() const { return contiguous ? contiguous->rows : experts() * masked->max_m; }
  // Each choice's row (token t's j-th at t * k + j).
  std::span<const int64_t> row() const { return contiguous ? contiguous->row : masked->row; }
  // f(first row, rows) for each expert that has rows: only they are computed (and only their weights read).
  template <typename F>
  void each_run(F&& f) const {
    for (int64_t e = 0; e < experts(); ++e)
      if (const int64_t n = routing->count[static_cast<size_t>(e)]; n > 0)
        f(contiguous ? contiguous->offset[static_cast<size_t>(e)] : e * masked->max_m, n);
  }
};

// A grouped GEMM's rows as its weights' format reads them: fp32, bf16, or e4m3 with one fp32 scale per row
// and 128 columns (row strides: the width, and ceil(width / 128) for the scales).
struct ExpertOperand {
  const float* f32 = nullptr;
  const bf16* b16 = nullptr;
  const fp8_e4m3* q8 = nullptr;
  const float* s8 = nullptr;
};

// The routed experts' w1, w3 or w2 of one MoE layer in the format as the grouped GEMMs read it: fp32 and
// bf16 stacked [E, n, k]; FP8 one PackedFp8B per expert (its [n, k] quantized on its own, 128x128 blocks,
// then packed as a dense FP8 linear's weights are: the decode kernels widen straight from the panels,
// where raw e4m3 rows went through the slower raw-B kernels).
struct ExpertStack {
  WeightFormat fmt = WeightFormat::fp32;
  int64_t E = 0, n = 0, k = 0;
  Buffer<float> w32;
  Buffer<bf16> w16;
  std::vector<gemm::PackedFp8B> w8;

  void set(const float* w, int64_t experts, int64_t rows, int64_t cols, WeightFormat f) {
    fmt = f;
    E = experts;
    n = rows;
    k = cols;
    const size_t count = static_cast<size_t>(E * n * k);
    if (!is_fp8(f)) return store_weights(w, count, f, w32, w16);
    w8.clear();
    w8.reserve(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) w8.push_back(pack_fp8(w + e * n * k, n, k, f));
  }
  // Bytes one expert's matrix takes to read (FP8: with its scales), as the decode roofline counts them; FP8
  // counted from the packed expert itself (its panels, which pad n to 32 rows and k to even: the roofline's
  // n k where the widths are multiples of 32, as every named size's are; and its 128x128 blocks' fp32
  // scales).
  double expert_bytes() const {
    if (is_fp8(fmt))
      return static_cast<double>(w8.front().bytes()) +
             4.0 * static_cast<double>(gemm::fp8_scale_blocks(n) * gemm::fp8_scale_blocks(k));
    return static_cast<double>(
        roofline::weight_bytes(static_cast<long double>(n), static_cast<long double>(k), weight_dtype(fmt)));
  }
  // d[r] = a[r] W_e^T for the rows r of each expert e as `lay` places them (d fp32, row stride ldd; rows of
  // experts without tokens, and padding, left as they are): the contiguous or the masked grouped GEMM.
  void apply(const ExpertRows& lay, const ExpertOperand& a, float* d, int64_t ldd) const {
    const int64_t kb = gemm::fp8_scale_blocks(k), R = lay.rows();
    const auto b3 = [&](const auto* p, int64_t rows, int64_t cols) {
      return TensorView<std::remove_pointer_t<decltype(p)>>::contiguous(p, {E, rows, cols});
    };
    if (lay.contiguous) {
      const auto mi = std::span<const int32_t>(lay.contiguous->m_indices);
      const MatrixView<float> dm{d, R, n, ldd};
      switch (fmt) {
        case WeightFormat::fp32:
          return gemm::m_grouped_f32_gemm_nt_contiguous(MatrixView<const float>{a.f32, R, k, k},
                                                        b3(w32.data(), n, k), dm, mi);
        case WeightFormat::bf16:
          return gemm::m_grouped_bf16_gemm_nt_contiguous(MatrixView<const bf16>{a.b16, R, k, k},
                                                         b3(w16.data(), n, k), dm, mi);
        default:
          return gemm::m_grouped_fp8_gemm_nt_contiguous(MatrixView<const fp8_e4m3>{a.q8, R, k, k},
                                                        MatrixView<const float>{a.s8, R, kb, kb},
                                                        std::span<const gemm::PackedFp8B>(w8), dm, mi);
      }
    }
    // Masked: [E, max_m, width] slabs. expected_m is the rows an expert with tokens has on average.
    const int64_t M = lay.masked->max_m;
    const auto slabs = [&](auto* p, int64_t cols, int64_t ld) {
      TensorView<std::remove_pointer_t<decltype(p)>> v;
      v.data = p;
      v.rank = 3;
      v.shape = {E, M, cols};
      v.stride = {M * ld, ld, 1};
      return v;
    };
    const auto mm = std::span<const int32_t>(lay.masked->masked_m);
    int64_t used = 0;
    for (int32_t c : mm) used += c > 0 ? 1 : 0;
    const int64_t expected =
        (lay.routing->tokens * lay.routing->top_k + used - 1) / std::max<int64_t>(1, used);
    switch (fmt) {
      case WeightFormat::fp32:
        return gemm::m_grouped_f32_gemm_nt_masked(slabs(a.f32, k, k), b3(w32.data(), n, k), slabs(d, n, ldd),
                                                  mm, expected);
      case WeightFormat::bf16:
        return gemm::m_grouped_bf16_gemm_nt_masked(slabs(a.b16, k, k), b3(w16.data(), n, k), slabs(d, n, ldd),
                                                   mm, expected);
      default:
        return gemm::m_grouped_fp8_gemm_nt_masked(slabs(a.q8, k, k), slabs(a.s8, kb, kb),
                                                  std::span<const gemm::PackedFp8B>(w8), slabs(d, n, ldd), mm,
                                                  expected);
    }
  }
};

}  // namespace

struct InferenceModel::Impl {
  ModelConfig cfg;
  InferenceOptions opt;
  WeightFormat head_fmt = WeightFormat::fp32;
  struct Layer {
    Linear qkv, out, w13, w2;
    Buffer<float> ln1, ln2;
    // An MoE layer (cfg.moe_layer), in place of w13 and w2: the router [E, D] in fp32 (the training
    // forward's: its logits, and so the choice of experts, are the model's), its bias (balance bias: E
    // values; else empty), the routed experts' stacks, and the shared experts as a dense feed-forward of
    // width S (w1|w3 [2S, D], w2 [D, S]; none when S is 0).
    bool moe = false;
    Linear router, shared13, shared2;
    std::vector<float> bias;
    ExpertStack e1, e3, e2;
  };
  std::vector<Layer> layers;
  Linear head;
  Buffer<float> embedding, ln_final;
  std::vector<float> rope_cos, rope_sin;  // [context, d_head / 2], the training forward's tables

  int64_t H() const { return cfg.num_heads; }
  int64_t KV() const { return cfg.kv_heads(); }
  int64_t dh() const { return cfg.d_head(); }
  int64_t qkv_width() const { return (H() + 2 * KV()) * dh(); }
  bool kv_bf16() const { return opt.weights != WeightFormat::fp32; }
  size_t kv_elem() const { return kv_bf16() ? sizeof(bf16) : sizeof(float); }

  void build(const ModelConfig& c, std::span<const float> params, std::span<const float> state,
             const InferenceOptions& o) {
    c.validate();
    o.validate();
    check_arg(
        c.d_head() >= 16 && c.d_head() <= 256, "config",
        "d_head = d_model / num_heads = {}; inference runs FlashAttention and decode attention, which take "
        "16..256",
        c.d_head());
    // Before anything is allocated: the tables alone grow with context_length (12.8 GB at 10^8 tokens).
    const InferenceMemory need = inference_memory(c, o);
    const auto avail = static_cast<double>(memory::available_bytes());
    check_arg(need.weights + need.rope <= avail, "config",
              "the weights ({}) and RoPE's tables for context_length {} ({}) need {}, more than the {} of "
              "memory available",
              units::format_bytes(need.weights), c.context_length, units::format_bytes(need.rope),
              units::format_bytes(need.weights + need.rope), units::format_bytes(avail));
    cfg = c;
    opt = o;
    head_fmt = o.head ? *o.head : (is_fp8(o.weights) ? WeightFormat::bf16 : o.weights);
    // The tensors' offsets in the flat order the model's description gives.
    std::map<std::string, std::pair<int64_t, std::vector<int64_t>>> at;
    int64_t off = 0;
    for (const auto& p : roofline::model_parameters(c)) {
      int64_t n = 1;
      for (int64_t d : p.shape) n *= d;
      at[p.name] = {off, p.shape};
      off += n;
    }
    check_arg(static_cast<int64_t>(params.size()) == off, "params",
              "{} values given; this model's parameters are {}", params.size(), off);
    // The state: each MoE layer's router bias under balance bias (TransformerLM::state()'s order).
    const int64_t E = c.num_experts,
                  biases = c.is_moe() && c.balance == moe::Balance::bias ? c.num_moe_layers() * E : 0;
    check_arg(static_cast<int64_t>(state.size()) == biases, "state",
              "{} values given; this model's state (a router bias of num_experts values per MoE layer under "
              "balance bias) is {}",
              state.size(), biases);
    for (size_t i = 0; i < state.size(); ++i)
      check_arg(std::isfinite(state[i]), "state",
                "value {} (the router bias of expert {} of MoE layer {}) is {}", i,
                static_cast<int64_t>(i) % std::max<int64_t>(1, E),
                static_cast<int64_t>(i) / std::max<int64_t>(1, E), state[i]);
    auto ptr = [&](const std::string& name) { return params.data() + at.at(name).first; };
    auto copy = [&](const std::string& name, int64_t n) {
      Buffer<float> b(static_cast<size_t>(n), "inference/weights");
      std::copy_n(ptr(name), n, b.data());
      return b;
    };
    const int64_t D = c.d_model, F = c.d_ff, V = c.vocab_size, De = c.expert_width(), S = c.shared_width();
    layers.resize(static_cast<size_t>(c.num_layers));
    int64_t bias_at = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      Layer& L = layers[static_cast<size_t>(l)];
      // q|k|v, w1|w3 and the shared experts' w1|w3 are adjacent in the flat buffer: one GEMM each, as in
      // training; the routed experts' w1 and w3 are two stacks, two grouped GEMMs (training's too).
      L.qkv.set(ptr(p + "attn.q_proj.weight"), qkv_width(), D, o.weights);
      L.out.set(ptr(p + "attn.output_proj.weight"), D, H() * dh(), o.weights);
      if (c.moe_layer(l)) {
        L.moe = true;
        L.router.set(ptr(p + "ffn.router.weight"), E, D, WeightFormat::fp32);
        if (biases > 0) {
          L.bias.assign(state.begin() + bias_at, state.begin() + bias_at + E);
          bias_at += E;
        }
        L.e1.set(ptr(p + "ffn.experts.w1.weight"), E, De, D, o.weights);
        L.e3.set(ptr(p + "ffn.experts.w3.weight"), E, De, D, o.weights);
        L.e2.set(ptr(p + "ffn.experts.w2.weight"), E, D, De, o.weights);
        if (S > 0) {
          L.shared13.set(ptr(p + "ffn.shared.w1.weight"), 2 * S, D, o.weights);
          L.shared2.set(ptr(p + "ffn.shared.w2.weight"), D, S, o.weights);
        }
      } else {
        L.w13.set(ptr(p + "ffn.w1.weight"), 2 * F, D, o.weights);
        L.w2.set(ptr(p + "ffn.w2.weight"), D, F, o.weights);
      }
      L.ln1 = copy(p + "ln1.weight", D);
      L.ln2 = copy(p + "ln2.weight", D);
    }
    head.set(ptr("lm_head.weight"), V, D, head_fmt);
    embedding = copy("token_embeddings.weight", V * D);
    ln_final = copy("ln_final.weight", D);
    layers::rope_tables<float>(c.context_length, dh(), c.rope_theta, rope_cos, rope_sin);
  }
};

InferenceModel::InferenceModel(const TransformerLM<float>& model, const InferenceOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->build(model.config(), model.params(), model.state(), options);
}
InferenceModel::InferenceModel(const ModelConfig& config, std::span<const float> params,
                               const InferenceOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->build(config, params, {}, options);
}
InferenceModel::InferenceModel(const ModelConfig& config, std::span<const float> params,
                               std::span<const float> state, const InferenceOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->build(config, params, state, options);
}
InferenceModel::~InferenceModel() = default;
InferenceModel::InferenceModel(InferenceModel&&) noexcept = default;
InferenceModel& InferenceModel::operator=(InferenceModel&&) noexcept = default;
const ModelConfig& InferenceModel::config() const {
  return impl_->cfg;
}
const InferenceOptions& InferenceModel::options() const {
  return impl_->opt;
}
WeightFormat InferenceModel::head_format() const {
  return impl_->head_fmt;
}
DType InferenceModel::kv_dtype() const {
  return impl_->kv_bf16() ? DType::bf16 : DType::f32;
}
roofline::InferenceDtypes InferenceModel::roofline_dtypes() const {
  roofline::InferenceDtypes d;
  d.weights = weight_dtype(impl_->opt.weights);
  d.head = weight_dtype(impl_->head_fmt);
  d.embedding = DType::f32;
  d.kv = kv_dtype();
  return d;
}
const InferenceModel::Impl& InferenceModel::impl() const {
  return *impl_;
}
double InferenceModel::weight_bytes() const {
  const Impl& m = *impl_;
  double b = m.head.bytes() + 4.0 * static_cast<double>(m.cfg.d_model);
  for (const auto& L : m.layers)
    b += L.qkv.bytes() + L.out.bytes() +
         (L.moe ? L.router.bytes() + L.shared13.bytes() + L.shared2.bytes() : L.w13.bytes() + L.w2.bytes()) +
         8.0 * static_cast<double>(m.cfg.d_model);
  return b;
}
double InferenceModel::expert_bytes() const {
  for (const auto& L : impl_->layers)
    if (L.moe) return L.e1.expert_bytes() + L.e3.expert_bytes() + L.e2.expert_bytes();
  return 0;
}
double InferenceModel::weight_bytes(std::span<const int64_t> experts_read) const {
  const ModelConfig& c = impl_->cfg;
  check_arg(static_cast<int64_t>(experts_read.size()) == c.num_moe_layers(), "experts_read",
            "{} counts for {} MoE layers", experts_read.size(), c.num_moe_layers());
  double read = 0;
  for (int64_t x : experts_read) {
    check_arg(x >= 0 && x <= c.num_experts, "experts_read", "{} is not a count of 0 .. {} experts", x,
              c.num_experts);
    read += static_cast<double>(x);
  }
  return weight_bytes() + read * expert_bytes();
}
double InferenceModel::embedding_row_bytes() const {
  return 4.0 * static_cast<double>(impl_->cfg.d_model);
}
double InferenceModel::kv_bytes_per_token() const {
  const Impl& m = *impl_;
  return 2.0 * static_cast<double>(m.cfg.num_layers * m.KV() * m.dh()) * static_cast<double>(m.kv_elem());
}

// ---------------------------------------------------------------------------------------------------------
// Session

struct Session::Impl {
  const InferenceModel::Impl* m = nullptr;
  int64_t max_sequences = 0, block_size = 0, num_blocks = 0, max_blocks_per_seq = 0;
  int num_splits = 0;
  std::vector<Buffer<std::byte>> k_pool, v_pool;  // per layer: [num_blocks, block_size, KV, dh]
  std::vector<int32_t> free_list;                 // block ids, popped from the back

  struct Seq {
    std::vector<int32_t> blocks;
    int64_t length = 0;
    bool live = false;
    int64_t logits_row = -1;  // its row in `logits` after the last step that included it
  };
  std::vector<Seq> seqs;

  // Step buffers (rows: the step's tokens), grown as needed.
  Buffer<float> x, h, qkv, o32, ab, g, rstd, lse, logits_buf, last_h;
  Buffer<bf16> g16;              // SwiGLU's output for bf16 weights: the w2 operand, as training's
  Buffer<std::byte> qkv_a, o_a;  // attention's operands in the cache's type
  Scratch scratch;
  int64_t rows_cap = 0, logit_rows_cap = 0;
  std::vector<int32_t> table, seqlens;

  // An MoE layer's step: the router's logits [tokens, E], the routing and its layout, and the routed rows
  // (rows: the layout's), each row of its own width: the normed input x (fp32; bf16 for bf16 weights),
  // w1|w3's outputs side by side, SwiGLU's output g (fp32; bf16 for bf16 weights) and w2's y (fp32); FP8
  // casts x and then g per token into q8 and s8. A decode step's masked slabs [E, max_sequences] fit from
  // the start (allocated with the session, never again); a prefill's contiguous layout grows them.
  struct MoeStep {
    moe::Routing routing;
    moe::ContiguousLayout contiguous;
    moe::MaskedLayout masked;
    Buffer<float> logits, x, ab, g, y, s8;
    Buffer<bf16> x16, g16;
    Buffer<fp8_e4m3> q8;
    int64_t rows_cap = 0, tokens_cap = 0;
  } moe_step;
  std::vector<int64_t> experts_read;  // per MoE layer, the last pass's

  // The routed rows' buffers' bytes for `rows` rows, by the format.
  static double moe_row_bytes(const ModelConfig& c, WeightFormat f) {
    const double D = static_cast<double>(c.d_model), De = static_cast<double>(c.expert_width());
    const double w = std::max(D, De),
                 wb = static_cast<double>(gemm::fp8_scale_blocks(static_cast<int64_t>(w)));
    return 4 * (2 * De + D) + (f == WeightFormat::bf16 ? 2 * (D + De) : 4 * (D + De)) +
           (is_fp8(f) ? w + 4 * wb : 0);
  }
  void reserve_moe(int64_t rows, int64_t tokens) {
    const ModelConfig& c = m->cfg;
    const int64_t D = c.d_model, De = c.expert_width(), E = c.num_experts;
    const int64_t w = std::max(D, De), wb = gemm::fp8_scale_blocks(w);
    const WeightFormat f = m->opt.weights;
    auto grow = [](auto& b, int64_t n) {
      b = std::remove_reference_t<decltype(b)>(static_cast<size_t>(n), "inference/activations");
    };
    MoeStep& st = moe_step;
    if (tokens > st.tokens_cap) {
      grow(st.logits, tokens * E);
      st.tokens_cap = tokens;
    }
    // Only the rows of experts with tokens are ever written or read (padding and empty slabs are not).
    if (rows <= st.rows_cap) return;
    grow(st.ab, rows * 2 * De);
    grow(st.y, rows * D);
    if (f == WeightFormat::bf16) {
      grow(st.x16, rows * D);
      grow(st.g16, rows * De);
    } else {
      grow(st.x, rows * D);
      grow(st.g, rows * De);
    }
    if (is_fp8(f)) {
      grow(st.q8, rows * w);
      grow(st.s8, rows * wb);
    }
    st.rows_cap = rows;
  }

  void reserve(int64_t rows) {
    if (rows <= rows_cap) return;
    // The feed-forward's width: d_ff for a dense layer, the shared experts' S for an MoE one.
    int64_t F = 0;
    for (const auto& L : m->layers) F = std::max(F, L.moe ? m->cfg.shared_width() : m->cfg.d_ff);
    const int64_t D = m->cfg.d_model, W = m->qkv_width(), HD = m->H() * m->dh();
    const size_t r = static_cast<size_t>(rows);
    x = Buffer<float>(r * D, "inference/activations");
    h = Buffer<float>(r * D, "inference/activations");
    qkv = Buffer<float>(r * W, "inference/activations");
    o32 = Buffer<float>(r * HD, "inference/activations");
    ab = Buffer<float>(r * 2 * F, "inference/activations");
    if (m->opt.weights == WeightFormat::bf16)
      g16 = Buffer<bf16>(r * F, "inference/activations");
    else
      g = Buffer<float>(r * F, "inference/activations");
    rstd = Buffer<float>(r, "inference/activations");
    lse = Buffer<float>(r * m->H(), "inference/activations");
    qkv_a = Buffer<std::byte>(r * W * m->kv_elem(), "inference/activations");
    o_a = Buffer<std::byte>(r * HD * m->kv_elem(), "inference/activations");
    rows_cap = rows;
  }
  void reserve_logits(int64_t rows) {
    if (rows <= logit_rows_cap) return;
    logits_buf = Buffer<float>(static_cast<size_t>(rows * m->cfg.vocab_size), "inference/logits");
    last_h = Buffer<float>(static_cast<size_t>(rows * m->cfg.d_model), "inference/activations");
    logit_rows_cap = rows;
  }

  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size - 1) / block_size; }
  // Grows sequence s's block list to hold `tokens` tokens (the caller checked there is room).
  void grow(Seq& s, int64_t tokens) {
    while (static_cast<int64_t>(s.blocks.size()) < blocks_for(tokens)) {
      s.blocks.push_back(free_list.back());
      free_list.pop_back();
    }
  }

  template <typename A>
  TensorView<A> pool(std::vector<Buffer<std::byte>>& p, int64_t layer) {
    return TensorView<A>::contiguous(reinterpret_cast<A*>(p[static_cast<size_t>(layer)].data()),
                                     {num_blocks, block_size, m->KV(), m->dh()});
  }

  // The feed-forward x += swiglu(h W1^T, h W3^T) W2^T of width F over `rows` rows (h normed), in two
  // halves: a dense layer's, or an MoE layer's shared experts.
  void ffn_w13_swiglu(const Linear& w13, int64_t F, int64_t rows) {
    w13.apply(h.data(), rows, ab.data(), nullptr, scratch);
    // With bf16 weights g is formed from bf16 a and b and rounded to bf16, as the bf16 training
    // forward forms it; fp32 and FP8 weights take it in fp32 (FP8's per-token cast quantizes it).
    if (m->opt.weights == WeightFormat::bf16)
      layers::swiglu_forward<float, bf16>(ab.data(), rows, F, nullptr, g16.data(), layers::Round::none);
    else
      layers::swiglu_forward<float, float>(ab.data(), rows, F, nullptr, g.data(), layers::Round::none);
  }
  void ffn_w2(const Linear& w2, int64_t rows) {
    if (m->opt.weights == WeightFormat::bf16)
      w2.apply(g16.data(), rows, x.data(), x.data());
    else
      w2.apply(g.data(), rows, x.data(), x.data(), scratch);
  }

  // FP8: the rows of each expert's run of `src` (width `cols`) cast per token into the step's q8 and s8
  // (DeepGEMM's 1x128 activation scales), as the grouped GEMM reads them; the rows of no expert are not.
  ExpertOperand cast_runs(const ExpertRows& lay, const float* src, int64_t cols) {
    const int64_t kb = gemm::fp8_scale_blocks(cols);
    fp8_e4m3* q = moe_step.q8.data();
    float* sc = moe_step.s8.data();
    lay.each_run([&](int64_t r0, int64_t n) {
      gemm::per_token_cast_to_fp8(MatrixView<const float>{src + r0 * cols, n, cols, cols},
                                  MatrixView<fp8_e4m3>{q + r0 * cols, n, cols, cols},
                                  MatrixView<float>{sc + r0 * kb, n, kb, kb}, fp8_scales(m->opt.weights));
    });
    return {.q8 = q, .s8 = sc};
  }

  // An MoE layer's feed-forward over the step's rows (h = ln2(x)): x += shared(h) + sum_j g_j
  // expert_{e_j}(h), the training forward's moe_forward step by step (src/model/model.cpp) and in its
  // trace ranges. A prefill (masked false) lays the routed rows out contiguously, a decode step in the
  // masked slabs of max_sequences rows per expert.
  void moe_ffn(const InferenceModel::Impl::Layer& L, int64_t rows, bool masked, size_t moe_index) {
    namespace rn = model::ranges;
    using layers::Round;
    const ModelConfig& c = m->cfg;
    const int64_t D = c.d_model, E = c.num_experts, De = c.expert_width(), S = c.shared_width();
    const WeightFormat f = m->opt.weights;
    MoeStep& st = moe_step;
    reserve_moe(masked ? E * max_sequences : 0, rows);
    {
      RIDGE_RANGE(rn::gemm_router.text);
      L.router.apply(h.data(), rows, st.logits.data(), nullptr, scratch);
    }
    ExpertRows lay{.routing = &st.routing};
    {
      RIDGE_RANGE(rn::route.text);
      moe::route<float>(std::span<const float>(st.logits.data(), static_cast<size_t>(rows * E)), rows, E,
                        c.top_k, c.router, L.bias, st.routing);
      if (masked) {
        st.masked = moe::masked_layout(st.routing, max_sequences);
        lay.masked = &st.masked;
      } else {
        st.contiguous = moe::contiguous_layout(st.routing, gemm::m_alignment_for_contiguous_layout());
        lay.contiguous = &st.contiguous;
        reserve_moe(st.contiguous.rows, rows);
      }
    }
    ExpertOperand xa;
    {
      // Each token's row once per expert it chose, in the weights' operand (bf16 rounded as the bf16
      // training forward rounds h2; FP8 cast per token, as a dense FP8 linear casts its input).
      RIDGE_RANGE(rn::permute.text);
      if (f == WeightFormat::bf16) {
        bf16* h16 = Scratch::room(scratch.b16, static_cast<size_t>(rows * D), "inference/activations");
        convert(h.data(), h16, static_cast<size_t>(rows * D));
        moe::permute_rows(static_cast<const bf16*>(h16), D, lay.row(), st.routing, D, st.x16.data(), D);
        xa.b16 = st.x16.data();
      } else {
        moe::permute_rows(static_cast<const float*>(h.data()), D, lay.row(), st.routing, D, st.x.data(), D);
        xa = is_fp8(f) ? cast_runs(lay, st.x.data(), D) : ExpertOperand{.f32 = st.x.data()};
      }
    }
    {
      RIDGE_RANGE(rn::experts.text);
      {
        RIDGE_RANGE(rn::gemm_experts_w1_w3.text);
        L.e1.apply(lay, xa, st.ab.data(), 2 * De);
        L.e3.apply(lay, xa, st.ab.data() + De, 2 * De);
      }
      {
        RIDGE_RANGE(rn::swiglu.text);
        lay.each_run([&](int64_t r0, int64_t n) {
          if (f == WeightFormat::bf16)
            layers::swiglu_forward<float, bf16>(st.ab.data() + r0 * 2 * De, n, De, nullptr,
                                                st.g16.data() + r0 * De, Round::none);
          else
            layers::swiglu_forward<float, float>(st.ab.data() + r0 * 2 * De, n, De, nullptr,
                                                 st.g.data() + r0 * De, Round::none);
        });
      }
      {
        RIDGE_RANGE(rn::gemm_experts_w2.text);
        const ExpertOperand ga = f == WeightFormat::bf16 ? ExpertOperand{.b16 = st.g16.data()}
                                 : is_fp8(f)             ? cast_runs(lay, st.g.data(), De)
                                                         : ExpertOperand{.f32 = st.g.data()};
        L.e2.apply(lay, ga, st.y.data(), D);
      }
    }
    if (S > 0) {
      RIDGE_RANGE(rn::shared_experts.text);
      ffn_w13_swiglu(L.shared13, S, rows);
      ffn_w2(L.shared2, rows);  // x += shared(h), the residual add fused
    }
    {
      RIDGE_RANGE(rn::unpermute.text);
      moe::combine_rows(static_cast<const float*>(st.y.data()), D, lay.row(),
                        std::span<const float>(st.routing.weight), st.routing, D, x.data(), D, true);
    }
    int64_t read = 0;
    for (int64_t n : st.routing.count) read += n > 0 ? 1 : 0;
    experts_read[moe_index] = read;
  }

  // One pass of the layers over `rows` tokens at positions pos (x holds their embeddings). `attend`
  // runs attention for layer l: K/V of the rows into the cache, o_a from q. RMSNorm, RoPE and SwiGLU are
  // the training layers (model/layers.hpp), fused paths included: a fix or a faster path reaches both.
  // An MoE layer's feed-forward routes the rows: a decode step (`decode`) in the masked layout.
  template <typename A, typename Attend>
  void layers_pass(int64_t rows, const int64_t* pos, bool decode, Attend&& attend) {
    const int64_t D = m->cfg.d_model, F = m->cfg.d_ff, HD = m->H() * m->dh(), dh = m->dh(),
                  W = m->qkv_width();
    using layers::Round;
    size_t moe_index = 0;
    for (int64_t l = 0; l < m->cfg.num_layers; ++l) {
      const auto& L = m->layers[static_cast<size_t>(l)];
      {
        RIDGE_RANGE("norm+qkv+rope");
        layers::rmsnorm_forward<float, float>(x.data(), L.ln1.data(), rows, D,
                                              static_cast<float>(m->cfg.rms_norm_eps), rstd.data(), h.data(),
                                              Round::none);
        L.qkv.apply(h.data(), rows, qkv.data(), nullptr, scratch);
        // q and k rotated at each row's own position, q|k|v into the attention operand type.
        layers::rope_forward<float, A>(qkv.data(), reinterpret_cast<A*>(qkv_a.data()), rows, pos,
                                       (m->H() + m->KV()) * dh, W, dh, m->rope_cos.data(), m->rope_sin.data(),
                                       Round::none);
      }
      {
        RIDGE_RANGE("attention");
        attend(l);
      }
      {
        RIDGE_RANGE("out_proj");
        // x += o Wo^T (o in the attention type; exact in fp32 for the linear's own rounding)
        if constexpr (std::is_same_v<A, bf16>)
          convert(reinterpret_cast<const bf16*>(o_a.data()), o32.data(), static_cast<size_t>(rows * HD));
        else
          std::copy_n(reinterpret_cast<const float*>(o_a.data()), rows * HD, o32.data());
        L.out.apply(o32.data(), rows, x.data(), x.data(), scratch);
      }
      if (L.moe) {
        {
          RIDGE_RANGE(model::ranges::norm.text);
          layers::rmsnorm_forward<float, float>(x.data(), L.ln2.data(), rows, D,
                                                static_cast<float>(m->cfg.rms_norm_eps), rstd.data(),
                                                h.data(), Round::none);
        }
        moe_ffn(L, rows, decode, moe_index++);
        continue;
      }
      {
        RIDGE_RANGE("norm+w13+swiglu");
        layers::rmsnorm_forward<float, float>(x.data(), L.ln2.data(), rows, D,
                                              static_cast<float>(m->cfg.rms_norm_eps), rstd.data(), h.data(),
                                              Round::none);
        ffn_w13_swiglu(L.w13, F, rows);
      }
      {
        RIDGE_RANGE("w2");
        ffn_w2(L.w2, rows);
      }
    }
  }

  // logits rows = head(ln_final(x[rows_idx])), into logits_buf rows 0..n-1.
  void head_rows(const std::vector<int64_t>& rows_idx) {
    const int64_t D = m->cfg.d_model, n = static_cast<int64_t>(rows_idx.size());
    reserve_logits(n);
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(x.data() + rows_idx[static_cast<size_t>(i)] * D, D, last_h.data() + i * D);
    layers::rmsnorm_forward<float, float>(last_h.data(), m->ln_final.data(), n, D,
                                          static_cast<float>(m->cfg.rms_norm_eps), rstd.data(), last_h.data(),
                                          layers::Round::none);
    m->head.apply(last_h.data(), n, logits_buf.data(), nullptr, scratch);
  }

  void embed(const int32_t* tokens, int64_t rows) {
    layers::embedding_forward<float>(tokens, rows, m->embedding.data(), m->cfg.vocab_size, m->cfg.d_model,
                                     x.data());
  }

  template <typename A>
  void prefill_group(const std::vector<int>& ids, const std::vector<std::vector<int32_t>>& prompts,
                     const std::vector<size_t>& which) {
    const int64_t W = m->qkv_width(), H = m->H(), KV = m->KV(), dh = m->dh(), HD = H * dh;
    int64_t rows = 0;
    for (size_t p : which) rows += static_cast<int64_t>(prompts[p].size());
    reserve(rows);
    std::vector<int32_t> tokens;
    std::vector<int64_t> pos, starts;
    for (size_t p : which) {
      starts.push_back(static_cast<int64_t>(tokens.size()));
      for (size_t t = 0; t < prompts[p].size(); ++t) {
        tokens.push_back(prompts[p][t]);
        pos.push_back(static_cast<int64_t>(t));
      }
    }
    embed(tokens.data(), rows);
    A* qa = reinterpret_cast<A*>(qkv_a.data());
    A* oa = reinterpret_cast<A*>(o_a.data());
    layers_pass<A>(rows, pos.data(), false, [&](int64_t l) {
      auto kc = pool<A>(k_pool, l), vc = pool<A>(v_pool, l);
      for (size_t j = 0; j < which.size(); ++j) {
        Seq& s = seqs[static_cast<size_t>(ids[j])];
        const int64_t L = static_cast<int64_t>(prompts[which[j]].size()), r0 = starts[j];
        A* base = qa + r0 * W;
        // The prompt's K/V into its blocks, then FlashAttention-2 over the prompt itself.
        TensorView<A> kn, vn;
        kn.data = base + HD;
        vn.data = base + HD + KV * dh;
        kn.rank = vn.rank = 4;
        kn.shape = vn.shape = {1, L, KV, dh};
        kn.stride = vn.stride = {L * W, W, dh, 1};
        const int32_t zero = 0;
        attention::kvcache_append<A>(
            kn, vn, kc, vc, std::span<const int32_t>(&zero, 1),
            MatrixView<const int32_t>{s.blocks.data(), 1, static_cast<int64_t>(s.blocks.size()),
                                      static_cast<int64_t>(s.blocks.size())});
        auto heads = [&](A* p, int64_t nh, int64_t ld) {
          TensorView<A> v;
          v.data = p;
          v.rank = 4;
          v.shape = {1, nh, L, dh};
          v.stride = {L * ld, dh, ld, 1};
          return v;
        };
        attention::Options opt;
        opt.causal = true;
        attention::flash_attention_forward<A>(heads(base, H, W), heads(base + HD, KV, W),
                                              heads(base + HD + KV * dh, KV, W), heads(oa + r0 * HD, H, HD),
                                              TensorView<float>::contiguous(lse.data(), {1, H, L}), opt);
      }
    });
    std::vector<int64_t> last;
    for (size_t j = 0; j < which.size(); ++j) {
      last.push_back(starts[j] + static_cast<int64_t>(prompts[which[j]].size()) - 1);
      Seq& s = seqs[static_cast<size_t>(ids[j])];
      s.length = static_cast<int64_t>(prompts[which[j]].size());
    }
    head_rows(last);
    keep_logits(ids);
  }

  // The logits of the step's sequences (logits_buf rows in ids' order) move to their own storage, so a
  // later step over other sequences leaves them readable.
  std::vector<std::vector<float>> kept;
  void keep_logits(const std::vector<int>& ids) {
    const int64_t V = m->cfg.vocab_size;
    if (kept.size() < seqs.size()) kept.resize(seqs.size());
    for (size_t j = 0; j < ids.size(); ++j) {
      auto& k = kept[static_cast<size_t>(ids[j])];
      k.assign(logits_buf.data() + static_cast<int64_t>(j) * V,
               logits_buf.data() + static_cast<int64_t>(j + 1) * V);
      seqs[static_cast<size_t>(ids[j])].logits_row = static_cast<int64_t>(j);
    }
  }

  template <typename A>
  void decode_step(std::span<const int> ids, std::span<const int32_t> tokens) {
    const int64_t n = static_cast<int64_t>(ids.size()), H = m->H(), KV = m->KV(), dh = m->dh(),
                  W = m->qkv_width(), HD = H * dh;
    reserve(n);
    std::vector<int64_t> pos(static_cast<size_t>(n));
    int64_t maxb = 1;
    for (int64_t i = 0; i < n; ++i) {
      Seq& s = seqs[static_cast<size_t>(ids[static_cast<size_t>(i)])];
      pos[static_cast<size_t>(i)] = s.length;
      grow(s, s.length + 1);
      maxb = std::max<int64_t>(maxb, static_cast<int64_t>(s.blocks.size()));
    }
    table.assign(static_cast<size_t>(n * maxb), 0);
    seqlens.resize(static_cast<size_t>(n));
    std::vector<int32_t> after(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const Seq& s = seqs[static_cast<size_t>(ids[static_cast<size_t>(i)])];
      std::copy(s.blocks.begin(), s.blocks.end(), table.begin() + i * maxb);
      seqlens[static_cast<size_t>(i)] = static_cast<int32_t>(s.length);
      after[static_cast<size_t>(i)] = static_cast<int32_t>(s.length + 1);
    }
    const MatrixView<const int32_t> bt{table.data(), n, maxb, maxb};
    embed(tokens.data(), n);
    A* qa = reinterpret_cast<A*>(qkv_a.data());
    A* oa = reinterpret_cast<A*>(o_a.data());
    auto rows4 = [&](A* p, int64_t nh, int64_t ld) {
      TensorView<A> v;
      v.data = p;
      v.rank = 4;
      v.shape = {n, 1, nh, dh};
      v.stride = {ld, ld, dh, 1};
      return v;
    };
    attention::KVCacheOptions opt;
    opt.causal = true;
    // The kernel's own heuristic depends on the thread count (and the bits of o with it); the split count
    // here depends on the step's longest context and its (sequence, kv head) pairs only, so the same seed
    // samples the same tokens at any thread count. kSplitThreads sizes it for up to that many threads.
    int64_t longest = 0;
    for (int32_t a : after) longest = std::max<int64_t>(longest, a);
    opt.num_splits =
        num_splits > 0 ? num_splits : attention::kvcache_num_splits(longest, n * KV, kSplitThreads);
    layers_pass<A>(n, pos.data(), true, [&](int64_t l) {
      auto kc = pool<A>(k_pool, l), vc = pool<A>(v_pool, l);
      attention::kvcache_append<A>(rows4(qa + HD, KV, W), rows4(qa + HD + KV * dh, KV, W), kc, vc, seqlens,
                                   bt);
      attention::flash_attn_with_kvcache<A>(rows4(qa, H, W), kc, vc, after, bt, rows4(oa, H, HD), {}, opt);
    });
    for (int64_t i = 0; i < n; ++i) seqs[static_cast<size_t>(ids[static_cast<size_t>(i)])].length += 1;
    std::vector<int64_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
    {
      RIDGE_RANGE("head");
      head_rows(all);
    }
    keep_logits(std::vector<int>(ids.begin(), ids.end()));
  }

  const Seq& seq(int id) const {
    check_arg(id >= 0 && static_cast<size_t>(id) < seqs.size(), "id", "{} is not a sequence of this session",
              id);
    return seqs[static_cast<size_t>(id)];
  }
};

double Session::cache_bytes(const InferenceModel& model, int64_t cache_tokens) {
  return model.kv_bytes_per_token() * static_cast<double>(cache_tokens);
}

Session::Session(const InferenceModel& model, int64_t max_sequences, int64_t cache_tokens)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.m = &model.impl();
  const ModelConfig& c = s.m->cfg;
  check_arg(max_sequences >= 1, "max_sequences", "{} must be >= 1", max_sequences);
  check_arg(cache_tokens >= 0, "cache_tokens", "{} must be >= 0 (0: max_sequences full contexts)",
            cache_tokens);
  s.max_sequences = max_sequences;
  s.block_size = s.m->opt.block_size;
  s.max_blocks_per_seq = s.blocks_for(c.context_length);
  const double tokens = cache_tokens > 0
                            ? static_cast<double>(cache_tokens)
                            : static_cast<double>(max_sequences) * static_cast<double>(c.context_length);
  const double blocks = std::ceil(tokens / static_cast<double>(s.block_size));
  check_arg(blocks <= static_cast<double>(INT32_MAX), "cache_tokens", "{} tokens make {} blocks; at most {}",
            tokens, blocks, INT32_MAX);
  s.num_blocks = static_cast<int64_t>(blocks);
  const double bytes = blocks * static_cast<double>(s.block_size) * model.kv_bytes_per_token();
  // An MoE model's decode slabs: max_sequences rows for each expert, and the router's logits.
  const double slabs = c.is_moe() ? static_cast<double>(c.num_experts) * static_cast<double>(max_sequences) *
                                        (Impl::moe_row_bytes(c, s.m->opt.weights) + 4)
                                  : 0;
  memory::check_fits(bytes + slabs,
                     slabs > 0 ? fmt::format("the KV cache ({} tokens of {} sequences, {:.3g} GB) and the "
                                             "experts' decode slabs ({} experts x {} rows, {:.3g} GB)",
                                             s.num_blocks * s.block_size, max_sequences, bytes / 1e9,
                                             c.num_experts, max_sequences, slabs / 1e9)
                               : fmt::format("the KV cache ({} tokens of {} sequences, {:.3g} GB)",
                                             s.num_blocks * s.block_size, max_sequences, bytes / 1e9));
  const size_t per_layer =
      static_cast<size_t>(s.num_blocks * s.block_size * s.m->KV() * s.m->dh()) * s.m->kv_elem();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    s.k_pool.emplace_back(per_layer, "inference/kv cache");
    s.v_pool.emplace_back(per_layer, "inference/kv cache");
  }
  s.free_list.resize(static_cast<size_t>(s.num_blocks));
  for (int64_t b = 0; b < s.num_blocks; ++b)
    s.free_list[static_cast<size_t>(b)] = static_cast<int32_t>(s.num_blocks - 1 - b);
  if (c.is_moe()) {
    s.experts_read.assign(static_cast<size_t>(c.num_moe_layers()), 0);
    s.reserve_moe(c.num_experts * max_sequences, max_sequences);  // the decode slabs, once
  }
}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

std::vector<int> Session::prefill(const std::vector<std::vector<int32_t>>& prompts) {
  Impl& s = *impl_;
  const ModelConfig& c = s.m->cfg;
  int64_t live = 0, blocks = 0;
  for (const auto& q : s.seqs) live += q.live ? 1 : 0;
  check_arg(live + static_cast<int64_t>(prompts.size()) <= s.max_sequences, "prompts",
            "{} new sequences with {} live exceed this session's {} sequences", prompts.size(), live,
            s.max_sequences);
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto& q = prompts[p];
    check_arg(!q.empty(), "prompts", "prompt {} is empty; a prompt needs at least one token", p);
    check_arg(static_cast<int64_t>(q.size()) <= c.context_length, "prompts",
              "prompt {} has {} tokens; the model's context_length is {}", p, q.size(), c.context_length);
    for (size_t t = 0; t < q.size(); ++t)
      check_arg(q[t] >= 0 && q[t] < c.vocab_size, "prompts",
                "prompt {} token {} is {}, outside the vocabulary [0, {})", p, t, q[t], c.vocab_size);
    blocks += s.blocks_for(static_cast<int64_t>(q.size()));
  }
  check_arg(blocks <= static_cast<int64_t>(s.free_list.size()), "prompts",
            "the prompts need {} KV-cache blocks of {} tokens; {} are free", blocks, s.block_size,
            s.free_list.size());
  std::vector<int> ids;
  for (const auto& q : prompts) {
    Impl::Seq seq;
    seq.live = true;
    s.grow(seq, static_cast<int64_t>(q.size()));
    s.seqs.push_back(std::move(seq));
    ids.push_back(static_cast<int>(s.seqs.size() - 1));
  }
  // Groups of prompts up to prefill_tokens tokens share each GEMM; a longer prompt runs alone.
  size_t p = 0;
  while (p < prompts.size()) {
    std::vector<size_t> which{p};
    std::vector<int> group_ids{ids[p]};
    int64_t tokens = static_cast<int64_t>(prompts[p].size());
    ++p;
    while (p < prompts.size() &&
           tokens + static_cast<int64_t>(prompts[p].size()) <= s.m->opt.prefill_tokens) {
      tokens += static_cast<int64_t>(prompts[p].size());
      which.push_back(p);
      group_ids.push_back(ids[p]);
      ++p;
    }
    RIDGE_RANGE("prefill");
    if (s.m->kv_bf16())
      s.prefill_group<bf16>(group_ids, prompts, which);
    else
      s.prefill_group<float>(group_ids, prompts, which);
  }
  return ids;
}

std::vector<int> Session::prefill_synthetic(std::span<const int64_t> lengths, uint64_t seed) {
  Impl& s = *impl_;
  const ModelConfig& c = s.m->cfg;
  int64_t live = 0, blocks = 0;
  for (const auto& q : s.seqs) live += q.live ? 1 : 0;
  check_arg(live + static_cast<int64_t>(lengths.size()) <= s.max_sequences, "lengths",
            "{} new sequences with {} live exceed this session's {} sequences", lengths.size(), live,
            s.max_sequences);
  for (int64_t len : lengths) {
    check_arg(len >= 1 && len <= c.context_length, "lengths", "{} is outside 1..context_length {}", len,
              c.context_length);
    blocks += s.blocks_for(len);
  }
  check_arg(blocks <= static_cast<int64_t>(s.free_list.size()), "lengths",
            "the sequences need {} KV-cache blocks of {} tokens; {} are free", blocks, s.block_size,
            s.free_list.size());
  Rng rng(seed);
  const int64_t row = s.m->KV() * s.m->dh();
  std::vector<int> ids;
  for (int64_t len : lengths) {
    Impl::Seq seq;
    seq.live = true;
    s.grow(seq, len);
    seq.length = len;
    for (int64_t l = 0; l < c.num_layers; ++l)
      for (auto* pool : {&s.k_pool, &s.v_pool})
        for (int32_t b : seq.blocks) {
          std::byte* base = (*pool)[static_cast<size_t>(l)].data() +
                            static_cast<size_t>(b) * static_cast<size_t>(s.block_size * row) * s.m->kv_elem();
          for (int64_t i = 0; i < s.block_size * row; ++i) {
            const float v = static_cast<float>(2 * rng.uniform() - 1);
            if (s.m->kv_bf16())
              reinterpret_cast<bf16*>(base)[i] = to_bf16(v);
            else
              reinterpret_cast<float*>(base)[i] = v;
          }
        }
    s.seqs.push_back(std::move(seq));
    ids.push_back(static_cast<int>(s.seqs.size() - 1));
  }
  return ids;
}

void Session::decode(std::span<const int> ids, std::span<const int32_t> tokens) {
  Impl& s = *impl_;
  const ModelConfig& c = s.m->cfg;
  check_arg(ids.size() == tokens.size(), "tokens", "{} tokens for {} sequences; one each", tokens.size(),
            ids.size());
  if (ids.empty()) return;
  int64_t need = 0;
  std::vector<char> seen(s.seqs.size(), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto& q = s.seq(ids[i]);
    check_arg(q.live, "ids", "sequence {} has been released", ids[i]);
    check_arg(!seen[static_cast<size_t>(ids[i])], "ids", "sequence {} appears twice in one step", ids[i]);
    seen[static_cast<size_t>(ids[i])] = 1;
    check_arg(q.length < c.context_length, "ids", "sequence {} already holds context_length {} tokens",
              ids[i], c.context_length);
    check_arg(tokens[i] >= 0 && tokens[i] < c.vocab_size, "tokens",
              "token {} is {}, outside the vocabulary [0, {})", i, tokens[i], c.vocab_size);
    need += s.blocks_for(q.length + 1) - static_cast<int64_t>(q.blocks.size());
  }
  check_arg(need <= static_cast<int64_t>(s.free_list.size()), "ids",
            "the step needs {} new KV-cache blocks; {} are free (release finished sequences)", need,
            s.free_list.size());
  RIDGE_RANGE("decode");
  if (s.m->kv_bf16())
    s.decode_step<bf16>(ids, tokens);
  else
    s.decode_step<float>(ids, tokens);
}

std::span<const float> Session::logits(int id) const {
  const auto& q = impl_->seq(id);
  check_arg(q.logits_row >= 0, "id", "sequence {} has no logits yet", id);
  return impl_->kept[static_cast<size_t>(id)];
}
std::span<const int64_t> Session::experts_read() const {
  return impl_->experts_read;
}
int64_t Session::length(int id) const {
  return impl_->seq(id).length;
}
bool Session::live(int id) const {
  return impl_->seq(id).live;
}
void Session::release(int id) {
  Impl& s = *impl_;
  s.seq(id);
  auto& q = s.seqs[static_cast<size_t>(id)];
  if (!q.live) return;
  for (auto it = q.blocks.rbegin(); it != q.blocks.rend(); ++it) s.free_list.push_back(*it);
  q.blocks.clear();
  q.live = false;
}
int64_t Session::block_size() const {
  return impl_->block_size;
}
int64_t Session::total_blocks() const {
  return impl_->num_blocks;
}
int64_t Session::free_blocks() const {
  return static_cast<int64_t>(impl_->free_list.size());
}
void Session::set_num_splits(int n) {
  check_arg(n >= 0 && n <= attention::kMaxKVCacheSplits, "num_splits",
            "{} is outside 0..{} (0: the kernel's heuristic)", n, attention::kMaxKVCacheSplits);
  impl_->num_splits = n;
}

// ---------------------------------------------------------------------------------------------------------
// Generation

std::vector<std::vector<int32_t>> generate(const InferenceModel& model,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           const GenerateOptions& o, GenerateStats* stats) {
  o.validate();
  const ModelConfig& c = model.config();
  check_arg(!prompts.empty(), "prompts", "no prompts given");
  check_arg(o.eos < c.vocab_size, "eos", "{} is outside the vocabulary [0, {})", o.eos, c.vocab_size);
  int64_t tokens = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const int64_t len = static_cast<int64_t>(prompts[p].size());
    check_arg(len > 0, "prompts", "prompt {} is empty; a prompt needs at least one token", p);
    // Subtracted, not added: a max_tokens near 2^63 wrapped the sum and passed.
    check_arg(
        o.max_tokens <= c.context_length - len, "max_tokens",
        "prompt {}'s {} tokens + max_tokens {} exceed the model's context_length {} (at most {} new tokens)",
        p, len, o.max_tokens, c.context_length, std::max<int64_t>(0, c.context_length - len));
    // Whole blocks per sequence: a pool of the summed tokens could fall short of what each needs.
    const int64_t bs = model.options().block_size;
    tokens += (len + o.max_tokens + bs - 1) / bs * bs;
  }
  Session session(model, static_cast<int64_t>(prompts.size()), o.cache_tokens > 0 ? o.cache_tokens : tokens);
  session.set_num_splits(o.num_splits);
  using clock = std::chrono::steady_clock;
  GenerateStats st;
  st.prompts = static_cast<int64_t>(prompts.size());
  auto t0 = clock::now();
  const std::vector<int> ids = session.prefill(prompts);
  st.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  for (const auto& p : prompts) st.prefill_tokens += static_cast<int64_t>(p.size());

  std::vector<std::vector<int32_t>> out(prompts.size());
  std::vector<int> step_ids;
  std::vector<int32_t> step_tokens;
  // Samples each listed sequence's next token; those that go on are returned for the next step.
  auto sample_all = [&](const std::vector<size_t>& which) {
    step_ids.clear();
    step_tokens.clear();
    for (size_t i : which) {
      // Draw k of prompt i from its own counter-based stream: the same tokens at any thread count, in any
      // batch, whichever other prompts run beside it.
      Rng rng = sampling_rng(o.seed, i, out[i].size());
      const int32_t t = sample_token(session.logits(ids[i]), o.sampling, rng);
      out[i].push_back(t);
      if (o.on_token) o.on_token(i, t);
      const bool done = t == o.eos || static_cast<int64_t>(out[i].size()) >= o.max_tokens;
      if (done) {
        session.release(ids[i]);
      } else {
        step_ids.push_back(ids[i]);
        step_tokens.push_back(t);
      }
    }
  };
  std::vector<size_t> all(prompts.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  sample_all(all);
  const roofline::InferenceDtypes dtypes = model.roofline_dtypes();
  t0 = clock::now();
  while (!step_ids.empty()) {
    std::vector<size_t> which;
    int64_t keys = 0;  // the keys each sequence attends to: its cache with this step's token
    for (int id : step_ids) {
      which.push_back(static_cast<size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin()));
      keys += session.length(id) + 1;
    }
    const auto n = static_cast<int64_t>(step_ids.size());
    session.decode(step_ids, step_tokens);
    // An MoE step's bytes with the experts its routing read (their mean over the MoE layers).
    const auto read = session.experts_read();
    double mean_read = 0;
    for (int64_t x : read) mean_read += static_cast<double>(x);
    const roofline::InferenceCost cost =
        read.empty() ? roofline::decode_cost(c, dtypes, n, (keys + n / 2) / n)
                     : roofline::decode_cost_read(c, dtypes, n, (keys + n / 2) / n,
                                                  mean_read / static_cast<double>(read.size()));
    st.decode_bytes += static_cast<double>(cost.memory_bytes());
    if (!read.empty()) st.decode_experts_read += mean_read / static_cast<double>(read.size());
    st.decode_steps += 1;
    st.decode_tokens += static_cast<int64_t>(step_ids.size());
    sample_all(which);
  }
  st.decode_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  if (st.decode_steps > 0) st.decode_experts_read /= static_cast<double>(st.decode_steps);
  if (stats) *stats = st;
  return out;
}

}  // namespace ridge::generate
