// ridge.bench: the trace recorder (push/pop ranges, async ranges, markers, Chrome trace JSON) and
// the memory profiler's history and snapshots, so Python code lands in the same trace file as the
// C++ kernels it calls. python/ridge/bench.py adds the context managers and decorators.
#include "common.hpp"
#include "ridge/bench/memory.hpp"
#include "ridge/bench/trace.hpp"

namespace ridge::py {

void bind_bench(nb::module_& m) {
  m.def("start_recording", &trace::start_recording, nb::arg("max_events") = 0);
  m.def("stop_recording", &trace::stop_recording);
  m.def("recording", &trace::recording);
  m.def("clear", &trace::clear);
  m.def("event_count", &trace::event_count);
  m.def("dropped", &trace::dropped);
  m.def("to_json", [] { return trace::to_json_text(); });
  m.def("write", &trace::write, nb::arg("path"));
  m.def("set_thread_name", &trace::set_thread_name, nb::arg("name"));
  m.def("push", nb::overload_cast<const std::string&>(&trace::push), nb::arg("name"));
  m.def("pop", &trace::pop);
  nb::class_<trace::Handle>(m, "Handle").def_ro("name", &trace::Handle::name);
  m.def("start_range", &trace::start_range, nb::arg("name"), nb::arg("colour") = trace::color::none);
  m.def("end_range", &trace::end_range, nb::arg("handle"));
  m.def(
      "mark",
      [](const std::string& name, const std::string& category, uint32_t colour,
         std::optional<double> payload) {
        trace::Marker mk;
        mk.category = category;
        mk.colour = colour;
        mk.payload = payload;
        trace::mark(name, mk);
      },
      nb::arg("name"), nb::arg("category") = "", nb::arg("colour") = trace::color::none,
      nb::arg("payload").none() = nb::none());

  m.def("memory_record_history", &memory::record_history, nb::arg("max_entries") = 1'000'000);
  m.def("memory_stop_recording", &memory::stop_recording);
  m.def("memory_recording", &memory::recording);
  m.def("memory_dump_snapshot", &memory::dump_snapshot, nb::arg("path"));
  m.def("memory_snapshot", [] { return memory::snapshot_json_text(memory::history()); });
  m.def("memory_current_bytes", &memory::current_bytes);
  m.def("memory_peak_bytes", &memory::peak_bytes);
  m.def("memory_reset_peak", &memory::reset_peak);
}

}  // namespace ridge::py
