// The Transformer LM: parameter layout, initialisation, and the forward and backward passes written
// out layer by layer over explicit buffers. The elementwise layers are in layers.hpp, the GEMMs in
// linear.hpp (the MoE experts' grouped ones in expert_gemm.hpp), the routing in moe.hpp; this file is
// the wiring, readable top to bottom as the model's math.
#include "ridge/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <fmt/format.h>
#include <map>
#include <type_traits>
#include <utility>

#include "model/expert_gemm.hpp"
#include "model/layers.hpp"
#include "model/linear.hpp"
#include "ridge/attention.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/model/moe.hpp"
#include "ridge/model/ranges.hpp"
#include "ridge/model/roofline.hpp"
#include "ridge/roofline/model_buffers.hpp"
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
    case Precision::fp32:
      return "fp32";
    case Precision::bf16:
      return "bf16";
    case Precision::fp16:
      return "fp16";
  }
  return "?";
}
AttentionPath parse_attention_path(const std::string& name) {
  if (name == "flash") return AttentionPath::flash;
  if (name == "math") return AttentionPath::math;
  fail("attention: '{}' is not one of flash, math", name);
}
const char* attention_path_name(AttentionPath a) {
  return a == AttentionPath::flash ? "flash" : "math";
}
void check_attention_path(const ModelConfig& cfg, AttentionPath a) {
  if (a != AttentionPath::flash) return;
  const int64_t dh = cfg.d_head();
  check_arg(dh >= 16 && dh <= 256, "attention",
            "FlashAttention needs a head dimension in 16..256 (d_model / num_heads = {}); use the math path",
            dh);
}

namespace rr = roofline;
using rr::Buf;

namespace {

// The one rule of document masking: a batch of B rows of T tokens is cut after every `eot` token and at
// each row's end. The offsets of the documents in the flattened batch, from 0 to B * T (FlashAttention's
// cu_seqlens).
std::vector<int32_t> document_offsets(const int32_t* tokens, int64_t B, int64_t T, int32_t eot) {
  std::vector<int32_t> cu(1, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      if (tokens[b * T + t] == eot || t == T - 1) cu.push_back(static_cast<int32_t>(b * T + t + 1));
  return cu;
}

// One region of a step's memory (a layer's saved activations, those after the last layer, or the
// workspace): one block, carved into the buffers that ridge/roofline/model_buffers.hpp places there,
// at the offsets it gives, tagged with the region's name for the memory profiler.
struct Region {
  Buffer<std::byte> bytes;
  rr::RegionLayout layout;
  void allocate(rr::Region r, const rr::ModelShape& m, size_t state, size_t operand, const std::string& tag) {
    layout = rr::region_layout(r, m, state, operand);
    bytes = Buffer<std::byte>(layout.bytes, tag.c_str());
  }
  template <typename T>
  T* at(Buf b) const {
    return reinterpret_cast<T*>(const_cast<std::byte*>(bytes.data()) + layout.offset[static_cast<int>(b)]);
  }
};

// Buffer b's element type: the state type S or the operand type O, as the description says; a view
// naming a buffer with the other type does not compile.
template <typename S, typename O, Buf b>
using ElemOf = std::conditional_t<rr::spec(b).elem == rr::Elem::state, S, O>;
template <typename S, typename O, Buf b>
ElemOf<S, O, b>* get(const Region& r) {
  return r.template at<ElemOf<S, O, b>>(b);
}

// The experts' grouped GEMMs' operands: rows x cols of a row-major buffer (rows ld apart), and a stack
// of G matrices [G, rows, cols] (the stacked experts' weights, or their gradients).
template <typename T>
MatrixView<const T> in_rows(const T* p, int64_t rows, int64_t cols, int64_t ld = -1) {
  return {p, rows, cols, ld < 0 ? cols : ld};
}
template <typename T>
MatrixView<T> out_rows(T* p, int64_t rows, int64_t cols, int64_t ld) {
  return {p, rows, cols, ld};
}
template <typename T>
TensorView<T> stack(T* p, int64_t g, int64_t rows, int64_t cols) {
  return TensorView<T>::contiguous(p, {g, rows, cols});
}
// Runs f(first row, rows) over each expert's rows of the contiguous layout. The padding rows are never
// touched: what the grouped GEMMs leave in them is not defined.
// count[e]: expert e's rows (the routing's counts, or an owner's ReceivedLayout::count).
template <typename F>
void each_expert(std::span<const int64_t> count, const moe::ContiguousLayout& lay, F&& f) {
  for (size_t e = 0; e < count.size(); ++e)
    if (count[e] > 0) f(lay.offset[e], count[e]);
}

// A scratch buffer of at least n elements of T, carved from `b` (grown, never shrunk: the rows an
// exchange brings change from step to step).
template <typename T>
T* grown(Buffer<std::byte>& b, int64_t n, const char* tag) {
  const auto bytes = static_cast<size_t>(n) * sizeof(T);
  if (b.size() < bytes) {
    b = Buffer<std::byte>();  // free first: the peak is the larger buffer, not both
    b = Buffer<std::byte>(bytes, tag);
  }
  return reinterpret_cast<T*>(b.data());
}

// Runs `f` inside the trace range `r`.
template <typename F>
void in(const ranges::Name& r, F&& f) {
  RIDGE_RANGE(r.text);
  f();
}

// FlashAttention has instances for fp32 state with fp32 or bf16 operands; the fp64 reference model
// runs the math path.
template <typename S, typename O>
inline constexpr bool kFlashInstance = std::is_same_v<S, float> && !std::is_same_v<O, double>;

}  // namespace

// Typed views of the regions, one pointer per buffer of kModelBuffers.
template <typename S, typename O>
struct LayerActs {
  S *x, *x_mid, *rstd1, *rstd2, *lse;
  O *h1, *qkv, *o, *h2, *ab, *g;
  explicit LayerActs(const Region& r)
      : x(get<S, O, Buf::x>(r)),
        x_mid(get<S, O, Buf::x_mid>(r)),
        rstd1(get<S, O, Buf::rstd1>(r)),
        rstd2(get<S, O, Buf::rstd2>(r)),
        lse(get<S, O, Buf::lse>(r)),
        h1(get<S, O, Buf::h1>(r)),
        qkv(get<S, O, Buf::qkv>(r)),
        o(get<S, O, Buf::o>(r)),
        h2(get<S, O, Buf::h2>(r)),
        ab(get<S, O, Buf::ab>(r)),
        g(get<S, O, Buf::g>(r)) {}
};
// An MoE layer's own buffers (its block holds the attention block's and h2 as LayerActs views them):
// MoeActs<S, O>{region}.
template <typename S, typename O>
struct MoeActs {
  const Region& r;
  S* logits = get<S, O, Buf::router_logits>(r);  // [N, E]
  S* y = get<S, O, Buf::moe_y>(r);               // [R, D], and below the operand-type ones
  O *x = get<S, O, Buf::moe_x>(r), *ab = get<S, O, Buf::moe_ab>(r), *g = get<S, O, Buf::moe_g>(r);
  O *shared_ab = get<S, O, Buf::shared_ab>(r), *shared_g = get<S, O, Buf::shared_g>(r);
};
template <typename S, typename O>
struct FinalActs {
  S *x, *rstd, *logits, *lse;
  O* h;
  explicit FinalActs(const Region& r)
      : x(get<S, O, Buf::final_x>(r)),
        rstd(get<S, O, Buf::final_rstd>(r)),
        logits(get<S, O, Buf::logits>(r)),
        lse(get<S, O, Buf::final_lse>(r)),
        h(get<S, O, Buf::final_h>(r)) {}
};
template <typename S, typename O>
struct Work {
  S *gemm, *dx, *dtmp, *dattn, *moe_gemm, *router_dlogits;
  O *dop, *dqkv, *dout, *moe_dop;
  explicit Work(const Region& r)
      : gemm(get<S, O, Buf::gemm>(r)),
        dx(get<S, O, Buf::dx>(r)),
        dtmp(get<S, O, Buf::dtmp>(r)),
        dattn(get<S, O, Buf::dattn>(r)),
        moe_gemm(get<S, O, Buf::moe_gemm>(r)),
        router_dlogits(get<S, O, Buf::router_dlogits>(r)),
        dop(get<S, O, Buf::dop>(r)),
        dqkv(get<S, O, Buf::dqkv>(r)),
        dout(get<S, O, Buf::dout>(r)),
        moe_dop(get<S, O, Buf::moe_dop>(r)) {}
};

template <typename S>
struct TransformerLM<S>::Impl {
  ModelConfig cfg;
  ExpertShard shard;  // the experts of each stack this model holds
  Precision precision = Precision::fp32;
  AttentionPath attention = AttentionPath::flash;
  std::vector<TensorInfo> tensors;
  std::vector<int> group_begin;
  std::map<std::string, int> index;
  Buffer<S> params, grads;

  // Operand copies of the weights (bf16, or fp32 rounded through fp16), refreshed at every forward.
  Buffer<bf16> w_bf16;
  Buffer<float> w_f16;

