// The CS336 Transformer LM's buffers, described once: every parameter tensor and every activation and
// workspace buffer a training step holds (name, shape, element type, region, which pass writes and
// reads it). The model (ridge/model/model.hpp) allocates and carves its memory from this description;
// its memory tags are the regions named here; `ridge train`'s memory check, `ridge bench model`'s
// analytic memory and the step's roofline (model_step_ops) read their sizes from it. Pure arithmetic
// on a ModelShape, so it answers for sizes that do not fit on the machine at hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "ridge/roofline.hpp"

namespace ridge::roofline {

// ---- Parameters, in the flat buffers' order: the order their gradients become final in the backward
// pass (lm_head, ln_final, layer L-1 .. layer 0, token_embeddings). Group g's gradients are final
// together; w1|w3 and q|k|v are adjacent, so one GEMM serves each pair or triple.
//
// Grouped-query attention (kv_heads() below num_heads): k_proj and v_proj have Dkv = kv_heads * d_head
// rows, not D, so the fused q|k|v weight is [D + 2 Dkv, D] and every q|k|v buffer below is
// [N, D + 2 Dkv]: q's H heads, then k's KV heads, then v's, each d_head wide. Without it Dkv = D and
// the width is 3D.
struct ParamSpec {
  std::string name;            // as PyTorch's state_dict names it, e.g. "layers.0.attn.q_proj.weight"
  std::vector<int64_t> shape;  // [out, in] for linear weights
  int group = 0;
};
std::vector<ParamSpec> model_parameters(const ModelArch& m);
// Whether a parameter is an MoE layer's stack of routed experts ("layers.L.ffn.experts.w1.weight", w2, w3:
// [E, rows, cols]), by its name: the tensors expert parallelism shards over the ranks.
inline bool is_expert_stack(const std::string& name) {
  return name.find(".ffn.experts.") != std::string::npos;
}
// Dkv: the width of k (and of v) in a q|k|v row, kv heads * d_head; D when kv heads = heads. ridge::Error
// for num_kv_heads < 0, or (grouped-query) heads not a multiple of kv heads or d_model of heads.
int64_t kv_width(const ModelArch& m);
// The q|k|v row: D + 2 Dkv.
int64_t qkv_width(const ModelArch& m);
// The sum of the tensors' sizes: the parameter count. The try_ form gives nullopt where it overflows
// int64; the other throws ridge::Error naming the shape's sizes.
std::optional<int64_t> try_model_parameter_elements(const ModelArch& m);
int64_t model_parameter_elements(const ModelArch& m);

// The same tensors by what generation does with them, in elements over all layers: the layers' linears
// (q, k, v, o, and the dense feed-forward's w1, w2, w3 or an MoE layer's shared experts), the norms'
// weights (ln1, ln2, ln_final), lm_head, the embedding table, and in MoE layers the routers and the routed
// experts (all E of them: a token reads top_k / E of `experts`); and the fp32 scales the linears and the
// experts carry when stored as fp8_e4m3, each matrix quantized on its own (weight_scale_blocks of each).
// The six element counts sum to model_param_count; the decode roofline's weight bytes and
// model::inference_memory read them.
//
// An MoE layer's tensors (issue 40): ffn.router.weight [E, D], ffn.experts.w1.weight and .w3.weight
// [E, d_expert, D], ffn.experts.w2.weight [E, D, d_expert], and with shared experts ffn.shared.w1 and
// .w3 [S, D], .w2 [D, S] (S = num_shared_experts * d_expert), in place of ffn.w1/w2/w3.
struct ParamGroups {
  long double linears = 0, norms = 0, head = 0, embedding = 0, router = 0, experts = 0;
  long double linear_scale_blocks = 0, expert_scale_blocks = 0;
};
ParamGroups model_param_groups(const ModelArch& m);

// A weight [rows, cols] stored as `dtype`: the fp32 scales fp8_e4m3 carries (one per 128x128 block,
// DeepGEMM's weight scaling: ceil(rows / 128) * ceil(cols / 128)), and the bytes of the weight with
// them. The decode roofline and the inference model's linears both count weights with these.
long double weight_scale_blocks(long double rows, long double cols);
long double weight_bytes(long double rows, long double cols, DType dtype);

// ---- Activations and workspace of one step.
// Where a buffer lives, which is also its memory tag: each layer's saved activations in a block of
// their own ("activations/layers.<l>"), those after the last layer ("activations/final"), and one
// workspace every layer's forward and backward reuse ("workspace"). An MoE layer's block (moe_layer,
// tagged as any layer's) holds the buffers of `layer` up to h2 (the attention block's and ln2's) and
// then its own, in place of the dense feed-forward's ab and g.
enum class Region { layer, final, workspace, moe_layer };
const char* region_tag(Region r);  // "activations/layers", "activations/final", "workspace"

// Element type: the state type (fp32 master weights and gradients, the residual stream, norms'
// statistics, logits; fp64 in the gradient checks' reference model) or the operand type (what the
// GEMMs and attention read: fp32, bf16, or fp16-rounded values stored as fp32 on a CPU).
enum class Elem { state, operand };

enum class Buf : int {
  // Saved by each layer's forward for its backward.
  x,
  x_mid,
  rstd1,
  rstd2,
  lse,
  h1,
  qkv,
  o,
  h2,
  ab,
  g,
  // Saved by an MoE layer's forward for its backward (in place of ab and g).
  router_logits,
  moe_x,
  moe_ab,
  moe_g,
  moe_y,
  shared_ab,
  shared_g,
  // After the last layer.
  final_x,
  final_rstd,
  logits,
  final_lse,
  final_h,
  // Workspace.
  gemm,
  dx,
  dtmp,
  dattn,
  dop,
  dqkv,
  dout,
  moe_gemm,
  moe_dop,
  router_dlogits,
  count
};

struct BufferSpec {
  Buf id;
  const char* name;
  Region region;
  Elem elem;
  const char* role;  // what it holds, which pass writes it, which reads it
};

// In Buf order; a region's buffers are carved in this order, each aligned to kBufferAlignment bytes.
inline constexpr BufferSpec kModelBuffers[] = {
    {Buf::x, "x", Region::layer, Elem::state,
     "[N,D] the layer's input (residual stream); read by ln1 backward"},
    {Buf::x_mid, "x_mid", Region::layer, Elem::state, "[N,D] x + attention output; read by ln2 backward"},
    {Buf::rstd1, "rstd1", Region::layer, Elem::state, "[N] ln1's 1/rms, for its backward"},
    {Buf::rstd2, "rstd2", Region::layer, Elem::state, "[N] ln2's 1/rms, for its backward"},
    {Buf::lse, "lse", Region::layer, Elem::state, "[B,H,T] attention's log-sum-exp, for its backward"},
    {Buf::h1, "h1", Region::layer, Elem::operand, "[N,D] ln1(x): the qkv GEMM's input and dW operand"},
    {Buf::qkv, "qkv", Region::layer, Elem::operand, "[N,D+2Dkv] q|k|v after RoPE: attention's inputs"},
    {Buf::o, "o", Region::layer, Elem::operand,
     "[N,D] attention output: the out GEMM's input and dW operand"},
    {Buf::h2, "h2", Region::layer, Elem::operand, "[N,D] ln2(x_mid): the w1|w3 GEMM's input and dW operand"},
    {Buf::ab, "ab", Region::layer, Elem::operand, "[N,2F] w1 x | w3 x: SwiGLU's inputs, for its backward"},
    {Buf::g, "g", Region::layer, Elem::operand, "[N,F] silu(a) * b: the w2 GEMM's input and dW operand"},
    {Buf::router_logits, "router_logits", Region::moe_layer, Elem::state,
     "[N,E] h2 W_router^T in fp32: the routing's input, read by its backward (the only [tokens x experts] "
     "buffer)"},
    {Buf::moe_x, "moe_x", Region::moe_layer, Elem::operand,
     "[R,D] h2's rows in the experts' contiguous layout: the w1, w3 GEMMs' input and dW operand"},
    {Buf::moe_ab, "moe_ab", Region::moe_layer, Elem::operand,
     "[R,2De] w1 x | w3 x of each row's expert: SwiGLU's inputs, for its backward"},
    {Buf::moe_g, "moe_g", Region::moe_layer, Elem::operand,
     "[R,De] silu(a) * b: the experts' w2 GEMM's input and dW operand"},
    {Buf::moe_y, "moe_y", Region::moe_layer, Elem::state,
     "[R,D] each row's expert output before the gate weights: the weights' gradient reads it"},
    {Buf::shared_ab, "shared_ab", Region::moe_layer, Elem::operand,
     "[N,2S] the shared experts' w1 x | w3 x, for their SwiGLU's backward"},
    {Buf::shared_g, "shared_g", Region::moe_layer, Elem::operand,
     "[N,S] the shared experts' silu(a) * b: their w2 GEMM's input and dW operand"},
    {Buf::final_x, "x", Region::final, Elem::state, "[N,D] the last layer's output"},
    {Buf::final_rstd, "rstd", Region::final, Elem::state, "[N] the final norm's 1/rms"},
    {Buf::logits, "logits", Region::final, Elem::state,
     "[N,V] logits; the loss's backward turns them into dlogits"},
    {Buf::final_lse, "lse", Region::final, Elem::state, "[N] the loss's log-sum-exp"},
    {Buf::final_h, "h", Region::final, Elem::operand, "[N,D] ln_final(x): lm_head's input and dW operand"},
    {Buf::gemm, "gemm", Region::workspace, Elem::state,
     "[N,max(D+2Dkv,2F,D,2S)] a forward GEMM's output before the elementwise layer that consumes it; in "
     "an MoE layer first the router's fp32 input"},
    {Buf::dx, "dx", Region::workspace, Elem::state, "[N,D] the residual stream's gradient"},
    {Buf::dtmp, "dtmp", Region::workspace, Elem::state, "[N,max(F,D,S)] an input-gradient GEMM's output"},
    {Buf::dattn, "dattn", Region::workspace, Elem::state,
     "[N,D+2Dkv] dq|dk|dv from the math path, or its forward output o"},
    {Buf::dop, "dop", Region::workspace, Elem::operand,
     "[N,max(V,D+2Dkv,2F,D,2S)] a gradient rounded to the operand type for the GEMMs that read it"},
    {Buf::dqkv, "dqkv", Region::workspace, Elem::operand,
     "[N,D+2Dkv] dq|dk|dv from FlashAttention (dk, dv summed over each kv head's query heads)"},
    {Buf::dout, "dout", Region::workspace, Elem::operand, "[N,D] the attention output's gradient"},
    {Buf::moe_gemm, "moe_gemm", Region::workspace, Elem::state,
     "[R,max(2De,2D)] an experts' GEMM output: w1|w3 x, then in backward dy per row, dg, and dx from w1 "
     "and w3 side by side"},
    {Buf::moe_dop, "moe_dop", Region::workspace, Elem::operand,
     "[R,max(2De,D)] an experts' gradient rounded to the operand type: dy per row, then d(a|b)"},
    {Buf::router_dlogits, "router_dlogits", Region::workspace, Elem::state,
     "[N,E] the router logits' gradient (gate weights and auxiliary loss)"},
};
static_assert(std::size(kModelBuffers) == static_cast<size_t>(Buf::count));
constexpr const BufferSpec& spec(Buf b) {
  return kModelBuffers[static_cast<int>(b)];
}

inline constexpr size_t kBufferAlignment = 64;

// The experts' grouped GEMMs run over DeepGEMM's contiguous layout, each expert's rows padded to a
// multiple of this (gemm::m_alignment_for_contiguous_layout(); a test holds the two equal).
inline constexpr int64_t kExpertRowAlignment = 64;
// R, the rows of an MoE layer's contiguous layout at most: the N * top_k choices plus the padding of
// each expert that has a token, N * k + min(E, N * k) * (kExpertRowAlignment - 1). 0 for a dense model.
int64_t expert_rows(const ModelShape& m);

// The buffer's shape for batch x seq tokens (N = batch * seq). MoE: E experts of width De, S =
// num_shared_experts x De, R = expert_rows(); the workspace's F is 0 when every layer is MoE. An MoE
// buffer of a dense model, and the shared experts' of a model without them, have no elements (and no
// place in their region).
std::vector<int64_t> buffer_shape(Buf b, const ModelShape& m);
int64_t buffer_elements(Buf b, const ModelShape& m);

// Byte offsets of a region's buffers (indexed by Buf; buffers of other regions are left 0) and the
// region's size, with state and operand elements of the given sizes.
struct RegionLayout {
  size_t offset[static_cast<int>(Buf::count)] = {};
  size_t bytes = 0;
};
RegionLayout region_layout(Region r, const ModelShape& m, size_t state_bytes, size_t operand_bytes);

// What a training step holds, in bytes, with fp32 state and operands stored as m.storage (unset: the
// operand dtype): parameters, gradients, AdamW's two moments, the operand copy of the weights (none
// for fp32), each layer's saved activations (per_layer for each dense layer, per_moe_layer for each of
// the moe_layers MoE layers), those after the last layer, and the workspace. An MoE model adds its
// routing (each MoE layer's choices, gate weights, counts and layout, at most R rows; the backward's
// gate-weight gradients) and the router biases (balance bias).
struct ModelMemory {
  double parameters = 0, gradients = 0, optimizer_state = 0, operand_copy = 0;
  double per_layer = 0, final = 0, workspace = 0;
  int64_t layers = 0;
  double per_moe_layer = 0, routing = 0;
  int64_t moe_layers = 0;
  // Expert parallelism (model::step_memory with expert_world > 1): the exchange's buffers, each MoE
  // layer's received rows and the rows in flight, at uniform routing.
  double exchange = 0;
  double activations() const {
    return per_layer * static_cast<double>(layers - moe_layers) +
           per_moe_layer * static_cast<double>(moe_layers) + final;
  }
  double total() const {
    return parameters + gradients + optimizer_state + operand_copy + activations() + workspace + routing +
           exchange;
  }
};
ModelMemory model_memory(const ModelShape& m);

}  // namespace ridge::roofline
