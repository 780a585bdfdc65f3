#include "ridge/model/train.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "ridge/bench/trace.hpp"
#include "ridge/core/error.hpp"
#include "ridge/model/safetensors.hpp"
#include "core/check.hpp"
#include "core/json.hpp"
#include "model/json.hpp"

namespace ridge::model {

void TrainConfig::validate() const {
  check(batch >= 1 && batch <= (int64_t{1} << 20), "batch: must be in 1..1048576, got {}", batch);
  check(seq >= 1, "seq: must be >= 1, got {}", seq);
  adamw.validate();
  check(std::isfinite(lr_max) && lr_max >= 0, "lr_max: must be finite and >= 0, got {}", lr_max);
  check(std::isfinite(lr_min) && lr_min >= 0 && lr_min <= lr_max, "lr_min: must be in [0, lr_max = {}], got {}",
        lr_max, lr_min);
  check(warmup_steps >= 0, "warmup_steps: must be >= 0, got {}", warmup_steps);
  check(cosine_steps >= 0, "cosine_steps: must be >= 0, got {}", cosine_steps);
  check(std::isfinite(max_grad_norm) && max_grad_norm >= 0, "max_grad_norm: must be finite and >= 0, got {}",
        max_grad_norm);
  check(std::isfinite(loss_scale) && loss_scale > 0, "loss_scale: must be finite and > 0, got {}", loss_scale);
  check(loss_scale_interval >= 1, "loss_scale_interval: must be >= 1, got {}", loss_scale_interval);
  check(optimizer_begin >= 0 && (optimizer_end == -1 || optimizer_end >= optimizer_begin),
        "optimizer_begin, optimizer_end: [{}, {}) is not a range (end -1: to the last parameter)", optimizer_begin,
        optimizer_end);
}

namespace {
// Checked before any member is built from it (the optimizer range sizes AdamW's state).
const TrainConfig& validated(const TrainConfig& t) {
  t.validate();
  return t;
}
}  // namespace

Trainer::Trainer(const ModelConfig& model, const TrainConfig& train)
    : cfg_(validated(train)),
      model_(model, train.precision, train.attention),
      adamw_(std::min<int64_t>(train.optimizer_end < 0 ? static_cast<int64_t>(model_.params().size())
                                                       : train.optimizer_end,
                               static_cast<int64_t>(model_.params().size())) -
                 std::min<int64_t>(train.optimizer_begin, static_cast<int64_t>(model_.params().size())),
             train.adamw),
      scaler_(train.precision == Precision::fp16 ? train.loss_scale : 1.0, 2.0, 0.5, train.loss_scale_interval),
      rng_(train.seed) {
  train.validate();
  check(train.seq <= model.context_length, "seq: {} is longer than the model's context_length {}", train.seq,
        model.context_length);
  const auto n = static_cast<int64_t>(model_.params().size());
  check(train.optimizer_begin <= n && train.optimizer_end <= n,
        "optimizer_begin, optimizer_end: [{}, {}) is not a range of the {} parameters", train.optimizer_begin,
        train.optimizer_end, n);
  opt_begin_ = train.optimizer_begin;
  model_.init(train.seed);
  frozen_.assign(model_.tensors().size(), false);
  inputs_.resize(static_cast<size_t>(train.batch * train.seq));
  targets_.resize(inputs_.size());
}

void Trainer::set_frozen(const std::string& name, bool frozen) {
  const TensorInfo& t = model_.tensor(name);
  frozen_[static_cast<size_t>(&t - model_.tensors().data())] = frozen;
}

void Trainer::shard_optimizer(int64_t begin, int64_t end) {
  const auto n = static_cast<int64_t>(model_.params().size());
  check(begin >= 0 && begin <= end && end <= n, "begin, end: [{}, {}) is not a range of the {} parameters", begin, end,
        n);
  const int64_t t = adamw_.steps();
  const AdamWConfig c = adamw_.config();
  if (begin == opt_begin_ && end == optimizer_end()) {
    // The range the trainer was built with: reset the state in place, allocating nothing.
    std::fill(adamw_.m().begin(), adamw_.m().end(), 0.0f);
    std::fill(adamw_.v().begin(), adamw_.v().end(), 0.0f);
  } else {
    adamw_ = AdamW<float>();  // free the old state first: the peak is the larger range, not both
    adamw_ = AdamW<float>(end - begin, c);
  }
  adamw_.set_steps(t);
  opt_begin_ = begin;
}

double Trainer::lr_at(int64_t t) const {
  if (cfg_.cosine_steps == 0) return t < cfg_.warmup_steps ? cfg_.lr_max * static_cast<double>(t) /
                                                                 static_cast<double>(cfg_.warmup_steps)
                                                           : cfg_.lr_max;
  return cosine_lr(t, cfg_.lr_max, cfg_.lr_min, cfg_.warmup_steps, cfg_.cosine_steps);
}

StepResult Trainer::step(const int32_t* inputs, const int32_t* targets) {
  StepResult r;
  r.loss_scale = cfg_.precision == Precision::fp16 ? scaler_.scale() : 1.0;
  model_.zero_grad();
  {
    RIDGE_RANGE("forward");
    r.loss = model_.forward(inputs, targets, cfg_.batch, cfg_.seq);
  }
  {
    RIDGE_RANGE("backward");
    if (hooks_)
      model_.backward(static_cast<float>(r.loss_scale), [this](int g) { hooks_->group_final(g); });
    else
      model_.backward(static_cast<float>(r.loss_scale));
  }
  const auto& tensors = model_.tensors();
  for (size_t i = 0; i < tensors.size(); ++i)
    if (frozen_[i]) std::fill_n(model_.grads().begin() + tensors[i].offset, tensors[i].numel, 0.0f);
  if (hooks_) {
    RIDGE_RANGE("reduce gradients");
    hooks_->reduce_gradients(model_.grads());
  }
  RIDGE_RANGE("optimizer");
  const double scaled_norm = hooks_ ? hooks_->grad_norm(model_.grads()) : grad_norm<float>(model_.grads());
  r.grad_norm = scaled_norm / r.loss_scale;
  r.lr = lr_at(adamw_.steps());
  const bool finite = std::isfinite(scaled_norm);
  if (cfg_.precision == Precision::fp16) scaler_.update(finite);
  if (!finite) {
    r.skipped = true;
    r.step = adamw_.steps();
    return r;
  }
  const double clip = cfg_.max_grad_norm > 0 ? clip_factor(r.grad_norm, cfg_.max_grad_norm) : 1.0;
  // AdamW over the unfrozen tensors inside this worker's optimizer range, in maximal contiguous runs.
  adamw_.advance();
  const int64_t ob = optimizer_begin(), oe = optimizer_end();
  for (size_t i = 0; i < tensors.size();) {
    if (frozen_[i]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < tensors.size() && !frozen_[j]) ++j;
    const int64_t b = std::max(ob, tensors[i].offset), e = std::min(oe, tensors[j - 1].offset + tensors[j - 1].numel);
    if (b < e)
      adamw_.update(model_.params().subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)),
                    std::span<const float>(model_.grads()).subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)),
                    b - ob, r.lr, clip / r.loss_scale);
    i = j;
  }
  if (hooks_) {
    RIDGE_RANGE("gather parameters");
    hooks_->after_update(model_.params());
  }
  r.step = adamw_.steps();
  return r;
}

