// Threads, the ISA path, and re-labelling a raw uint16/uint8 view as bf16/fp8 (NumPy cannot hand
// ml_dtypes arrays over DLPack or the buffer protocol, so python/ridge/_arrays.py passes their
// integer view here and gets back the same memory with the right dtype: no copy).
#include <string>

#include "common.hpp"
#include "ridge/core/cpu.hpp"
#include "ridge/core/threads.hpp"
#include "ridge/core/version.hpp"
#include "core/check.hpp"

namespace ridge::py {
namespace {

nb::dlpack::dtype dlpack_dtype(const std::string& name) {
  using C = nb::dlpack::dtype_code;
  if (name == "bfloat16") return {static_cast<uint8_t>(C::Bfloat), 16, 1};
  if (name == "float8_e4m3fn") return {static_cast<uint8_t>(C::Float8_E4M3FN), 8, 1};
  if (name == "float8_e5m2") return {static_cast<uint8_t>(C::Float8_E5M2), 8, 1};
  fail("dtype: '{}' cannot be re-labelled; accepted: bfloat16, float8_e4m3fn, float8_e5m2", name);
}

template <typename A>
A relabel(const A& a, const std::string& name) {
  const auto want = dlpack_dtype(name);
  check(a.dtype().bits == want.bits && a.dtype().lanes == 1, "array: {} needs a {}-bit integer view", name,
        want.bits);
  check_cpu(a, "array");
  std::vector<size_t> shape(a.ndim());
  std::vector<int64_t> strides(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    shape[i] = a.shape(i);
    strides[i] = a.stride(i);
  }
  // The capsule holds a reference to the source array for as long as the new one lives.
  auto* keep = new A(a);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<A*>(p); });
  return A(a.data(), a.ndim(), shape.data(), owner, strides.data(), want);
}

}  // namespace

void bind_core(nb::module_& m) {
  m.def("version", &version,
        "ridge's version (CMakeLists.txt's project VERSION), as the package's __version__.");
  m.def("get_num_threads", &get_num_threads, "Threads ridge kernels use.");
  m.def("set_num_threads", &set_num_threads, nb::arg("n"),
        "Sets the thread count for later kernel calls (n >= 1).");
  m.def(
      "get_isa", [] { return std::string(cpu::isa_name(cpu::active_isa())); },
      "The instruction-set path kernels take: scalar, avx2, avx512, avx512bf16 or amx.");
  m.def(
      "set_isa", [](const std::string& isa) { cpu::set_isa(cpu::parse_isa(isa, "isa")); }, nb::arg("isa"),
      "Forces an instruction-set path for this process (ValueError if the machine cannot run it).");
  m.def("reset_isa", &cpu::reset_isa, "Returns to the best path (or RIDGE_ISA).");
  m.def(
      "supported_isas",
      [] {
        std::vector<std::string> out;
        for (auto i : cpu::supported_isas()) out.emplace_back(cpu::isa_name(i));
        return out;
      },
      "Every path this machine supports, lowest first.");
  m.def("_relabel", &relabel<Out>, nb::arg("array"), nb::arg("dtype"));
  m.def("_relabel_ro", &relabel<In>, nb::arg("array"), nb::arg("dtype"));
}

}  // namespace ridge::py
