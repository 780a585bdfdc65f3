// One training step and the state around it: the model, AdamW, the learning-rate schedule, gradient
// clipping, dynamic loss scaling (fp16), the data sampler's generator, and checkpoints that save and
// resume all of it in safetensors form (PyTorch reads the weights by their state_dict names); and the
// training loop around the step (train(): batches, logging, checkpoints), which `ridge train` and
// Python's TransformerLM.train both run.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ridge/text/data.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/optim.hpp"

namespace ridge::model {

// Which tokenizer made the training data (ridge/text/tokenizer.hpp): its directory and content hash. A
// checkpoint records it (metadata "tokenizer": {"path", "hash" (16 hex digits), "vocab_size"}) so that text
// in and text out go through the same one: `ridge generate` and a resumed `ridge train` compare it with the
// tokenizer they are given.
struct TokenizerRecord {
  std::string path;   // absolute, as given when training
  uint64_t hash = 0;  // Tokenizer::content_hash()
  int64_t vocab_size = 0;
};

struct TrainConfig {
  int64_t batch = 4;
  int64_t seq = 256;  // tokens per sequence (<= the model's context_length)
  Precision precision = Precision::fp32;
  AttentionPath attention = AttentionPath::flash;
  AdamWConfig adamw;  // adamw.lr is unused: the schedule below sets the rate of every step
  double lr_max = 1e-3, lr_min = 1e-4;
  int64_t warmup_steps = 0, cosine_steps = 0;  // cosine_steps 0: constant lr_max after warm-up
  double max_grad_norm = 1.0;                  // 0 turns clipping off
  double loss_scale = 65536.0;                 // fp16 only: the initial dynamic loss scale
  int64_t loss_scale_interval = 2000;
  uint64_t seed = 0;  // initialisation and batch sampling
  // Document masking (TransformerLM::set_document_mask): attention does not cross this end-of-text
  // token id; -1: plain causal attention over each whole row.
  int32_t eot_id = -1;
  // The flat parameter range AdamW keeps state for from the start (optimizer_end -1: to the end).
  // A data-parallel rank that knows its shard before building the trainer sets it, so it never
  // allocates the whole state (shard_optimizer() with the same range then keeps the buffers).
  int64_t optimizer_begin = 0, optimizer_end = -1;
  // Expert parallelism: the experts of each MoE layer this worker's model holds (and steps); the
  // distributed module's DataParallel needs {its rank, the world}. Default: all of them.
  ExpertShard experts;
  void validate() const;
};

struct StepResult {
  int64_t step = 0;  // optimizer steps taken after this one (1 for the first)
  double loss = 0;   // mean cross-entropy of the batch, before the update (+ aux_loss)
  // Mixture of Experts: the auxiliary losses included in `loss` (balance aux), and each MoE layer's
  // expert load, max / mean tokens per expert (over every worker's tokens under data parallelism), in
  // ascending layer order. 0 and empty for a dense model.
  double aux_loss = 0;
  std::vector<double> expert_load;
  double grad_norm = 0;  // global L2 norm of the unscaled gradient, before clipping
  double lr = 0;
  double loss_scale = 1;  // the scale this step's backward used
  bool skipped = false;   // non-finite gradients: no update (the loss scale backs off in fp16)
};

class Trainer;

// What a data-parallel layer (the distributed module) plugs into Trainer::step and into the training
// loop, train(), which takes them from the trainer they are set on. The defaults are what a single
// process does.
class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // From the backward pass, as soon as group g's gradients are final.
  virtual void group_final(int group) { (void)group; }
  // After backward (frozen tensors' gradients already zeroed): make grads the average over every
  // worker, at least over the range this worker's optimizer steps.
  virtual void reduce_gradients(std::span<float> grads) { (void)grads; }
  // The global L2 norm of the averaged gradient.
  virtual double grad_norm(std::span<const float> grads) { return model::grad_norm<float>(grads); }
  // After the optimizer stepped its range: make every worker's parameters whole again.
  virtual void after_update(std::span<float> params) { (void)params; }
  // Mixture of Experts, after backward: make `counts` (each MoE layer's tokens per expert, E per layer)
  // the sums over every worker, so that the expert load reported and the router biases moved from them
  // (balance bias) are the same on every worker. Collective: every worker calls it at every step of an
  // MoE model.
  virtual void sum_expert_counts(std::span<int64_t> counts) { (void)counts; }