StepResult Trainer::step(const TokenFile& data) {
  check(data.max_token() < model_.config().vocab_size,
        "data: token file '{}' holds token id {}, beyond the model's vocab_size {}", data.path(), data.max_token(),
        model_.config().vocab_size);
  sample_batch(data, cfg_.batch, cfg_.seq, rng_, inputs_.data(), targets_.data());
  return step(inputs_.data(), targets_.data());
}

namespace {
constexpr const char* kFormat = "ridge-checkpoint-1";
}

void Trainer::save(const std::string& path) const {
  auto& self = const_cast<Trainer&>(*this);
  check(opt_begin_ == 0 && adamw_.size() == static_cast<int64_t>(model_.params().size()),
        "save: the optimizer state is sharded; gather it and pass it to save(path, exp_avg, exp_avg_sq)");
  save(path, self.adamw_.m(), self.adamw_.v());
}

void Trainer::save(const std::string& path, std::span<const float> m, std::span<const float> v) const {
  auto& self = const_cast<Trainer&>(*this);  // the writer only reads the buffers it is handed
  check(m.size() == model_.params().size() && v.size() == m.size(),
        "exp_avg, exp_avg_sq: need {} values each, got {} and {}", model_.params().size(), m.size(), v.size());
  SafetensorsWriter w;
  auto params = self.model_.params();
  for (const TensorInfo& t : model_.tensors()) {
    w.add(t.name, DType::f32, t.shape, params.data() + t.offset);
    w.add("optimizer.exp_avg." + t.name, DType::f32, t.shape, m.data() + t.offset);
    w.add("optimizer.exp_avg_sq." + t.name, DType::f32, t.shape, v.data() + t.offset);
  }
  nlohmann::json cfg = model_.config();
  const auto st = rng_.state();
  nlohmann::json state = {{"step", adamw_.steps()},
                          {"rng", {st[0], st[1], st[2], st[3]}},
                          {"loss_scale", scaler_.scale()},
                          {"loss_scale_streak", scaler_.clean_streak()},
                          {"skipped_steps", scaler_.skipped()},
                          {"precision", precision_name(cfg_.precision)}};
  w.set_metadata("format", kFormat);
  w.set_metadata("config", cfg.dump());
  w.set_metadata("state", state.dump());
  w.write(path);
}

