// The Transformer LM: parameter layout, initialisation, and the forward and backward passes written
// out layer by layer over explicit buffers. The elementwise layers are in layers.hpp, the GEMMs in
// linear.hpp; this file is the wiring, readable top to bottom as the model's math.
#include "ridge/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <type_traits>
#include <utility>

#include "model/layers.hpp"
#include "model/linear.hpp"
#include "ridge/attention.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/model/ranges.hpp"
#include "core/check.hpp"

namespace ridge::model {

Precision parse_precision(const std::string& name) {
  if (name == "fp32" || name == "f32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16" || name == "f16") return Precision::fp16;
  fail("precision: '{}' is not one of fp32, bf16, fp16", name);
}
const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}
AttentionPath parse_attention_path(const std::string& name) {
  if (name == "flash") return AttentionPath::flash;
  if (name == "math") return AttentionPath::math;
  fail("attention: '{}' is not one of flash, math", name);
}
const char* attention_path_name(AttentionPath a) { return a == AttentionPath::flash ? "flash" : "math"; }
void check_attention_path(const ModelConfig& cfg, AttentionPath a) {
  if (a != AttentionPath::flash) return;
  const int64_t dh = cfg.d_head();
  check_arg(dh >= 16 && dh <= 256, "attention",
            "FlashAttention needs a head dimension in 16..256 (d_model / num_heads = {}); use the math path", dh);
}

namespace {

// Raw storage carved into typed arrays; one block per layer so the memory profiler can tag them.
struct Arena {
  Buffer<std::byte> bytes;
  size_t used = 0;
  template <typename T>
  T* take(int64_t n) {
    const size_t off = (used + 63) / 64 * 64;
    used = off + static_cast<size_t>(n) * sizeof(T);
    return bytes.data() ? reinterpret_cast<T*>(bytes.data() + off) : nullptr;
  }
};

}  // namespace

template <typename S>
struct TransformerLM<S>::Impl {
  ModelConfig cfg;
  Precision precision = Precision::fp32;
  AttentionPath attention = AttentionPath::flash;
  std::vector<TensorInfo> tensors;
  std::vector<int> group_begin;
  std::map<std::string, int> index;
  Buffer<S> params, grads;

  // Operand copies of the weights (bf16, or fp32 rounded through fp16), refreshed at every forward.
  Buffer<bf16> w_bf16;
  Buffer<float> w_f16;

  // Shape of the saved activations and the buffers holding them.
  int64_t batch = 0, seq = 0;
  bool forward_done = false;
  bool logits_only = false;
  std::vector<Arena> layer_acts;  // one per layer
  Arena final_acts, work;
  std::vector<S> rope_cos, rope_sin;
  std::vector<int32_t> inputs, targets;  // copies of the last forward's tokens

  // Per-layer offsets into the flat buffers.
  struct LayerTensors {
    int64_t w2, w1, w3, ln2, wo, wq, wk, wv, ln1;
  };
  std::vector<LayerTensors> layer_offsets;
  int64_t off_lm_head = 0, off_ln_final = 0, off_embedding = 0;

  void add(const std::string& name, std::vector<int64_t> shape, int group) {
    TensorInfo t;
    t.name = name;
    t.shape = std::move(shape);
    t.numel = 1;
    for (int64_t d : t.shape) t.numel *= d;
    t.offset = tensors.empty() ? 0 : tensors.back().offset + tensors.back().numel;
    t.group = group;
    if (group_begin.size() <= static_cast<size_t>(group)) group_begin.push_back(static_cast<int>(tensors.size()));
    index[t.name] = static_cast<int>(tensors.size());
    tensors.push_back(std::move(t));
  }
  int64_t off(const std::string& name) const { return tensors[static_cast<size_t>(index.at(name))].offset; }

