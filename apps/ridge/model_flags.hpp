// The model-size flags the analyzer's model commands share (`ridge roofline model`, `ridge roofline ddp`):
// a preset and its overrides, turned into a validated ModelConfig whose errors name the flags.
#pragma once

#include <string>

#include "core/check.hpp"
#include "ridge/core/units.hpp"
#include "ridge/model/config.hpp"

namespace ridge::cli {

struct ModelFlags {
  std::string size = "small", vocab = "10000", context = "256", batch = "4";
  std::string d_model, d_ff, layers, heads;
  std::string precision = "fp32", attention = "flash";

  int64_t count(const std::string& v, const char* flag) const { return units::parse_count(v, flag); }
  // The preset at --vocab and --context with --d-model/--d-ff/--layers/--heads applied; `custom` says
  // whether any override was given (the label then reads "SIZE (modified)").
  model::ModelConfig config(bool& custom) const {
    auto cfg = model::preset(size, count(vocab, "--vocab"), count(context, "--context"));
    custom = false;
    if (!d_model.empty()) cfg.d_model = count(d_model, "--d-model"), custom = true;
    if (!d_ff.empty()) cfg.d_ff = count(d_ff, "--d-ff"), custom = true;
    if (!layers.empty()) cfg.num_layers = count(layers, "--layers"), custom = true;
    if (!heads.empty()) cfg.num_heads = count(heads, "--heads"), custom = true;
    check(cfg.d_model % cfg.num_heads == 0, "--heads: {} does not divide d_model {}", cfg.num_heads, cfg.d_model);
    check(cfg.d_head() % 2 == 0, "--heads: d_model / heads = {} must be even (RoPE rotates pairs)", cfg.d_head());
    cfg.validate();
    return cfg;
  }
  std::string label(bool custom) const { return custom ? size + " (modified)" : size; }
};

}  // namespace ridge::cli
