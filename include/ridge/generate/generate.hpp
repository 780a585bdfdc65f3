// Running what ridge trains: the Transformer LM's weights prepared for inference (fp32, bf16, or FP8 e4m3
// with DeepGEMM's 128x128 block scales), a paged KV cache shared by sequences of different lengths, prefill
// and decode steps over it, and sampled generation.
//
//   InferenceModel  the weights in the chosen format (built from a TransformerLM<float> or flat fp32
//                   parameters in the model's order: a training checkpoint, a PyTorch state_dict)
//   Session         sequences and their KV cache: prefill(prompts), then decode(one token per sequence);
//                   logits(seq) after each; release(seq) returns its cache blocks to the pool
//   generate()      prompts in, sampled tokens out, streamed through a callback
//
// The cache: fixed-size blocks of block_size tokens, one pool per layer for K and one for V, each
// [num_blocks, block_size, kv_heads, d_head] (flash-attn's paged layout), a block table per sequence;
// bf16 for bf16 and FP8 weights, fp32 for fp32 weights. Prefill runs FlashAttention-2 over each prompt and
// writes its K/V into the cache; a decode step appends each sequence's new K/V and runs split-KV decode
// attention (attention::flash_attn_with_kvcache) over its blocks.
//
// Precision: everything the training model's forward computes in fp32 is fp32 here (residual stream,
// norms, RoPE, softmax, logits); GEMM operands are what the weight format says: fp32; bf16 (activations
// rounded to bf16 as the bf16 training forward rounds them, so the two agree); FP8: the weights e4m3 with
// one fp32 scale per 128x128 block (or UE8M0 power-of-two scales), each activation row cast to e4m3 per
// 1x128 block at run time, fp32 accumulation promoted every 128 K (DeepGEMM's recipe).
// The embedding and the norms stay fp32 in every format (a decode step reads one embedding row per
// sequence and the norms are D floats: their bytes are negligible, so lower precision would buy
// nothing). The lm_head is a GEMM like the others; by default it takes the layers' format, except with
// FP8 layers, where it stays bf16: the logits feed sampling directly and DeepSeek-V3's FP8 recipe keeps
// its output head in higher precision for the same reason. `head` overrides the default.
//
// Mixture of Experts (config.is_moe(); docs/generate.md, "Mixture of Experts"): an MoE layer computes what
// the training forward's does. Its router runs in fp32 on the fp32 normed rows (the choice of experts is the
// training model's), with the router bias (balance bias; TransformerLM::state()); the routed experts are
// stacks [E, n, k] in the weight format, run as DeepGEMM's M-grouped GEMMs: a prefill over the contiguous
// layout, a decode step over the masked one, in slabs [E, max_sequences] allocated once per Session. An
// expert no token chose is not computed and its weights are not read. The shared experts are linears in
// the format.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ridge/core/format.hpp"
#include "ridge/model/config.hpp"
#include "ridge/model/model.hpp"
#include "ridge/generate/sample.hpp"
#include "ridge/roofline/decode.hpp"

namespace ridge::generate {

enum class WeightFormat { fp32, bf16, fp8, fp8_ue8m0 };
// "fp32", "bf16", "fp8", "fp8-ue8m0"; ridge::Error naming `what` and listing them otherwise.
WeightFormat parse_weight_format(const std::string& name, const char* what = "weights");
const char* weight_format_name(WeightFormat f);

struct InferenceOptions {
  WeightFormat weights = WeightFormat::bf16;
  std::optional<WeightFormat> head;  // unset: weights' format, or bf16 when that is FP8
  int64_t block_size = 16;           // tokens per KV-cache block, 1..1024
  int64_t prefill_tokens = 2048;     // prompt tokens per prefill pass (a longer prompt runs alone)
  void validate() const;
};

// What inference allocates, in bytes, known before anything is: an InferenceModel's weights in their
// format (and the embedding and norms, fp32) and RoPE's cos/sin tables for the whole context_length, and
// a Session's KV cache for `cache_tokens` tokens. InferenceModel's constructor checks weights + rope
// against the memory available before it allocates; a caller that knows the cache it will ask for
// (`ridge generate`) checks total() first.
struct InferenceMemory {
  double weights = 0, rope = 0, kv_cache = 0;
  double total() const { return weights + rope + kv_cache; }
};
InferenceMemory inference_memory(const model::ModelConfig& config, const InferenceOptions& options,
                                 int64_t cache_tokens = 0);

class InferenceModel {
 public:
  // From a trained model (its fp32 parameters), or from flat fp32 parameters in the order
  // model_parameters() gives (TransformerLM::params()). The weights are copied into their format.
  // From a TransformerLM the state (an MoE model's router biases) comes with the parameters; from flat
  // parameters, `state` is TransformerLM::state()'s (each MoE layer's layers.L.ffn.router.bias under
  // balance bias, ascending layers; empty otherwise): ridge::Error naming `state` unless it is that size
  // and finite.
  InferenceModel(const model::TransformerLM<float>& model, const InferenceOptions& options = {});
  InferenceModel(const model::ModelConfig& config, std::span<const float> params,
                 const InferenceOptions& options = {});
  InferenceModel(const model::ModelConfig& config, std::span<const float> params,
                 std::span<const float> state, const InferenceOptions& options = {});
  ~InferenceModel();
  InferenceModel(InferenceModel&&) noexcept;
  InferenceModel& operator=(InferenceModel&&) noexcept;

