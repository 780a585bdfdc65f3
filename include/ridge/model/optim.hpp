// Training's numerics around the model: AdamW (PyTorch's and CS336's definition), global-norm
// gradient clipping, the cosine learning-rate schedule with linear warm-up, and the dynamic loss
// scaler fp16 needs.
#pragma once

#include <cstdint>
#include <span>

#include "ridge/core/memory.hpp"

namespace ridge::model {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  void validate() const;  // ridge::Error naming the field out of range
};

// AdamW over a flat parameter range, state (m, v) in S. One step, with t counting from 1:
//   p -= lr * wd * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// (torch.optim.AdamW's arithmetic, so the trajectories agree to rounding).
template <typename S>
class AdamW {
 public:
  AdamW() = default;
  AdamW(int64_t n, const AdamWConfig& config);
  // lr < 0 means config.lr. Steps params[i] with grads[i] * grad_scale (grad_scale unscales a loss
  // scale or applies clipping in the same pass).
  void step(std::span<S> params, std::span<const S> grads, double lr = -1, double grad_scale = 1);
  // step() in two halves, for an optimizer that steps only some ranges of the parameters (frozen
  // tensors skipped, or a shard of a data-parallel run): advance() counts one step; update() steps
  // params[i] with grads[i] using the state at state_offset + i and the current step count.
  void advance() { ++t_; }
  void update(std::span<S> params, std::span<const S> grads, int64_t state_offset, double lr,
              double grad_scale = 1);
  int64_t size() const { return static_cast<int64_t>(m_.size()); }
  int64_t steps() const { return t_; }
  void set_steps(int64_t t) { t_ = t; }
  std::span<S> m() { return m_.span(); }
  std::span<S> v() { return v_.span(); }
  const AdamWConfig& config() const { return cfg_; }
  void set_config(const AdamWConfig& c);

 private:
  AdamWConfig cfg_;
  Buffer<S> m_, v_;
  int64_t t_ = 0;
};

// The L2 norm of the gradient (summed in double). Not finite when any gradient is inf or NaN.
template <typename S>
double grad_norm(std::span<const S> grads);
// grad_norm's sum of squares in its fixed chunks: out[c] = sum of g^2 over [c * kNormChunk, (c + 1) *
// kNormChunk), in double. A data-parallel shard aligned to the chunks computes its part and the
// parts are summed in chunk order, giving grad_norm's bits without gathering the gradient.
inline constexpr int64_t kNormChunk = int64_t{1} << 14;
template <typename S>
void grad_sq_chunks(std::span<const S> grads, std::span<double> out);
double norm_from_chunks(std::span<const double> chunks);
// The factor clipping multiplies gradients by: max_norm / (norm + 1e-6) when norm > max_norm, else 1.
double clip_factor(double norm, double max_norm);

// CS336's schedule: t < warmup: lr_max * t / warmup; warmup <= t <= cosine_steps: cosine from lr_max
// down to lr_min; after: lr_min.
double cosine_lr(int64_t t, double lr_max, double lr_min, int64_t warmup, int64_t cosine_steps);

// Dynamic loss scaling (PyTorch's GradScaler rule): scale the loss; if any gradient is inf or NaN,
// skip the step and multiply the scale by `backoff`; after `growth_interval` clean steps in a row,
// multiply it by `growth`.
class LossScaler {
 public:
  explicit LossScaler(double initial = 65536.0, double growth = 2.0, double backoff = 0.5,
                      int64_t growth_interval = 2000);
  double scale() const { return scale_; }
  // Call after backward with whether the gradients were all finite; returns true if the step should
  // be taken (then divide the gradients by scale() before it was updated: use the returned flag and
  // the scale read before calling update()).
  bool update(bool finite);
  int64_t skipped() const { return skipped_; }
  int64_t clean_streak() const { return streak_; }
  void restore(double scale, int64_t streak, int64_t skipped);

 private:
  double scale_, growth_, backoff_;
  int64_t interval_, streak_ = 0, skipped_ = 0;
};

}  // namespace ridge::model
