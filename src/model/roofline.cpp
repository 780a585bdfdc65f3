#include "ridge/model/roofline.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "ridge/core/error.hpp"
#include "ridge/core/units.hpp"
#include "core/check.hpp"
#include "model/json.hpp"
#include "roofline/json.hpp"

namespace ridge::model {

roofline::ModelShape model_shape(const ModelConfig& c, int64_t batch, int64_t seq, Precision p,
                                 AttentionPath a) {
  roofline::ModelShape s;
  static_cast<roofline::ModelArch&>(s) = c;
  s.batch = batch;
  s.seq = seq;
  s.operand = p == Precision::fp32 ? DType::f32 : p == Precision::bf16 ? DType::bf16 : DType::fp16;
  s.flash = a == AttentionPath::flash;
  return s;
}

roofline::ModelMemory step_memory(const ModelConfig& c, int64_t batch, int64_t seq, Precision p,
                                  int expert_world) {
  check_arg(expert_world >= 1, "expert_world", "{} is not accepted (expected 1 or more)", expert_world);
  roofline::ModelShape m = model_shape(c, batch, seq, p, AttentionPath::flash);
  m.storage = p == Precision::fp16 ? DType::f32 : m.operand;
  roofline::ModelMemory r = roofline::model_memory(m);
  if (expert_world == 1 || !c.is_moe()) return r;
  // The share of the parameters the other ranks hold.
  const double all = static_cast<double>(roofline::model_parameter_elements(m));
  const double experts = static_cast<double>(roofline::model_param_groups(m).experts);
  const double kept = 1 - experts * (1 - 1.0 / expert_world) / all;
  r.parameters *= kept;
  r.gradients *= kept;
  r.optimizer_state *= kept;
  r.operand_copy *= kept;
  // Per MoE layer the owner keeps its received rows' x, SwiGLU's inputs and g (operand type; the rows
  // of its experts padded to the grouped GEMMs' alignment) and the outputs that came back (state type);
  // once, the rows leaving and arriving and the owner's GEMM output and rounded gradients
  // (TransformerLM's ep_* scratch).
  const double state = 4, operand = static_cast<double>(dtype_size(*m.storage));
  const double rows = static_cast<double>(batch * seq * c.top_k), D = static_cast<double>(c.d_model),
               De = static_cast<double>(c.expert_width());
  const double padded =
      rows + static_cast<double>(c.num_experts / expert_world * (roofline::kExpertRowAlignment - 1));
  r.exchange =
      static_cast<double>(c.num_moe_layers()) * (padded * (D + 3 * De) * operand + rows * D * state) +
      rows * 2 * D * std::max(state, operand) +
      padded * (std::max(2 * De, 2 * D) * state + std::max(2 * De, D) * operand);
  return r;
}

const char* mfu_peak_key(const roofline::Chip& chip, Precision p) {
  // fp16 operands are multiplied on the fp32 units (this CPU model has no fp16 dot products).
  return p == Precision::bf16 && chip.has_peak("bf16") ? "bf16" : "fp32";
}
double mfu_peak(const roofline::Chip& chip, Precision p) {
  return chip.peak(mfu_peak_key(chip, p));
}

DType operand_storage(DType operand, const roofline::Chip& chip) {
  if (operand == DType::fp16 && !chip.has_peak("fp16")) return DType::f32;
  return operand;
}

StepRoofline step_roofline(const std::string& label, const roofline::ModelShape& shape_in,
                           const roofline::Chip& chip, const std::string& level) {
  StepRoofline r;
  r.label = label;
  roofline::ModelShape shape = shape_in;
  if (!shape.storage) shape.storage = operand_storage(shape.operand, chip);
  r.shape = shape;
  r.chip = chip;
  r.params = static_cast<double>(roofline::model_param_count(shape));
  r.tokens = static_cast<double>(shape.batch * shape.seq);
  r.model_flops =
      roofline::model_matmul_flops(shape, "forward") + roofline::model_matmul_flops(shape, "backward");
  // A chip without a dtype's peak runs those ops at a peak it has: a CPU probe without fp16 multiplies
  // fp16 operands on its fp32 units; a TPU without a quoted fp32 peak runs elementwise work at bf16's.
  const std::string op_key = roofline::peak_key(shape.operand);
  std::map<std::string, std::string> key;
  for (const std::string& k : {op_key, std::string("fp32")}) {
    if (key.count(k)) continue;
    key[k] = k;
    if (chip.has_peak(k)) continue;
    for (const char* alt : {"fp32", "bf16", "fp16"})
      if (chip.has_peak(alt)) {
        key[k] = alt;
        break;
      }
    check(key[k] != k, "chip {}: has no {}, fp32, bf16 or fp16 peak to bound the model's ops with", chip.id,
          k);
    r.notes.push_back(
        fmt::format("{} has no {} peak: the {} ops are bounded at its {} peak", chip.id, k, k, key[k]));
  }
  if (*shape.storage != shape.operand)
    r.notes.push_back(fmt::format("{} operands are stored as {} ({} bytes per element moved, not {})",
                                  dtype_name(shape.operand), dtype_name(*shape.storage),
                                  dtype_size(*shape.storage), dtype_size(shape.operand)));
  r.roofs = fmt::format("{} {}", key[op_key], units::format_flops(chip.peak(key[op_key])));
  if (key["fp32"] != key[op_key])
    r.roofs += fmt::format(", {} {}", key["fp32"], units::format_flops(chip.peak(key["fp32"])));
  const auto& ml = chip.memory_level(level);
  r.roofs += fmt::format(", {} {}", ml.level, units::format_rate(ml.bandwidth.value));
  roofline::BoundOptions bo;
  bo.level = level;
  for (auto& op : roofline::model_step_ops(shape)) {
    op.cost.compute = key.at(op.cost.compute);
    OpBound e;
    e.bound = roofline::bound(op.cost, chip, bo);
    e.t_lower = e.bound.t_lower * static_cast<double>(op.count);
    e.op = std::move(op);
    const double c = static_cast<double>(e.op.count);
    for (PassSum* s : {&r.passes[e.op.pass], &r.step}) {
      s->flops += e.bound.flops * c;
      s->bytes += e.bound.memory_bytes * c;
      s->t_math += e.bound.t_math * c;
      s->t_memory += e.bound.t_memory * c;
      s->t_lower += e.t_lower;
    }
    r.ops.push_back(std::move(e));
  }
  return r;
}

nlohmann::json to_json(const StepRoofline& self) {
  auto sum = [](const PassSum& s) {
    return nlohmann::json{{"flops", s.flops},
                          {"memory_bytes", s.bytes},
                          {"t_math_s", s.t_math},
                          {"t_memory_s", s.t_memory},
                          {"t_lower_s", s.t_lower}};
  };
  nlohmann::json j;
  j["size"] = self.label;
  j["shape"] = {{"vocab", self.shape.vocab_size},
                {"d_model", self.shape.d_model},
                {"layers", self.shape.num_layers},
                {"heads", self.shape.num_heads},
                {"kv_heads", self.shape.kv_heads()},
                {"d_ff", self.shape.d_ff},
                {"batch", self.shape.batch},
                {"seq", self.shape.seq},
                {"operand", dtype_name(self.shape.operand)},
                {"operand_storage", dtype_name(self.shape.storage.value_or(self.shape.operand))},
                {"attention", self.shape.flash ? "flash" : "math"}};
  j["chip"] = self.chip.id;
  j["notes"] = self.notes;
  j["params"] = self.params;
  j["tokens"] = self.tokens;
  j["model_flops"] = self.model_flops;
  j["ops"] = nlohmann::json::array();
  for (const auto& e : self.ops) {
    nlohmann::json o = to_json(e.op.cost);
    o["pass"] = e.op.pass;
    o["kind"] = e.op.kind;
    o["name"] = e.op.name;
    o["count"] = e.op.count;
    o["bound"] = to_json(e.bound);
    o["t_lower_step_s"] = e.t_lower;
    j["ops"].push_back(o);
  }
  for (const auto& [k, s] : self.passes) j["passes"][k] = sum(s);
  j["step"] = sum(self.step);
  j["step"]["tokens_per_s_bound"] = self.tokens / self.step.t_lower;
  return j;
}

}  // namespace ridge::model
