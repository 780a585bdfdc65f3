// The CS336 Transformer language model with an explicit forward and backward pass, in the spirit of
// llm.c: every layer is a forward/backward pair over explicit buffers, parameters and gradients each
// live in one flat buffer, and the backward pass tells an observer when a group of gradients is final.
//
//   x = token_embeddings[inputs]
//   for each layer:  x = x + attn(ln1(x));  x = x + ffn(ln2(x))
//   logits = lm_head(ln_final(x));  loss = mean cross-entropy(logits, targets)
//
// RMSNorm: x * rsqrt(mean(x^2) + eps) * w (eps: the config's rms_norm_eps, 1e-5 unless set, in the
// precision of the computation). Attention: causal, multi-head, RoPE (theta from the config,
// rotating adjacent pairs (2i, 2i+1)) on q and k, FlashAttention-2 or the math path. FFN: SwiGLU,
// w2(silu(w1 x) * w3 x). No biases, no dropout, untied lm_head.
//
// Mixture of Experts (config.is_moe(); docs/model.md, "The MoE block"): the FFN of each layer in
// moe_layers is  ffn(h) = sum_j g_j expert_{e_j}(h) + shared(h),  the router's top-k experts e_j with
// their gate weights g_j (ridge/model/moe.hpp), each expert and the shared experts SwiGLUs; the experts
// run as grouped GEMMs over the tokens permuted into DeepGEMM's contiguous layout. The loss forward
// returns adds each MoE layer's auxiliary loss (balance aux); balance bias keeps a router bias per MoE
// layer (state_tensors()) that update_router_bias moves after each step.
//
// Precision (which operation runs in which dtype; docs/model.md has the full table):
//   fp32: everything in fp32.
//   bf16: GEMM operands (weights, the normed activations, attention inputs and outputs, the gradients
//         fed to GEMMs) rounded to bf16, accumulation in fp32; master weights, gradients, the residual
//         stream, norms, RoPE, SwiGLU, softmax and the loss in fp32.
//   fp16: as bf16 with fp16 rounding (overflow to inf, as on hardware); this CPU has no fp16 dot
//         products, so the rounded operands are multiplied on the fp32 units (exact products, fp32
//         accumulation: what a tensor core computes). Pair it with a LossScaler.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ridge/model/config.hpp"
#include "ridge/model/expert_exchange.hpp"

namespace ridge::model {

enum class Precision { fp32, bf16, fp16 };
// "fp32|f32", "bf16", "fp16|f16"; ridge::Error listing them otherwise.
Precision parse_precision(const std::string& name);
const char* precision_name(Precision p);

enum class AttentionPath { flash, math };
AttentionPath parse_attention_path(const std::string& name);  // "flash" or "math"
const char* attention_path_name(AttentionPath a);
// ridge::Error about `attention` when `cfg` cannot run on path `a` (FlashAttention takes head
// dimensions 16..256): the model's own check, for callers that want it before building a model.
void check_attention_path(const ModelConfig& cfg, AttentionPath a);

// One named parameter tensor inside the flat buffers.
struct TensorInfo {
  std::string name;            // as PyTorch's state_dict names it, e.g. "layers.0.attn.q_proj.weight"
  std::vector<int64_t> shape;  // [out, in] for linear weights
  int64_t offset = 0;          // in elements, into params() / grads()
  int64_t numel = 0;
  int group = 0;  // backward group: gradients of a group become final together
  // An MoE layer's expert stack ("layers.L.ffn.experts.w1.weight" ...; experts > 0): this model holds
  // experts [expert_begin, expert_begin + shape[0]) of the layer's `experts` (all of them unless it was
  // built for one worker of expert parallelism, ExpertShard). 0 for every other tensor.
  int64_t experts = 0, expert_begin = 0;
  bool expert_stack() const { return experts > 0; }
  bool partial() const { return experts > 0 && shape[0] != experts; }
  // The tensor as a checkpoint holds it: shape with every expert of a stack; and where this model's block
  // starts in it, in elements (0 for a whole tensor).
  std::vector<int64_t> whole_shape() const;
  int64_t whole_begin() const { return expert_stack() ? numel / shape[0] * expert_begin : 0; }
  int64_t whole_numel() const { return expert_stack() ? numel / shape[0] * experts : numel; }
};

// Parameters in the flat buffers are ordered by when their gradients become final in the backward
// pass: lm_head, ln_final, layer L-1 (ffn.w2, ffn.w1, ffn.w3, ln2, attn.output_proj, attn.q/k/v,
// ln1), ..., layer 0, token_embeddings. Group g covers tensors [group_begin(g), group_begin(g+1)).
// S is the type of parameters, gradients and the residual stream: float for training, double for
// the fp64 reference the gradient checks use (double runs fp32 "precision" and the math attention
// path, with fp64 GEMMs written as plain loops).
template <typename S>
class TransformerLM {
 public:
  // `experts`: the experts this model holds (a worker of expert parallelism holds its block of each
  // stack; every parameter of a partial stack, its gradient and optimizer state are that block's).
  // ridge::Error naming `experts` for a dense model with world > 1, or E not a multiple of world.
  explicit TransformerLM(const ModelConfig& config, Precision precision = Precision::fp32,
                         AttentionPath attention = AttentionPath::flash, ExpertShard experts = {});
  ~TransformerLM();
  TransformerLM(TransformerLM&&) noexcept;
  TransformerLM& operator=(TransformerLM&&) noexcept;