  // Shape of the saved activations and the regions holding them.
  int64_t batch = 0, seq = 0;
  bool forward_done = false;
  bool logits_only = false;
  std::vector<Region> layer_acts;  // one per layer
  Region final_acts, work;
  std::vector<S> rope_cos, rope_sin;     // [seq, d_head / 2]
  std::vector<int64_t> rope_pos;         // row i of the batch at position i % seq
  std::vector<int32_t> inputs, targets;  // copies of the last forward's tokens
  // Document masking: attention stops at every token `eot` (-1: off). cu holds the last forward's
  // documents as the varlen kernels take them: the batch's rows packed one after the other, each cut
  // after every eot token (and at its end); longest is the longest document.
  int32_t eot = -1;
  std::vector<int32_t> cu;
  int64_t longest = 0;

  // Per-layer offsets into the flat buffers (w2, w1, w3 -1 in an MoE layer).
  struct LayerTensors {
    int64_t w2, w1, w3, ln2, wo, wq, wk, wv, ln1;
  };
  std::vector<LayerTensors> layer_offsets;
  // An MoE layer's: the router, the stacked experts' w1, w2, w3 and the shared experts' (-1 without
  // them; shared w1 and w3 are adjacent, one [2S, D] matrix); its bias's offset into `state` (-1 unless
  // balance bias).
  struct MoeTensors {
    int64_t router = -1, ew1 = -1, ew2 = -1, ew3 = -1, sw1 = -1, sw2 = -1, bias = -1;
  };
  std::vector<MoeTensors> moe_offsets;
  // Non-trained state: the router biases.
  std::vector<TensorInfo> state_tensors;
  Buffer<S> state;
  // Each MoE layer's routing in the last forward (the backward reads it), and its auxiliary loss.
  struct MoeRoute {
    moe::BasicRouting<S> routing;
    moe::ContiguousLayout layout;
    double aux = 0;
  };
  std::vector<MoeRoute> moe_route;
  std::vector<S> dweight;
  // Expert parallelism (nullptr: every expert here). Each MoE layer's side of the last forward's
  // exchange, kept for its backward: this worker's choices in expert order (the order its rows leave
  // in), the rows sent to and received from each worker, the owner's layout of what it received, the
  // owner's saved operands (x, SwiGLU's inputs, g) and the experts' outputs of this worker's choices as
  // they came back (the gate weights' gradient reads them).
  ExpertExchange* exchange = nullptr;
  struct MoeRemote {
    moe::ContiguousLayout send;
    std::vector<int64_t> send_rows, recv_rows, recv_count;
    moe::ReceivedLayout owner;
    Buffer<std::byte> x, ab, g, y;
  };
  std::vector<MoeRemote> moe_remote;
  // Scratch shared by the layers: the rows that leave and arrive, the owner's GEMM outputs and rounded
  // gradients, and this worker's choices' gradients before rounding.
  Buffer<std::byte> ep_send, ep_recv, ep_gemm, ep_dop,
      ep_local;  // the backward's gradients of one layer's gate weights [N * k]
  int64_t off_lm_head = 0, off_ln_final = 0, off_embedding = 0;
  // A q|k|v row (ridge/roofline/model_buffers.hpp): q's num_heads heads, then k's and v's kv_heads()
  // heads, d_head each: D + 2 Dkv wide, Dkv = kv_heads() * d_head (= D without grouped-query attention).
  int64_t Dkv = 0, QKV = 0;

  rr::ModelShape shape(int64_t B, int64_t T) const { return model_shape(cfg, B, T, precision, attention); }
  int64_t off(const std::string& name) const { return tensors[static_cast<size_t>(index.at(name))].offset; }

  // The flat buffers' tensors, in the description's order (ridge/roofline/model_buffers.hpp).
  void layout() {
    Dkv = rr::kv_width(shape(1, 1));
    QKV = rr::qkv_width(shape(1, 1));
    for (rr::ParamSpec& p : rr::model_parameters(shape(1, 1))) {
      TensorInfo t;
      t.name = std::move(p.name);
      t.shape = std::move(p.shape);
      t.numel = 1;
      for (int64_t d : t.shape) t.numel *= d;
      if (rr::is_expert_stack(t.name)) {
        // A stack [E, rows, cols]: this worker's block of E / world experts.
        t.experts = t.shape[0];
        t.expert_begin = t.experts / shard.world * shard.rank;
        t.shape[0] = t.experts / shard.world;
        t.numel /= shard.world;
      }
      t.offset = tensors.empty() ? 0 : tensors.back().offset + tensors.back().numel;
      t.group = p.group;
      if (group_begin.size() <= static_cast<size_t>(t.group))
        group_begin.push_back(static_cast<int>(tensors.size()));
      index[t.name] = static_cast<int>(tensors.size());
      tensors.push_back(std::move(t));
    }
    group_begin.push_back(static_cast<int>(tensors.size()));

    layer_offsets.resize(static_cast<size_t>(cfg.num_layers));
    moe_offsets.resize(static_cast<size_t>(cfg.num_layers));
    moe_route.resize(static_cast<size_t>(cfg.num_layers));
    moe_remote.resize(static_cast<size_t>(cfg.num_layers));
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      const bool moe = cfg.moe_layer(l);
      if (moe) moe_offsets[static_cast<size_t>(l)] = moe_layout(l);
      layer_offsets[static_cast<size_t>(l)] = {moe ? -1 : off(p + "ffn.w2.weight"),
                                               moe ? -1 : off(p + "ffn.w1.weight"),
                                               moe ? -1 : off(p + "ffn.w3.weight"),
                                               off(p + "ln2.weight"),
                                               off(p + "attn.output_proj.weight"),
                                               off(p + "attn.q_proj.weight"),
                                               off(p + "attn.k_proj.weight"),
                                               off(p + "attn.v_proj.weight"),
                                               off(p + "ln1.weight")};
    }
    off_lm_head = off("lm_head.weight");
    off_ln_final = off("ln_final.weight");
    off_embedding = off("token_embeddings.weight");
  }
  // The MoE layers' tensors and router biases (called by layout() for a layer whose FFN is MoE).
  MoeTensors moe_layout(int64_t l) {
    const std::string p = "layers." + std::to_string(l) + ".ffn.";
    MoeTensors m;
    m.router = off(p + "router.weight");
    m.ew1 = off(p + "experts.w1.weight");
    m.ew2 = off(p + "experts.w2.weight");
    m.ew3 = off(p + "experts.w3.weight");
    if (cfg.num_shared_experts > 0) {
      m.sw1 = off(p + "shared.w1.weight");
      m.sw2 = off(p + "shared.w2.weight");
    }
    if (cfg.balance == moe::Balance::bias) {
      TensorInfo t;
      t.name = p + "router.bias";
      t.shape = {cfg.num_experts};
      t.numel = cfg.num_experts;
      t.offset = state_tensors.empty() ? 0 : state_tensors.back().offset + state_tensors.back().numel;
      m.bias = t.offset;
      state_tensors.push_back(std::move(t));
    }
    return m;
  }
  // Layer l's router bias, or none.
  std::span<const S> router_bias(int64_t l) const {
    const int64_t b = moe_offsets[static_cast<size_t>(l)].bias;
    if (b < 0) return {};
    return {state.data() + b, static_cast<size_t>(cfg.num_experts)};
  }

