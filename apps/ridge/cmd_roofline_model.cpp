// `ridge roofline model`: every operation of a Transformer LM's training step (forward, backward,
// AdamW) with its FLOPs, bytes, intensity and bound on a chip; sums per pass and per step; the
// step-time and tokens/s bounds. An MoE model (the MoE flags, or an MoE --size) adds its router, grouped
// expert GEMMs at the active rows, permute and combine, and prints its total against its active parameters
// (MFU's FLOPs are the active ones). Parsing and printing only: the cost list is ridge::roofline's.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>

#include "cli.hpp"
#include "model_flags.hpp"
#include "ridge/core.hpp"
#include "ridge/model/config.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/roofline.hpp"
#include "core/check.hpp"
#include "roofline/json.hpp"
#include "model/json.hpp"

namespace ridge::cli {

namespace rr = ridge::roofline;

namespace {

struct Opts : ridge::cli::ModelFlags {
  std::string hw = "h100", level;
  bool json = false, brief = false;
};

std::string ms(double s) {
  return fmt::format("{:.4g} ms", s * 1e3);
}

void print_text(const ridge::model::StepRoofline& r, const Opts& o) {
  const auto& m = r.shape;
  fmt::print("{}: d_model {}, d_ff {}, {} layers, {}, vocab {} ({:.3g} M parameters)\n", r.label, m.d_model,
             m.d_ff, m.num_layers, heads_text(m.num_heads, m.kv_heads()), m.vocab_size, r.params / 1e6);
  if (m.is_moe())
    fmt::print(
        "MoE: {}; {:.4g} M parameters, {:.4g} M active per token (the model FLOPs below are the active "
        "ones)\n",
        moe_text(m), r.params / 1e6, static_cast<double>(rr::model_active_param_count(m)) / 1e6);
  fmt::print("batch {} x context {} = {} tokens, {} operands, {} attention\n", m.batch, m.seq,
             m.batch * m.seq, ridge::dtype_name(m.operand), m.flash ? "flash" : "math");
  fmt::print("chip {} ({}): {}\n", r.chip.id, r.chip.name, r.roofs);
  for (const auto& n : r.notes) fmt::print("note: {}\n", n);
  if (!o.brief) {
    // The op column fits the longest name (an MoE model's "swiglu backward (experts)"), 22 at least.
    size_t w = 22;
    for (const auto& e : r.ops) w = std::max(w, e.op.name.size());
    fmt::print("\n{:<9} {:<{}} {:>3} {:>11} {:>11} {:>8} {:>8} {:>11} {:>6}\n", "pass", "op", w, "x",
               "GFLOP/run", "MB/run", "FLOP/B", "bound", "T_lower", "share");
    for (const auto& e : r.ops) {
      fmt::print("{:<9} {:<{}} {:>3} {:>11.4g} {:>11.4g} {:>8.3g} {:>8} {:>11} {:>5.1f}%\n", e.op.pass,
                 e.op.name, w, e.op.count, static_cast<double>(e.op.cost.flops) / 1e9,
                 static_cast<double>(e.op.cost.memory_bytes()) / 1e6, e.bound.intensity, e.bound.binding,
                 ms(e.t_lower), 100.0 * e.t_lower / r.step.t_lower);
    }
  }
  fmt::print("\n{:<10} {:>11} {:>11} {:>11} {:>11} {:>11}\n", "pass", "GFLOP", "GB", "T_math", "T_memory",
             "T_lower");
  for (const char* name : {"forward", "backward", "optimizer"}) {
    const auto& s = r.passes.at(name);
    fmt::print("{:<10} {:>11.4g} {:>11.4g} {:>11} {:>11} {:>11}\n", name, s.flops / 1e9, s.bytes / 1e9,
               ms(s.t_math), ms(s.t_memory), ms(s.t_lower));
  }
  fmt::print("{:<10} {:>11.4g} {:>11.4g} {:>11} {:>11} {:>11}\n", "step", r.step.flops / 1e9,
             r.step.bytes / 1e9, ms(r.step.t_math), ms(r.step.t_memory), ms(r.step.t_lower));
  fmt::print("\nstep time >= {} (each op at its own roof, one after another); tokens/s <= {:.4g}\n",
             ms(r.step.t_lower), r.tokens / r.step.t_lower);
  fmt::print("forward >= {}, forward+backward >= {}; model FLOPs per step {:.4g} GFLOP (GEMMs + attention)\n",
             ms(r.passes.at("forward").t_lower),
             ms(r.passes.at("forward").t_lower + r.passes.at("backward").t_lower), r.model_flops / 1e9);
}

}  // namespace

void setup_roofline_model(CLI::App* parent) {
  auto o = std::make_shared<Opts>();
  auto* c = parent->add_subcommand("model",
                                   "every op of a Transformer LM training step (forward, backward, AdamW) "
                                   "on a chip: FLOPs, bytes, bound; step-time and tokens/s bounds");
  o->add_to(c);
  c->add_option("--hw", o->hw, "chip: h100, tpu-v5e, ..., 'this' (the probe's result), or a chip JSON file")
      ->capture_default_str();
  c->add_option("--level", o->level, "memory level to bound against; default outermost");
  c->add_flag("--brief", o->brief, "only the sums per pass and per step");
  c->add_flag("--json", o->json, "print one JSON document");
  c->callback([o] {
    bool custom = false;
    const auto cfg = o->config(custom);
    const auto shape = o->shape(cfg);
    const auto chip =
        ridge::cli::with_flags(ridge::cli::chip_flags("--hw"), [&] { return rr::load_chip(o->hw); });
    const auto report = ridge::cli::with_flags({{"level", "--level"}}, [&] {
      return ridge::model::step_roofline(o->label(custom), shape, chip, o->level);
    });
    if (o->json) {
      auto j = to_json(report);
      if (shape.is_moe()) {  // added keys: a dense model's document is what it was
        j["params_active"] = static_cast<double>(rr::model_active_param_count(shape));
        j["shape"]["experts"] = shape.num_experts;
        j["shape"]["top_k"] = shape.top_k;
        j["shape"]["shared_experts"] = shape.num_shared_experts;
        j["shape"]["d_expert"] = shape.expert_width();
        j["shape"]["moe_layers"] =
            shape.moe_layers.empty() ? nlohmann::json("all") : nlohmann::json(shape.moe_layers);
      }
      print_json(j);
    } else
      print_text(report, *o);
  });
}

}  // namespace ridge::cli