void Trainer::load(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::load(path);
  const auto& md = f.metadata();
  if (auto it = md.find("config"); it != md.end()) {
    ModelConfig c;
    try {
      c = nlohmann::json::parse(it->second).get<ModelConfig>();
    } catch (const nlohmann::json::exception&) {
      fail("checkpoint '{}': its 'config' metadata is not a model config", path);
    }
    check(c == model_.config(),
          "checkpoint '{}': written for a model with d_model {}, {} layers, {} heads, d_ff {}, vocab {}, context {}; "
          "this model has d_model {}, {} layers, {} heads, d_ff {}, vocab {}, context {}",
          path, c.d_model, c.num_layers, c.num_heads, c.d_ff, c.vocab_size, c.context_length,
          model_.config().d_model, model_.config().num_layers, model_.config().num_heads, model_.config().d_ff,
          model_.config().vocab_size, model_.config().context_length);
  }
  auto copy = [&](const std::string& name, const TensorInfo& t, std::span<float> dst) {
    const auto& e = f.at(name);
    check(e.shape == t.shape, "checkpoint '{}': tensor '{}' has the wrong shape for this model", path, name);
    const std::vector<float> v = f.to_f32(name);
    std::copy(v.begin(), v.end(), dst.begin() + t.offset);
  };
  // The optimizer state of this worker's range only (all of it unless sharded).
  auto copy_state = [&](const std::string& name, const TensorInfo& t, std::span<float> dst) {
    const int64_t b = std::max(opt_begin_, t.offset), e = std::min(optimizer_end(), t.offset + t.numel);
    if (b >= e) return;
    const std::vector<float> v = f.to_f32(name);
    std::copy(v.begin() + (b - t.offset), v.begin() + (e - t.offset), dst.begin() + (b - opt_begin_));
  };
  // Check everything before changing anything, so a bad file leaves the trainer as it was.
  for (const TensorInfo& t : model_.tensors()) {
    check(f.contains(t.name), "checkpoint '{}': missing the tensor '{}'", path, t.name);
    check(f.at(t.name).shape == t.shape, "checkpoint '{}': tensor '{}' has the wrong shape for this model", path,
          t.name);
  }
  const bool full = md.count("format") && md.at("format") == kFormat;
  nlohmann::json state;
  if (full) {
    try {
      state = nlohmann::json::parse(md.at("state"));
      (void)state.at("step").get<int64_t>();
      (void)state.at("rng").get<std::array<uint64_t, 4>>();
      (void)state.at("loss_scale").get<double>();
    } catch (const nlohmann::json::exception&) {
      fail("checkpoint '{}': its 'state' metadata is damaged", path);
    }
    for (const TensorInfo& t : model_.tensors()) {
      check(f.contains("optimizer.exp_avg." + t.name) && f.contains("optimizer.exp_avg_sq." + t.name),
            "checkpoint '{}': missing the optimizer state of '{}'", path, t.name);
      check(f.at("optimizer.exp_avg." + t.name).shape == t.shape &&
                f.at("optimizer.exp_avg_sq." + t.name).shape == t.shape,
            "checkpoint '{}': the optimizer state of '{}' has the wrong shape for this model", path, t.name);
    }
  }
  for (const TensorInfo& t : model_.tensors()) copy(t.name, t, model_.params());
  if (full) {
    for (const TensorInfo& t : model_.tensors()) {
      copy_state("optimizer.exp_avg." + t.name, t, adamw_.m());
      copy_state("optimizer.exp_avg_sq." + t.name, t, adamw_.v());
    }
    adamw_.set_steps(state.at("step").get<int64_t>());
    rng_.set_state(state.at("rng").get<std::array<uint64_t, 4>>());
    scaler_.restore(state.at("loss_scale").get<double>(), state.value("loss_scale_streak", int64_t{0}),
                    state.value("skipped_steps", int64_t{0}));
  }
}

}  // namespace ridge::model