  // ---- The passes, for one operand type O ----
  template <typename O>
  void cast_weights();
  template <typename O>
  const O* weights();
  template <typename O>
  void forward_pass(const int32_t* tokens, int64_t B, int64_t T, bool with_loss, double& loss);
  template <typename O>
  void backward_pass(S loss_scale, const Observer& observer);
  template <typename O>
  void allocate(int64_t B, int64_t T);
  template <typename O>
  void attention_forward(const LayerActs<S, O>& s, const Work<S, O>& w);
  template <typename O>
  void attention_backward(const LayerActs<S, O>& s, const Work<S, O>& w, const O* dout, O* dqkv);
  // What an MoE layer's forward and its backward both read: the sizes (N tokens, D, E experts of width
  // De, shared width Sh), the layer's tensors, its own buffers and its routing.
  template <typename O>
  struct MoeLayer {
    int64_t N, D, E, De, Sh;
    const MoeTensors& t;
    MoeActs<S, O> m;
    MoeRoute& mr;
  };
  template <typename O>
  MoeLayer<O> moe_layer(int64_t l) {
    const auto i = static_cast<size_t>(l);
    return {batch * seq,
            cfg.d_model,
            cfg.num_experts,
            cfg.expert_width(),
            cfg.shared_width(),
            moe_offsets[i],
            MoeActs<S, O>{layer_acts[i]},
            moe_route[i]};
  }
  template <typename O>
  void moe_forward(int64_t l, const LayerActs<S, O>& s, const Work<S, O>& w, S* next);
  // The parts of an MoE layer both paths run: the shared experts (progress() between their GEMMs, so an
  // exchange in flight moves on), the routed experts over the rows of a contiguous layout (the experts
  // this model holds; y may be gemm), their backward (dop: the rows' dy in, d(a|b) out; dx of both halves
  // side by side into gemm), and the router's backward.
  template <typename O>
  void shared_forward(const MoeLayer<O>& L, const LayerActs<S, O>& s, const Work<S, O>& w, S* next);
  template <typename O>
  void shared_backward(const MoeLayer<O>& L, const LayerActs<S, O>& s, const Work<S, O>& w, const O* dy);
  template <typename O>
  void experts_forward(const MoeLayer<O>& L, const O* x, std::span<const int64_t> count,
                       const moe::ContiguousLayout& lay, O* ab, O* g, S* gemm, S* y);
  template <typename O>
  void experts_backward(const MoeLayer<O>& L, O* dop, const O* x, const O* ab, const O* g,
                        std::span<const int64_t> count, const moe::ContiguousLayout& lay, S* gemm);
  template <typename O>
  void router_backward(int64_t l, const MoeLayer<O>& L, const LayerActs<S, O>& s, const Work<S, O>& w,
                       S loss_scale);
  // Expert parallelism's forward and backward of the routed experts (the exchange above).
  template <typename O>
  void moe_forward_remote(int64_t l, const MoeLayer<O>& L, const LayerActs<S, O>& s, const Work<S, O>& w,
                          S* next);
  template <typename O>
  void moe_backward_remote(const MoeLayer<O>& L, const LayerActs<S, O>& s, const Work<S, O>& w, const O* dy,
                           int64_t l);
  void progress() const {
    if (exchange) exchange->progress();
  }
  // The router's input: h2 unrounded, in the state type (the router runs in fp32 whatever the operand
  // precision, as DeepSeek-V3 keeps its gate): h2 itself where it is not rounded, else formed again
  // from x_mid into the GEMM workspace (free in an MoE layer's routing, forward and backward).
  template <typename O>
  const S* router_input(int64_t l, const LayerActs<S, O>& s, const Work<S, O>& w) const {
    if constexpr (std::is_same_v<O, S>) {
      if (round() == layers::Round::none) return s.h2;
    }
    layers::rmsnorm_apply(s.x_mid, params.data() + layer_offsets[static_cast<size_t>(l)].ln2, s.rstd2,
                          batch * seq, cfg.d_model, w.gemm);
    return w.gemm;
  }
  template <typename O>
  void moe_backward(int64_t l, const LayerActs<S, O>& s, const Work<S, O>& w, const O* dy, S loss_scale);

  layers::Round round() const {
    return precision == Precision::fp16 ? layers::Round::fp16 : layers::Round::none;
  }
  // [batch, n, seq, d_head] views of rows of `ld` elements, head h at columns [h dh, (h + 1) dh):
  // q (n = num_heads), k and v (n = kv_heads) inside the fused q|k|v rows, or the attention output,
  // without copies.
  template <typename E>
  TensorView<E> heads(E* base, int64_t ld, int64_t n) const {
    const int64_t dh = cfg.d_head();
    TensorView<E> v;
    v.data = base;
    v.rank = 4;
    v.shape = {batch, n, seq, dh};
    v.stride = {seq * ld, dh, ld, 1};
    return v;
  }
  // The same rows as [batch * seq, n, d_head] (the varlen kernels' packed layout).
  template <typename E>
  TensorView<E> packed(E* base, int64_t ld, int64_t n) const {
    const int64_t dh = cfg.d_head();
    TensorView<E> v;
    v.data = base;
    v.rank = 3;
    v.shape = {batch * seq, n, dh};
    v.stride = {ld, dh, 1};
    return v;
  }
  // Tokens [t0, t0 + len) of the packed rows as one [1, n, len, d_head] sequence (the math path runs
  // a document at a time).
  template <typename E>
  TensorView<E> doc(E* base, int64_t ld, int64_t n, int64_t t0, int64_t len) const {
    const int64_t dh = cfg.d_head();
    TensorView<E> v;
    v.data = base + t0 * ld;
    v.rank = 4;
    v.shape = {1, n, len, dh};
    v.stride = {len * ld, dh, ld, 1};
    return v;
  }
  // Cuts the batch's rows into documents after every eot token.
  void cut_documents(const int32_t* tokens, int64_t B, int64_t T) {
    cu = document_offsets(tokens, B, T, eot);
    longest = 0;
    for (size_t x = 0; x + 1 < cu.size(); ++x) longest = std::max<int64_t>(longest, cu[x + 1] - cu[x]);
  }
};

template <typename S>
template <typename O>
void TransformerLM<S>::Impl::allocate(int64_t B, int64_t T) {
  if (B == batch && T == seq && !layer_acts.empty()) return;
  batch = B;
  seq = T;
  const rr::ModelShape m = shape(B, T);
  layer_acts.clear();
  layer_acts.resize(static_cast<size_t>(cfg.num_layers));
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const rr::Region r = cfg.moe_layer(l) ? rr::Region::moe_layer : rr::Region::layer;
    layer_acts[static_cast<size_t>(l)].allocate(r, m, sizeof(S), sizeof(O),
                                                fmt::format("{}.{}", rr::region_tag(r), l));
  }
  final_acts.allocate(rr::Region::final, m, sizeof(S), sizeof(O), rr::region_tag(rr::Region::final));
  work.allocate(rr::Region::workspace, m, sizeof(S), sizeof(O), rr::region_tag(rr::Region::workspace));
  layers::rope_tables<S>(T, cfg.d_head(), cfg.rope_theta, rope_cos, rope_sin);
  layers::rope_positions(B * T, T, rope_pos);
}

