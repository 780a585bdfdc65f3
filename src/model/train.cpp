#include "ridge/model/train.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/check.hpp"
#include "core/json.hpp"
#include "model/json.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/core/error.hpp"
#include "ridge/model/moe.hpp"
#include "ridge/model/ranges.hpp"
#include "ridge/model/safetensors.hpp"

namespace ridge::model {

void TrainConfig::validate() const {
  check(batch >= 1 && batch <= (int64_t{1} << 20), "batch: must be in 1..1048576, got {}", batch);
  check(seq >= 1, "seq: must be >= 1, got {}", seq);
  adamw.validate();
  check(std::isfinite(lr_max) && lr_max >= 0, "lr_max: must be finite and >= 0, got {}", lr_max);
  check(std::isfinite(lr_min) && lr_min >= 0 && lr_min <= lr_max,
        "lr_min: must be in [0, lr_max = {}], got {}", lr_max, lr_min);
  check(eot_id >= -1, "eot_id: must be a token id >= 0, or -1 (no document mask), got {}", eot_id);
  check(warmup_steps >= 0, "warmup_steps: must be >= 0, got {}", warmup_steps);
  check(cosine_steps >= 0, "cosine_steps: must be >= 0, got {}", cosine_steps);
  check(std::isfinite(max_grad_norm) && max_grad_norm >= 0, "max_grad_norm: must be finite and >= 0, got {}",
        max_grad_norm);
  check(std::isfinite(loss_scale) && loss_scale > 0, "loss_scale: must be finite and > 0, got {}",
        loss_scale);
  check(loss_scale_interval >= 1, "loss_scale_interval: must be >= 1, got {}", loss_scale_interval);
  check(optimizer_begin >= 0 && (optimizer_end == -1 || optimizer_end >= optimizer_begin),
        "optimizer_begin, optimizer_end: [{}, {}) is not a range (end -1: to the last parameter)",
        optimizer_begin, optimizer_end);
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
      model_(model, train.precision, train.attention, train.experts),
      adamw_(std::min<int64_t>(
                 train.optimizer_end < 0 ? static_cast<int64_t>(model_.params().size()) : train.optimizer_end,
                 static_cast<int64_t>(model_.params().size())) -
                 std::min<int64_t>(train.optimizer_begin, static_cast<int64_t>(model_.params().size())),
             train.adamw),
      scaler_(train.precision == Precision::fp16 ? train.loss_scale : 1.0, 2.0, 0.5,
              train.loss_scale_interval),
      rng_(train.seed) {
  train.validate();
  check(train.seq <= model.context_length, "seq: {} is longer than the model's context_length {}", train.seq,
        model.context_length);
  const auto n = static_cast<int64_t>(model_.params().size());
  check(train.optimizer_begin <= n && train.optimizer_end <= n,
        "optimizer_begin, optimizer_end: [{}, {}) is not a range of the {} parameters", train.optimizer_begin,
        train.optimizer_end, n);
  opt_begin_ = train.optimizer_begin;
  model_.set_document_mask(train.eot_id);
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
  check(begin >= 0 && begin <= end && end <= n, "begin, end: [{}, {}) is not a range of the {} parameters",
        begin, end, n);
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
  if (cfg_.cosine_steps == 0)
    return t < cfg_.warmup_steps
               ? cfg_.lr_max * static_cast<double>(t) / static_cast<double>(cfg_.warmup_steps)
               : cfg_.lr_max;
  return cosine_lr(t, cfg_.lr_max, cfg_.lr_min, cfg_.warmup_steps, cfg_.cosine_steps);
}

StepResult Trainer::step(const int32_t* inputs, const int32_t* targets) {
  StepResult r;
  r.loss_scale = cfg_.precision == Precision::fp16 ? scaler_.scale() : 1.0;
  model_.zero_grad();
  {
    RIDGE_RANGE(ranges::forward.text);
    r.loss = model_.forward(inputs, targets, cfg_.batch, cfg_.seq);
  }
  {
    RIDGE_RANGE(ranges::backward.text);
    if (hooks_)
      model_.backward(static_cast<float>(r.loss_scale), [this](int g) { hooks_->group_final(g); });
    else
      model_.backward(static_cast<float>(r.loss_scale));
  }
  const auto& tensors = model_.tensors();
  for (size_t i = 0; i < tensors.size(); ++i)
    if (frozen_[i]) std::fill_n(model_.grads().begin() + tensors[i].offset, tensors[i].numel, 0.0f);
  if (hooks_) {
    RIDGE_RANGE(ranges::reduce_gradients.text);
    hooks_->reduce_gradients(model_.grads());
  }
  // Mixture of Experts: the load of each MoE layer, from its counts summed over the workers (which the
  // bias balance below moves the biases from).
  std::vector<int64_t> counts;
  const ModelConfig& mc = model_.config();
  const int64_t tokens = cfg_.batch * cfg_.seq * (hooks_ ? hooks_->world() : 1);
  if (mc.is_moe()) {
    r.aux_loss = model_.aux_loss();
    for (const auto& st : model_.moe_stats()) counts.insert(counts.end(), st.count.begin(), st.count.end());
    if (hooks_) hooks_->sum_expert_counts(counts);
    const auto E = static_cast<size_t>(mc.num_experts);
    for (size_t at = 0; at < counts.size(); at += E)
      r.expert_load.push_back(moe::load_imbalance(std::span(counts).subspan(at, E), tokens, mc.top_k));
  }
  RIDGE_RANGE(ranges::optimizer.text);
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
    const int64_t b = std::max(ob, tensors[i].offset);
    const int64_t e = std::min(oe, tensors[j - 1].offset + tensors[j - 1].numel);
    if (b < e)
      adamw_.update(
          model_.params().subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)),
          std::span<const float>(model_.grads()).subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)),
          b - ob, r.lr, clip / r.loss_scale);
    i = j;
  }
  if (hooks_) {
    RIDGE_RANGE(ranges::gather_parameters.text);
    hooks_->after_update(model_.params());
  }
  // DeepSeek-V3's auxiliary-loss-free balance: the biases move after each step taken.
  if (mc.is_moe()) model_.update_router_bias(counts, tokens);
  r.step = adamw_.steps();
  return r;
}

