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
#include <type_traits>
#include <utility>

#include "model/layers.hpp"
#include "ridge/attention.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/units.hpp"
#include "ridge/model/roofline.hpp"
#include "ridge/gemm.hpp"
#include "ridge/gemm_fp8.hpp"
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
  InferenceMemory m;
  m.weights = static_cast<double>(w.linears) * per(o.weights) + static_cast<double>(w.head) * per(head) +
              4 * static_cast<double>(w.embedding) + 4 * static_cast<double>(w.norms);
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
    const size_t count = static_cast<size_t>(n * k);
    switch (f) {
      case WeightFormat::fp32:
        w32 = Buffer<float>(count, "inference/weights");
        std::copy_n(w, count, w32.data());
        break;
      case WeightFormat::bf16:
        w16 = Buffer<bf16>(count, "inference/weights");
        convert(w, w16.data(), count);
        break;
      case WeightFormat::fp8:
      case WeightFormat::fp8_ue8m0: {
        const auto q = gemm::per_block_cast_to_fp8(
            MatrixView<const float>{w, n, k, k},
            f == WeightFormat::fp8 ? gemm::Fp8Scales::fp32 : gemm::Fp8Scales::ue8m0);
        w8 = gemm::PackedFp8B::pack(q.view(), q.scale_view());
        break;
      }
    }
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
        gemm::per_token_cast_to_fp8(
            MatrixView<const float>{x, rows, k, k}, MatrixView<fp8_e4m3>{a, rows, k, k},
            MatrixView<float>{sa, rows, kb, kb},
            fmt == WeightFormat::fp8 ? gemm::Fp8Scales::fp32 : gemm::Fp8Scales::ue8m0);
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

}  // namespace

struct InferenceModel::Impl {
  ModelConfig cfg;
  InferenceOptions opt;
  WeightFormat head_fmt = WeightFormat::fp32;
  struct Layer {
    Linear qkv, out, w13, w2;
    Buffer<float> ln1, ln2;
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

  void build(const ModelConfig& c, std::span<const float> params, const InferenceOptions& o) {
    c.validate();
    check(!c.is_moe(),
          "ModelConfig: num_experts is {}; generation runs dense models only for now (ridge train trains MoE "
          "models; MoE decode is issue 40, in progress)",
          c.num_experts);
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
    auto ptr = [&](const std::string& name) { return params.data() + at.at(name).first; };
    auto copy = [&](const std::string& name, int64_t n) {
      Buffer<float> b(static_cast<size_t>(n), "inference/weights");
      std::copy_n(ptr(name), n, b.data());
      return b;
    };
    const int64_t D = c.d_model, F = c.d_ff, V = c.vocab_size;
    layers.resize(static_cast<size_t>(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      Layer& L = layers[static_cast<size_t>(l)];
      // q|k|v and w1|w3 are adjacent in the flat buffer: one GEMM each, as in training.
      L.qkv.set(ptr(p + "attn.q_proj.weight"), qkv_width(), D, o.weights);
      L.out.set(ptr(p + "attn.output_proj.weight"), D, H() * dh(), o.weights);
      L.w13.set(ptr(p + "ffn.w1.weight"), 2 * F, D, o.weights);
      L.w2.set(ptr(p + "ffn.w2.weight"), D, F, o.weights);
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
  impl_->build(model.config(), model.params(), options);
}
InferenceModel::InferenceModel(const ModelConfig& config, std::span<const float> params,
                               const InferenceOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->build(config, params, options);
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
    b += L.qkv.bytes() + L.out.bytes() + L.w13.bytes() + L.w2.bytes() +
         8.0 * static_cast<double>(m.cfg.d_model);
  return b;
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

  void reserve(int64_t rows) {
    if (rows <= rows_cap) return;
    const int64_t D = m->cfg.d_model, F = m->cfg.d_ff, W = m->qkv_width(), HD = m->H() * m->dh();
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

  // One pass of the layers over `rows` tokens at positions pos (x holds their embeddings). `attend`
  // runs attention for layer l: K/V of the rows into the cache, o_a from q. RMSNorm, RoPE and SwiGLU are
  // the training layers (model/layers.hpp), fused paths included: a fix or a faster path reaches both.
  template <typename A, typename Attend>
  void layers_pass(int64_t rows, const int64_t* pos, Attend&& attend) {
    const int64_t D = m->cfg.d_model, F = m->cfg.d_ff, HD = m->H() * m->dh(), dh = m->dh(),
                  W = m->qkv_width();
    using layers::Round;
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
      {
        RIDGE_RANGE("norm+w13+swiglu");
        layers::rmsnorm_forward<float, float>(x.data(), L.ln2.data(), rows, D,
                                              static_cast<float>(m->cfg.rms_norm_eps), rstd.data(), h.data(),
                                              Round::none);
        L.w13.apply(h.data(), rows, ab.data(), nullptr, scratch);
        // With bf16 weights g is formed from bf16 a and b and rounded to bf16, as the bf16 training
        // forward forms it; fp32 and FP8 weights take it in fp32 (FP8's per-token cast quantizes it).
        if (m->opt.weights == WeightFormat::bf16)
          layers::swiglu_forward<float, bf16>(ab.data(), rows, F, nullptr, g16.data(), Round::none);
        else
          layers::swiglu_forward<float, float>(ab.data(), rows, F, nullptr, g.data(), Round::none);
      }
      {
        RIDGE_RANGE("w2");
        if (m->opt.weights == WeightFormat::bf16)
          L.w2.apply(g16.data(), rows, x.data(), x.data());
        else
          L.w2.apply(g.data(), rows, x.data(), x.data(), scratch);
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
    layers_pass<A>(rows, pos.data(), [&](int64_t l) {
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
    layers_pass<A>(n, pos.data(), [&](int64_t l) {
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
  memory::check_fits(bytes, fmt::format("the KV cache ({} tokens of {} sequences, {:.3g} GB)",
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
    st.decode_bytes +=
        static_cast<double>(roofline::decode_cost(c, dtypes, n, (keys + n / 2) / n).memory_bytes());
    session.decode(step_ids, step_tokens);
    st.decode_steps += 1;
    st.decode_tokens += static_cast<int64_t>(step_ids.size());
    sample_all(which);
  }
  st.decode_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  if (stats) *stats = st;
  return out;
}

}  // namespace ridge::generate