template <typename S>
template <typename O>
void TransformerLM<S>::Impl::cast_weights() {
  const layers::Round r = round();
  if constexpr (std::is_same_v<O, bf16>) {
    RIDGE_RANGE(ranges::cast_weights.text);
    if (w_bf16.size() != params.size()) w_bf16 = Buffer<bf16>(params.size(), "parameters/bf16 copy");
    layers::cast<bf16>(params.data(), w_bf16.data(), static_cast<int64_t>(params.size()), r);
  } else if constexpr (std::is_same_v<O, float> && std::is_same_v<S, float>) {
    if (precision == Precision::fp16) {
      RIDGE_RANGE(ranges::cast_weights.text);
      if (w_f16.size() != params.size()) w_f16 = Buffer<float>(params.size(), "parameters/fp16 copy");
      layers::cast<float>(params.data(), w_f16.data(), static_cast<int64_t>(params.size()), r);
    }
  }
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

// Causal attention of a layer: o from q|k|v, the log-sum-exp saved for the backward pass. With
// grouped-query attention k and v have kv_heads() heads, each read by num_heads / kv_heads() query
// heads (the kernels take the views as they are).
template <typename S>
template <typename O>
void TransformerLM<S>::Impl::attention_forward(const LayerActs<S, O>& s, const Work<S, O>& w) {
  const int64_t D = cfg.d_model, H = cfg.num_heads, KV = cfg.kv_heads();
  attention::Options opt;
  opt.causal = true;
  const auto q = heads(s.qkv, QKV, H), k = heads(s.qkv + D, QKV, KV), v = heads(s.qkv + D + Dkv, QKV, KV);
  const TensorView<S> lse = TensorView<S>::contiguous(s.lse, {batch, H, seq});
  if (eot >= 0) {
    // Document mask: lse as [H, batch * seq], the varlen layout, on both paths.
    const int64_t N = batch * seq;
    if constexpr (kFlashInstance<S, O>) {
      if (attention == AttentionPath::flash) {
        attention::flash_attention_varlen_forward<O>(
            packed(s.qkv, QKV, H), packed(s.qkv + D, QKV, KV), packed(s.qkv + D + Dkv, QKV, KV), cu, cu,
            longest, longest, packed(s.o, D, H), TensorView<float>::contiguous(s.lse, {H, N}), opt);
        return;
      }
    }
    for (size_t x = 0; x + 1 < cu.size(); ++x) {
      const int64_t t0 = cu[x], len = cu[x + 1] - cu[x];
      TensorView<S> l;
      l.data = s.lse + t0;
      l.rank = 3;
      l.shape = {1, H, len};
      l.stride = {H * N, N, 1};
      attention::attention_reference_forward<O, S>(
          doc(s.qkv, QKV, H, t0, len), doc(s.qkv + D, QKV, KV, t0, len),
          doc(s.qkv + D + Dkv, QKV, KV, t0, len), doc(w.dattn, D, H, t0, len), l, opt);
    }
    layers::cast<O>(w.dattn, s.o, batch * seq * D, round());
    return;
  }
  if constexpr (kFlashInstance<S, O>) {
    if (attention == AttentionPath::flash) {
      attention::flash_attention_forward<O>(q, k, v, heads(s.o, D, H), lse, opt);
      return;
    }
  }
  // The math path's output is in S: through the workspace, then rounded to the operand type.
  attention::attention_reference_forward<O, S>(q, k, v, heads(w.dattn, D, H), lse, opt);
  layers::cast<O>(w.dattn, s.o, batch * seq * D, round());
}

// Its backward: d(q|k|v) from d(o), RoPE's backward applied, rounded into `dqkv` for the qkv GEMMs.
// dk and dv come out of the kernels already summed over the query heads that share each kv head.
template <typename S>
template <typename O>
void TransformerLM<S>::Impl::attention_backward(const LayerActs<S, O>& s, const Work<S, O>& w, const O* dout,
                                                O* dqkv) {
  const int64_t N = batch * seq, D = cfg.d_model, H = cfg.num_heads, KV = cfg.kv_heads(), dh = cfg.d_head();
  attention::Options opt;
  opt.causal = true;
  const auto q = heads(s.qkv, QKV, H), k = heads(s.qkv + D, QKV, KV), v = heads(s.qkv + D + Dkv, QKV, KV);
  const auto dO = heads(const_cast<O*>(dout), D, H);
  if (eot >= 0) {
    O* d_o = const_cast<O*>(dout);
    if constexpr (kFlashInstance<S, O>) {
      if (attention == AttentionPath::flash) {
        attention::flash_attention_varlen_backward<O>(
            packed(s.qkv, QKV, H), packed(s.qkv + D, QKV, KV), packed(s.qkv + D + Dkv, QKV, KV),
            packed(s.o, D, H), packed(d_o, D, H), TensorView<float>::contiguous(s.lse, {H, N}), cu, cu,
            longest, longest, packed(w.dqkv, QKV, H), packed(w.dqkv + D, QKV, KV),
            packed(w.dqkv + D + Dkv, QKV, KV), opt);
        layers::rope_backward<S>(w.dqkv, dqkv, N, rope_pos.data(), D + Dkv, QKV, dh, rope_cos.data(),
                                 rope_sin.data(), round());
        return;
      }
    }
    for (size_t x = 0; x + 1 < cu.size(); ++x) {
      const int64_t t0 = cu[x], len = cu[x + 1] - cu[x];
      attention::attention_reference_backward<O, S>(
          doc(s.qkv, QKV, H, t0, len), doc(s.qkv + D, QKV, KV, t0, len),
          doc(s.qkv + D + Dkv, QKV, KV, t0, len), doc(d_o, D, H, t0, len), doc(w.dattn, QKV, H, t0, len),
          doc(w.dattn + D, QKV, KV, t0, len), doc(w.dattn + D + Dkv, QKV, KV, t0, len), opt);
    }
    layers::rope_backward<S>(w.dattn, dqkv, N, rope_pos.data(), D + Dkv, QKV, dh, rope_cos.data(),
                             rope_sin.data(), round());
    return;
  }
  if constexpr (kFlashInstance<S, O>) {
    if (attention == AttentionPath::flash) {
      const TensorView<float> lse = TensorView<float>::contiguous(s.lse, {batch, H, seq});
      attention::flash_attention_backward<O>(q, k, v, heads(s.o, D, H), dO, lse, heads(w.dqkv, QKV, H),
                                             heads(w.dqkv + D, QKV, KV), heads(w.dqkv + D + Dkv, QKV, KV),
                                             opt);
      layers::rope_backward<S>(w.dqkv, dqkv, N, rope_pos.data(), D + Dkv, QKV, dh, rope_cos.data(),
                               rope_sin.data(), round());
      return;
    }
  }
  attention::attention_reference_backward<O, S>(q, k, v, dO, heads(w.dattn, QKV, H),
                                                heads(w.dattn + D, QKV, KV),
                                                heads(w.dattn + D + Dkv, QKV, KV), opt);
  layers::rope_backward<S>(w.dattn, dqkv, N, rope_pos.data(), D + Dkv, QKV, dh, rope_cos.data(),
                           rope_sin.data(), round());
}

template <typename S>
template <typename O>
void TransformerLM<S>::Impl::forward_pass(const int32_t* tokens, int64_t B, int64_t T, bool with_loss,
                                          double& loss) {
  using namespace layers;
  using linear::mat;
  const int64_t N = B * T, D = cfg.d_model, F = cfg.d_ff, V = cfg.vocab_size, dh = cfg.d_head();
  const Round r = round();
  allocate<O>(B, T);
  cast_weights<O>();
  const O* W = weights<O>();
  const S* P = params.data();
  const Work<S, O> w(work);
  const FinalActs<S, O> f(final_acts);

  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    RIDGE_RANGE(ranges::layer.text);
    const LayerActs<S, O> s(layer_acts[static_cast<size_t>(l)]);
    const LayerTensors& t = layer_offsets[static_cast<size_t>(l)];
    // Later layers find their input already in s.x, written by the layer before.
    if (l == 0) in(ranges::embedding, [&] { embedding_forward(tokens, N, P + off_embedding, V, D, s.x); });
    in(ranges::attention_block, [&] {
      in(ranges::norm, [&] { rmsnorm_forward(s.x, P + t.ln1, N, D, S(cfg.rms_norm_eps), s.rstd1, s.h1, r); });
      // q|k|v = h1 [Wq; Wk; Wv]^T: the three weights are adjacent, one [D + 2 Dkv, D] matrix.
      in(ranges::gemm_qkv,
         [&] { linear::forward(mat(s.h1, N, D), mat(W + t.wq, QKV, D), mat(w.gemm, N, QKV)); });
      in(ranges::rope, [&] {
        rope_forward(w.gemm, s.qkv, N, rope_pos.data(), D + Dkv, QKV, dh, rope_cos.data(), rope_sin.data(),
                     r);
      });
      in(ranges::attention, [&] { attention_forward<O>(s, w); });
      // x_mid = x + o Wo^T: the residual add in the GEMM's epilogue.
      in(ranges::gemm_out,
         [&] { linear::forward(mat(s.o, N, D), mat(W + t.wo, D, D), mat(s.x_mid, N, D), s.x); });
    });
    in(ranges::ffn_block, [&] {
      in(ranges::norm,
         [&] { rmsnorm_forward(s.x_mid, P + t.ln2, N, D, S(cfg.rms_norm_eps), s.rstd2, s.h2, r); });
      // The next layer's input (or the final norm's) = x_mid + ffn(h2).
      S* next = l + 1 < cfg.num_layers ? get<S, O, Buf::x>(layer_acts[static_cast<size_t>(l + 1)]) : f.x;
      if (cfg.moe_layer(l)) {
        moe_forward<O>(l, s, w, next);
        return;
      }
      in(ranges::gemm_w1_w3,
         [&] { linear::forward(mat(s.h2, N, D), mat(W + t.w1, 2 * F, D), mat(w.gemm, N, 2 * F)); });
      in(ranges::swiglu, [&] { swiglu_forward(w.gemm, N, F, s.ab, s.g, r); });
      // next = x_mid + g W2^T, the residual add fused as above.
      in(ranges::gemm_w2,
         [&] { linear::forward(mat(s.g, N, F), mat(W + t.w2, D, F), mat(next, N, D), s.x_mid); });
    });
  }
  if (cfg.num_layers == 0) embedding_forward(tokens, N, P + off_embedding, V, D, f.x);
  in(ranges::final_norm,
     [&] { rmsnorm_forward(f.x, P + off_ln_final, N, D, S(cfg.rms_norm_eps), f.rstd, f.h, r); });
  in(ranges::gemm_lm_head,
     [&] { linear::forward(mat(f.h, N, D), mat(W + off_lm_head, V, D), mat(f.logits, N, V)); });
  if (with_loss)
    in(ranges::loss, [&] { loss = cross_entropy_forward(f.logits, targets.data(), N, V, f.lse); });
  // The MoE layers' auxiliary losses join the loss (their gradient joins in moe_backward).
  if (with_loss && cfg.is_moe())
    for (const MoeRoute& m : moe_route) loss += m.aux;
}

// An MoE layer's feed-forward: next = x_mid + sum_j g_j expert_{e_j}(h2) + shared(h2).
template <typename S>
template <typename O>
void TransformerLM<S>::Impl::moe_forward(int64_t l, const LayerActs<S, O>& s, const Work<S, O>& w, S* next) {
  const MoeLayer<O> layer = moe_layer<O>(l);
  const auto& [N, D, E, De, Sh, t, m, mr] = layer;
  const std::span<const S> logits(m.logits, static_cast<size_t>(N * E));
  in(ranges::gemm_router, [&] {
    linear::forward(linear::mat(router_input<O>(l, s, w), N, D), linear::mat(params.data() + t.router, E, D),
                    linear::mat(m.logits, N, E));
  });
  in(ranges::route, [&] {
    moe::route<S>(logits, N, E, cfg.top_k, cfg.router, router_bias(l), mr.routing);
    mr.aux = cfg.balance == moe::Balance::aux ? moe::aux_loss<S>(logits, mr.routing, cfg.aux_loss_coef) : 0.0;
    if (!exchange) mr.layout = moe::contiguous_layout(mr.routing, experts::row_alignment());
  });
  if (exchange) {
    moe_forward_remote<O>(l, layer, s, w, next);
    return;
  }
  const moe::ContiguousLayout& lay = mr.layout;
  in(ranges::permute, [&] { moe::permute_rows(s.h2, D, lay.row, mr.routing, D, m.x, D); });
  in(ranges::experts,
     [&] { experts_forward<O>(layer, m.x, mr.routing.count, lay, m.ab, m.g, w.moe_gemm, m.y); });
  if (Sh > 0) shared_forward<O>(layer, s, w, next);
  in(ranges::unpermute, [&] {
    if (Sh == 0) std::copy_n(s.x_mid, N * D, next);
    moe::combine_rows(m.y, D, lay.row, std::span<const S>(mr.routing.weight), mr.routing, D, next, D, true);
  });
}