StepResult Trainer::step(const text::TokenFile& data) {
  check(data.max_token() < model_.config().vocab_size,
        "data: token file '{}' holds token id {}, beyond the model's vocab_size {}", data.path(),
        data.max_token(), model_.config().vocab_size);
  text::sample_batch(data, cfg_.batch, cfg_.seq, rng_, inputs_.data(), targets_.data());
  return step(inputs_.data(), targets_.data());
}

namespace {
constexpr const char* kFormat = "ridge-checkpoint-1";

// The trainer's state a checkpoint's 'state' metadata holds, checked field by field.
struct SavedState {
  int64_t step = 0;
  text::Rng::State rng{};
  double loss_scale = 1;
  int64_t streak = 0, skipped = 0;
  Precision precision = Precision::fp32;
};

// A metadata value as a message shows it: JSON text, cut short (a hostile file may hold megabytes), and
// never a dump() of the whole value, which may be megabytes or deep.
std::string shown(const nlohmann::json& j) {
  return input::excerpt(j, 40);
}

// A metadata value parsed as JSON through input::parse_json, whose depth limit keeps a hostile value
// (nested 300,000 deep) from exhausting the stack; "checkpoint 'PATH': metadata 'KEY' is not JSON"
// otherwise, or says how deep it nests.
nlohmann::json parse_metadata(const std::string& path, const char* key, const std::string& text) {
  try {
    return input::parse_json(text, "metadata");
  } catch (const Error& e) {
    const std::string why = e.what();
    const std::string deep = "metadata: nested deeper";
    if (why.rfind(deep, 0) == 0)
      fail("checkpoint '{}': metadata '{}' is {}", path, key, why.substr(std::string("metadata: ").size()));
    fail("checkpoint '{}': metadata '{}' is not JSON", path, key);
  }
}

SavedState parse_state(const std::string& path, const std::string& text) {
  const nlohmann::json j = parse_metadata(path, "state", text);
  check(j.is_object(), "checkpoint '{}': metadata 'state' is not a JSON object", path);
  auto field = [&](const char* key) -> const nlohmann::json& {
    check(j.contains(key), "checkpoint '{}': metadata 'state' has no '{}'", path, key);
    return j.at(key);
  };
  // A count in 0..2^53: JSON's integers only (never a float, a string or a bool); the bound keeps every
  // later increment from overflowing and the value exact in any JSON reader.
  auto count = [&](const char* key) {
    constexpr uint64_t kMax = uint64_t{1} << 53;
    const auto& v = field(key);
    check(v.is_number_integer() &&
              (v.is_number_unsigned() ? v.get<uint64_t>() <= kMax
                                      : v.get<int64_t>() >= 0 && v.get<int64_t>() <= int64_t{kMax}),
          "checkpoint '{}': state '{}' is {}; it must be an integer in 0..2^53", path, key, shown(v));
    return v.get<int64_t>();
  };
  SavedState s;
  s.step = count("step");
  s.streak = count("loss_scale_streak");
  s.skipped = count("skipped_steps");
  const auto& rng = field("rng");
  check(
      rng.is_array() && rng.size() == 4 &&
          std::all_of(rng.begin(), rng.end(), [](const nlohmann::json& x) { return x.is_number_unsigned(); }),
      "checkpoint '{}': state 'rng' must be 4 unsigned 64-bit integers (the generator's state)", path);
  for (size_t i = 0; i < 4; ++i) s.rng[i] = rng[i].get<uint64_t>();
  check(s.rng != text::Rng::State{},
        "checkpoint '{}': state 'rng' is all zeros, which is not a generator state", path);
  const auto& ls = field("loss_scale");
  // The range the dynamic loss scaler keeps to (its back-off floor and growth ceiling).
  check(ls.is_number() && ls.get<double>() >= 1.0 / 65536.0 && ls.get<double>() <= 1e30,
        "checkpoint '{}': state 'loss_scale' is {}; it must be a number in [2^-16, 1e30]", path, shown(ls));
  s.loss_scale = ls.get<double>();
  const auto& p = field("precision");
  check(p.is_string(), "checkpoint '{}': state 'precision' is {}; it must be fp32, bf16 or fp16", path,
        shown(p));
  try {
    s.precision = parse_precision(p.get<std::string>());
  } catch (const Error&) {
    fail("checkpoint '{}': state 'precision' is {}; it must be fp32, bf16 or fp16", path, shown(p));
  }
  return s;
}

// A field of the model's config that differs from the checkpoint's: an error about that field, so
// a caller that took it under another name (a CLI flag) can say which.
template <typename T>
void check_same(const std::string& path, const char* field, const T& saved, const T& mine) {
  if (!(saved == mine))
    throw Error(field,
                fmt::format("this model has {} but checkpoint '{}' was written for {}; a checkpoint resumes "
                            "only the model it was written for",
                            mine, path, saved));
}
}  // namespace