  void layout() {
    const int64_t D = cfg.d_model, F = cfg.d_ff, V = cfg.vocab_size;
    int g = 0;
    add("lm_head.weight", {V, D}, g++);
    add("ln_final.weight", {D}, g++);
    for (int64_t l = cfg.num_layers - 1; l >= 0; --l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      // Gradient-ready order inside the layer; w1|w3 and q|k|v adjacent, so one GEMM serves each pair
      // or triple (their rows form one [2F, D] or [3D, D] weight).
      add(p + "ffn.w2.weight", {D, F}, g);
      add(p + "ffn.w1.weight", {F, D}, g);
      add(p + "ffn.w3.weight", {F, D}, g);
      add(p + "ln2.weight", {D}, g);
      add(p + "attn.output_proj.weight", {D, D}, g);
      add(p + "attn.q_proj.weight", {D, D}, g);
      add(p + "attn.k_proj.weight", {D, D}, g);
      add(p + "attn.v_proj.weight", {D, D}, g);
      add(p + "ln1.weight", {D}, g);
      ++g;
    }
    add("token_embeddings.weight", {V, D}, g++);
    group_begin.push_back(static_cast<int>(tensors.size()));

    layer_offsets.resize(static_cast<size_t>(cfg.num_layers));
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      layer_offsets[static_cast<size_t>(l)] = {off(p + "ffn.w2.weight"),           off(p + "ffn.w1.weight"),
                                               off(p + "ffn.w3.weight"),           off(p + "ln2.weight"),
                                               off(p + "attn.output_proj.weight"), off(p + "attn.q_proj.weight"),
                                               off(p + "attn.k_proj.weight"),      off(p + "attn.v_proj.weight"),
                                               off(p + "ln1.weight")};
    }
    off_lm_head = off("lm_head.weight");
    off_ln_final = off("ln_final.weight");
    off_embedding = off("token_embeddings.weight");
  }

  // ---- The passes, for one operand type O ----
  template <typename O>
  const O* weights();
  template <typename O>
  void forward_pass(const int32_t* tokens, int64_t B, int64_t T, bool with_loss, double& loss);
  template <typename O>
  void backward_pass(S loss_scale, const Observer& observer);
  template <typename O>
  void allocate(int64_t B, int64_t T);

  layers::Round round() const { return precision == Precision::fp16 ? layers::Round::fp16 : layers::Round::none; }
};

// Per-layer saved activations and the shared workspace, carved in a fixed order. Called twice: once
// to size the arenas (null storage), once to hand out pointers.
template <typename S, typename O>
struct Saved {
  S *x, *x_mid, *rstd1, *rstd2, *lse;
  O *h1, *qkv, *o, *h2, *ab, *g;
};
template <typename S, typename O>
struct Final {
  S *x, *rstd, *logits, *lse;
  O* h;
};
template <typename S, typename O>
struct Work {
  S* gemm;     // [N, max(3D, 2F, D)] GEMM outputs before the elementwise layer that consumes them
  S* dx;       // [N, D] gradient of the residual stream
  S* dtmp;     // [N, max(F, D)] gradient out of an input-gradient GEMM
  S* dattn;    // [N, 3D] dq|dk|dv from the math path, or o from the math path ([N, D])
  O* dop;      // [N, max(V, 3D, 2F, D)] a gradient rounded to the operand type for a GEMM
  O* dqkv;     // [N, 3D] dq|dk|dv from FlashAttention
  O* dO;       // [N, D]
};

// A [batch, heads, seq, d_head] view of rows of `ld` elements, head h at columns [h dh, (h + 1) dh):
// q, k and v inside the fused q|k|v rows, or the attention output, without copies.
template <typename E>
TensorView<E> head_view(E* base, int64_t B, int64_t H, int64_t T, int64_t dh, int64_t ld) {
  TensorView<E> v;
  v.data = base;
  v.rank = 4;
  v.shape = {B, H, T, dh};
  v.stride = {T * ld, dh, ld, 1};
  return v;
}

template <typename S, typename O>
Saved<S, O> carve_layer(Arena& a, int64_t N, int64_t D, int64_t F, int64_t BHT) {
  Saved<S, O> s{};
  s.x = a.take<S>(N * D);
  s.x_mid = a.take<S>(N * D);
  s.rstd1 = a.take<S>(N);
  s.rstd2 = a.take<S>(N);
  s.lse = a.take<S>(BHT);
  s.h1 = a.take<O>(N * D);
  s.qkv = a.take<O>(N * 3 * D);
  s.o = a.take<O>(N * D);
  s.h2 = a.take<O>(N * D);
  s.ab = a.take<O>(N * 2 * F);
  s.g = a.take<O>(N * F);
  return s;
}
template <typename S, typename O>
Final<S, O> carve_final(Arena& a, int64_t N, int64_t D, int64_t V) {
  Final<S, O> f{};
  f.x = a.take<S>(N * D);
  f.rstd = a.take<S>(N);
  f.logits = a.take<S>(N * V);
  f.lse = a.take<S>(N);
  f.h = a.take<O>(N * D);
  return f;
}
template <typename S, typename O>
Work<S, O> carve_work(Arena& a, int64_t N, int64_t D, int64_t F, int64_t V) {
  Work<S, O> w{};
  w.gemm = a.take<S>(N * std::max({3 * D, 2 * F, D}));
  w.dx = a.take<S>(N * D);
  w.dtmp = a.take<S>(N * std::max(F, D));
  w.dattn = a.take<S>(N * 3 * D);
  w.dop = a.take<O>(N * std::max({V, 3 * D, 2 * F, D}));
  w.dqkv = a.take<O>(N * 3 * D);
  w.dO = a.take<O>(N * D);
  return w;
}