// next = x_mid + shared(h2): the dense feed-forward of width S, the residual add fused.
template <typename S>
template <typename O>
void TransformerLM<S>::Impl::shared_forward(const MoeLayer<O>& L, const LayerActs<S, O>& s,
                                            const Work<S, O>& w, S* next) {
  using linear::mat;
  const auto& [N, D, E, De, Sh, t, m, mr] = L;
  const O* W = weights<O>();
  in(ranges::shared_experts, [&] {
    in(ranges::gemm_w1_w3,
       [&] { linear::forward(mat(s.h2, N, D), mat(W + t.sw1, 2 * Sh, D), mat(w.gemm, N, 2 * Sh)); });
    progress();
    in(ranges::swiglu, [&] { layers::swiglu_forward(w.gemm, N, Sh, m.shared_ab, m.shared_g, round()); });
    progress();
    in(ranges::gemm_w2,
       [&] { linear::forward(mat(m.shared_g, N, Sh), mat(W + t.sw2, D, Sh), mat(next, N, D), s.x_mid); });
    progress();
  });
}

// The routed experts over a contiguous layout's R rows: w1 x and w3 x side by side into gemm (the two
// stacks are not interleaved per expert: two GEMMs), SwiGLU into ab and g, then y = g W2^T.
template <typename S>
template <typename O>
void TransformerLM<S>::Impl::experts_forward(const MoeLayer<O>& L, const O* x, std::span<const int64_t> count,
                                             const moe::ContiguousLayout& lay, O* ab, O* g, S* gemm, S* y) {
  const int64_t D = L.D, De = L.De, R = lay.rows, El = static_cast<int64_t>(count.size());
  if (R == 0) return;  // an owner no worker sent a row to
  const O* W = weights<O>();
  in(ranges::gemm_experts_w1_w3, [&] {
    experts::forward(in_rows(x, R, D), stack(W + L.t.ew1, El, De, D), out_rows(gemm, R, De, 2 * De),
                     lay.m_indices);
    experts::forward(in_rows(x, R, D), stack(W + L.t.ew3, El, De, D), out_rows(gemm + De, R, De, 2 * De),
                     lay.m_indices);
  });
  in(ranges::swiglu, [&] {
    each_expert(count, lay, [&](int64_t r0, int64_t n) {
      layers::swiglu_forward(gemm + r0 * 2 * De, n, De, ab + r0 * 2 * De, g + r0 * De, round());
    });
  });
  in(ranges::gemm_experts_w2, [&] {
    experts::forward(in_rows(g, R, De), stack(W + L.t.ew2, El, D, De), out_rows(y, R, D, D), lay.m_indices);
  });
}

// Expert parallelism's forward of the routed experts. This worker's choices leave in expert order, so
// the rows for worker d are one run (its block of experts); the counts go first, so each owner knows
// what arrives and lays every source's rows of one expert together before its grouped GEMMs; the
// outputs go back in the order the rows came and are combined with the gate weights here. With shared
// experts the dispatch is in flight while they compute.
template <typename S>
template <typename O>
void TransformerLM<S>::Impl::moe_forward_remote(int64_t l, const MoeLayer<O>& L, const LayerActs<S, O>& s,
                                                const Work<S, O>& w, S* next) {
  const auto& [N, D, E, De, Sh, t, m, mr] = L;
  MoeRemote& x = moe_remote[static_cast<size_t>(l)];
  const int world = exchange->world();
  const int64_t El = E / world, K = cfg.top_k, NK = N * K;
  O* send = grown<O>(ep_send, NK * D, "communication/expert parallel");
  in(ranges::permute, [&] {
    x.send = moe::contiguous_layout(mr.routing, 1);
    moe::permute_rows(s.h2, D, x.send.row, mr.routing, D, send, D);
  });
  int ticket = -1;
  O* recv = nullptr;
  in(ranges::dispatch, [&] {
    x.recv_count.assign(static_cast<size_t>(world * El), 0);
    exchange->exchange_counts(mr.routing.count, x.recv_count);
    x.send_rows.assign(static_cast<size_t>(world), 0);
    x.recv_rows.assign(static_cast<size_t>(world), 0);
    for (int64_t e = 0; e < E; ++e)
      x.send_rows[static_cast<size_t>(e / El)] += mr.routing.count[static_cast<size_t>(e)];
    for (size_t i = 0; i < x.recv_count.size(); ++i)
      x.recv_rows[i / static_cast<size_t>(El)] += x.recv_count[i];
    x.owner = moe::received_layout(x.recv_count, world, El, experts::row_alignment());
    recv = grown<O>(ep_recv, static_cast<int64_t>(x.owner.layout.row.size()) * D,
                    "communication/expert parallel");
    ticket = exchange->start(send, x.send_rows, recv, x.recv_rows, D * static_cast<int64_t>(sizeof(O)));
    if (Sh == 0) exchange->wait(ticket);
  });
  if (Sh > 0) {
    shared_forward<O>(L, s, w, next);
    in(ranges::dispatch, [&] { exchange->wait(ticket); });
  }
  // The owner: every worker's rows of its experts, grouped; the outputs into the GEMM scratch.
  const moe::ContiguousLayout& own = x.owner.layout;
  const int64_t R = own.rows, Rr = static_cast<int64_t>(own.row.size());
  O* xo = grown<O>(x.x, R * D, "activations/expert parallel");
  O* ab = grown<O>(x.ab, R * 2 * De, "activations/expert parallel");
  O* g = grown<O>(x.g, R * De, "activations/expert parallel");
  S* gemm = grown<S>(ep_gemm, R * std::max(2 * De, 2 * D), "workspace/expert parallel");
  in(ranges::permute, [&] { moe::scatter_rows(recv, D, own.row, D, xo, D); });
  in(ranges::experts, [&] { experts_forward<O>(L, xo, x.owner.count, own, ab, g, gemm, gemm); });
  S* back = grown<S>(ep_send, Rr * D, "communication/expert parallel");
  in(ranges::unpermute, [&] { moe::gather_rows(gemm, D, own.row, D, back, D, false); });
  S* y = grown<S>(x.y, NK * D, "activations/expert parallel");
  in(ranges::combine, [&] {
    exchange->wait(exchange->start(back, x.recv_rows, y, x.send_rows, D * static_cast<int64_t>(sizeof(S))));
  });
  in(ranges::unpermute, [&] {
    if (Sh == 0) std::copy_n(s.x_mid, N * D, next);
    moe::combine_rows(y, D, x.send.row, std::span<const S>(mr.routing.weight), mr.routing, D, next, D, true);
  });
}