void Trainer::save(const std::string& path) const {
  auto& self = const_cast<Trainer&>(*this);
  check(opt_begin_ == 0 && adamw_.size() == static_cast<int64_t>(model_.params().size()),
        "save: the optimizer state is sharded; gather it and pass it to save(path, exp_avg, exp_avg_sq)");
  write(path, self.adamw_.m(), self.adamw_.v(), nullptr);
}

void Trainer::save(const std::string& path, std::span<const float> m, std::span<const float> v) const {
  write(path, m, v, nullptr);
}

void Trainer::save(const std::string& path, const WholeStack& whole) const {
  auto& self = const_cast<Trainer&>(*this);
  check(static_cast<bool>(whole), "save: the whole-stack source is empty");
  check(opt_begin_ == 0 && adamw_.size() == static_cast<int64_t>(model_.params().size()),
        "save: the optimizer state is sharded; a model holding a block of the experts keeps all of its own");
  write(path, self.adamw_.m(), self.adamw_.v(), &whole);
}

void Trainer::write(const std::string& path, std::span<const float> m, std::span<const float> v,
                    const WholeStack* whole) const {
  auto& self = const_cast<Trainer&>(*this);  // the writer only reads the buffers it is handed
  check(m.size() == model_.params().size() && v.size() == m.size(),
        "exp_avg, exp_avg_sq: need {} values each, got {} and {}", model_.params().size(), m.size(),
        v.size());
  const ExpertShard& shard = model_.expert_shard();
  check(shard.whole() || whole,
        "save: this model holds the experts of worker {} of {} only; the checkpoint needs every worker's "
        "(distributed::DataParallel::save gathers them)",
        shard.rank, shard.world);
  SafetensorsWriter w;
  auto params = self.model_.params();
  const float* parts[3] = {params.data(), m.data(), v.data()};
  const std::string prefix[3] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
  for (const TensorInfo& t : model_.tensors())
    for (int part = 0; part < 3; ++part) {
      if (!t.partial()) {
        w.add(prefix[part] + t.name, DType::f32, t.shape, parts[part] + t.offset);
        continue;
      }
      w.add(prefix[part] + t.name, DType::f32, t.whole_shape(), [&t, part, whole](std::span<std::byte> dst) {
        (*whole)(t, part, {reinterpret_cast<float*>(dst.data()), dst.size() / sizeof(float)});
      });
    }
  // The router biases (balance bias): state the model keeps, not trained.
  for (const TensorInfo& t : model_.state_tensors())
    w.add(t.name, DType::f32, t.shape, self.model_.state().data() + t.offset);
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
  if (tokenizer_)
    w.set_metadata("tokenizer", nlohmann::json{{"path", tokenizer_->path},
                                               {"hash", fmt::format("{:016x}", tokenizer_->hash)},
                                               {"vocab_size", tokenizer_->vocab_size}}
                                    .dump());
  w.write(path);
}

