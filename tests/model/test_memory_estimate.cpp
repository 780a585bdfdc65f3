// The memory a training step holds, as model::step_memory estimates it from the buffer description
// (what `ridge train` checks against the memory available, what `ridge bench model` prints), held to
// what the model and trainer actually allocate: each region exactly, and the step's measured peak
// (ridge's allocator counts every byte) within the kernels' own scratch of it.
#include <gtest/gtest.h>

#include <vector>

#include "ridge/core/memory.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/roofline.hpp"
#include "ridge/model/train.hpp"

namespace rm = ridge::model;
namespace mem = ridge::memory;

namespace {

struct Case {
  int64_t vocab, d_model, layers, heads, d_ff, batch, seq;
  int64_t kv_heads = 0;  // grouped-query attention when set
};

}  // namespace

TEST(MemoryEstimate, RegionsAreWhatTheModelAllocatesAndTheStepPeakMeetsTheTotal) {
  const Case cases[] = {{97, 64, 2, 4, 160, 2, 24},
                        {1000, 128, 3, 2, 352, 3, 64},
                        {300, 96, 1, 3, 200, 1, 33},
                        {97, 64, 2, 4, 160, 2, 24, 1},
                        {300, 96, 1, 6, 200, 1, 33, 2}};
  for (const Case& k : cases)
    for (rm::Precision p : {rm::Precision::fp32, rm::Precision::bf16, rm::Precision::fp16}) {
      rm::ModelConfig c;
      c.vocab_size = k.vocab;
      c.context_length = k.seq;
      c.d_model = k.d_model;
      c.num_layers = k.layers;
      c.num_heads = k.heads;
      c.num_kv_heads = k.kv_heads;
      c.d_ff = k.d_ff;
      rm::TrainConfig t;
      t.batch = k.batch;
      t.seq = k.seq;
      t.precision = p;
      const auto est = rm::step_memory(c, k.batch, k.seq, p);
      const std::string at = std::string(rm::precision_name(p)) + " d_model " + std::to_string(k.d_model) +
                             " kv_heads " + std::to_string(c.kv_heads());

      const int64_t base = mem::current_bytes();
      mem::reset_peak();
      {
        rm::Trainer trainer(c, t);
        std::vector<int32_t> in(static_cast<size_t>(k.batch * k.seq)), tg(in.size());
        for (size_t i = 0; i < in.size(); ++i) {
          in[i] = static_cast<int32_t>((i * 7) % static_cast<size_t>(k.vocab));
          tg[i] = static_cast<int32_t>((i * 11 + 5) % static_cast<size_t>(k.vocab));
        }
        trainer.step(in.data(), tg.data());
        const auto& model = trainer.model();
        EXPECT_EQ(static_cast<double>(model.params().size() * sizeof(float)), est.parameters) << at;
        EXPECT_EQ(static_cast<double>(model.grads().size() * sizeof(float)), est.gradients) << at;
        EXPECT_EQ(static_cast<double>(model.activation_bytes()), est.activations()) << at;
        EXPECT_EQ(static_cast<double>(model.workspace_bytes()), est.workspace) << at;
        EXPECT_EQ(static_cast<double>(c.param_count()), est.parameters / 4) << at;
      }
      // Everything the estimate counts is held at once during the step; beyond it the peak holds only
      // the kernels' scratch (GEMM packing, attention tiles) and the trainer's small arrays.
      const double peak = static_cast<double>(mem::peak_bytes() - base);
      EXPECT_GE(peak, est.total()) << at;
      EXPECT_LE(peak, est.total() * 1.15 + (1 << 20))
          << at << ": peak " << peak << " estimate " << est.total();
    }
}
