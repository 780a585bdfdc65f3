// model/fused.hpp's entry points: the active path's table (isa::pick_path), or false for the scalar
// twins in layers.hpp when the path has no vector code.
#include "model/fused.hpp"

#include "core/isa_paths.hpp"
#include "ridge/core/cpu.hpp"

namespace ridge::model::fused {
namespace {

const Kernels& kernels() {
  static const isa::PathTables<Kernels> tables({nullptr, nullptr, kernels_avx512, nullptr});
  return tables(cpu::active_isa());
}

// Calls the entry if the path has it.
template <typename Fn, typename... Args>
bool call(Fn fn, Args... args) {
  if (!fn) return false;
  fn(args...);
  return true;
}

}  // namespace

bool swiglu_forward(const float* ab, int64_t n, int64_t f, bf16* ab_saved, bf16* g) {
  return call(kernels().swiglu_forward_bf16, ab, n, f, ab_saved, g);
}
bool swiglu_forward(const float* ab, int64_t n, int64_t f, float* ab_saved, float* g) {
  return call(kernels().swiglu_forward_f32, ab, n, f, ab_saved, g);
}
bool swiglu_forward_fp16(const float* ab, int64_t n, int64_t f, float* ab_saved, float* g) {
  return call(kernels().swiglu_forward_fp16, ab, n, f, ab_saved, g);
}
bool swiglu_backward(const float* dg, const bf16* ab, int64_t n, int64_t f, bf16* dab) {
  return call(kernels().swiglu_backward_bf16, dg, ab, n, f, dab);
}
bool swiglu_backward(const float* dg, const float* ab, int64_t n, int64_t f, float* dab) {
  return call(kernels().swiglu_backward_f32, dg, ab, n, f, dab);
}
bool swiglu_backward_fp16(const float* dg, const float* ab, int64_t n, int64_t f, float* dab) {
  return call(kernels().swiglu_backward_fp16, dg, ab, n, f, dab);
}
bool cross_entropy_forward(const float* logits, const int32_t* targets, int64_t n, int64_t vocab, float* lse,
                           double* row_loss) {
  return call(kernels().cross_entropy_forward_f32, logits, targets, n, vocab, lse, row_loss);
}
bool cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, int64_t n,
                            int64_t vocab, float k, float* out) {
  return call(kernels().cross_entropy_backward_f32, logits, targets, lse, n, vocab, k, out);
}
bool cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, int64_t n,
                            int64_t vocab, float k, bf16* out) {
  return call(kernels().cross_entropy_backward_bf16, logits, targets, lse, n, vocab, k, out);
}

}  // namespace ridge::model::fused