namespace {

// A checkpoint checked against a model before anything is read into it: the structure
// (SafetensorsFile::load), the metadata, each tensor's dtype, shape and values. `precision`: the
// training run's, which a full checkpoint must have been written by (nullptr: any, weights only);
// with `state`, the optimizer tensors of a full checkpoint are checked too.
struct CheckedFile {
  SafetensorsFile f;
  bool full = false;
  SavedState state;
};
CheckedFile check_checkpoint(const std::string& path, const TransformerLM<float>& model,
                             const Precision* precision, bool state) {
  CheckedFile out{SafetensorsFile::load(path), false, {}};
  const SafetensorsFile& f = out.f;
  const auto& md = f.metadata();
  const ModelConfig& mine = model.config();

  // A ridge checkpoint has 'format', 'config' and 'state'; a weights-only file (PyTorch's state_dict)
  // none of them, or only 'config'.
  const bool full = md.count("format") || md.count("state");
  if (full) {
    check(md.count("format") && md.at("format") == kFormat,
          "checkpoint '{}': metadata 'format' is {}; ridge reads '{}'", path,
          md.count("format") ? shown(nlohmann::json(md.at("format"))) : std::string("missing"), kFormat);
    for (const char* key : {"config", "state"})
      check(md.count(key),
            "checkpoint '{}': metadata '{}' is missing (a ridge checkpoint has format, config and "
            "state)",
            path, key);
  }
  if (auto it = md.find("config"); it != md.end()) {
    ModelConfig c;
    const nlohmann::json j = parse_metadata(path, "config", it->second);
    try {
      c = j.get<ModelConfig>();
    } catch (const nlohmann::json::exception&) {
      fail("checkpoint '{}': metadata 'config' is not JSON", path);
    } catch (const Error& e) {
      fail("checkpoint '{}': metadata 'config' is not a valid model config ({})", path, e.what());
    }
    check_same(path, "vocab_size", c.vocab_size, mine.vocab_size);
    check_same(path, "context_length", c.context_length, mine.context_length);
    check_same(path, "d_model", c.d_model, mine.d_model);
    check_same(path, "num_layers", c.num_layers, mine.num_layers);
    check_same(path, "num_heads", c.num_heads, mine.num_heads);
    check_same(path, "num_kv_heads", c.kv_heads(), mine.kv_heads());
    check_same(path, "d_ff", c.d_ff, mine.d_ff);
    check_same(path, "rope_theta", c.rope_theta, mine.rope_theta);
    check_same(path, "rms_norm_eps", c.rms_norm_eps, mine.rms_norm_eps);
    // Mixture of Experts: a dense checkpoint into an MoE model, or the reverse, names num_experts.
    check_same(path, "num_experts", c.num_experts, mine.num_experts);
    if (mine.is_moe()) {
      check_same(path, "top_k", c.top_k, mine.top_k);
      check_same(path, "num_shared_experts", c.num_shared_experts, mine.num_shared_experts);
      check_same(path, "d_expert", c.expert_width(), mine.expert_width());
      check_same(path, "moe_layers", moe_layers_text(c), moe_layers_text(mine));
      check_same(path, "router", std::string(moe::gate_name(c.router)),
                 std::string(moe::gate_name(mine.router)));
      check_same(path, "balance", std::string(moe::balance_name(c.balance)),
                 std::string(moe::balance_name(mine.balance)));
      check_same(path, "aux_loss_coef", c.aux_loss_coef, mine.aux_loss_coef);
      check_same(path, "bias_update_speed", c.bias_update_speed, mine.bias_update_speed);
    }
  }
  out.full = full;
  if (full && precision) {
    out.state = parse_state(path, md.at("state"));
    if (out.state.precision != *precision)
      throw Error("precision",
                  fmt::format("this run trains in {} but checkpoint '{}' was written by a {} run; "
                              "resume it in {}",
                              precision_name(*precision), path, precision_name(out.state.precision),
                              precision_name(out.state.precision)));
  }

  // Each tensor: present, a float dtype (F32 in a ridge checkpoint, as save() writes), this model's
  // shape, and finite values (the second moments also >= 0, or AdamW's square root is NaN).
  enum class Kind { param, exp_avg, exp_avg_sq };
  auto validate = [&](const std::string& name, const TensorInfo& t, Kind kind) {
    const std::string what = kind == Kind::param ? "tensor" : "optimizer state";
    check(f.contains(name), "checkpoint '{}': missing the {} '{}'", path, what, name);
    const auto& e = f.at(name);
    const bool is_float =
        e.dtype == DType::f32 || e.dtype == DType::f64 || e.dtype == DType::bf16 || e.dtype == DType::fp16;
    check(full ? e.dtype == DType::f32 : is_float, "checkpoint '{}': tensor '{}' is {}; ridge reads {} here",
          path, name, safetensors_dtype_name(e.dtype), full ? "F32" : "F32, F64, BF16 or F16");
    check(e.shape == t.whole_shape(), "checkpoint '{}': tensor '{}' has the shape {}; this model's is {}",
          path, name, fmt::format("[{}]", fmt::join(e.shape, ", ")),
          fmt::format("[{}]", fmt::join(t.whole_shape(), ", ")));
    const std::vector<float> v = f.to_f32(name);
    for (size_t i = 0; i < v.size(); ++i) {
      check(std::isfinite(v[i]), "checkpoint '{}': tensor '{}' holds a non-finite value ({}) at index {}",
            path, name, v[i], i);
      check(kind != Kind::exp_avg_sq || v[i] >= 0,
            "checkpoint '{}': tensor '{}' holds a negative second moment ({}) at index {}", path, name, v[i],
            i);
    }
  };
  for (const TensorInfo& t : model.tensors()) {
    validate(t.name, t, Kind::param);
    if (full && state) {
      validate("optimizer.exp_avg." + t.name, t, Kind::exp_avg);
      validate("optimizer.exp_avg_sq." + t.name, t, Kind::exp_avg_sq);
    }
  }
  for (const TensorInfo& t : model.state_tensors()) validate(t.name, t, Kind::param);
  return out;
}

// The values of `name` that tensor t holds: the file's whole tensor, or a partial stack's block of it.
std::vector<float> held_values(const SafetensorsFile& f, const std::string& name, const TensorInfo& t) {
  std::vector<float> v = f.to_f32(name);
  if (!t.partial()) return v;
  return {v.begin() + t.whole_begin(), v.begin() + t.whole_begin() + t.numel};
}

void copy_params(const SafetensorsFile& f, TransformerLM<float>& model) {
  for (const TensorInfo& t : model.tensors()) {
    const std::vector<float> v = held_values(f, t.name, t);
    std::copy(v.begin(), v.end(), model.params().begin() + t.offset);
  }
  for (const TensorInfo& t : model.state_tensors()) {
    const std::vector<float> v = f.to_f32(t.name);
    std::copy(v.begin(), v.end(), model.state().begin() + t.offset);
  }
}

}  // namespace

