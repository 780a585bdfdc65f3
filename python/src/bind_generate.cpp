// ridge.model's inference half: InferenceModel (weights in fp32, bf16 or FP8), Session (a paged KV cache:
// prefill, decode, logits) and generate(). Prompts arrive as lists of int lists (python/ridge/model.py
// checks their types); the library checks the values and names the argument.
#include <functional>

#include "common.hpp"
#include "ridge/generate/generate.hpp"
#include "ridge/model/train.hpp"
#include "core/check.hpp"

namespace ridge::py {
namespace {

using generate::InferenceModel;
using generate::Session;
using Prompts = std::vector<std::vector<int32_t>>;

generate::InferenceOptions options(const std::string& weights, const std::optional<std::string>& head,
                                   int64_t block_size) {
  generate::InferenceOptions o;
  o.weights = generate::parse_weight_format(weights, "weights");
  if (head) o.head = generate::parse_weight_format(*head, "head");
  o.block_size = block_size;
  return o;
}

}  // namespace

void bind_generate(nb::module_& m) {
  nb::class_<InferenceModel>(m, "InferenceModel")
      .def(
          "__init__",
          [](InferenceModel* self, const model::Trainer& t, const std::string& weights,
             const std::optional<std::string>& head, int64_t block_size) {
            const auto o = options(weights, head, block_size);
            nb::gil_scoped_release release;
            new (self) InferenceModel(const_cast<model::Trainer&>(t).model(), o);
          },
          nb::arg("trainer"), nb::arg("weights"), nb::arg("head").none(), nb::arg("block_size"))
      .def("weights",
           [](const InferenceModel& im) { return generate::weight_format_name(im.options().weights); })
      .def("head", [](const InferenceModel& im) { return generate::weight_format_name(im.head_format()); })
      .def("kv_dtype", [](const InferenceModel& im) { return std::string(dtype_name(im.kv_dtype())); })
      .def("weight_bytes", [](const InferenceModel& im) { return im.weight_bytes(); })
      .def("kv_bytes_per_token", &InferenceModel::kv_bytes_per_token);

  nb::class_<Session>(m, "Session")
      .def(
          "__init__",
          [](Session* self, const InferenceModel& im, int64_t max_sequences, int64_t cache_tokens) {
            new (self) Session(im, max_sequences, cache_tokens);
          },
          nb::arg("model"), nb::arg("max_sequences"), nb::arg("cache_tokens"), nb::keep_alive<1, 2>())
      .def(
          "prefill",
          [](Session& s, const Prompts& prompts) {
            nb::gil_scoped_release release;
            return s.prefill(prompts);
          },
          nb::arg("prompts"))
      .def(
          "decode",
          [](Session& s, const std::vector<int>& ids, const std::vector<int32_t>& tokens) {
            nb::gil_scoped_release release;
            s.decode(ids, tokens);
          },
          nb::arg("ids"), nb::arg("tokens"))
      .def(
          "logits",
          [](const Session& s, int id) {
            const auto l = s.logits(id);
            auto* copy = new std::vector<float>(l.begin(), l.end());
            nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
            const size_t shape[1] = {copy->size()};
            return nb::ndarray<nb::numpy, float>(copy->data(), 1, shape, owner);
          },
          nb::arg("id"))
      .def("length", &Session::length, nb::arg("id"))
      .def("live", &Session::live, nb::arg("id"))
      .def("release", &Session::release, nb::arg("id"))
      .def("free_blocks", &Session::free_blocks)
      .def("total_blocks", &Session::total_blocks)
      .def("block_size", &Session::block_size)
      .def("set_num_splits", &Session::set_num_splits, nb::arg("n"));

  m.def(
      "generate",
      [](const InferenceModel& im, const Prompts& prompts, int64_t max_tokens, double temperature,
         double top_p, int64_t top_k, uint64_t seed, int64_t eos, int num_splits,
         std::optional<nb::callable> on_token) {
        generate::GenerateOptions o;
        o.sampling.temperature = temperature;
        o.sampling.top_p = top_p;
        o.sampling.top_k = top_k;
        o.max_tokens = max_tokens;
        o.seed = seed;
        o.eos = eos;
        o.num_splits = num_splits;
        if (on_token) {
          o.on_token = [cb = *on_token](size_t p, int32_t t) {
            nb::gil_scoped_acquire acquire;
            cb(p, t);
          };
        }
        generate::GenerateStats st;
        Prompts out;
        {
          nb::gil_scoped_release release;
          out = generate::generate(im, prompts, o, &st);
        }
        nb::dict d;
        d["prefill_tokens"] = st.prefill_tokens;
        d["prefill_seconds"] = st.prefill_seconds;
        d["decode_tokens"] = st.decode_tokens;
        d["decode_steps"] = st.decode_steps;
        d["decode_seconds"] = st.decode_seconds;
        d["decode_bytes"] = st.decode_bytes;
        if (im.config().is_moe()) d["decode_experts_read"] = st.decode_experts_read;
        return nb::make_tuple(out, d);
      },
      nb::arg("model"), nb::arg("prompts"), nb::arg("max_tokens"), nb::arg("temperature"), nb::arg("top_p"),
      nb::arg("top_k"), nb::arg("seed"), nb::arg("eos"), nb::arg("num_splits"), nb::arg("on_token").none());
}

}  // namespace ridge::py