  const ModelConfig& config() const;
  const ExpertShard& expert_shard() const;
  Precision precision() const;
  AttentionPath attention_path() const;
  void set_precision(Precision p);
  void set_attention_path(AttentionPath a);
  // Document masking for packed training data: from the next forward on, attention does not cross
  // token `eot_id` (a row's tokens after an eot attend only to tokens after it; the eot itself closes
  // its document), on the varlen kernels (flash) or a document at a time (math). -1 turns it off.
  // Positions (RoPE) stay those of the row: RoPE scores depend on relative positions only.
  void set_document_mask(int32_t eot_id);
  int32_t document_mask() const;  // -1: off

  const std::vector<TensorInfo>& tensors() const;
  int num_groups() const;
  int group_begin(int g) const;  // first tensor index of group g (g == num_groups() gives tensors().size())
  const TensorInfo& tensor(const std::string& name) const;  // ridge::Error naming unknown names

  std::span<S> params();
  std::span<const S> params() const;
  std::span<S> grads();
  std::span<const S> grads() const;
  std::span<S> param(const std::string& name);
  std::span<S> grad(const std::string& name);

  // Non-trained state (PyTorch's buffers), in a flat buffer of its own: under balance bias each MoE
  // layer's router bias, "layers.L.ffn.router.bias" [E], in ascending layer order, zero after init().
  // Saved and loaded with the parameters; no gradient, no optimizer state. Empty otherwise.
  const std::vector<TensorInfo>& state_tensors() const;
  std::span<S> state();
  std::span<const S> state() const;

  // CS336's initialisation: linear weights truncated normal, std sqrt(2 / (d_in + d_out)), cut at
  // 3 std; the embedding truncated N(0, 1) cut at 3; norm weights 1. Same seed, same weights (a
  // partial expert stack gets the single process's values of its experts).
  void init(uint64_t seed);

  // Runs the forward pass on inputs [batch, seq] (token ids in [0, vocab)), keeping what backward
  // needs. With targets, returns the mean cross-entropy; without (nullptr), returns 0 and only the
  // logits are computed. seq <= context_length.
  S forward(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq);
  // Logits of the last forward, [batch * seq, vocab] in S (backward overwrites them).
  std::span<const S> logits() const;

  // Accumulates d(loss * loss_scale)/d(params) into grads() (call zero_grad() first for a fresh
  // gradient). After each backward group is final, calls observer(group).
  using Observer = std::function<void(int group)>;
  void backward(S loss_scale = S(1), const Observer& observer = {});
  void zero_grad();

  // What the last forward's routing did in each MoE layer, in ascending layer order (empty for a dense
  // model; zero counts before the first forward).
  struct MoeLayerStats {
    int64_t layer = 0;
    std::vector<int64_t> count;  // tokens routed to each expert (a token counts once per expert it chose)
    double load_imbalance = 1;   // max count / mean count
    double aux_loss = 0;         // the layer's auxiliary loss (balance aux; 0 otherwise)
  };
  std::vector<MoeLayerStats> moe_stats() const;
  // The auxiliary losses of the last forward with targets, summed over the MoE layers: the part of the
  // loss forward returned that is not cross-entropy (0 for a dense model and under balance bias).
  double aux_loss() const;
  // The auxiliary-loss-free balance after a step: each MoE layer's bias moves by bias_update_speed
  // towards balance (moe::update_bias) from `counts`, the layers' counts one after another (E each, as
  // moe_stats gives them, or their sums over data-parallel workers) for `tokens` tokens. ridge::Error
  // naming `counts` or `tokens` unless they fit the model; nothing to do without balance bias or at
  // speed 0.
  void update_router_bias(std::span<const int64_t> counts, int64_t tokens);

  // Expert parallelism (ridge/model/expert_exchange.hpp): from the next forward on, each MoE layer runs
  // the experts this model holds (its ExpertShard, which must be the exchange's rank and world) over the
  // rows every worker routes to them, and reaches the others' through `exchange` (nullptr: none, for a
  // model that holds every expert). ridge::Error naming `exchange` for a dense model or a shard that is
  // not the exchange's worker. A model built for a shard of world > 1 runs forward only with its
  // exchange set. The exchange must outlive its use.
  void set_expert_exchange(ExpertExchange* exchange);
  ExpertExchange* expert_exchange() const;

  // Bytes held for activations and workspace by the last forward (what the memory profiler tags
  // "activations" and "workspace"; under expert parallelism also the owner's saved rows and the
  // exchange's buffers, tagged ".../expert parallel").
  int64_t activation_bytes() const;
  int64_t workspace_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// FLOPs of one forward (and forward + backward) pass over batch x seq tokens: what every MFU ridge
// prints divides by. The roofline analyzer's count (roofline::model_matmul_flops over the step's ops):
// 2 per multiply-add of every GEMM (the lm_head included), attention as FlashAttention counts it
// (causal halves the score work), elementwise work left out.
// `attention_share` scales the attention part: the share of the causal score work the batch does
// (document_attention_share for a document-masked batch; 1 for plain causal rows).
double forward_flops(const ModelConfig& c, int64_t batch, int64_t seq, double attention_share = 1.0);
double training_flops(const ModelConfig& c, int64_t batch, int64_t seq,
                      double attention_share = 1.0);  // forward + backward (3x GEMMs)

// The share of plain causal attention's visible scores that a document-masked batch (`tokens`, batch x
// seq, cut after every `eot` and at each row's end, as set_document_mask does) has: the sum of
// L(L+1)/2 over its documents of L tokens, over batch x seq(seq+1)/2. 1 when eot < 0 (no mask).
double document_attention_share(const int32_t* tokens, int64_t batch, int64_t seq, int32_t eot);

}  // namespace ridge::model
