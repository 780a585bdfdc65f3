// ridge.model: the Transformer LM with its trainer (AdamW, clipping, the schedule) and the training
// loop `ridge train` runs (model::train). Parameters and gradients are handed out as NumPy views of the
// model's flat buffers (the model stays alive while a view does); state_dict tensors are copied in by
// name with their shapes checked.
#include <nanobind/stl/pair.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "common.hpp"
#include "ridge/model/roofline.hpp"
#include "ridge/model/train.hpp"
#include "core/check.hpp"
#include "core/json.hpp"
#include "model/json.hpp"

namespace ridge::py {
namespace {

using model::Trainer;
using F32 = nb::ndarray<nb::numpy, float>;

model::ModelConfig config(const std::string& config_json) {
  model::ModelConfig cfg;
  model::from_json(input::parse_json(config_json, "config_json"), cfg);
  return cfg;
}

// The run's shape as the trainer takes it (the rest of TrainConfig at its defaults).
model::TrainConfig run_shape(int64_t batch, int64_t seq, const std::string& precision) {
  model::TrainConfig t;
  t.batch = batch;
  t.seq = seq;
  t.precision = model::parse_precision(precision);
  return t;
}

Trainer make(const std::string& config_json, const std::string& precision, const std::string& attention,
             int64_t batch, int64_t seq, double lr_max, double lr_min, int64_t warmup_steps,
             int64_t cosine_steps, double weight_decay, double beta1, double beta2, double eps,
             double max_grad_norm, uint64_t seed) {
  const model::ModelConfig cfg = config(config_json);
  model::TrainConfig t = run_shape(batch, seq, precision);
  t.attention = model::parse_attention_path(attention);
  t.lr_max = lr_max;
  t.lr_min = lr_min;
  t.warmup_steps = warmup_steps;
  t.cosine_steps = cosine_steps;
  t.adamw.weight_decay = weight_decay;
  t.adamw.beta1 = beta1;
  t.adamw.beta2 = beta2;
  t.adamw.eps = eps;
  t.max_grad_norm = max_grad_norm;
  t.seed = seed;
  return Trainer(cfg, t);
}

F32 view(nb::handle self, bool grad, const std::string& name) {
  Trainer& tr = nb::cast<Trainer&>(self);
  const auto& info = tr.model().tensor(name);
  std::span<float> s = grad ? tr.model().grad(name) : tr.model().param(name);
  std::vector<size_t> shape(info.shape.begin(), info.shape.end());
  return F32(s.data(), shape.size(), shape.data(), self);
}

// A non-trained state tensor (PyTorch's buffers: an MoE router's bias) by name: its info and its values.
const model::TensorInfo* state_info(Trainer& tr, const std::string& name) {
  for (const auto& t : tr.model().state_tensors())
    if (t.name == name) return &t;
  return nullptr;
}
std::span<float> state_span(Trainer& tr, const model::TensorInfo& info) {
  return tr.model().state().subspan(static_cast<size_t>(info.offset), static_cast<size_t>(info.numel));
}

F32 state_view(nb::handle self, const std::string& name) {
  Trainer& tr = nb::cast<Trainer&>(self);
  const model::TensorInfo* info = state_info(tr, name);
  check(info != nullptr, "state: the model has no state tensor '{}'", name);
  std::vector<size_t> shape(info->shape.begin(), info->shape.end());
  return F32(state_span(tr, *info).data(), shape.size(), shape.data(), self);
}

// Copies one state_dict tensor (float32, any strides, NumPy or torch) into the named parameter or state
// tensor.
void set_param(Trainer& tr, const std::string& name, const In& value) {
  const model::TensorInfo* st = state_info(tr, name);
  const auto& info = st ? *st : tr.model().tensor(name);
  const float* p = typed_data<float>(value, name.c_str(), DType::f32);
  check(value.ndim() == info.shape.size(), "{}: expected {} dimensions, got {}", name, info.shape.size(),
        value.ndim());
  for (size_t i = 0; i < info.shape.size(); ++i)
    check(static_cast<int64_t>(value.shape(i)) == info.shape[i], "{}: dimension {} must be {}, got {}", name,
          i, info.shape[i], value.shape(i));
  std::span<float> dst = st ? state_span(tr, *st) : tr.model().param(name);
  const size_t nd = info.shape.size();
  std::vector<int64_t> idx(nd, 0);
  for (size_t flat = 0; flat < dst.size(); ++flat) {
    int64_t off = 0;
    for (size_t i = 0; i < nd; ++i) off += idx[i] * value.stride(i);
    dst[flat] = p[off];
    for (size_t i = nd; i-- > 0;) {
      if (++idx[i] < info.shape[i]) break;
      idx[i] = 0;
    }
  }
}

// [batch, seq] int32 tokens, each in [0, vocab).
const int32_t* tokens(Trainer& tr, const In& a, const char* name, int64_t& batch, int64_t& seq) {
  const int32_t* p = typed_data<int32_t>(a, name, DType::i32);
  check(a.ndim() == 2, "{}: must be a 2-D [batch, seq] int32 array, got {} dimensions", name, a.ndim());
  batch = static_cast<int64_t>(a.shape(0));
  seq = static_cast<int64_t>(a.shape(1));
  check((seq <= 1 || a.stride(1) == 1) && (batch <= 1 || a.stride(0) == seq), "{}: must be C-contiguous",
        name);
  const int64_t vocab = tr.model().config().vocab_size;
  for (int64_t i = 0; i < batch * seq; ++i)
    check(p[i] >= 0 && p[i] < vocab, "{}: token {} at position {} is outside 0..{}", name, p[i], i,
          vocab - 1);
  return p;
}

// A Python exception is in the error indicator (a callback raised, or a signal's handler did): the
// loop unwinds without Python objects, and the binding raises it again once it holds the GIL.
struct PythonRaised {};

nb::dict log_dict(const model::StepLog& l) {
  nb::dict d;
  d["step"] = l.step;
  d["loss"] = l.result.loss;
  d["mean_loss"] = l.mean_loss;
  d["lr"] = l.result.lr;
  d["grad_norm"] = l.result.grad_norm;
  d["tokens_per_s"] = l.tokens_per_s;
  d["step_ms"] = l.step_ms;
  d["mfu"] = std::isnan(l.mfu) ? nb::object(nb::none()) : nb::object(nb::float_(l.mfu));
  d["skipped"] = l.result.skipped;
  d["loss_scale"] = l.result.loss_scale;
  d["seconds_left"] = l.seconds_left;
  return d;
}

// model::train with the GIL released; the log callback takes it for each logged step, which is also
// where Ctrl-C is noticed (KeyboardInterrupt ends the run there, the checkpoint unwritten).
nb::dict train(Trainer& t, const std::optional<std::string>& path, const std::optional<In>& tokens,
               int64_t steps, int64_t log_every, const std::string& checkpoint, int64_t save_every,
               double peak_flops, const std::optional<nb::callable>& on_log) {
  std::optional<text::TokenFile> file;
  std::vector<uint16_t> held;  // a copy: Python may change or free its array while the GIL is released
  if (path) {
    try {
      file = text::TokenFile::open(*path);
    } catch (const Error& e) {
      throw Error("data", e.what());
    }
  } else if (tokens) {
    const std::span<const int32_t> ids = int32_vector(*tokens, "data");
    check_arg(!ids.empty(), "data", "has 0 tokens; a row of seq {} needs at least {}", t.config().seq,
              t.config().seq + 1);
    held.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      check_arg(ids[i] >= 0 && ids[i] <= 65535, "data", "token {} at position {} is outside 0..65535", ids[i],
                i);
      held.push_back(static_cast<uint16_t>(ids[i]));
    }
  }
  const text::BatchSource source{file ? &*file : nullptr, held, t.model().config().vocab_size};
  const model::LoopConfig loop{.steps = steps,
                               .log_every = log_every,
                               .checkpoint = checkpoint,
                               .save_every = save_every,
                               .peak_flops = peak_flops,
                               .on_log = [&on_log](const model::StepLog& l) {
                                 nb::gil_scoped_acquire acquire;
                                 if (PyErr_CheckSignals() != 0) throw PythonRaised{};
                                 if (!on_log) return false;
                                 try {
                                   const nb::object stop = (*on_log)(log_dict(l));
                                   return stop.is(nb::handle(Py_True));
                                 } catch (nb::python_error& e) {
                                   e.restore();
                                   throw PythonRaised{};
                                 }
                               }};
  model::TrainSummary s;
  try {
    nb::gil_scoped_release release;
    s = model::train(t, source, loop);
  } catch (const PythonRaised&) {
    throw nb::python_error();
  }
  nb::dict d;
  d["first_step"] = s.first_step;
  d["steps"] = s.steps;
  d["stopped"] = s.stopped;
  d["last"] = log_dict(s.last);
  return d;
}

}  // namespace