template <typename S>
template <typename O>
void TransformerLM<S>::Impl::allocate(int64_t B, int64_t T) {
  const int64_t N = B * T, D = cfg.d_model, F = cfg.d_ff, V = cfg.vocab_size, BHT = B * cfg.num_heads * T;
  const bool same = B == batch && T == seq && !layer_acts.empty();
  if (same) return;
  batch = B;
  seq = T;
  layer_acts.clear();
  layer_acts.resize(static_cast<size_t>(cfg.num_layers));
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    Arena sizing;
    carve_layer<S, O>(sizing, N, D, F, BHT);
    const std::string tag = "activations/layers." + std::to_string(l);
    layer_acts[static_cast<size_t>(l)].bytes = Buffer<std::byte>(sizing.used, tag.c_str());
  }
  Arena sizing_f, sizing_w;
  carve_final<S, O>(sizing_f, N, D, V);
  carve_work<S, O>(sizing_w, N, D, F, V);
  final_acts.bytes = Buffer<std::byte>(sizing_f.used, "activations/final");
  work.bytes = Buffer<std::byte>(sizing_w.used, "workspace");
  layers::rope_tables<S>(T, cfg.d_head(), cfg.rope_theta, rope_cos, rope_sin);
}

template <typename S>
template <typename O>
const O* TransformerLM<S>::Impl::weights() {
  if constexpr (std::is_same_v<O, bf16>) {
    return w_bf16.data();
  } else if constexpr (std::is_same_v<O, float> && std::is_same_v<S, float>) {
    return precision == Precision::fp16 ? w_f16.data() : params.data();
  } else {
    return params.data();
  }
}

