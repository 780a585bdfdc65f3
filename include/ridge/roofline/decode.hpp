// The roofline of generating with the CS336 Transformer LM (pre-norm RMSNorm, RoPE, grouped-query attention,
// SwiGLU, untied lm_head, no biases): one decode step (a batch of B sequences, each adding one token over its
// KV cache) and a prefill (B prompts of P tokens), as FLOPs and as bytes split by what they move: the
// weights, the KV cache read, the K/V written, the activations. Bounded on a chip with every group of FLOPs
// at the peak of its own dtype, and the critical batch: the B at which decode turns compute-bound with the KV
// cache counted (its bytes grow with B, so the intensity saturates and may stay below the chip's ridge point
// at any batch). Arithmetic only; the formulas, with worked outputs, are in docs/roofline.md.
//
// Mixture of Experts (a ModelArch with num_experts > 0): an MoE layer reads its router (fp32), its shared
// experts and only the routed experts its tokens choose: the expected number of distinct ones
// (ridge/roofline/moe.hpp), under uniform routing or a measured routing histogram (`expert_histogram`: one
// value per expert, shares or token counts, routing_shares' form; empty = uniform). Its bytes grow with the
// batch until every expert is read, so the critical batch is solved from the curve, and set beside that of
// the dense model of the same active size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ridge/roofline.hpp"
#include "ridge/roofline/model_arch.hpp"

namespace ridge::roofline {

// The model is its ModelArch (ridge/roofline/model_arch.hpp; a ridge::model::ModelConfig is one), of which
// the sizes enter the counts here; its kv heads must divide its heads. d_head = d_model / heads.

// Where each tensor's dtype comes from. Linear weights in fp8_e4m3 carry DeepGEMM's fp32 scales, one per
// 128x128 block of each [out, in] tensor (q, k, v, o, w1, w2, w3 quantized one by one), and the activations
// a fp8 GEMM reads are cast per token with one fp32 scale per 128 values. Norm weights stay fp32.
struct InferenceDtypes {
  DType weights = DType::bf16;  // the layers' linears: f32, bf16 or fp8_e4m3
  std::optional<DType> head;    // lm_head: f32, bf16 or fp8_e4m3; unset = weights, but bf16 for fp8 weights
  std::optional<DType> embedding;  // the embedding table: f32 or bf16; unset = weights, but bf16 for fp8
  DType kv = DType::bf16;          // the KV cache: f32 or bf16

  DType head_dtype() const;
  DType embedding_dtype() const;
  // What the activations between kernels are stored in: f32 with fp32 weights, bf16 otherwise.
  DType activation_dtype() const;
  // ridge::Error naming the field ("weights", "head", "embedding", "kv") for a dtype it does not accept.
  void validate() const;
};

// A group of FLOPs and the peak_flops key it runs at ("fp8", "bf16", "fp32").
struct FlopsPart {
  std::string name;  // "layer GEMMs", "lm_head", "attention"
  std::string compute;
  long double flops = 0;
};

struct InferenceCost {
  std::string phase;    // "decode" or "prefill"
  int64_t batch = 1;    // sequences
  int64_t context = 1;  // decode: keys each sequence attends to, its new token's included; prefill: 0
  int64_t prompt = 0;   // prefill: tokens per prompt; decode: 0
  std::vector<FlopsPart> flops;
  // Memory traffic by what it is: the weights (the embedding rows the batch looks up among them), the KV
  // cache read, the K/V written, the activations between kernels (the residual stream, GEMM inputs and
  // outputs, fp8 activation scales, the logits).
  std::vector<Traffic> weights, kv_read, kv_write, activations;
  // An MoE model: the expected distinct routed experts the step's tokens read in each MoE layer (k at one
  // token, up to num_experts); 0 for a dense model.
  double experts_read = 0;