void bind_model(nb::module_& m) {
  nb::class_<Trainer>(m, "Trainer")
      .def(nb::new_(&make), nb::arg("config_json"), nb::arg("precision"), nb::arg("attention"),
           nb::arg("batch"), nb::arg("seq"), nb::arg("lr_max"), nb::arg("lr_min"), nb::arg("warmup_steps"),
           nb::arg("cosine_steps"), nb::arg("weight_decay"), nb::arg("beta1"), nb::arg("beta2"),
           nb::arg("eps"), nb::arg("max_grad_norm"), nb::arg("seed"))
      .def("names",
           [](Trainer& t) {
             std::vector<std::string> out;
             for (const auto& i : t.model().tensors()) out.push_back(i.name);
             return out;
           })
      .def("shape",
           [](Trainer& t, const std::string& name) {
             const model::TensorInfo* st = state_info(t, name);
             return st ? st->shape : t.model().tensor(name).shape;
           })
      .def("state_names",
           [](Trainer& t) {
             std::vector<std::string> out;
             for (const auto& i : t.model().state_tensors()) out.push_back(i.name);
             return out;
           })
      .def("state", [](nb::handle self, const std::string& name) { return state_view(self, name); })
      .def("param", [](nb::handle self, const std::string& name) { return view(self, false, name); })
      .def("grad", [](nb::handle self, const std::string& name) { return view(self, true, name); })
      .def("set_param", &set_param, nb::arg("name"), nb::arg("value"))
      .def("config_json",
           [](Trainer& t) {
             nlohmann::json j;
             model::to_json(j, t.model().config());
             return j.dump();
           })
      .def(
          "forward",
          [](Trainer& t, const In& inputs, const std::optional<In>& targets) {
            int64_t b = 0, s = 0, bt = 0, st = 0;
            const int32_t* in = tokens(t, inputs, "inputs", b, s);
            const int32_t* tg = nullptr;
            if (targets) {
              tg = tokens(t, *targets, "targets", bt, st);
              check(bt == b && st == s, "targets: must have the inputs' shape [{}, {}], got [{}, {}]", b, s,
                    bt, st);
            }
            nb::gil_scoped_release release;
            return static_cast<double>(t.model().forward(in, tg, b, s));
          },
          nb::arg("inputs"), nb::arg("targets").none() = nb::none())
      .def("logits",
           [](nb::handle self) {
             Trainer& t = nb::cast<Trainer&>(self);
             auto l = t.model().logits();
             const size_t vocab = static_cast<size_t>(t.model().config().vocab_size);
             const size_t shape[2] = {l.size() / vocab, vocab};
             return nb::ndarray<nb::numpy, const float>(l.data(), 2, shape, self);
           })
      .def("backward",
           [](Trainer& t) {
             nb::gil_scoped_release release;
             t.model().backward();
           })
      .def("zero_grad", [](Trainer& t) { t.model().zero_grad(); })
      .def(
          "step",
          [](Trainer& t, const In& inputs, const In& targets) {
            int64_t b = 0, s = 0, bt = 0, st = 0;
            const int32_t* in = tokens(t, inputs, "inputs", b, s);
            const int32_t* tg = tokens(t, targets, "targets", bt, st);
            check(b == t.config().batch && s == t.config().seq,
                  "inputs: a training step takes [batch={}, seq={}] tokens (as the model was built), got "
                  "[{}, {}]",
                  t.config().batch, t.config().seq, b, s);
            check(bt == b && st == s, "targets: must have the inputs' shape [{}, {}], got [{}, {}]", b, s, bt,
                  st);
            model::StepResult r;
            {
              nb::gil_scoped_release release;
              r = t.step(in, tg);
            }
            nb::dict d;
            d["step"] = r.step;
            d["loss"] = r.loss;
            d["grad_norm"] = r.grad_norm;
            d["lr"] = r.lr;
            d["skipped"] = r.skipped;
            return d;
          },
          nb::arg("inputs"), nb::arg("targets"))
      .def("train", &train, nb::arg("path").none(), nb::arg("tokens").none(), nb::arg("steps"),
           nb::arg("log_every"), nb::arg("checkpoint"), nb::arg("save_every"), nb::arg("peak_flops"),
           nb::arg("on_log").none())
      .def("steps", &Trainer::steps)
      .def(
          "save", [](const Trainer& t, const std::string& path) { t.save(path); }, nb::arg("path"))
      .def("load", &Trainer::load, nb::arg("path"));
  m.def(
      "preset",
      [](const std::string& name, int64_t vocab, int64_t context) {
        nlohmann::json j;
        model::to_json(j, model::preset(name, vocab, context));
        return j.dump();
      },
      nb::arg("name"), nb::arg("vocab"), nb::arg("context"));
  m.def("preset_names", &model::preset_names);
  // What a checkpoint records of the run that wrote it: the model config (JSON text) and the training
  // precision, each None where the file has none (a weights-only file). TransformerLM.from_checkpoint.
  m.def(
      "checkpoint_info",
      [](const std::string& path) {
        std::optional<std::string> config, precision;
        if (const auto c = model::checkpoint_config(path)) {
          nlohmann::json j;
          model::to_json(j, *c);
          config = j.dump();
        }
        if (const auto p = model::checkpoint_precision(path)) precision = model::precision_name(*p);
        return std::make_pair(config, precision);
      },
      nb::arg("path"));
  // The parameter count and what one training step holds in bytes (model::step_memory: parameters,
  // gradients, AdamW's moments, the operand copy, activations, workspace; what `ridge train` checks
  // against the memory available), for python/ridge/model.py to refuse a model that cannot fit before
  // it builds one. batch and seq are checked as the trainer checks them.
  m.def(
      "step_memory",
      [](const std::string& config_json, int64_t batch, int64_t seq, const std::string& precision) {
        const model::ModelConfig cfg = config(config_json);
        const model::TrainConfig t = run_shape(batch, seq, precision);
        t.validate();
        return std::make_pair(cfg.param_count(), model::step_memory(cfg, batch, seq, t.precision).total());
      },
      nb::arg("config_json"), nb::arg("batch"), nb::arg("seq"), nb::arg("precision"));
  // The config's checks alone (every field, the fields together, the sizes they imply), before
  // python/ridge/model.py estimates the memory a model of that config needs.
  m.def(
      "validate_config", [](const std::string& config_json) { config(config_json); }, nb::arg("config_json"));
}

}  // namespace ridge::py
