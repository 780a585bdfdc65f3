// ridge.roofline: chips, the cost models, bounds, critical batch sizes and collectives, as Python
// objects (what `ridge roofline` computes). JSON forms travel as text; python/ridge/roofline.py
// parses them.
#include "common.hpp"
#include "ridge/roofline.hpp"
#include "ridge/roofline/decode.hpp"
#include "core/check.hpp"
#include "roofline/json.hpp"

namespace ridge::py {
namespace {

namespace rl = roofline;

rl::MatmulDtypes dtypes(const std::string& x, const std::string& w, const std::string& out,
                        const std::string& compute) {
  rl::MatmulDtypes dt;
  dt.x = parse_dtype(x);
  dt.w = parse_dtype(w);
  dt.out = parse_dtype(out);
  dt.compute = compute;
  return dt;
}

// A dtype argument of decode(): one of `accepted`, else a ValueError naming the argument.
DType decode_dtype(const std::string& text, const char* name, std::initializer_list<const char*> accepted) {
  std::string list;
  for (const char* a : accepted) {
    if (text == a) return parse_dtype(text);
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  fail_arg(name, "'{}' is not accepted (accepted: {})", text, list);
}

}  // namespace

void bind_roofline(nb::module_& m) {
  nb::class_<rl::Chip>(m, "Chip")
      .def_ro("id", &rl::Chip::id)
      .def_ro("name", &rl::Chip::name)
      .def_ro("kind", &rl::Chip::kind)
      .def_ro("origin", &rl::Chip::origin)
      .def("peak", nb::overload_cast<const std::string&>(&rl::Chip::peak, nb::const_), nb::arg("dtype"),
           "Dense FLOP/s for a dtype (fp64, fp32, tf32, bf16, fp16, fp8, int8).")
      .def("has_peak", &rl::Chip::has_peak, nb::arg("dtype"))
      .def("bandwidth", &rl::Chip::bandwidth, nb::arg("level") = "",
           "Bytes/s of a memory level (hbm, dram, l3, ...); the outermost when empty.")
      .def("link_bandwidth", &rl::Chip::link_bandwidth, nb::arg("which") = "intra_node")
      .def("describe", [](const rl::Chip& c) { return rl::describe(c); })
      .def("_json", [](const rl::Chip& c) { return to_json(c).dump(); })
      .def("__repr__",
           [](const rl::Chip& c) { return fmt::format("<ridge.roofline.Chip {}: {}>", c.id, c.name); });
  m.def("load_chip", &rl::load_chip, nb::arg("name_or_path"));
  m.def("chip_ids", &rl::chip_ids);

  nb::class_<rl::Cost>(m, "Cost")
      .def_ro("op", &rl::Cost::op)
      .def_ro("shape", &rl::Cost::shape)
      .def_ro("compute", &rl::Cost::compute)
      .def_prop_ro("flops", [](const rl::Cost& c) { return static_cast<double>(c.flops); })
      .def_prop_ro("memory_bytes", [](const rl::Cost& c) { return static_cast<double>(c.memory_bytes()); })
      .def_prop_ro("link_bytes", [](const rl::Cost& c) { return static_cast<double>(c.link_bytes()); })
      .def_prop_ro("intensity", &rl::Cost::intensity)
      .def("_json", [](const rl::Cost& c) { return to_json(c).dump(); })
      .def("__repr__", [](const rl::Cost& c) {
        return fmt::format("<ridge.roofline.Cost {} {}: {:.4g} FLOP, {:.4g} B>", c.op, c.shape,
                           static_cast<double>(c.flops), static_cast<double>(c.memory_bytes()));
      });

  nb::class_<rl::Bound>(m, "Bound")
      .def_ro("chip", &rl::Bound::chip)
      .def_ro("level", &rl::Bound::level)
      .def_ro("peak", &rl::Bound::peak)
      .def_ro("bandwidth", &rl::Bound::bandwidth)
      .def_ro("link_bandwidth", &rl::Bound::link_bandwidth)
      .def_ro("flops", &rl::Bound::flops)
      .def_ro("memory_bytes", &rl::Bound::memory_bytes)
      .def_ro("link_bytes", &rl::Bound::link_bytes)
      .def_ro("intensity", &rl::Bound::intensity)
      .def_ro("ridge_intensity", &rl::Bound::ridge_intensity)
      .def_ro("t_math", &rl::Bound::t_math)
      .def_ro("t_memory", &rl::Bound::t_memory)
      .def_ro("t_link", &rl::Bound::t_link)
      .def_ro("t_comm", &rl::Bound::t_comm)
      .def_ro("t_lower", &rl::Bound::t_lower)
      .def_ro("t_upper", &rl::Bound::t_upper)
      .def_ro("binding", &rl::Bound::binding)
      .def_ro("attainable_flops", &rl::Bound::attainable_flops)
      .def_ro("fraction_of_peak", &rl::Bound::fraction_of_peak)
      .def("_json", [](const rl::Bound& b) { return to_json(b).dump(); })
      .def("__repr__", [](const rl::Bound& b) {
        return fmt::format("<ridge.roofline.Bound on {}: {:.4g} s, {}-bound>", b.chip, b.t_lower, b.binding);
      });
  m.def(
      "bound",
      [](const rl::Cost& cost, const rl::Chip& chip, const std::string& level, const std::string& link) {
        rl::BoundOptions o;
        o.level = level;
        o.link = link;
        return rl::bound(cost, chip, o);
      },
      nb::arg("cost"), nb::arg("chip"), nb::arg("level") = "", nb::arg("link") = "intra_node");
  m.def(
      "describe",
      [](const rl::Cost& c, const rl::Bound& b, const rl::Chip& chip) { return rl::describe(c, b, chip); },
      nb::arg("cost"), nb::arg("bound"), nb::arg("chip"));

  m.def(
      "matmul",
      [](int64_t b, int64_t d, int64_t f, const std::string& x, const std::string& w, const std::string& out,
         const std::string& compute) { return rl::matmul(b, d, f, dtypes(x, w, out, compute)); },
      nb::arg("b"), nb::arg("d"), nb::arg("f"), nb::arg("x") = "bf16", nb::arg("w") = "bf16",
      nb::arg("out") = "bf16", nb::arg("compute") = "");
  m.def(
      "attention",
      [](int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t head_dim,
         const std::string& dtype, bool causal, bool backward, bool flash) {
        rl::AttentionShape s;
        s.batch = batch;
        s.heads = heads;
        s.seq_q = seq_q;
        s.seq_kv = seq_kv;
        s.head_dim = head_dim;
        s.dtype = parse_dtype(dtype);
        s.causal = causal;
        s.backward = backward;
        return flash ? rl::attention_flash(s) : rl::attention_naive(s);
      },
      nb::arg("batch"), nb::arg("heads"), nb::arg("seq_q"), nb::arg("seq_kv"), nb::arg("head_dim") = 64,
      nb::arg("dtype") = "bf16", nb::arg("causal") = false, nb::arg("backward") = false,
      nb::arg("flash") = true);
  m.def(
      "fp8_gemm",
      [](int64_t mm, int64_t n, int64_t k, const std::string& out) {
        return rl::fp8_gemm(mm, n, k, DType::fp8_e4m3, parse_dtype(out));
      },
      nb::arg("m"), nb::arg("n"), nb::arg("k"), nb::arg("out") = "bf16");
  m.def(
      "grouped_gemm_contiguous",
      [](const std::vector<int64_t>& m_per_group, int64_t n, int64_t k) {
        return rl::grouped_gemm_contiguous(m_per_group, n, k);
      },
      nb::arg("m_per_group"), nb::arg("n"), nb::arg("k"));
  m.def(
      "grouped_gemm_masked",
      [](int64_t max_m, const std::vector<int64_t>& valid_m, int64_t n, int64_t k) {
        return rl::grouped_gemm_masked(max_m, valid_m, n, k);
      },
      nb::arg("max_m"), nb::arg("valid_m"), nb::arg("n"), nb::arg("k"));
  auto dt = [](const std::string& s) { return parse_dtype(s); };
  m.def(
      "all_reduce",
      [dt](int64_t bytes, int64_t chips, const std::string& t) {
        return rl::all_reduce(bytes, chips, dt(t));
      },
      nb::arg("bytes"), nb::arg("chips"), nb::arg("dtype") = "bf16");
  m.def(
      "all_gather",
      [dt](int64_t bytes, int64_t chips, const std::string& t) {
        return rl::all_gather(bytes, chips, dt(t));
      },
      nb::arg("bytes"), nb::arg("chips"), nb::arg("dtype") = "bf16");
  m.def(
      "reduce_scatter",
      [dt](int64_t bytes, int64_t chips, const std::string& t) {
        return rl::reduce_scatter(bytes, chips, dt(t));
      },
      nb::arg("bytes"), nb::arg("chips"), nb::arg("dtype") = "bf16");
  m.def(
      "critical_batch",
      [](const rl::Chip& chip, int64_t d, int64_t f, const std::string& x, const std::string& w,
         const std::string& out, const std::string& compute, const std::string& level) {
        return rl::to_json(rl::critical_batch(chip, d, f, dtypes(x, w, out, compute), level)).dump();
      },
      nb::arg("chip"), nb::arg("d"), nb::arg("f"), nb::arg("x") = "bf16", nb::arg("w") = "bf16",
      nb::arg("out") = "bf16", nb::arg("compute") = "", nb::arg("level") = "");
  m.def(
      "_decode",
      [](int64_t vocab, int64_t d_model, int64_t layers, int64_t heads, int64_t kv_heads, int64_t d_ff,
         int64_t batch, int64_t context, const std::string& weights, const std::string& head,
         const std::string& embedding, const std::string& kv, const rl::Chip& chip, const std::string& level,
         int64_t prompt, bool sweep, int64_t experts, int64_t top_k, int64_t shared_experts, int64_t d_expert,
         const std::vector<int64_t>& moe_layers, const std::vector<double>& expert_histogram) {
        rl::ModelArch s;
        s.vocab_size = vocab;
        s.d_model = d_model;
        s.num_layers = layers;
        s.num_heads = heads;
        s.num_kv_heads = kv_heads;
        s.d_ff = d_ff;
        // Mixture of Experts (experts 0: a dense model).
        s.num_experts = experts;
        s.top_k = top_k;
        s.num_shared_experts = shared_experts;
        s.d_expert = d_expert;
        s.moe_layers = moe_layers;
        rl::InferenceDtypes dt;
        dt.weights = decode_dtype(weights, "weights", {"fp32", "bf16", "fp8", "fp8_e4m3"});
        if (!head.empty()) dt.head = decode_dtype(head, "head", {"fp32", "bf16", "fp8", "fp8_e4m3"});
        if (!embedding.empty()) dt.embedding = decode_dtype(embedding, "embedding", {"fp32", "bf16"});
        dt.kv = kv.empty() ? (dt.weights == DType::f32 ? DType::f32 : DType::bf16)
                           : decode_dtype(kv, "kv", {"fp32", "bf16"});
        return rl::decode_report_json(
            rl::decode_report(s, dt, batch, context, chip, level, prompt, sweep, expert_histogram));
      },
      nb::arg("vocab"), nb::arg("d_model"), nb::arg("layers"), nb::arg("heads"), nb::arg("kv_heads"),
      nb::arg("d_ff"), nb::arg("batch"), nb::arg("context"), nb::arg("weights"), nb::arg("head"),
      nb::arg("embedding"), nb::arg("kv"), nb::arg("chip"), nb::arg("level"), nb::arg("prompt"),
      nb::arg("sweep"), nb::arg("experts") = 0, nb::arg("top_k") = 0, nb::arg("shared_experts") = 0,
      nb::arg("d_expert") = 0, nb::arg("moe_layers") = std::vector<int64_t>{},
      nb::arg("expert_histogram") = std::vector<double>{});
  m.def(
      "critical_split_d",
      [](const rl::Chip& chip, int64_t chips, const std::string& link) {
        return rl::to_json(rl::critical_split_d(chip, chips, {}, link)).dump();
      },
      nb::arg("chip"), nb::arg("chips"), nb::arg("link") = "intra_node");
}

}  // namespace ridge::py