  long double total_flops() const;
  long double weight_bytes() const;
  long double kv_read_bytes() const;
  long double kv_write_bytes() const;
  long double activation_bytes() const;
  long double memory_bytes() const;  // the four together
  double intensity() const;          // FLOPs per memory byte
  // What has to stay in a memory level from one step to the next for a step to find it there: the weights
  // read and the KV cache (read by a decode step, written by a prefill).
  long double resident_bytes() const;
  // "decode B=4 C=1024" or "prefill B=1 P=512"
  std::string label() const;
};

// One decode step: each of `batch` sequences adds one token, attending to `context` keys (the context
// after this token: context - 1 cached before the step plus its own, written to the cache and read back
// with the rest). FLOPs: 2 per multiply-add of every GEMM at m = batch, and attention 4 * batch * heads *
// context * d_head per layer (Q K^T and P V); elementwise work is counted in bytes only. ridge::Error naming
// the argument for a size outside [1, 2^40], a shape the model cannot have or an unaccepted dtype.
InferenceCost decode_cost(const ModelArch& shape, const InferenceDtypes& dtypes, int64_t batch,
                          int64_t context, const std::vector<double>& expert_histogram = {});
// The same step of an MoE model as it ran: `experts_read` the distinct routed experts it read per MoE layer
// (their mean over the MoE layers, counted from the step's routing: what generation measures) in place of
// the expected number. ridge::Error naming experts_read outside top_k .. min(experts, batch x top_k), or
// for a dense model.
InferenceCost decode_cost_read(const ModelArch& shape, const InferenceDtypes& dtypes, int64_t batch,
                               int64_t context, double experts_read);
// The prefill of `batch` prompts of `prompt` tokens each: every GEMM at m = batch * prompt, causal attention
// (query i attends to i + 1 keys: 4 * heads * d_head * prompt (prompt + 1) / 2 per sequence and layer), the
// prompts' K/V written to the cache and read once by the attention, and the logits of each prompt's last
// token only (what generation samples from).
InferenceCost prefill_cost(const ModelArch& shape, const InferenceDtypes& dtypes, int64_t batch,
                           int64_t prompt, const std::vector<double>& expert_histogram = {});

// The time bound of an InferenceCost on a chip at one memory level.
struct ComputeRoof {
  std::string name;     // the FlopsPart's
  std::string compute;  // the peak it runs at: its own dtype's, or a substitute the chip has (see notes)
  double peak = 0, flops = 0, t_math = 0;
};

struct InferenceBound {
  std::string chip, level;
  double bandwidth = 0;  // bytes/s of `level`
  std::vector<ComputeRoof> roofs;
  double flops = 0, bytes = 0, intensity = 0;
  // The intensity at which this mix of FLOPs meets the memory roof: (flops / t_math) / bandwidth.
  double ridge_intensity = 0;
  double t_math = 0;        // the sum of the parts' FLOPs over their peaks
  double t_memory = 0;      // bytes / bandwidth
  double t_lower = 0;       // max(t_math, t_memory)
  std::string binding;      // "compute" (t_math >= t_memory) or "memory"
  double tokens_per_s = 0;  // decode: batch / t_lower; prefill: batch * prompt / t_lower
  // The resident bytes, the innermost level whose capacity holds them ("" when no level with a capacity in
  // the chip file does), and whether they exceed the outermost level's capacity (a step that cannot run).
  double resident_bytes = 0;
  std::string fits_level;
  bool exceeds_memory = false;
  std::vector<std::string> notes;  // substitutions (a peak the chip lacks), the fit
};

// `level`: a memory level of the chip ("hbm", "dram", "l3", ...), "" for the outermost, or "auto" for the
// level the bytes come from (fits_level; the outermost when nothing smaller holds them). A chip without the
// peak of a part's dtype runs it at the next wider one it has (fp8 -> bf16 -> fp32, bf16 -> fp32: ridge's
// CPU FP8 GEMM widens fp8 to bf16), with a note; ridge::Error when it has none of them.
InferenceBound inference_bound(const InferenceCost& cost, const Chip& chip, const std::string& level = "");

// The smallest batch at which a decode step at `context` is compute-bound (t_math >= t_memory) at a fixed
// memory level ("" = outermost; "auto" is not accepted: the level the bytes come from moves with the batch).
// All FLOPs grow with B while the bytes are W (weights) + B k (KV cache, embedding rows, activations), so
// t_math / t_memory rises to a limit: compute-bound from B = W / (bandwidth t_math(1) - k), or never when
// the per-sequence bytes k alone outrun the per-sequence FLOPs, i.e. when limit_intensity <= ridge_intensity.
// An MoE model's bytes are W + B k + X(B), X the routed experts read (Lm x experts_read(B) x one expert's
// bytes): X is concave in B and levels off at every expert, so B t_math(1) bandwidth - (W + B k + X(B)) is
// convex, negative at 0, and crosses 0 once; the crossing is solved by bisection, then settled as above.
struct DecodeCriticalBatch {
  std::string chip, level;
  int64_t context = 0;
  double bandwidth = 0;
  std::optional<int64_t> batch;  // none: never compute-bound at this context (or only beyond 2^40)
  double asymptotic = 0;         // the real-valued crossing W / (bandwidth t_math(1) - k); inf when never
  double limit_intensity = 0;    // FLOPs per byte as B grows without bound (per-sequence FLOPs / k)
  double ridge_intensity = 0;    // InferenceBound::ridge_intensity: the intensity the step must exceed
  // The roofline chapter's critical batch, for comparison: the crossing when a step moves only the weights
  // (W) and computes only its GEMMs, B = W / (bandwidth t_gemm(1)); about ridge_intensity x bytes per
  // weight / 2. What the KV cache and the activations take away from it is the difference.
  int64_t batch_weights_only = 0;
  // At `batch`: the weights and KV cache held (InferenceBound::resident_bytes), and whether they exceed the
  // outermost level's capacity (a batch that large cannot run on one chip). 0 and false when never.
  double resident_bytes = 0;
  bool exceeds_memory = false;
  double weight_bytes = 0;           // W: the bytes a step moves whatever the batch
  double bytes_per_sequence = 0;     // k
  double kv_bytes_per_sequence = 0;  // the KV cache read and written per sequence, part of k
  double flops_per_sequence = 0;
  // An MoE model (0 for dense): X(1), the routed experts one sequence reads (W excludes them); X when every
  // expert is read, its ceiling; the expected experts read per MoE layer at `batch` (none: 0).
  double expert_bytes_one = 0, expert_bytes_all = 0, experts_read_at_batch = 0;
};
DecodeCriticalBatch decode_critical_batch(const ModelArch& shape, const InferenceDtypes& dtypes,
                                          int64_t context, const Chip& chip, const std::string& level = "",
                                          const std::vector<double>& expert_histogram = {});

// What `ridge roofline decode` adds for an MoE model.
struct MoeDecode {
  double params_total = 0, params_active = 0;  // model_param_count, model_active_param_count
  std::vector<double> shares;                  // the histogram, normalised; empty: uniform routing
  double expert_bytes = 0;                     // one routed expert of one layer (w1, w2, w3; fp8: scales)
  // The critical batch of the dense model of the same active size: each token's k experts always the same
  // k, so the same FLOPs and active weights, every batch reading k experts per layer.
  DecodeCriticalBatch dense_equivalent;
  std::vector<double> sweep_experts_read;  // per DecodeReport::sweep row
};

// `ridge roofline decode` in one call: the decode step at (batch, context), the prefill of `prompt` tokens
// when prompt > 0, the critical batch at the step's level (for `level` "auto": the level of the step at
// `batch`), and with `sweep` the steps at batch 1, 2, 4, ... at that level, up to the first power of two at
// or past the critical batch (never compute-bound: until the intensity is within 1% of its limit), at most
// 2^20.
struct DecodeReport {
  ModelArch shape;
  InferenceDtypes dtypes;  // resolved: head and embedding set
  std::string chip, chip_name;
  double params = 0;  // the model's parameter count
  InferenceCost step;
  InferenceBound bound;
  std::optional<InferenceCost> prefill;
  std::optional<InferenceBound> prefill_bound;
  DecodeCriticalBatch critical;
  std::vector<InferenceBound> sweep;  // one per batch; sweep_batches[i] is its batch
  std::vector<int64_t> sweep_batches;
  std::optional<MoeDecode> moe;  // an MoE model's figures
};
DecodeReport decode_report(const ModelArch& shape, const InferenceDtypes& dtypes, int64_t batch,
                           int64_t context, const Chip& chip, const std::string& level = "",
                           int64_t prompt = 0, bool sweep = false,
                           const std::vector<double>& expert_histogram = {});
// The report as JSON text (what `ridge roofline decode --json` prints and ridge.roofline.decode returns). An
// MoE model adds keys (shape: experts, top_k, shared_experts, d_expert, moe_layers, params_active; each step:
// experts_read, bytes_per_token; each sweep row: experts_read; "moe"), a dense model's document is unchanged.
std::string decode_report_json(const DecodeReport& r, int indent = 2);

}  // namespace ridge::roofline