template <typename S>
template <typename O>
void TransformerLM<S>::Impl::forward_pass(const int32_t* tokens, int64_t B, int64_t T, bool with_loss,
                                          double& loss) {
  using namespace layers;
  const int64_t N = B * T, D = cfg.d_model, F = cfg.d_ff, V = cfg.vocab_size, H = cfg.num_heads;
  const int64_t dh = cfg.d_head(), BHT = B * H * T;
  const Round r = round();
  allocate<O>(B, T);

  // Operand copies of the weights.
  if constexpr (std::is_same_v<O, bf16>) {
    RIDGE_RANGE(ranges::cast_weights.text);
    if (w_bf16.size() != params.size()) w_bf16 = Buffer<bf16>(params.size(), "parameters/bf16 copy");
    cast<bf16>(params.data(), w_bf16.data(), static_cast<int64_t>(params.size()), r);
  } else if constexpr (std::is_same_v<O, float> && std::is_same_v<S, float>) {
    if (precision == Precision::fp16) {
      RIDGE_RANGE(ranges::cast_weights.text);
      if (w_f16.size() != params.size()) w_f16 = Buffer<float>(params.size(), "parameters/fp16 copy");
      cast<float>(params.data(), w_f16.data(), static_cast<int64_t>(params.size()), r);
    }
  }
  const O* W = weights<O>();
  const S* P = params.data();
  work.used = 0;
  Work<S, O> w = carve_work<S, O>(work, N, D, F, V);

  attention::Options opt;
  opt.causal = true;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    RIDGE_RANGE(ranges::layer.text);
    auto& arena = layer_acts[static_cast<size_t>(l)];
    arena.used = 0;
    Saved<S, O> s = carve_layer<S, O>(arena, N, D, F, BHT);
    const LayerTensors& t = layer_offsets[static_cast<size_t>(l)];
    if (l == 0) {  // later layers find their input already in s.x, written by the layer before
      RIDGE_RANGE(ranges::embedding.text);
      embedding_forward(tokens, N, P + off_embedding, V, D, s.x);
    }
    {
      RIDGE_RANGE(ranges::attention_block.text);
      {
        RIDGE_RANGE(ranges::norm.text);
        rmsnorm_forward(s.x, P + t.ln1, N, D, S(1e-5), s.rstd1, s.h1, r);
      }
      {
        RIDGE_RANGE(ranges::gemm_qkv.text);
        linear::nt(s.h1, W + t.wq, w.gemm, N, 3 * D, D, D, D, 3 * D, false);
      }
      {
        RIDGE_RANGE(ranges::rope.text);
        rope_forward(w.gemm, s.qkv, N, T, D, dh, rope_cos.data(), rope_sin.data(), r);
      }
      {
        RIDGE_RANGE(ranges::attention.text);
        auto view = [&](auto* base, int64_t ld) { return head_view(base, B, H, T, dh, ld); };
        TensorView<S> lse = TensorView<S>::contiguous(s.lse, {B, H, T});
        if constexpr (std::is_same_v<S, float> && !std::is_same_v<O, double>) {
          if (attention == AttentionPath::flash) {
            attention::flash_attention_forward<O>(view(s.qkv, 3 * D), view(s.qkv + D, 3 * D),
                                                  view(s.qkv + 2 * D, 3 * D), view(s.o, D), lse, opt);
          } else {
            attention::attention_reference_forward<O, S>(view(s.qkv, 3 * D), view(s.qkv + D, 3 * D),
                                                         view(s.qkv + 2 * D, 3 * D), view(w.dattn, D), lse, opt);
            cast<O>(w.dattn, s.o, N * D, r);
          }
        } else {
          attention::attention_reference_forward<O, S>(view(s.qkv, 3 * D), view(s.qkv + D, 3 * D),
                                                       view(s.qkv + 2 * D, 3 * D), view(w.dattn, D), lse, opt);
          cast<O>(w.dattn, s.o, N * D, r);
        }
      }
      {
        RIDGE_RANGE(ranges::gemm_out.text);  // x_mid = x + o Wo^T: the residual add in the GEMM's epilogue
        linear::nt_add(s.o, W + t.wo, s.x_mid, s.x, N, D, D, D, D, D);
      }
    }
    {
      RIDGE_RANGE(ranges::ffn_block.text);
      {
        RIDGE_RANGE(ranges::norm.text);
        rmsnorm_forward(s.x_mid, P + t.ln2, N, D, S(1e-5), s.rstd2, s.h2, r);
      }
      {
        RIDGE_RANGE(ranges::gemm_w1_w3.text);
        linear::nt(s.h2, W + t.w1, w.gemm, N, 2 * F, D, D, D, 2 * F, false);
      }
      {
        RIDGE_RANGE(ranges::swiglu.text);
        swiglu_forward(w.gemm, N, F, s.ab, s.g, r);
      }
      // The next layer's input (or the final norm's) lands in the next saved x.
      Arena* next = l + 1 < cfg.num_layers ? &layer_acts[static_cast<size_t>(l + 1)] : &final_acts;
      next->used = 0;
      S* xn = l + 1 < cfg.num_layers ? carve_layer<S, O>(*next, N, D, F, BHT).x : carve_final<S, O>(*next, N, D, V).x;
      next->used = 0;
      {
        RIDGE_RANGE(ranges::gemm_w2.text);  // x_next = x_mid + g W2^T, the residual add fused as above
        linear::nt_add(s.g, W + t.w2, xn, s.x_mid, N, D, F, F, F, D);
      }
    }
  }
  final_acts.used = 0;
  Final<S, O> f = carve_final<S, O>(final_acts, N, D, V);
  if (cfg.num_layers == 0) embedding_forward(tokens, N, P + off_embedding, V, D, f.x);
  {
    RIDGE_RANGE(ranges::final_norm.text);
    rmsnorm_forward(f.x, P + off_ln_final, N, D, S(1e-5), f.rstd, f.h, r);
  }
  {
    RIDGE_RANGE(ranges::gemm_lm_head.text);
    linear::nt(f.h, W + off_lm_head, f.logits, N, V, D, D, D, V, false);
  }
  if (with_loss) {
    RIDGE_RANGE(ranges::loss.text);
    loss = cross_entropy_forward(f.logits, targets.data(), N, V, f.lse);
  }
}