  // The loop's part. This worker among the `world` that share each global batch: train() draws
  // world x batch rows and steps on rows [rank x batch, (rank + 1) x batch).
  virtual int rank() const { return 0; }
  virtual int world() const { return 1; }
  // The step's loss as the run reports it: the mean of every worker's (each the mean over an equal
  // share of the tokens). Collective: every worker calls it at every step.
  virtual double mean_loss(double loss) { return loss; }
  // Writes `trainer`'s checkpoint; collective (a sharded optimizer state is gathered first, one
  // worker writes).
  virtual void save_checkpoint(const Trainer& trainer, const std::string& path);
};

class Trainer {
 public:
  Trainer(const ModelConfig& model, const TrainConfig& train);

  TransformerLM<float>& model() { return model_; }
  AdamW<float>& optimizer() { return adamw_; }
  LossScaler& scaler() { return scaler_; }
  text::Rng& rng() { return rng_; }
  const TrainConfig& config() const { return cfg_; }
  int64_t steps() const { return adamw_.steps(); }
  double lr_at(int64_t t) const;

  // Forward, backward, checks, clipping and AdamW on one batch of [batch, seq] tokens.
  StepResult step(const int32_t* inputs, const int32_t* targets);
  // A batch drawn from the token file with the trainer's generator, then step().
  StepResult step(const text::TokenFile& data);

  // Data parallelism: hooks called by step() and train() (nullptr: none; the hooks must outlive their
  // use).
  void set_hooks(StepHooks* hooks) { hooks_ = hooks; }
  StepHooks* hooks() const { return hooks_; }
  // A frozen tensor is neither updated nor decayed; its gradient is zeroed after backward, so the
  // norm and clipping ignore it. ridge::Error for unknown names.
  void set_frozen(const std::string& name, bool frozen = true);
  bool frozen(size_t tensor_index) const { return frozen_[tensor_index]; }
  const std::vector<bool>& frozen_flags() const { return frozen_; }
  // Keep AdamW state only for the flat parameter range [begin, end) and step only that range
  // (optimizer-state sharding; the other workers step the rest). Resets the state, keeps the step.
  void shard_optimizer(int64_t begin, int64_t end);
  int64_t optimizer_begin() const { return opt_begin_; }
  int64_t optimizer_end() const { return opt_begin_ + adamw_.size(); }

  // Writes parameters, AdamW state, step, generator state and loss scale (atomically: a failed write
  // leaves an existing file as it was).
  void save(const std::string& path) const;
  // The same with AdamW's state for every parameter given (a sharded run gathers it first).
  void save(const std::string& path, std::span<const float> exp_avg, std::span<const float> exp_avg_sq) const;
  // A model that holds a block of each expert stack (TrainConfig::experts) writes the whole stacks, so the
  // file is the single process's: `whole(t, part, dst)` fills stack t's every value (t.whole_shape(); part
  // 0 the parameters, 1 exp_avg, 2 exp_avg_sq) as the file is written, one stack at a time, in the
  // tensors' order. The plain save() refuses such a model (distributed::DataParallel::save gathers them).
  using WholeStack = std::function<void(const TensorInfo& t, int part, std::span<float> dst)>;
  void save(const std::string& path, const WholeStack& whole) const;
  // Loads a checkpoint written by save() (everything resumes), or a weights-only file (PyTorch's
  // state_dict saved as safetensors): then the optimizer starts fresh. The model's config must match; a
  // model that holds a block of the experts takes its block of each stack.
  // The checkpoint's tokenizer record, if any, becomes the trainer's.
  void load(const std::string& path);

  // The tokenizer record save() writes (none: the data were bytes, random tokens, or a token file of
  // unknown origin).
  void set_tokenizer(std::optional<TokenizerRecord> t) { tokenizer_ = std::move(t); }
  const std::optional<TokenizerRecord>& tokenizer() const { return tokenizer_; }