template <typename S>
template <typename O>
void TransformerLM<S>::Impl::backward_pass(S loss_scale, const Observer& observer) {
  using namespace layers;
  using linear::mat;
  const int64_t N = batch * seq, D = cfg.d_model, F = cfg.d_ff, V = cfg.vocab_size;
  const Round r = round();
  const O* W = weights<O>();
  const S* P = params.data();
  S* G = grads.data();
  const Work<S, O> w(work);
  const FinalActs<S, O> f(final_acts);
  int group = 0;
  auto done = [&](int g) {
    if (observer) observer(g);
  };

  // Gradients are rounded to the operand type for the GEMMs that read them; where that rounding is
  // needed, the producing pass writes the rounded copy itself (never a cast pass of its own).
  constexpr bool same_type = std::is_same_v<O, S>;
  const bool rounds = !same_type || r != Round::none;
  // The residual gradient as the operand type: the rounded copy the last norm backward left in
  // w.dop, or w.dx itself.
  auto dx_op = [&]() -> const O* {
    if constexpr (same_type) {
      if (!rounds) return w.dx;
    }
    return w.dop;
  };

  // Loss and lm_head: the logits' gradient, in place, or straight into the operand buffer.
  const O* dl = nullptr;
  in(ranges::loss_backward, [&] {
    if constexpr (same_type) {
      if (!rounds) {
        cross_entropy_backward(f.logits, targets.data(), f.lse, N, V, loss_scale);
        dl = f.logits;
        return;
      }
    }
    cross_entropy_backward(f.logits, targets.data(), f.lse, N, V, loss_scale, w.dop, r);
    dl = w.dop;
  });
  in(ranges::gemm_lm_head_backward, [&] {
    linear::weight_grad(mat(dl, N, V), mat(f.h, N, D), mat(G + off_lm_head, V, D));
    linear::input_grad(mat(dl, N, V), mat(W + off_lm_head, V, D), mat(w.dtmp, N, D));
  });
  done(group++);
  // dx rounded into w.dop for the first layer's w2 GEMMs (w.dop's lm_head gradient is consumed).
  in(ranges::final_norm_backward, [&] {
    rmsnorm_backward(w.dtmp, f.x, P + off_ln_final, f.rstd, N, D, w.dx, G + off_ln_final, false,
                     rounds && cfg.num_layers > 0 ? w.dop : nullptr, r);
  });
  done(group++);

  for (int64_t l = cfg.num_layers - 1; l >= 0; --l) {
    RIDGE_RANGE(ranges::layer_backward.text);
    const LayerActs<S, O> s(layer_acts[static_cast<size_t>(l)]);
    const LayerTensors& t = layer_offsets[static_cast<size_t>(l)];
    in(ranges::ffn_block_backward, [&] {
      const O* dy = dx_op();
      if (cfg.moe_layer(l)) {
        moe_backward<O>(l, s, w, dy, loss_scale);  // d h2 into w.dtmp, as below
      } else {
        in(ranges::gemm_w2_backward, [&] {
          linear::weight_grad(mat(dy, N, D), mat(s.g, N, F), mat(G + t.w2, D, F));
          linear::input_grad(mat(dy, N, D), mat(W + t.w2, D, F), mat(w.dtmp, N, F));
        });
        O* dab = w.dop;  // dy is consumed: its buffer takes d(a|b)
        in(ranges::swiglu_backward, [&] { swiglu_backward(w.dtmp, s.ab, N, F, dab, r); });
        in(ranges::gemm_w1_w3_backward, [&] {
          linear::weight_grad(mat(dab, N, 2 * F), mat(s.h2, N, D), mat(G + t.w1, 2 * F, D));
          linear::input_grad(mat(dab, N, 2 * F), mat(W + t.w1, 2 * F, D), mat(w.dtmp, N, D));
        });
      }
      in(ranges::norm_backward, [&] {
        rmsnorm_backward(w.dtmp, s.x_mid, P + t.ln2, s.rstd2, N, D, w.dx, G + t.ln2, true,
                         rounds ? w.dop : nullptr, r);
      });
    });
    in(ranges::attention_block_backward, [&] {
      const O* dy = dx_op();
      const O* dout = w.dout;  // the attention output's gradient, as the operand type
      in(ranges::gemm_out_backward, [&] {
        linear::weight_grad(mat(dy, N, D), mat(s.o, N, D), mat(G + t.wo, D, D));
        if constexpr (std::is_same_v<O, bf16>) {  // rounded to bf16 by the GEMM itself
          linear::input_grad(mat(dy, N, D), mat(W + t.wo, D, D), mat(w.dout, N, D));
        } else {
          linear::input_grad(mat(dy, N, D), mat(W + t.wo, D, D), mat(w.dtmp, N, D));
          if constexpr (same_type) {
            if (!rounds) {
              dout = w.dtmp;
              return;
            }
          }
          cast<O>(w.dtmp, w.dout, N * D, r);
        }
      });
      O* dqkv = w.dop;
      in(ranges::attention_backward, [&] { attention_backward<O>(s, w, dout, dqkv); });
      in(ranges::gemm_qkv_backward, [&] {
        linear::weight_grad(mat(dqkv, N, QKV), mat(s.h1, N, D), mat(G + t.wq, QKV, D));
        linear::input_grad(mat(dqkv, N, QKV), mat(W + t.wq, QKV, D), mat(w.dtmp, N, D));
      });
      // dx rounded into w.dop (its dq|dk|dv is consumed) for the next layer down; not after layer 0.
      in(ranges::norm_backward, [&] {
        rmsnorm_backward(w.dtmp, s.x, P + t.ln1, s.rstd1, N, D, w.dx, G + t.ln1, true,
                         rounds && l > 0 ? w.dop : nullptr, r);
      });
    });
    done(group++);
  }
  in(ranges::embedding_backward, [&] { embedding_backward(inputs.data(), N, w.dx, D, G + off_embedding); });
  done(group++);
}

// An MoE layer's feed-forward backward: from dy (the residual gradient, w.dx, and its operand copy),
// the gradients of the shared experts, the experts, the router (through the gate weights and the
// auxiliary loss), and d h2 into w.dtmp.
template <typename S>
template <typename O>
void TransformerLM<S>::Impl::moe_backward(int64_t l, const LayerActs<S, O>& s, const Work<S, O>& w,
                                          const O* dy, S loss_scale) {
  using namespace layers;
  const MoeLayer<O> layer = moe_layer<O>(l);
  const auto& [N, D, E, De, Sh, t, m, mr] = layer;
  dweight.resize(static_cast<size_t>(N * cfg.top_k));
  if (exchange) {
    moe_backward_remote<O>(layer, s, w, dy, l);
    router_backward<O>(l, layer, s, w, loss_scale);
    return;
  }
  const Round r = round();
  const moe::ContiguousLayout& lay = mr.layout;
  constexpr bool same_type = std::is_same_v<O, S>;
  const bool rounds = !same_type || r != Round::none;

  // The shared experts first, while w.dop still holds dy: the dense feed-forward's backward.
  if (Sh > 0) shared_backward<O>(layer, s, w, dy);
  // The combine's: each row's dy (g_j dy_t, from the unrounded residual gradient), rounded into w.moe_dop
  // for the experts' GEMMs, and each gate weight's gradient <dy_t, y_row>.
  in(ranges::unpermute_backward, [&] {
    S* dye = w.moe_gemm;
    if constexpr (same_type) {
      if (!rounds) dye = w.moe_dop;
    }
    moe::combine_rows_backward(w.dx, D, m.y, D, lay.row, mr.routing, D, dye, D, std::span<S>(dweight));
    if (rounds)
      each_expert(mr.routing.count, lay,
                  [&](int64_t r0, int64_t n) { cast<O>(dye + r0 * D, w.moe_dop + r0 * D, n * D, r); });
  });
  in(ranges::experts_backward,
     [&] { experts_backward<O>(layer, w.moe_dop, m.x, m.ab, m.g, mr.routing.count, lay, w.moe_gemm); });
  // d h2 (+)= the sum over each token's rows of both halves.
  in(ranges::permute_backward, [&] {
    moe::combine_rows(w.moe_gemm, 2 * D, lay.row, {}, mr.routing, D, w.dtmp, D, Sh > 0);
    moe::combine_rows(w.moe_gemm + D, 2 * D, lay.row, {}, mr.routing, D, w.dtmp, D, true);
  });
  router_backward<O>(l, layer, s, w, loss_scale);
}

// The shared experts' backward (the dense feed-forward's), d h2 into w.dtmp; reads dy (w.dop's rounded
// residual gradient) and consumes w.dop.
template <typename S>
template <typename O>
void TransformerLM<S>::Impl::shared_backward(const MoeLayer<O>& L, const LayerActs<S, O>& s,
                                             const Work<S, O>& w, const O* dy) {
  using linear::mat;
  const auto& [N, D, E, De, Sh, t, m, mr] = L;
  S* G = grads.data();
  const O* W = weights<O>();
  in(ranges::shared_experts_backward, [&] {
    in(ranges::gemm_w2_backward, [&] {
      linear::weight_grad(mat(dy, N, D), mat(m.shared_g, N, Sh), mat(G + t.sw2, D, Sh));
      linear::input_grad(mat(dy, N, D), mat(W + t.sw2, D, Sh), mat(w.dtmp, N, Sh));
    });
    progress();
    O* dab = w.dop;
    in(ranges::swiglu_backward, [&] { layers::swiglu_backward(w.dtmp, m.shared_ab, N, Sh, dab, round()); });
    progress();
    in(ranges::gemm_w1_w3_backward, [&] {
      linear::weight_grad(mat(dab, N, 2 * Sh), mat(s.h2, N, D), mat(G + t.sw1, 2 * Sh, D));
      linear::input_grad(mat(dab, N, 2 * Sh), mat(W + t.sw1, 2 * Sh, D), mat(w.dtmp, N, D));
    });
    progress();
  });
}