template <typename S>
template <typename O>
void TransformerLM<S>::Impl::backward_pass(S loss_scale, const Observer& observer) {
  using namespace layers;
  const int64_t B = batch, T = seq, N = B * T, D = cfg.d_model, F = cfg.d_ff, V = cfg.vocab_size;
  const int64_t H = cfg.num_heads, dh = cfg.d_head(), BHT = B * H * T;
  const Round r = round();
  const O* W = weights<O>();
  const S* P = params.data();
  S* G = grads.data();
  work.used = 0;
  Work<S, O> w = carve_work<S, O>(work, N, D, F, V);
  final_acts.used = 0;
  Final<S, O> f = carve_final<S, O>(final_acts, N, D, V);
  int group = 0;
  auto done = [&](int g) {
    if (observer) observer(g);
  };

  // Gradients are rounded to the operand type for the GEMMs that read them; where that rounding is
  // needed, the producing pass writes the rounded copy itself (never a cast pass of its own).
  constexpr bool same_type = std::is_same_v<O, S>;
  const bool rounds = !same_type || r != Round::none;
  // Loss and lm_head: the logits' gradient, in place, or straight into the operand buffer.
  const O* dl = nullptr;
  {
    RIDGE_RANGE(ranges::loss_backward.text);
    if constexpr (same_type) {
      if (!rounds) {
        cross_entropy_backward(f.logits, targets.data(), f.lse, N, V, loss_scale);
        dl = f.logits;
      }
    }
    if (!dl) {
      cross_entropy_backward(f.logits, targets.data(), f.lse, N, V, loss_scale, w.dop, r);
      dl = w.dop;
    }
  }
  {
    RIDGE_RANGE(ranges::gemm_lm_head_backward.text);
    linear::tn(dl, f.h, G + off_lm_head, V, D, N, V, D, D, true);  // d lm_head += dl^T h
    linear::nn(dl, W + off_lm_head, w.dtmp, N, D, V, V, D, D, false);  // dh = dl lm_head
  }
  done(group++);
  {
    RIDGE_RANGE(ranges::final_norm_backward.text);
    // dx rounded into w.dop for the first layer's w2 GEMMs (w.dop's lm_head gradient is consumed).
    rmsnorm_backward(w.dtmp, f.x, P + off_ln_final, f.rstd, N, D, w.dx, G + off_ln_final, false,
                     rounds && cfg.num_layers > 0 ? w.dop : nullptr, r);
  }
  done(group++);

  // A gradient (S) rounded into the operand buffer, or used as it is when no rounding is needed.
  auto as_op = [&](const S* g, int64_t n, O* buf) -> const O* {
    if constexpr (same_type) {
      if (!rounds) return g;
    }
    cast<O>(g, buf, n, r);
    return buf;
  };
  // The residual gradient as the operand type: the rounded copy the last norm backward left in
  // w.dop, or w.dx itself.
  auto dx_op = [&]() -> const O* {
    if constexpr (same_type) {
      if (!rounds) return w.dx;
    }
    return w.dop;
  };
  attention::Options opt;
  opt.causal = true;

  for (int64_t l = cfg.num_layers - 1; l >= 0; --l) {
    RIDGE_RANGE(ranges::layer_backward.text);
    auto& arena = layer_acts[static_cast<size_t>(l)];
    arena.used = 0;
    Saved<S, O> s = carve_layer<S, O>(arena, N, D, F, BHT);
    const LayerTensors& t = layer_offsets[static_cast<size_t>(l)];
    {
      RIDGE_RANGE(ranges::ffn_block_backward.text);
      const O* dy = dx_op();
      {
        RIDGE_RANGE(ranges::gemm_w2_backward.text);
        linear::tn(dy, s.g, G + t.w2, D, F, N, D, F, F, true);     // dW2 += dy^T g
        linear::nn(dy, W + t.w2, w.dtmp, N, F, D, D, F, F, false);  // dg = dy W2
      }
      O* dab = w.dop;  // dy is consumed: its buffer takes d(a|b)
      {
        RIDGE_RANGE(ranges::swiglu_backward.text);
        swiglu_backward(w.dtmp, s.ab, N, F, dab, r);
      }
      {
        RIDGE_RANGE(ranges::gemm_w1_w3_backward.text);
        linear::tn(dab, s.h2, G + t.w1, 2 * F, D, N, 2 * F, D, D, true);  // dW13 += dab^T h2
        linear::nn(dab, W + t.w1, w.dtmp, N, D, 2 * F, 2 * F, D, D, false);  // dh2 = dab W13
      }
      {
        RIDGE_RANGE(ranges::norm_backward.text);
        rmsnorm_backward(w.dtmp, s.x_mid, P + t.ln2, s.rstd2, N, D, w.dx, G + t.ln2, true, rounds ? w.dop : nullptr,
                         r);
      }
    }
    {
      RIDGE_RANGE(ranges::attention_block_backward.text);
      const O* dy = dx_op();
      const O* dO = nullptr;  // the attention output's gradient, as the operand type
      {
        RIDGE_RANGE(ranges::gemm_out_backward.text);
        linear::tn(dy, s.o, G + t.wo, D, D, N, D, D, D, true);  // dWo += dy^T o
        if constexpr (std::is_same_v<O, bf16>) {  // do = dy Wo, rounded to bf16 by the GEMM itself
          linear::nn(dy, W + t.wo, w.dO, N, D, D, D, D, D);
          dO = w.dO;
        } else {
          linear::nn(dy, W + t.wo, w.dtmp, N, D, D, D, D, D, false);
          dO = as_op(w.dtmp, N * D, w.dO);
        }
      }
      auto view = [&](auto* base, int64_t ld) { return head_view(base, B, H, T, dh, ld); };
      O* dqkv_op = w.dop;
      {
        RIDGE_RANGE(ranges::attention_backward.text);
        bool flash = false;
        if constexpr (std::is_same_v<S, float> && !std::is_same_v<O, double>) flash = attention == AttentionPath::flash;
        if (flash) {
          if constexpr (std::is_same_v<S, float> && !std::is_same_v<O, double>) {
            TensorView<float> lse = TensorView<float>::contiguous(s.lse, {B, H, T});
            attention::flash_attention_backward<O>(
                view(s.qkv, 3 * D), view(s.qkv + D, 3 * D), view(s.qkv + 2 * D, 3 * D), view(s.o, D),
                view(const_cast<O*>(dO), D), lse, view(w.dqkv, 3 * D), view(w.dqkv + D, 3 * D),
                view(w.dqkv + 2 * D, 3 * D), opt);
            rope_backward<S>(w.dqkv, dqkv_op, N, T, D, dh, rope_cos.data(), rope_sin.data(), r);
          }
        } else {
          attention::attention_reference_backward<O, S>(
              view(s.qkv, 3 * D), view(s.qkv + D, 3 * D), view(s.qkv + 2 * D, 3 * D), view(const_cast<O*>(dO), D),
              view(w.dattn, 3 * D), view(w.dattn + D, 3 * D), view(w.dattn + 2 * D, 3 * D), opt);
          rope_backward<S>(w.dattn, dqkv_op, N, T, D, dh, rope_cos.data(), rope_sin.data(), r);
        }
      }
      {
        RIDGE_RANGE(ranges::gemm_qkv_backward.text);
        linear::tn(dqkv_op, s.h1, G + t.wq, 3 * D, D, N, 3 * D, D, D, true);  // dWqkv += dqkv^T h1
        linear::nn(dqkv_op, W + t.wq, w.dtmp, N, D, 3 * D, 3 * D, D, D, false);  // dh1 = dqkv Wqkv
      }
      {
        RIDGE_RANGE(ranges::norm_backward.text);
        // dx rounded into w.dop (its dq|dk|dv is consumed) for the next layer down; not after layer 0.
        rmsnorm_backward(w.dtmp, s.x, P + t.ln1, s.rstd1, N, D, w.dx, G + t.ln1, true,
                         rounds && l > 0 ? w.dop : nullptr, r);
      }
    }
    done(group++);
  }
  {
    RIDGE_RANGE(ranges::embedding_backward.text);
    embedding_backward(inputs.data(), N, w.dx, D, G + off_embedding);
  }
  done(group++);
}