std::optional<ModelConfig> checkpoint_config(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::load(path);
  const auto it = f.metadata().find("config");
  if (it == f.metadata().end()) return std::nullopt;
  const nlohmann::json j = parse_metadata(path, "config", it->second);
  try {
    return j.get<ModelConfig>();
  } catch (const nlohmann::json::exception&) {
    fail("checkpoint '{}': metadata 'config' is not JSON", path);
  } catch (const Error& e) {
    fail("checkpoint '{}': metadata 'config' is not a valid model config ({})", path, e.what());
  }
}

std::optional<Precision> checkpoint_precision(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::load(path);
  const auto it = f.metadata().find("state");
  if (it == f.metadata().end()) return std::nullopt;
  return parse_state(path, it->second).precision;
}

void load_weights(TransformerLM<float>& model, const std::string& path) {
  const CheckedFile c = check_checkpoint(path, model, nullptr, false);
  copy_params(c.f, model);
}

namespace {

std::optional<TokenizerRecord> tokenizer_record(const SafetensorsFile& f, const std::string& path) {
  const auto it = f.metadata().find("tokenizer");
  if (it == f.metadata().end()) return std::nullopt;
  TokenizerRecord r;
  try {
    const auto j = parse_metadata(path, "tokenizer", it->second);
    r.path = j.at("path").get<std::string>();
    const auto hash = j.at("hash").get<std::string>();
    check(hash.size() == 16 && hash.find_first_not_of("0123456789abcdef") == std::string::npos,
          "checkpoint '{}': metadata 'tokenizer': hash '{}' is not 16 hex digits", path, hash);
    r.hash = std::stoull(hash, nullptr, 16);
    r.vocab_size = j.at("vocab_size").get<int64_t>();
  } catch (const nlohmann::json::exception&) {
    fail("checkpoint '{}': metadata 'tokenizer' is not {{\"path\", \"hash\", \"vocab_size\"}}", path);
  }
  return r;
}

}  // namespace