// The routed experts' backward over a contiguous layout: dW2 += dy^T g (K-grouped), dg = dy W2, SwiGLU's
// backward into dop as d(a|b), dW1, dW3 += d(a|b)^T x, and dx through w1 and w3 side by side into gemm
// [R, 2D] (summed by the caller: the grouped GEMMs do not accumulate).
template <typename S>
template <typename O>
void TransformerLM<S>::Impl::experts_backward(const MoeLayer<O>& L, O* dop, const O* x, const O* ab,
                                              const O* g, std::span<const int64_t> count,
                                              const moe::ContiguousLayout& lay, S* gemm) {
  const int64_t D = L.D, De = L.De, R = lay.rows, El = static_cast<int64_t>(count.size());
  if (R == 0) return;
  S* G = grads.data();
  const O* W = weights<O>();
  const MoeTensors& t = L.t;
  in(ranges::gemm_experts_w2_backward, [&] {
    experts::weight_grad(in_rows(dop, R, D), in_rows(g, R, De), stack(G + t.ew2, El, D, De), lay.m_indices);
    experts::input_grad(in_rows(dop, R, D), stack(W + t.ew2, El, D, De), out_rows(gemm, R, De, De),
                        lay.m_indices);
  });
  // d(a|b) into dop (the rows' dy is consumed).
  in(ranges::swiglu_backward, [&] {
    each_expert(count, lay, [&](int64_t r0, int64_t n) {
      layers::swiglu_backward(gemm + r0 * De, ab + r0 * 2 * De, n, De, dop + r0 * 2 * De, round());
    });
  });
  in(ranges::gemm_experts_w1_w3_backward, [&] {
    for (const int64_t half : {int64_t{0}, int64_t{1}}) {
      const auto dab = in_rows(dop + half * De, R, De, 2 * De);
      const int64_t w13 = half ? t.ew3 : t.ew1;
      experts::weight_grad(dab, in_rows(x, R, D), stack(G + w13, El, De, D), lay.m_indices);
      experts::input_grad(dab, stack(W + w13, El, De, D), out_rows(gemm + half * D, R, D, 2 * D),
                          lay.m_indices);
    }
  });
}

// The router's logits: through the gate weights, and the auxiliary loss (scaled as the loss is); then in
// fp32, as the forward: dW_router += dlogits^T h2, d h2 += dlogits W_router.
template <typename S>
template <typename O>
void TransformerLM<S>::Impl::router_backward(int64_t l, const MoeLayer<O>& L, const LayerActs<S, O>& s,
                                             const Work<S, O>& w, S loss_scale) {
  using linear::mat;
  const auto& [N, D, E, De, Sh, t, m, mr] = L;
  const std::span<const S> logits(m.logits, static_cast<size_t>(N * E));
  in(ranges::route_backward, [&] {
    const std::span<S> dl(w.router_dlogits, static_cast<size_t>(N * E));
    moe::gate_backward<S>(logits, mr.routing, dweight, dl);
    if (cfg.balance == moe::Balance::aux && cfg.aux_loss_coef > 0)
      moe::aux_loss_backward<S>(logits, mr.routing, cfg.aux_loss_coef, static_cast<double>(loss_scale), dl);
  });
  in(ranges::gemm_router_backward, [&] {
    linear::weight_grad(mat(w.router_dlogits, N, E), mat(router_input<O>(l, s, w), N, D),
                        mat(grads.data() + t.router, E, D));
    linear::nn(w.router_dlogits, params.data() + t.router, w.dtmp, N, D, E, E, D, D, true);
  });
}

// Expert parallelism's backward of the routed experts: the combine's gradient here (each choice's dy and
// its gate weight's gradient), the choices' dy to the owners (in flight while the shared experts' backward
// runs), the owner's expert backward over every worker's rows (each expert's weight gradient whole
// there), each row's dx (both halves summed) back to its worker, and d h2 (+)= the sum over each token's
// rows, into w.dtmp.
template <typename S>
template <typename O>
void TransformerLM<S>::Impl::moe_backward_remote(const MoeLayer<O>& L, const LayerActs<S, O>& s,
                                                 const Work<S, O>& w, const O* dy, int64_t l) {
  const auto& [N, D, E, De, Sh, t, m, mr] = L;
  MoeRemote& x = moe_remote[static_cast<size_t>(l)];
  const layers::Round r = round();
  const bool rounds = !std::is_same_v<O, S> || r != layers::Round::none;
  const int64_t NK = N * cfg.top_k;
  const moe::ContiguousLayout& own = x.owner.layout;
  const int64_t R = own.rows, Rr = static_cast<int64_t>(own.row.size());
  O* send = grown<O>(ep_send, NK * D, "communication/expert parallel");
  in(ranges::unpermute_backward, [&] {
    S* dye = rounds ? grown<S>(ep_local, NK * D, "workspace/expert parallel") : reinterpret_cast<S*>(send);
    const S* y = reinterpret_cast<const S*>(x.y.data());
    moe::combine_rows_backward(w.dx, D, y, D, x.send.row, mr.routing, D, dye, D, std::span<S>(dweight));
    if (rounds) layers::cast<O>(dye, send, NK * D, r);
  });
  O* recv = grown<O>(ep_recv, Rr * D, "communication/expert parallel");
  int ticket = -1;
  in(ranges::dispatch_backward, [&] {
    ticket = exchange->start(send, x.send_rows, recv, x.recv_rows, D * static_cast<int64_t>(sizeof(O)));
    if (Sh == 0) exchange->wait(ticket);
  });
  if (Sh > 0) {
    shared_backward<O>(L, s, w, dy);
    in(ranges::dispatch_backward, [&] { exchange->wait(ticket); });
  }
  O* dop = grown<O>(ep_dop, R * std::max(2 * De, D), "workspace/expert parallel");
  S* gemm = grown<S>(ep_gemm, R * std::max(2 * De, 2 * D), "workspace/expert parallel");
  in(ranges::unpermute_backward, [&] { moe::scatter_rows(recv, D, own.row, D, dop, D); });
  in(ranges::experts_backward, [&] {
    experts_backward<O>(L, dop, reinterpret_cast<const O*>(x.x.data()),
                        reinterpret_cast<const O*>(x.ab.data()), reinterpret_cast<const O*>(x.g.data()),
                        x.owner.count, own, gemm);
  });
  S* back = grown<S>(ep_send, Rr * D, "communication/expert parallel");
  in(ranges::permute_backward, [&] {
    moe::gather_rows(gemm, 2 * D, own.row, D, back, D, false);
    moe::gather_rows(gemm + D, 2 * D, own.row, D, back, D, true);
  });
  S* dx = grown<S>(ep_recv, NK * D, "communication/expert parallel");
  in(ranges::combine_backward, [&] {
    exchange->wait(exchange->start(back, x.recv_rows, dx, x.send_rows, D * static_cast<int64_t>(sizeof(S))));
  });
  in(ranges::permute_backward,
     [&] { moe::combine_rows(dx, D, x.send.row, {}, mr.routing, D, w.dtmp, D, Sh > 0); });
}

// ---- The public class ----

std::vector<int64_t> TensorInfo::whole_shape() const {
  std::vector<int64_t> s = shape;
  if (expert_stack()) s[0] = experts;
  return s;
}

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
TransformerLM<S>::TransformerLM(const ModelConfig& config, Precision precision, AttentionPath attention,
                                ExpertShard experts)
    : impl_(std::make_unique<Impl>()) {
  config.validate();
  check_arg(experts.world >= 1 && experts.rank >= 0 && experts.rank < experts.world, "experts",
            "worker {} of {} is not a worker of an expert shard", experts.rank, experts.world);
  check_arg(experts.whole() || config.is_moe(), "experts",
            "a shard of {} workers needs an MoE model (this one is dense)", experts.world);
  check_arg(experts.whole() || config.num_experts % experts.world == 0, "experts",
            "{} workers do not share out {} experts evenly (the experts must be a multiple of the workers)",
            experts.world, config.num_experts);
  impl_->cfg = config;
  impl_->shard = experts;
  set_precision(precision);
  set_attention_path(attention);
  impl_->layout();
  const auto n = static_cast<size_t>(impl_->tensors.back().offset + impl_->tensors.back().numel);
  impl_->params = Buffer<S>(n, "parameters");
  impl_->grads = Buffer<S>(n, "gradients");
  std::fill(impl_->params.begin(), impl_->params.end(), S(0));
  std::fill(impl_->grads.begin(), impl_->grads.end(), S(0));
  if (!impl_->state_tensors.empty()) {
    const TensorInfo& last = impl_->state_tensors.back();
    impl_->state = Buffer<S>(static_cast<size_t>(last.offset + last.numel), "parameters/state");
    std::fill(impl_->state.begin(), impl_->state.end(), S(0));
  }
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
const ExpertShard& TransformerLM<S>::expert_shard() const {
  return impl_->shard;
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
std::vector<typename TransformerLM<S>::MoeLayerStats> TransformerLM<S>::moe_stats() const {
  std::vector<MoeLayerStats> out;
  const ModelConfig& c = impl_->cfg;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.moe_layer(l)) continue;
    const auto& mr = impl_->moe_route[static_cast<size_t>(l)];
    MoeLayerStats st;
    st.layer = l;
    st.count = mr.routing.count;
    st.count.resize(static_cast<size_t>(c.num_experts), 0);
    st.load_imbalance = moe::load_imbalance(st.count, mr.routing.tokens, c.top_k);
    st.aux_loss = mr.aux;
    out.push_back(std::move(st));
  }
  return out;
}

// The router biases, as their tensors name them.
template <typename S>
const std::vector<TensorInfo>& TransformerLM<S>::state_tensors() const {
  return impl_->state_tensors;
}

template <typename S>
double TransformerLM<S>::aux_loss() const {
  double a = 0;
  if (impl_->cfg.is_moe() && !impl_->logits_only)
    for (const auto& mr : impl_->moe_route) a += mr.aux;
  return a;
}