// ---- The public class ----

namespace {

// Seeded normal samples for initialisation (splitmix64 bits, Box-Muller), independent of the data
// sampler's generator so that changing one never moves the other.
struct InitRng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double normal() {
    double u1 = uniform();
    while (u1 <= 0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
  double truncated_normal(double std) {  // N(0, std^2) cut at +-3 std, by rejection
    for (;;) {
      const double z = normal();
      if (std::abs(z) <= 3.0) return z * std;
    }
  }
};

}  // namespace

template <typename S>
TransformerLM<S>::TransformerLM(const ModelConfig& config, Precision precision, AttentionPath attention)
    : impl_(std::make_unique<Impl>()) {
  config.validate();
  impl_->cfg = config;
  set_precision(precision);
  set_attention_path(attention);
  impl_->layout();
  const auto n = static_cast<size_t>(impl_->tensors.back().offset + impl_->tensors.back().numel);
  impl_->params = Buffer<S>(n, "parameters");
  impl_->grads = Buffer<S>(n, "gradients");
  std::fill(impl_->params.begin(), impl_->params.end(), S(0));
  std::fill(impl_->grads.begin(), impl_->grads.end(), S(0));
}
template <typename S>
TransformerLM<S>::~TransformerLM() = default;
template <typename S>
TransformerLM<S>::TransformerLM(TransformerLM&&) noexcept = default;
template <typename S>
TransformerLM<S>& TransformerLM<S>::operator=(TransformerLM&&) noexcept = default;

template <typename S>
const ModelConfig& TransformerLM<S>::config() const {
  return impl_->cfg;
}
template <typename S>
Precision TransformerLM<S>::precision() const {
  return impl_->precision;
}
template <typename S>
AttentionPath TransformerLM<S>::attention_path() const {
  return impl_->attention;
}
template <typename S>
void TransformerLM<S>::set_precision(Precision p) {
  check(std::is_same_v<S, float> || p == Precision::fp32,
        "precision: the fp64 reference model runs in fp32 precision only, got {}", precision_name(p));
  if (p != impl_->precision) {
    impl_->layer_acts.clear();  // operand types change: the buffers are re-carved
    impl_->forward_done = false;
  }
  impl_->precision = p;
}
template <typename S>
void TransformerLM<S>::set_attention_path(AttentionPath a) {
  if (std::is_same_v<S, double>) a = AttentionPath::math;  // FlashAttention has no fp64 instance
  check_attention_path(impl_->cfg, a);
  impl_->attention = a;
}
template <typename S>
const std::vector<TensorInfo>& TransformerLM<S>::tensors() const {
  return impl_->tensors;
}
template <typename S>
int TransformerLM<S>::num_groups() const {
  return static_cast<int>(impl_->group_begin.size()) - 1;
}
template <typename S>
int TransformerLM<S>::group_begin(int g) const {
  check(g >= 0 && g <= num_groups(), "group: {} is outside 0..{}", g, num_groups());
  return impl_->group_begin[static_cast<size_t>(g)];
}
template <typename S>
const TensorInfo& TransformerLM<S>::tensor(const std::string& name) const {
  const auto it = impl_->index.find(name);
  check(it != impl_->index.end(), "name: the model has no parameter '{}'", name);
  return impl_->tensors[static_cast<size_t>(it->second)];
}
template <typename S>
std::span<S> TransformerLM<S>::params() {
  return impl_->params.span();
}
template <typename S>
std::span<const S> TransformerLM<S>::params() const {
  return impl_->params.span();
}
template <typename S>
std::span<S> TransformerLM<S>::grads() {
  return impl_->grads.span();
}
template <typename S>
std::span<const S> TransformerLM<S>::grads() const {
  return impl_->grads.span();
}
template <typename S>
std::span<S> TransformerLM<S>::param(const std::string& name) {
  const TensorInfo& t = tensor(name);
  return params().subspan(static_cast<size_t>(t.offset), static_cast<size_t>(t.numel));
}
template <typename S>
std::span<S> TransformerLM<S>::grad(const std::string& name) {
  const TensorInfo& t = tensor(name);
  return grads().subspan(static_cast<size_t>(t.offset), static_cast<size_t>(t.numel));
}

template <typename S>
void TransformerLM<S>::init(uint64_t seed) {
  InitRng rng{seed};
  // Tensors are filled in state_dict order (embedding first, then layer by layer), not in the flat
  // buffer's order, so the same seed gives the same weights whatever the buffer layout.
  std::vector<const TensorInfo*> order;
  order.push_back(&tensor("token_embeddings.weight"));
  for (int64_t l = 0; l < impl_->cfg.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (const char* n : {"attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight",
                          "attn.output_proj.weight", "ln1.weight", "ffn.w1.weight", "ffn.w2.weight",
                          "ffn.w3.weight", "ln2.weight"})
      order.push_back(&tensor(p + n));
  }
  order.push_back(&tensor("ln_final.weight"));
  order.push_back(&tensor("lm_head.weight"));
  S* P = impl_->params.data();
  for (const TensorInfo* t : order) {
    S* p = P + t->offset;
    if (t->shape.size() == 1) {
      std::fill_n(p, t->numel, S(1));
      continue;
    }
    const bool embedding = t->name == "token_embeddings.weight";
    const double std = embedding ? 1.0 : std::sqrt(2.0 / static_cast<double>(t->shape[0] + t->shape[1]));
    for (int64_t i = 0; i < t->numel; ++i) p[i] = static_cast<S>(rng.truncated_normal(std));
  }
  impl_->forward_done = false;
}

template <typename S>
S TransformerLM<S>::forward(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq) {
  const ModelConfig& c = impl_->cfg;
  check(inputs != nullptr, "inputs: no data");
  check(batch >= 1, "batch: must be >= 1, got {}", batch);
  check(seq >= 1 && seq <= c.context_length, "seq: must be in 1..{} (the context length), got {}", c.context_length,
        seq);
  const int64_t n = batch * seq;
  impl_->inputs.assign(inputs, inputs + n);
  if (targets)
    impl_->targets.assign(targets, targets + n);
  else
    impl_->targets.clear();
  double loss = 0;
  impl_->forward_done = false;
  if constexpr (std::is_same_v<S, double>) {
    impl_->template forward_pass<double>(inputs, batch, seq, targets != nullptr, loss);
  } else {
    if (impl_->precision == Precision::bf16)
      impl_->template forward_pass<bf16>(inputs, batch, seq, targets != nullptr, loss);
    else
      impl_->template forward_pass<float>(inputs, batch, seq, targets != nullptr, loss);
  }
  impl_->forward_done = true;
  impl_->logits_only = targets == nullptr;
  return static_cast<S>(loss);
}

template <typename S>
std::span<const S> TransformerLM<S>::logits() const {
  check(!impl_->layer_acts.empty() || impl_->cfg.num_layers == 0, "logits: no forward pass has run");
  Arena a;
  a.bytes = Buffer<std::byte>();
  const int64_t N = impl_->batch * impl_->seq, D = impl_->cfg.d_model, V = impl_->cfg.vocab_size;
  // Offsets of the final arena: x, rstd, then the logits.
  Arena sizing;
  sizing.take<S>(N * D);
  sizing.take<S>(N);
  const size_t off = (sizing.used + 63) / 64 * 64;
  const auto* p = reinterpret_cast<const S*>(impl_->final_acts.bytes.data() + off);
  return {p, static_cast<size_t>(N * V)};
}

template <typename S>
void TransformerLM<S>::backward(S loss_scale, const Observer& observer) {
  check(impl_->forward_done, "backward: needs a forward pass first (each forward allows one backward)");
  check(!impl_->logits_only, "backward: the forward pass ran without targets, so there is no loss to differentiate");
  check(std::isfinite(static_cast<double>(loss_scale)) && loss_scale > 0, "loss_scale: must be finite and > 0, got {}",
        static_cast<double>(loss_scale));
  impl_->forward_done = false;
  if constexpr (std::is_same_v<S, double>) {
    impl_->template backward_pass<double>(loss_scale, observer);
  } else {
    if (impl_->precision == Precision::bf16)
      impl_->template backward_pass<bf16>(loss_scale, observer);
    else
      impl_->template backward_pass<float>(loss_scale, observer);
  }
}

template <typename S>
void TransformerLM<S>::zero_grad() {
  std::fill(impl_->grads.begin(), impl_->grads.end(), S(0));
}

template <typename S>
int64_t TransformerLM<S>::activation_bytes() const {
  int64_t b = static_cast<int64_t>(impl_->final_acts.bytes.size());
  for (const auto& a : impl_->layer_acts) b += static_cast<int64_t>(a.bytes.size());
  return b;
}
template <typename S>
int64_t TransformerLM<S>::workspace_bytes() const {
  return static_cast<int64_t>(impl_->work.bytes.size());
}

template class TransformerLM<float>;
template class TransformerLM<double>;

double forward_flops(const ModelConfig& c, int64_t batch, int64_t seq) {
  const double n = static_cast<double>(batch * seq);
  const double D = static_cast<double>(c.d_model), F = static_cast<double>(c.d_ff);
  const double gemm_per_token = 2.0 * (4.0 * D * D + 3.0 * D * F) * static_cast<double>(c.num_layers) +
                                2.0 * D * static_cast<double>(c.vocab_size);
  const double attn = attention::attention_flops(batch, c.num_heads, seq, seq, c.d_head(), true, false) *
                      static_cast<double>(c.num_layers);
  return n * gemm_per_token + attn;
}
double training_flops(const ModelConfig& c, int64_t batch, int64_t seq) {
  const double n = static_cast<double>(batch * seq);
  const double D = static_cast<double>(c.d_model), F = static_cast<double>(c.d_ff);
  const double gemm_per_token = 2.0 * (4.0 * D * D + 3.0 * D * F) * static_cast<double>(c.num_layers) +
                                2.0 * D * static_cast<double>(c.vocab_size);
  const double attn_f = attention::attention_flops(batch, c.num_heads, seq, seq, c.d_head(), true, false);
  const double attn_b = attention::attention_flops(batch, c.num_heads, seq, seq, c.d_head(), true, true);
  return 3.0 * n * gemm_per_token + (attn_f + attn_b) * static_cast<double>(c.num_layers);
}

}  // namespace ridge::model
