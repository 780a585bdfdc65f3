// One training step and the state around it: the model, AdamW, the learning-rate schedule, gradient
// clipping, dynamic loss scaling (fp16), the data sampler's generator, and checkpoints that save and
// resume all of it in safetensors form (PyTorch reads the weights by their state_dict names).
#pragma once

#include <cstdint>
#include <string>

#include "ridge/model/data.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/optim.hpp"

namespace ridge::model {

struct TrainConfig {
  int64_t batch = 4;
  int64_t seq = 256;  // tokens per sequence (<= the model's context_length)
  Precision precision = Precision::fp32;
  AttentionPath attention = AttentionPath::flash;
  AdamWConfig adamw;          // adamw.lr is unused: the schedule below sets the rate of every step
  double lr_max = 1e-3, lr_min = 1e-4;
  int64_t warmup_steps = 0, cosine_steps = 0;  // cosine_steps 0: constant lr_max after warm-up
  double max_grad_norm = 1.0;  // 0 turns clipping off
  double loss_scale = 65536.0;  // fp16 only: the initial dynamic loss scale
  int64_t loss_scale_interval = 2000;
  uint64_t seed = 0;  // initialisation and batch sampling
  void validate() const;
};

struct StepResult {
  int64_t step = 0;         // optimizer steps taken after this one (1 for the first)
  double loss = 0;          // mean cross-entropy of the batch, before the update
  double grad_norm = 0;     // global L2 norm of the unscaled gradient, before clipping
  double lr = 0;
  double loss_scale = 1;    // the scale this step's backward used
  bool skipped = false;     // non-finite gradients: no update (the loss scale backs off in fp16)
};

class Trainer {
 public:
  Trainer(const ModelConfig& model, const TrainConfig& train);

  TransformerLM<float>& model() { return model_; }
  AdamW<float>& optimizer() { return adamw_; }
  LossScaler& scaler() { return scaler_; }
  Rng& rng() { return rng_; }
  const TrainConfig& config() const { return cfg_; }
  int64_t steps() const { return adamw_.steps(); }
  double lr_at(int64_t t) const;

  // Forward, backward, checks, clipping and AdamW on one batch of [batch, seq] tokens.
  StepResult step(const int32_t* inputs, const int32_t* targets);
  // A batch drawn from the token file with the trainer's generator, then step().
  StepResult step(const TokenFile& data);

  // Writes parameters, AdamW state, step, generator state and loss scale (atomically: a failed write
  // leaves an existing file as it was).
  void save(const std::string& path) const;
  // Loads a checkpoint written by save() (everything resumes), or a weights-only file (PyTorch's
  // state_dict saved as safetensors): then the optimizer starts fresh. The model's config must match.
  void load(const std::string& path);

 private:
  TrainConfig cfg_;
  TransformerLM<float> model_;
  AdamW<float> adamw_;
  LossScaler scaler_;
  Rng rng_;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace ridge::model