template <typename S>
std::span<S> TransformerLM<S>::state() {
  return impl_->state.span();
}
template <typename S>
std::span<const S> TransformerLM<S>::state() const {
  return impl_->state.span();
}

template <typename S>
void TransformerLM<S>::update_router_bias(std::span<const int64_t> counts, int64_t tokens) {
  const ModelConfig& c = impl_->cfg;
  const int64_t E = c.num_experts, layers = c.num_moe_layers();
  check_arg(static_cast<int64_t>(counts.size()) == layers * E, "counts",
            "{} values for {} MoE layers x {} experts", counts.size(), layers, E);
  check_arg(tokens >= 0, "tokens", "{} is negative", tokens);
  if (c.balance != moe::Balance::bias || c.bias_update_speed == 0) return;
  int64_t at = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.moe_layer(l)) continue;
    const int64_t b = impl_->moe_offsets[static_cast<size_t>(l)].bias;
    moe::update_bias<S>(counts.subspan(static_cast<size_t>(at * E), static_cast<size_t>(E)), tokens, c.top_k,
                        c.bias_update_speed, std::span<S>(impl_->state.data() + b, static_cast<size_t>(E)));
    ++at;
  }
}

template <typename S>
void TransformerLM<S>::set_expert_exchange(ExpertExchange* exchange) {
  const ModelConfig& c = impl_->cfg;
  if (exchange) {
    check_arg(c.is_moe(), "exchange", "expert parallelism needs an MoE model (this one is dense)");
    const int w = exchange->world();
    check_arg(w >= 1 && exchange->rank() >= 0 && exchange->rank() < w, "exchange",
              "worker {} of {} is not a worker of the exchange", exchange->rank(), w);
    check_arg(c.num_experts % w == 0, "exchange",
              "{} experts do not share out evenly over {} workers (the experts must be a multiple of the "
              "workers)",
              c.num_experts, w);
    const ExpertShard& h = impl_->shard;
    check_arg(
        h.world == w && h.rank == exchange->rank(), "exchange",
        "this model holds the experts of worker {} of {}, but the exchange is worker {} of {} (build the "
        "model for ExpertShard{{{}, {}}})",
        h.rank, h.world, exchange->rank(), w, exchange->rank(), w);
  }
  impl_->exchange = exchange;
  impl_->forward_done = false;
}
template <typename S>
ExpertExchange* TransformerLM<S>::expert_exchange() const {
  return impl_->exchange;
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
                          "attn.output_proj.weight", "ln1.weight"})
      order.push_back(&tensor(p + n));
    if (impl_->cfg.moe_layer(l)) {
      for (const char* n :
           {"ffn.router.weight", "ffn.experts.w1.weight", "ffn.experts.w2.weight", "ffn.experts.w3.weight"})
        order.push_back(&tensor(p + n));
      if (impl_->cfg.num_shared_experts > 0)
        for (const char* n : {"ffn.shared.w1.weight", "ffn.shared.w2.weight", "ffn.shared.w3.weight"})
          order.push_back(&tensor(p + n));
    } else {
      for (const char* n : {"ffn.w1.weight", "ffn.w2.weight", "ffn.w3.weight"})
        order.push_back(&tensor(p + n));
    }
    order.push_back(&tensor(p + "ln2.weight"));
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
    // A linear's [out, in], or each expert's of a stack [E, out, in].
    const bool embedding = t->name == "token_embeddings.weight";
    const size_t d = t->shape.size();
    const double std =
        embedding ? 1.0 : std::sqrt(2.0 / static_cast<double>(t->shape[d - 2] + t->shape[d - 1]));
    // A partial stack draws every expert's values in order and keeps its own block's.
    const int64_t skip = t->whole_begin(), after = t->whole_numel() - skip - t->numel;
    for (int64_t i = 0; i < skip; ++i) rng.truncated_normal(std);
    for (int64_t i = 0; i < t->numel; ++i) p[i] = static_cast<S>(rng.truncated_normal(std));
    for (int64_t i = 0; i < after; ++i) rng.truncated_normal(std);
  }
  std::fill(impl_->state.begin(), impl_->state.end(), S(0));
  impl_->forward_done = false;
}

template <typename S>
S TransformerLM<S>::forward(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq) {
  const ModelConfig& c = impl_->cfg;
  check(inputs != nullptr, "inputs: no data");
  check(batch >= 1, "batch: must be >= 1, got {}", batch);
  check(seq >= 1 && seq <= c.context_length, "seq: must be in 1..{} (the context length), got {}",
        c.context_length, seq);
  check_arg(impl_->shard.whole() || impl_->exchange, "exchange",
            "this model holds the experts of worker {} of {} only; set its expert exchange before a forward",
            impl_->shard.rank, impl_->shard.world);
  const int64_t n = batch * seq;
  impl_->inputs.assign(inputs, inputs + n);
  if (impl_->eot >= 0) impl_->cut_documents(inputs, batch, seq);
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
void TransformerLM<S>::set_document_mask(int32_t eot_id) {
  check(eot_id >= -1 && eot_id < impl_->cfg.vocab_size,
        "eot_id: {} is not a token of the vocabulary (0..{}), nor -1 (no document mask)", eot_id,
        impl_->cfg.vocab_size - 1);
  impl_->eot = eot_id;
  impl_->forward_done = false;
}
template <typename S>
int32_t TransformerLM<S>::document_mask() const {
  return impl_->eot;
}

template <typename S>
std::span<const S> TransformerLM<S>::logits() const {
  check(!impl_->layer_acts.empty() || impl_->cfg.num_layers == 0, "logits: no forward pass has run");
  const int64_t N = impl_->batch * impl_->seq, V = impl_->cfg.vocab_size;
  return {impl_->final_acts.template at<S>(Buf::logits), static_cast<size_t>(N * V)};
}

template <typename S>
void TransformerLM<S>::backward(S loss_scale, const Observer& observer) {
  check(impl_->forward_done, "backward: needs a forward pass first (each forward allows one backward)");
  check(!impl_->logits_only,
        "backward: the forward pass ran without targets, so there is no loss to differentiate");
  check(std::isfinite(static_cast<double>(loss_scale)) && loss_scale > 0,
        "loss_scale: must be finite and > 0, got {}", static_cast<double>(loss_scale));
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
  for (const auto& x : impl_->moe_remote)
    b += static_cast<int64_t>(x.x.size() + x.ab.size() + x.g.size() + x.y.size());
  return b;
}
template <typename S>
int64_t TransformerLM<S>::workspace_bytes() const {
  const Impl& m = *impl_;
  return static_cast<int64_t>(m.work.bytes.size() + m.ep_send.size() + m.ep_recv.size() + m.ep_gemm.size() +
                              m.ep_dop.size() + m.ep_local.size());
}

template class TransformerLM<float>;
template class TransformerLM<double>;

// The one FLOP count every MFU uses: the roofline's ops of the step, GEMMs and attention summed, the
// attention ops scaled by the share of the causal scores the batch attends to.
namespace {
double step_flops(const ModelConfig& c, int64_t batch, int64_t seq, double attention_share, bool backward) {
  check(attention_share >= 0.0 && attention_share <= 1.0, "attention_share: {} (accepted: 0 .. 1)",
        attention_share);
  auto m = model_shape(c, batch, seq, Precision::fp32, AttentionPath::flash);
  m.flash = true;                // model FLOPs do not depend on the implementation
  long double fwd = 0, bwd = 0;  // summed per pass, as roofline::model_matmul_flops does
  for (const auto& op : roofline::model_step_ops(m)) {
    if (op.pass != "forward" && op.pass != "backward") continue;
    const long double f = op.cost.flops * static_cast<long double>(op.count);
    const long double add = op.kind == "gemm" ? f : op.kind == "attention" ? f * attention_share : 0;
    (op.pass == "forward" ? fwd : bwd) += add;
  }
  return backward ? static_cast<double>(fwd) + static_cast<double>(bwd) : static_cast<double>(fwd);
}
}  // namespace

double forward_flops(const ModelConfig& c, int64_t batch, int64_t seq, double attention_share) {
  return step_flops(c, batch, seq, attention_share, false);
}
double training_flops(const ModelConfig& c, int64_t batch, int64_t seq, double attention_share) {
  return step_flops(c, batch, seq, attention_share, true);
}

double document_attention_share(const int32_t* tokens, int64_t batch, int64_t seq, int32_t eot) {
  if (eot < 0 || batch <= 0 || seq <= 0) return 1.0;
  auto tri = [](int64_t n) { return static_cast<double>(n) * static_cast<double>(n + 1) / 2.0; };
  const std::vector<int32_t> cu = document_offsets(tokens, batch, seq, eot);
  double visible = 0;
  for (size_t x = 0; x + 1 < cu.size(); ++x) visible += tri(cu[x + 1] - cu[x]);
  return visible / (static_cast<double>(batch) * tri(seq));
}

}  // namespace ridge::model