std::optional<TokenizerRecord> checkpoint_tokenizer(const std::string& path) {
  return tokenizer_record(SafetensorsFile::load(path), path);
}

void Trainer::load(const std::string& path) {
  // Everything is checked before anything changes, so a bad file leaves the trainer as it was.
  const CheckedFile checked = check_checkpoint(path, model_, &cfg_.precision, true);
  auto record = tokenizer_record(checked.f, path);
  const SafetensorsFile& f = checked.f;
  const bool full = checked.full;
  const SavedState& state = checked.state;

  // Nothing below throws (but for memory): the trainer changes as a whole.
  // The optimizer state of this worker's range only (all of it unless sharded).
  auto copy_state = [&](const std::string& name, const TensorInfo& t, std::span<float> dst) {
    const int64_t b = std::max(opt_begin_, t.offset), e = std::min(optimizer_end(), t.offset + t.numel);
    if (b >= e) return;
    const std::vector<float> v = held_values(f, name, t);
    std::copy(v.begin() + (b - t.offset), v.begin() + (e - t.offset), dst.begin() + (b - opt_begin_));
  };
  copy_params(f, model_);
  if (full) {
    for (const TensorInfo& t : model_.tensors()) {
      copy_state("optimizer.exp_avg." + t.name, t, adamw_.m());
      copy_state("optimizer.exp_avg_sq." + t.name, t, adamw_.v());
    }
    adamw_.set_steps(state.step);
    rng_.set_state(state.rng);
    scaler_.restore(state.loss_scale, state.streak, state.skipped);
  }
  tokenizer_ = std::move(record);
}

}  // namespace ridge::model
