// The roofline of a Transformer LM's training step on a chip: the model's configuration and run
// settings turned into roofline::ModelShape, every op bounded on the chip, sums per pass and step.
// What `ridge roofline model` prints and what `ridge bench model --predict` starts from.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ridge/model/config.hpp"
#include "ridge/model/model.hpp"
#include "ridge/roofline.hpp"
#include "ridge/roofline/model_buffers.hpp"

namespace ridge::model {

roofline::ModelShape model_shape(const ModelConfig& c, int64_t batch, int64_t seq, Precision p,
                                 AttentionPath a);

// What one training step of ridge's model holds (parameters, gradients, AdamW state, the operand copy,
// activations, workspace), from the buffer description the model allocates from
// (ridge/roofline/model_buffers.hpp), with operands stored as the model stores them on this CPU (fp16
// values in fp32 storage). What `ridge train` checks against the memory available and `ridge bench
// model` prints as its analytic memory. `expert_world` > 1: one rank of expert parallelism over that many
// ranks (`ridge train --expert-parallel`): its block of the experts' parameters, gradients, AdamW state and
// operand copy, and the exchange's buffers at uniform routing (a rank receives as many rows as it sends).
roofline::ModelMemory step_memory(const ModelConfig& c, int64_t batch, int64_t seq, Precision p,
                                  int expert_world = 1);

// The peak a model FLOPs utilisation divides by: that of the units ridge's model runs its GEMMs on,
// bf16's for bf16 (fp32's on a chip without a bf16 peak), fp32's for fp32 and for fp16 (ridge
// multiplies fp16-rounded operands on the fp32 units). ridge::Error when the chip has no fp32 peak.
double mfu_peak(const roofline::Chip& chip, Precision p);
// Which of the chip's peaks mfu_peak returns: "bf16" or "fp32" (what a label names).
const char* mfu_peak_key(const roofline::Chip& chip, Precision p);

// How ridge's model stores operands of dtype `operand` on `chip`: the dtype itself, except fp16 on a
// chip without an fp16 peak (a CPU: no fp16 arithmetic), where the model emulates fp16 by rounding
// each operand through fp16 and keeping it in fp32 storage (4 bytes moved per element, not 2). A GPU
// or TPU chip file with an fp16 peak stores fp16 as fp16.
DType operand_storage(DType operand, const roofline::Chip& chip);

struct OpBound {
  roofline::ModelOp op;
  roofline::Bound bound;  // one run
  double t_lower = 0;     // all runs in a step: bound.t_lower * count
};

struct PassSum {
  double flops = 0, bytes = 0;
  double t_math = 0, t_memory = 0;  // sums over the ops: each roof alone
  double t_lower = 0;               // sum of the ops' bounds, each at its own roof
};

struct StepRoofline {
  std::string label;  // "small" or "custom"
  roofline::ModelShape shape;
  roofline::Chip chip;
  std::string roofs;               // "bf16 989 TFLOP/s, fp32 ..., hbm 3.35 TB/s"
  std::vector<std::string> notes;  // substitutions made (a peak the chip lacks)
  std::vector<OpBound> ops;
  std::map<std::string, PassSum> passes;  // forward, backward, optimizer
  PassSum step;
  double params = 0, tokens = 0;
  double model_flops = 0;  // GEMMs + attention, forward + backward: what MFU counts
};

// Bounds every op of the step on `chip` at memory level `level` ("" = outermost). A chip without
// the operand dtype's peak (a CPU probe without fp16) runs those ops at its fp32 peak, with a note,
// and, unless shape.storage says otherwise, its operands move as operand_storage() stores them.
StepRoofline step_roofline(const std::string& label, const roofline::ModelShape& shape,
                           const roofline::Chip& chip, const std::string& level = "");

}  // namespace ridge::model