  const model::ModelConfig& config() const;
  const InferenceOptions& options() const;
  WeightFormat head_format() const;
  DType kv_dtype() const;  // f32 for fp32 weights, bf16 otherwise
  // Bytes of the weights one decode step reads (every layer's linears, the final norm, the head), plus
  // one embedding row per sequence: weight_bytes() + batch * embedding_row_bytes(). An MoE model's
  // weight_bytes() holds what every step reads (its routers, fp32, and shared experts with the rest);
  // the routed experts come on top, expert_bytes() for each expert a step reads in each MoE layer:
  // weight_bytes(experts_read), experts_read the distinct experts of each MoE layer
  // (Session::experts_read()).
  double weight_bytes() const;
  double expert_bytes() const;  // one routed expert of one MoE layer (w1, w3, w2; FP8: with scales); 0: dense
  double weight_bytes(std::span<const int64_t> experts_read) const;
  double embedding_row_bytes() const;
  // Bytes the KV cache holds per token (both K and V, every layer).
  double kv_bytes_per_token() const;
  // The formats as the roofline's cost of generation takes them (ridge/roofline/decode.hpp): the
  // embedding fp32, the head and the cache as above.
  roofline::InferenceDtypes roofline_dtypes() const;

  struct Impl;
  const Impl& impl() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// Sequences of one model and their KV cache. Not thread-safe (one caller at a time); each step is
// parallel inside over ridge::get_num_threads() threads.
class Session {
 public:
  // A pool of cache_tokens tokens (rounded up to whole blocks; 0: max_sequences full contexts) for at
  // most max_sequences live sequences. The pool's size is checked against the memory available before
  // anything is allocated (ridge::Error naming the sizes).
  Session(const InferenceModel& model, int64_t max_sequences, int64_t cache_tokens = 0);
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  // The pool's bytes for a given token capacity, before building one.
  static double cache_bytes(const InferenceModel& model, int64_t cache_tokens);

  // Starts one sequence per prompt (each 1..context_length tokens in [0, vocab)) and runs its prefill;
  // returns their ids. logits(id) is then the distribution after each prompt's last token. Every
  // prompt is checked, and the cache's room for all of them, before any work.
  std::vector<int> prefill(const std::vector<std::vector<int32_t>>& prompts);
  // For timing decode at a context without paying its prefill: starts one sequence per length whose cache
  // holds that many positions of synthetic K/V (values drawn from `seed`, of the size real keys have), and
  // no logits. Decode steps then cost what they cost after a real prefill of that length. Checked as
  // prefill checks (lengths in 1..context_length, room in the pool).
  std::vector<int> prefill_synthetic(std::span<const int64_t> lengths, uint64_t seed = 0);
  // One decode step: tokens[i] appended to live sequence ids[i] (each id at most once); logits(ids[i])
  // then follow it. A sequence may not grow past context_length.
  void decode(std::span<const int> ids, std::span<const int32_t> tokens);
  // The logits [vocab] of the last prefill or decode step that included sequence `id`.
  std::span<const float> logits(int id) const;
  // An MoE model: the distinct routed experts the last decode step (or prefill pass) read in each MoE layer,
  // ascending layers (the experts its tokens chose: the others' weights were not read). Empty for a dense
  // model.
  std::span<const int64_t> experts_read() const;
  int64_t length(int id) const;  // tokens in its cache
  bool live(int id) const;
  void release(int id);  // ends the sequence; its blocks return to the pool

  int64_t block_size() const;
  int64_t total_blocks() const;
  int64_t free_blocks() const;
  // Splits of decode attention (attention::KVCacheOptions::num_splits: 0, the kernel's heuristic, to
  // attention::kMaxKVCacheSplits; checked here, not first inside the kernel mid-generation).
  void set_num_splits(int n);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct GenerateOptions {
  SamplingParams sampling;
  int64_t max_tokens = 64;  // new tokens per prompt, >= 1; prompt + max_tokens must fit the context
  uint64_t seed = 0;  // draw k of prompt i uses sampling_rng(seed, i, k): the same tokens at any thread count
  int64_t eos = -1;   // a token id that ends its sequence (it is still emitted), or -1
  int64_t cache_tokens = 0;  // Session's pool (0: enough for every prompt's whole generation)
  int num_splits = 0;        // as Session::set_num_splits: 0 .. attention::kMaxKVCacheSplits
  // Called for each new token as soon as it is sampled: (prompt index, token).
  std::function<void(size_t, int32_t)> on_token;
  void validate() const;
};

struct GenerateStats {
  int64_t prompts = 0, prefill_tokens = 0, decode_steps = 0, decode_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  // Bytes the decode steps moved, as roofline::decode_cost counts them (weights, KV cache read and
  // written, activations), each step at its batch and its sequences' mean context; an MoE model's steps
  // with the routed experts each read (roofline::decode_cost_read of Session::experts_read()).
  double decode_bytes = 0;
  // An MoE model's decode: the distinct routed experts each MoE layer read per step, the mean over the
  // layers and the steps (of E; what decode_bytes counted). 0 for a dense model.
  double decode_experts_read = 0;
};

// The tokens generated for each prompt (ending at eos, if it came, or after max_tokens).
std::vector<std::vector<int32_t>> generate(const InferenceModel& model,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           const GenerateOptions& options, GenerateStats* stats = nullptr);

}  // namespace ridge::generate