 private:
  void write(const std::string& path, std::span<const float> m, std::span<const float> v,
             const WholeStack* whole) const;
  TrainConfig cfg_;
  TransformerLM<float> model_;
  AdamW<float> adamw_;
  LossScaler scaler_;
  text::Rng rng_;
  std::vector<int32_t> inputs_, targets_;
  StepHooks* hooks_ = nullptr;
  std::vector<bool> frozen_;
  int64_t opt_begin_ = 0;
  std::optional<TokenizerRecord> tokenizer_;
};

// One logged step of train(). Rates and times are over the window: the steps since the previous log.
struct StepLog {
  // The run's step count after this step; result.step is the optimizer's, which a skipped step (a
  // non-finite gradient) does not advance.
  int64_t step = 0;
  StepResult result;        // this step's (under data parallelism, loss is StepHooks::mean_loss's)
  double mean_loss = 0;     // the mean of the window's finite losses (NaN: none was finite)
  double tokens_per_s = 0;  // tokens of the global batch per second
  double step_ms = 0;       // wall time per step
  double mfu = 0;           // model FLOPs per second over LoopConfig::peak_flops (NaN when that is 0)
  double seconds_left = 0;  // the time per step times the steps still to run
};

struct LoopConfig {
  // The step the run ends at: it takes steps - trainer.steps() steps, so a trainer resumed from a
  // checkpoint at step k runs steps - k more, as the run that wrote it would have.
  int64_t steps = 1;
  int64_t log_every = 10;  // on_log at every log_every-th step, and at the run's first and last
  std::string checkpoint;  // written at the end (empty: none), atomically as Trainer::save writes
  int64_t save_every = 0;  // and at every save_every-th step (0: only at the end)
  double peak_flops = 0;   // the FLOP/s the model FLOPs utilisation divides by (0: none)
  // Called at each logged step, on every worker; returns true to stop after this step, which then
  // ends the run as the last step would (the checkpoint is written). Under data parallelism every
  // worker must answer alike. Empty: nothing is logged. An exception it throws ends the run and
  // leaves train().
  std::function<bool(const StepLog&)> on_log;
  void validate() const;
};

struct TrainSummary {
  int64_t first_step = 0;  // the trainer's step count when the run began
  int64_t steps = 0;       // the steps this run took
  bool stopped = false;    // on_log asked to stop before LoopConfig::steps
  StepLog last;            // the log of the run's last step
};

// The training loop: from trainer.steps() to loop.steps, each step draws the global batch from
// `data` with the trainer's generator (so every worker draws the same rows, and a resumed run the
// rows it would have drawn), steps on this worker's slice of it, logs and saves as `loop` says.
// The data are checked first against the model (the largest token below vocab_size, at least
// seq + 1 tokens; random tokens below a vocab in 1..vocab_size), and the checkpoint's path with
// files::check_writable. ridge::Error names `steps`, `log_every`, `save_every`, `peak_flops`, `data`
// or `checkpoint` for bad arguments, `data` for a token file that changes under the run, and
// `checkpoint` for a checkpoint that cannot be written.
TrainSummary train(Trainer& trainer, const text::BatchSource& data, const LoopConfig& loop);

// The model config a checkpoint's metadata records (ridge's checkpoints and weights files written by
// ridge), or nullopt for a weights-only file without one (a PyTorch state_dict). ridge::Error for a file
// that is not safetensors or whose config is malformed.
std::optional<ModelConfig> checkpoint_config(const std::string& path);
// The precision of the training run that wrote a full checkpoint (nullopt: a weights-only file).
// ridge::Error for a file that is not safetensors or whose state record is malformed.
std::optional<Precision> checkpoint_precision(const std::string& path);
// The weights of a checkpoint or a weights-only file into `model`, checked as Trainer::load checks them
// (the config, every tensor's dtype, shape and values) before any is copied; the optimizer state, if
// any, is not read.
void load_weights(TransformerLM<float>& model, const std::string& path);
// The tokenizer record of a checkpoint (nullopt: it has none). ridge::Error for a file that is not
// safetensors or whose record is malformed.
std::optional<TokenizerRecord> checkpoint_tokenizer(const std::string& path);

}  // namespace ridge::model
