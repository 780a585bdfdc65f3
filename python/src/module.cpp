// ridge._ridge: the extension's entry point. ridge::Error becomes ValueError carrying ridge's
// one-line message; each module's bindings live in their own bind_<module>.cpp.
#include <string>

#include "common.hpp"

NB_MODULE(_ridge, m) {
  m.doc() = "ridge's C++ kernels (use the ridge.gemm, ridge.attention, ... modules, not this one)";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ridge::Error& e) {
      // A message may quote bytes of a user's file or path that are not UTF-8: escaped, never a
      // UnicodeDecodeError in place of the ValueError.
      const std::string what = e.what();
      PyObject* msg =
          PyUnicode_DecodeUTF8(what.data(), static_cast<Py_ssize_t>(what.size()), "backslashreplace");
      if (!msg) return;  // the decoder's own error (out of memory) stands
      PyErr_SetObject(PyExc_ValueError, msg);
      Py_DECREF(msg);
    }
  });
  auto core = m.def_submodule("core");
  ridge::py::bind_core(core);
  auto gemm = m.def_submodule("gemm");
  ridge::py::bind_gemm(gemm);
  auto attention = m.def_submodule("attention");
  ridge::py::bind_attention(attention);
  auto roofline = m.def_submodule("roofline");
  ridge::py::bind_roofline(roofline);
  auto bench = m.def_submodule("bench");
  ridge::py::bind_bench(bench);
  auto model = m.def_submodule("model");
  ridge::py::bind_model(model);
  ridge::py::bind_generate(model);
  auto data = m.def_submodule("data");
  ridge::py::bind_data(data);
}
