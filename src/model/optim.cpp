#include "ridge/model/optim.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ridge/core/error.hpp"
#include "ridge/core/threads.hpp"
#include "core/check.hpp"

namespace ridge::model {

void AdamWConfig::validate() const {
  check(std::isfinite(lr) && lr >= 0, "lr: must be finite and >= 0, got {}", lr);
  check(beta1 >= 0 && beta1 < 1, "beta1: must be in [0, 1), got {}", beta1);
  check(beta2 >= 0 && beta2 < 1, "beta2: must be in [0, 1), got {}", beta2);
  check(std::isfinite(eps) && eps > 0, "eps: must be finite and > 0, got {}", eps);
  check(std::isfinite(weight_decay) && weight_decay >= 0, "weight_decay: must be finite and >= 0, got {}",
        weight_decay);
}

template <typename S>
AdamW<S>::AdamW(int64_t n, const AdamWConfig& config) : cfg_(config) {
  config.validate();
  check(n >= 0, "n: must be >= 0, got {}", n);
  m_ = Buffer<S>(static_cast<size_t>(n), "optimizer state/m (exp_avg)");
  v_ = Buffer<S>(static_cast<size_t>(n), "optimizer state/v (exp_avg_sq)");
  std::fill(m_.begin(), m_.end(), S(0));
  std::fill(v_.begin(), v_.end(), S(0));
}

template <typename S>
void AdamW<S>::set_config(const AdamWConfig& c) {
  c.validate();
  cfg_ = c;
}

template <typename S>
void AdamW<S>::step(std::span<S> params, std::span<const S> grads, double lr, double grad_scale) {
  check(params.size() == m_.size() && grads.size() == m_.size(),
        "params: the optimizer holds state for {} values, got {} parameters and {} gradients", m_.size(),
        params.size(), grads.size());
  advance();
  update(params, grads, 0, lr, grad_scale);
}

template <typename S>
void AdamW<S>::update(std::span<S> params, std::span<const S> grads, int64_t state_offset, double lr,
                      double grad_scale) {
  check(grads.size() == params.size(), "grads: {} values for {} parameters", grads.size(), params.size());
  check(state_offset >= 0 && state_offset + static_cast<int64_t>(params.size()) <= size(),
        "state_offset: [{}, {}) is outside the optimizer's {} values of state", state_offset,
        state_offset + static_cast<int64_t>(params.size()), size());
  check(t_ >= 1, "update: call advance() first (the step count is 0)");
  if (lr < 0) lr = cfg_.lr;
  const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(t_));
  const S step_size = static_cast<S>(lr / bc1);
  const S bc2_sqrt = static_cast<S>(std::sqrt(bc2));
  const S decay = static_cast<S>(1.0 - lr * cfg_.weight_decay);
  const S b1 = static_cast<S>(cfg_.beta1), b2 = static_cast<S>(cfg_.beta2), eps = static_cast<S>(cfg_.eps);
  const S gs = static_cast<S>(grad_scale);
  S* p = params.data();
  const S* g = grads.data();
  S* m = m_.data() + state_offset;
  S* v = v_.data() + state_offset;
  const auto n = static_cast<int64_t>(params.size());
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    const S gi = g[i] * gs;
    p[i] *= decay;
    m[i] = b1 * m[i] + (S(1) - b1) * gi;
    v[i] = b2 * v[i] + (S(1) - b2) * gi * gi;
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
  }
}

template <typename S>
void grad_sq_chunks(std::span<const S> grads, std::span<double> out) {
  // Fixed-size chunks: the same bits whatever the thread count.
  const auto n = static_cast<int64_t>(grads.size());
  const int64_t chunks = (n + kNormChunk - 1) / kNormChunk;
  check(static_cast<int64_t>(out.size()) == chunks, "out: {} values for the {} chunks of {} gradients",
        out.size(), chunks, n);
  const S* g = grads.data();
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    double ss = 0;
    for (int64_t i = c * kNormChunk; i < std::min(n, (c + 1) * kNormChunk); ++i)
      ss += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    out[static_cast<size_t>(c)] = ss;
  }
}

double norm_from_chunks(std::span<const double> chunks) {
  double ss = 0;
  for (double v : chunks) ss += v;
  return std::sqrt(ss);
}

template <typename S>
double grad_norm(std::span<const S> grads) {
  std::vector<double> part(
      static_cast<size_t>((static_cast<int64_t>(grads.size()) + kNormChunk - 1) / kNormChunk));
  grad_sq_chunks(grads, std::span<double>(part));
  return norm_from_chunks(part);
}

double clip_factor(double norm, double max_norm) {
  check(max_norm > 0, "max_norm: must be > 0, got {}", max_norm);
  return norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

double cosine_lr(int64_t t, double lr_max, double lr_min, int64_t warmup, int64_t cosine_steps) {
  if (t < warmup) return lr_max * static_cast<double>(t) / static_cast<double>(warmup);
  if (t <= cosine_steps && cosine_steps > warmup) {
    const double x = static_cast<double>(t - warmup) / static_cast<double>(cosine_steps - warmup);
    return lr_min + 0.5 * (1.0 + std::cos(M_PI * x)) * (lr_max - lr_min);
  }
  return t <= warmup ? lr_max : lr_min;
}

LossScaler::LossScaler(double initial, double growth, double backoff, int64_t growth_interval)
    : scale_(initial), growth_(growth), backoff_(backoff), interval_(growth_interval) {
  check(std::isfinite(initial) && initial > 0, "initial: the loss scale must be finite and > 0, got {}",
        initial);
  check(growth >= 1, "growth: must be >= 1, got {}", growth);
  check(backoff > 0 && backoff < 1, "backoff: must be in (0, 1), got {}", backoff);
  check(growth_interval >= 1, "growth_interval: must be >= 1, got {}", growth_interval);
}

bool LossScaler::update(bool finite) {
  if (!finite) {
    scale_ = std::max(scale_ * backoff_, 1.0 / 65536.0);
    streak_ = 0;
    ++skipped_;
    return false;
  }
  if (++streak_ >= interval_) {
    scale_ = std::min(scale_ * growth_, 1e30);
    streak_ = 0;
  }
  return true;
}

void LossScaler::restore(double scale, int64_t streak, int64_t skipped) {
  check(std::isfinite(scale) && scale > 0, "scale: must be finite and > 0, got {}", scale);
  scale_ = scale;
  streak_ = streak;
  skipped_ = skipped;
}

template class AdamW<float>;
template class AdamW<double>;
template double grad_norm<float>(std::span<const float>);
template double grad_norm<double>(std::span<const double>);
template void grad_sq_chunks<float>(std::span<const float>, std::span<double>);
template void grad_sq_chunks<double>(std::span<const double>, std::span<double>);

}  // namespace ridge::model
