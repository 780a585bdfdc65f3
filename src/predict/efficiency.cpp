// Op classes, the efficiency of an op, and the efficiency file.
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/check.hpp"
#include "core/json.hpp"
#include "ridge/core/files.hpp"
#include "ridge/predict.hpp"

namespace ridge::predict {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string gemm_class(const roofline::ModelOp& op) {
  const bool dw = op.name.find(" dW") != std::string::npos, dx = op.name.find(" dX") != std::string::npos;
  const std::string layout = dw ? "tn" : dx ? "nn" : "nt";
  // The routed experts' grouped GEMMs: many short GEMMs, whatever their summed FLOPs.
  if (grouped_gemm(op)) return "grouped gemm " + layout;
  return fmt::format("gemm {} {}", layout, op.cost.flops < 2e9L ? "<2GF" : ">=2GF");
}

}  // namespace

bool grouped_gemm(const roofline::ModelOp& op) {
  return op.kind == "gemm" && op.name.rfind("gemm experts", 0) == 0;
}

bool exp_heavy(const roofline::ModelOp& op) {
  return op.kind == "elementwise" && (op.name.rfind("swiglu", 0) == 0 || op.name.rfind("loss", 0) == 0);
}

std::string op_class(const roofline::ModelOp& op, model::Precision precision) {
  const std::string prec = precision == model::Precision::bf16 ? "bf16" : "fp32";
  if (op.kind == "gemm") return prec + " " + gemm_class(op);
  if (op.kind == "attention") return prec + " attention";
  if (exp_heavy(op)) return "elementwise exp";
  return op.kind;  // elementwise, optimizer: fp32 streams whatever the precision
}

double Efficiencies::of(const roofline::ModelOp& op, model::Precision precision) const {
  auto it = by_class.find(op_class(op, precision));
  if (it == by_class.end() && exp_heavy(op)) it = by_class.find("elementwise");
  return it != by_class.end() && it->second > 0 ? it->second : 1.0;
}

void write_efficiencies(const std::string& path, const Efficiencies& e) {
  const json doc = {{"chip", e.chip},
                    {"threads", e.threads},
                    {"chip_file_mtime", e.chip_file_mtime},
                    {"version", e.version},
                    {"efficiency", e.by_class},
                    {"shapes", e.shapes},
                    {"note",
                     "efficiency = roofline bound on the probed roofs / measured time, per op class; "
                     "shapes disjoint from every model preset"}};
  files::write_text(path, doc.dump(2) + "\n", "efficiency file");
}

Efficiencies read_efficiencies(const std::string& path) {
  const std::string what = fmt::format("efficiency file '{}'", path);
  const json doc = input::read_json_file(path, "efficiency file");
  check_arg(doc.is_object(), what, "expected a JSON object (got {})", doc.type_name());
  Efficiencies e;
  e.chip_file_mtime = input::integer(input::field(doc, "chip_file_mtime", "", what), "chip_file_mtime", what);
  const json& eff = input::field(doc, "efficiency", "", what);
  check_arg(eff.is_object(), what, "field 'efficiency' must be an object (got {})", eff.type_name());
  for (const auto& [cls, v] : eff.items()) {
    const std::string at = "efficiency." + cls;
    const double x = input::number(v, at, what);
    check_arg(x > 0 && x <= 1, what, "field '{}' is {}; an efficiency is in (0, 1]", at, x);
    e.by_class[cls] = x;
  }
  const json& shapes = input::field(doc, "shapes", "", what);
  check_arg(shapes.is_object(), what, "field 'shapes' must be an object (got {})", shapes.type_name());
  for (const auto& [cls, v] : shapes.items()) e.shapes[cls] = input::string(v, "shapes." + cls, what);
  if (doc.contains("chip")) e.chip = input::string(doc["chip"], "chip", what);
  // A file without a version is a fit from before the grouped GEMMs' classes (version 1).
  e.version = doc.contains("version") ? static_cast<int>(input::integer(doc["version"], "version", what)) : 1;
  if (doc.contains("threads")) {
    const int64_t t = input::integer(doc["threads"], "threads", what);
    check_arg(t >= 0 && t <= (int64_t{1} << 20), what, "field 'threads' is {}; expected a thread count", t);
    e.threads = static_cast<int>(t);
  }
  return e;
}

std::string efficiency_path(const std::string& chip_file, int threads) {
  return (fs::path(chip_file).parent_path() / fmt::format("this.efficiency.t{}.json", threads)).string();
}

int64_t efficiency_file_mtime(const std::string& chip_file) {
  std::error_code ec;
  const auto t = fs::last_write_time(chip_file, ec);
  check_arg(!ec, "chip_file", "'{}' cannot be read ({})", chip_file, ec.message());
  return static_cast<int64_t>(t.time_since_epoch().count());
}

Efficiencies efficiencies(const roofline::Chip& chip, const FitOptions& options) {
  const int64_t mtime = efficiency_file_mtime(options.chip_file);
  if (!options.refit && fs::is_regular_file(options.path)) {
    try {
      Efficiencies e = read_efficiencies(options.path);
      if (e.chip_file_mtime == mtime && e.version == kFitVersion) return e;
    } catch (const Error&) {  // a damaged file is fitted again
    }
  }
  Efficiencies e = fit(chip);
  e.chip_file_mtime = mtime;
  e.version = kFitVersion;
  try {
    write_efficiencies(options.path, e);
  } catch (const Error&) {  // not saved (a read-only folder): used for this run, fitted again next time
  }
  return e;
}

}  // namespace ridge::predict
