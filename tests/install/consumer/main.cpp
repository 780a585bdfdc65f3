// Uses a GEMM, the roofline and attention through the installed headers and libraries, and checks
// one product by hand, so a broken link or header shows as a failure, not only a build error.
#include <cmath>
#include <cstdio>
#include <vector>

#include "ridge/attention.hpp"
#include "ridge/gemm.hpp"
#include "ridge/roofline.hpp"

int main() {
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 1, 0, 1, 0, 2, 2, 2}, d(6);
  // a [2,3], b [3,3] (nt: d = a b^T)
  ridge::gemm::f32_gemm_nt({a.data(), 2, 3, 3}, {b.data(), 3, 3, 3}, {d.data(), 2, 3, 3});
  const float want[6] = {4, 2, 12, 10, 5, 30};
  for (int i = 0; i < 6; ++i) {
    if (std::fabs(d[i] - want[i]) > 1e-5f) {
      std::printf("gemm mismatch at %d: %g vs %g\n", i, d[i], want[i]);
      return 1;
    }
  }
  const auto chip = ridge::roofline::load_chip("h100");
  const auto cost = ridge::roofline::matmul(4096, 8192, 8192);
  const auto bound = ridge::roofline::bound(cost, chip);
  if (!(bound.t_lower > 0)) return 1;
  try {
    ridge::gemm::f32_gemm_nt({a.data(), 2, 3, 3}, {b.data(), 3, 2, 2}, {d.data(), 2, 3, 3});
    return 1;  // mismatched k must throw
  } catch (const ridge::Error&) {
  }
  std::printf("consumer ok: h100 matmul bound %.3f ms (%s)\n", bound.t_lower * 1e3, bound.binding.c_str());
  return 0;
}
