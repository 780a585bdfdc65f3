// The model-size flags the analyzer's model commands share (`ridge roofline model`, `ridge roofline ddp`,
// `ridge roofline decode`): declared once (add_to), a preset and its overrides (the MoE flags among them,
// moe_flags.hpp) turned into a validated ModelConfig whose errors name the flags.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <utility>

#include "cli.hpp"
#include "moe_flags.hpp"
#include "core/check.hpp"
#include "ridge/core/numbers.hpp"
#include "ridge/model/config.hpp"
#include "ridge/model/roofline.hpp"

namespace ridge::cli {

// The ModelConfig fields the model flags set, as the library names them and as the user types them
// (rope_theta has no flag). num_heads comes before d_model: in_flag_words replaces in this order. The MoE
// fields' flags are as MoeFlags declares them (model_fields: `ridge generate` names top_k --expert-top-k).
inline const FlagNames kModelFields = {{"vocab_size", "--vocab"},
                                       {"context_length", "--context"},
                                       {"num_layers", "--layers"},
                                       {"num_heads", "--heads"},
                                       {"d_model", "--d-model"},
                                       {"d_ff", "--d-ff"},
                                       {"num_kv_heads", "--kv-heads"},
                                       {"num_experts", "--experts"},
                                       {"top_k", "--top-k"},
                                       {"num_shared_experts", "--shared-experts"},
                                       {"d_expert", "--d-expert"},
                                       {"moe_layers", "--moe-layers"},
                                       {"aux_loss_coef", "--aux-loss-coef"},
                                       {"bias_update_speed", "--bias-speed"}};

// kModelFields with the experts' top-k named as `moe` declares it.
inline FlagNames model_fields(const MoeFlags& moe) {
  FlagNames f = kModelFields;
  for (auto& [field, flag] : f)
    if (field == "top_k") flag = moe.top_k_flag;
  return f;
}

// The size presets as --size's help lists them: "tiny, small, ..., moe-small".
inline std::string preset_list() {
  std::string presets;
  for (const auto& n : model::preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  return presets;
}

// "12 heads", or "12 heads (4 kv heads)" for grouped-query attention: how the commands print them.
inline std::string heads_text(int64_t heads, int64_t kv_heads) {
  return kv_heads == heads ? fmt::format("{} heads", heads)
                           : fmt::format("{} heads ({} kv heads)", heads, kv_heads);
}

// An MoE model's experts as the commands print them: "64 experts (top-3, 1 shared, d_expert 768) in layers
// all, softmax router, aux balance".
inline std::string moe_text(const roofline::ModelArch& m) {
  return fmt::format(
      "{} experts (top-{}{}, d_expert {}) in layers {}, {} router, {} balance", m.num_experts, m.top_k,
      m.num_shared_experts > 0 ? fmt::format(", {} shared", m.num_shared_experts) : "", m.expert_width(),
      model::moe_layers_text(m), model::moe::gate_name(m.router), model::moe::balance_name(m.balance));
}

// --kv-heads against the heads it shares out: one line naming both flags when it does not divide them.
inline void check_kv_heads(int64_t kv_heads, int64_t heads) {
  check(heads % kv_heads == 0,
        "--kv-heads: {} does not divide --heads {} (each kv head serves heads / kv-heads query "
        "heads; accepted: a divisor of {})",
        kv_heads, heads, heads);
}

// The model library's messages name its fields ("preset: ...", "ModelConfig: context_length ...");
// the user typed flags. The message of such an error in the flags' words (`fields`: the flag of each
// field), or nothing for another error.
inline std::optional<std::string> flag_words(const ridge::Error& e, const FlagNames& fields = kModelFields) {
  std::string m = e.what();
  static const std::pair<const char*, const char*> prefixes[] = {{"preset: ", "--size: "},
                                                                 {"precision: ", "--precision: "},
                                                                 {"attention: ", "--attention: "},
                                                                 {"ModelConfig: ", ""}};
  bool known = false;
  for (const auto& [from, to] : prefixes)
    if (m.rfind(from, 0) == 0) {
      m = to + m.substr(std::string(from).size());
      known = true;
      break;
    }
  if (!known) return std::nullopt;
  // Field names as the flags that set them; d_head ("d_model / num_heads") before d_model.
  FlagNames names = fields;
  names.insert(names.begin() + 4, {"d_head", "d_model / heads"});
  for (const auto& [field, flag] : names)
    for (size_t at = m.find(field); at != std::string::npos; at = m.find(field, at + flag.size()))
      m.replace(at, field.size(), flag);
  return m;
}

// Runs `body` and throws a model library error again in the flags' words (flag_words).
template <typename F>
decltype(auto) in_flag_words(F&& body, const FlagNames& fields = kModelFields) {
  try {
    return body();
  } catch (const ridge::Error& e) {
    if (auto m = flag_words(e, fields)) throw ridge::Error(*m);
    throw;
  }
}

struct ModelFlags {
  std::string size = "small", vocab = "10000", context = "256", batch = "4";
  std::string d_model, d_ff, layers, heads, kv_heads;
  std::string precision = "fp32", attention = "flash";
  MoeFlags moe;

  // Declares the shared flags on `c`, bound to this object (which must outlive the parse): --size,
  // --vocab, --context, --batch (batch_help says what one batch is), --d-model, --d-ff, --layers,
  // --heads, --kv-heads, --precision, --attention. One definition, so the commands cannot drift apart.
  void add_to(CLI::App* c, const std::string& batch_help = "sequences per batch") {
    add_preset_to(c);
    c->add_option("--batch", batch, batch_help)->capture_default_str();
    add_overrides_to(c);
    c->add_option("--precision", precision, "fp32, bf16 or fp16")->capture_default_str();
    c->add_option("--attention", attention, "flash or math")->capture_default_str();
  }
  // The size flags alone, for a command with a batch and dtypes of its own (`ridge roofline decode`):
  // --size, --vocab, --context (add_preset_to) and --d-model, --d-ff, --layers, --heads, --kv-heads and
  // the MoE flags (add_overrides_to).
  void add_preset_to(CLI::App* c, const std::string& context_help = "tokens per sequence") {
    c->add_option("--size", size, "model preset: " + preset_list())->capture_default_str();
    c->add_option("--vocab", vocab, "vocabulary size")->capture_default_str();
    c->add_option("--context", context, context_help)->capture_default_str();
  }
  void add_overrides_to(CLI::App* c) {
    c->add_option("--d-model", d_model, "override the preset's d_model");
    c->add_option("--d-ff", d_ff, "override the preset's d_ff");
    c->add_option("--layers", layers, "override the preset's layer count");
    c->add_option("--heads", heads, "override the preset's head count");
    c->add_option(
        "--kv-heads", kv_heads,
        "key/value heads, a divisor of the head count (grouped-query attention; default: as many as "
        "heads)");
    moe.add_to(c);
  }

  int64_t count(const std::string& v, const char* flag) const {
    return numbers::parse_integer(v, flag, numbers::kCount);
  }
  // The preset at --vocab and --context with --d-model/--d-ff/--layers/--heads/--kv-heads/MoE applied;
  // `custom` says whether any override was given (the label then reads "SIZE (modified)").
  model::ModelConfig config(bool& custom) const {
    return in_flag_words([&] { return config_(custom); });
  }
  model::ModelConfig config_(bool& custom) const {
    return overrides_(model::preset(size, count(vocab, "--vocab"), count(context, "--context")), custom);
  }
  // `cfg` (a preset, or a configuration read from a file) with --d-model/--d-ff/--layers/--heads, --kv-heads
  // and the MoE flags applied.
  model::ModelConfig overridden(const model::ModelConfig& cfg, bool& custom) const {
    return in_flag_words([&] { return overrides_(cfg, custom); });
  }
  model::ModelConfig overrides_(model::ModelConfig cfg, bool& custom) const {
    custom = false;
    if (!d_model.empty()) cfg.d_model = count(d_model, "--d-model"), custom = true;
    if (!d_ff.empty()) cfg.d_ff = count(d_ff, "--d-ff"), custom = true;
    if (!layers.empty()) cfg.num_layers = count(layers, "--layers"), custom = true;
    if (!heads.empty()) cfg.num_heads = count(heads, "--heads"), custom = true;
    check(cfg.d_model % cfg.num_heads == 0, "--heads/--d-model: {} heads do not divide d_model {}",
          cfg.num_heads, cfg.d_model);
    check(cfg.d_head() % 2 == 0, "--heads/--d-model: d_model / heads = {} must be even (RoPE rotates pairs)",
          cfg.d_head());
    if (!kv_heads.empty()) {
      cfg.num_kv_heads = count(kv_heads, "--kv-heads"), custom = true;
      check_kv_heads(cfg.num_kv_heads, cfg.num_heads);
    }
    if (moe.apply(cfg)) custom = true;
    cfg.validate();
    return cfg;
  }
  // The shape of a step of `cfg` on batch_times x --batch sequences of --context tokens, at --precision
  // with --attention (roofline ddp: batch_times = ranks for the global batch).
  roofline::ModelShape shape(const model::ModelConfig& cfg, int64_t batch_times = 1) const {
    const int64_t b = count(batch, "--batch");
    // The analyzer takes batches up to 2^40; past that, the flag the user typed is named (the product
    // with the ranks, where there are ranks, cannot wrap: both are at most 2^40 and 2^20).
    check(b <= (int64_t{1} << 40) / batch_times,
          "--batch: {} sequences x {} rank(s) is past the 2^40 sequences the analyzer takes (1 to 2^40)", b,
          batch_times);
    return in_flag_words([&] {
      return model::model_shape(cfg, b * batch_times, count(context, "--context"),
                                model::parse_precision(precision), model::parse_attention_path(attention));
    });
  }
  std::string label(bool custom) const { return custom ? size + " (modified)" : size; }
};

}  // namespace ridge::cli
