// `ridge roofline decode`: the roofline of generating with a Transformer LM on a chip: one decode step's
// bytes (weights, KV cache read, K/V written, activations), FLOPs, intensity, time and tokens/s bounds and
// which roof binds; the critical batch with the KV cache counted; a prefill of --prompt-length tokens; with
// --sweep-batch the steps at batch 1, 2, 4, ... An MoE model (the MoE flags, or an MoE --size or --config)
// reads only the experts its batch routes to: the expected number (uniform, or under --expert-histogram), the
// bytes per token, the critical batch beside the dense model's of the same active size. Parsing and printing
// only: the model is ridge::roofline's (ridge/roofline/decode.hpp, docs/roofline.md).
#include <fmt/format.h>

#include <memory>
#include <optional>

#include "cli.hpp"
#include "model_flags.hpp"
#include "ridge/core.hpp"
#include "ridge/core/input.hpp"
#include "ridge/model/config.hpp"
#include "ridge/roofline/decode.hpp"
#include "core/check.hpp"
#include "core/json.hpp"
#include "roofline/json.hpp"

namespace ridge::cli {

namespace rr = ridge::roofline;

namespace {

struct Opts : ridge::cli::ModelFlags {
  std::string config_file;
  std::string batch1 = "1", context_length, prompt_length;
  std::string weights = "bf16", head, embedding, kv;
  std::string hw = "h100", level, histogram;
  bool sweep = false, json = false;
  CLI::Option *size_opt = nullptr, *vocab_opt = nullptr, *context_opt = nullptr;
};

// A dtype flag: one of `accepted` (as typed), else one line naming the flag.
DType dtype_flag(const std::string& text, const char* flag, std::initializer_list<const char*> accepted) {
  std::string list;
  for (const char* a : accepted) {
    if (text == a) return parse_dtype(text);
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  fail("{}: '{}' is not accepted here (accepted: {})", flag, text, list);
}

// The model: --config FILE or the --size preset (at --vocab, --context), then the overrides and --kv-heads.
model::ModelConfig model_config(const Opts& o, std::string& label) {
  model::ModelConfig base;
  if (!o.config_file.empty()) {
    check(o.size_opt->count() == 0, "--config: give either --config or --size, not both");
    const std::string text = input::read_input_file(o.config_file, "--config", 1 << 20);
    try {
      base = model::from_json_text(text, "--config " + o.config_file);
    } catch (const ridge::Error& e) {
      const std::string m = e.what();
      throw ridge::Error(m.rfind("--config", 0) == 0 ? m : "--config " + o.config_file + ": " + m);
    }
    if (o.vocab_opt->count()) base.vocab_size = o.count(o.vocab, "--vocab");
    if (o.context_opt->count()) base.context_length = o.count(o.context, "--context");
    label = o.config_file;
    if (o.vocab_opt->count() || o.context_opt->count()) label += " (modified)";
  } else {
    base = in_flag_words(
        [&] { return model::preset(o.size, o.count(o.vocab, "--vocab"), o.count(o.context, "--context")); });
    label = o.size;
  }
  // The overrides, --kv-heads among them (ModelFlags checks it divides the heads after --heads).
  bool custom = false;
  model::ModelConfig cfg = o.overridden(base, custom);
  if (custom && label.find(" (modified)") == std::string::npos) label += " (modified)";
  return cfg;
}

// --expert-histogram FILE: a JSON array of one number per expert, the shares of the routed choices or the
// tokens each expert received (normalised by their sum; the library checks the values).
std::vector<double> read_histogram(const std::string& path) {
  const std::string what = "--expert-histogram '" + path + "'";
  const nlohmann::json j = input::read_json_file(path, "--expert-histogram", 1 << 24);
  check(j.is_array() && !j.empty(),
        "{}: expected a JSON array of one number per expert (shares, or tokens per expert), got {}", what,
        input::excerpt(j));
  std::vector<double> v;
  for (size_t i = 0; i < j.size(); ++i) {
    check(j[i].is_number(), "{}: entry {} is {}, not a number (a share, or a count of tokens)", what, i,
          input::excerpt(j[i]));
    v.push_back(j[i].get<double>());
  }
  return v;
}

std::string flops_text(double f) {
  return units::format_count(f) + "FLOP";
}

// An MoE model: its experts and routing, total against active parameters.
void print_moe_header(const model::ModelConfig& cfg, const rr::MoeDecode& m, const rr::InferenceDtypes& dt) {
  fmt::print("MoE: {}; {:.4g} M parameters, {:.4g} M active per token; one expert {} ({}), routing {}\n",
             moe_text(cfg), m.params_total / 1e6, m.params_active / 1e6, units::format_bytes(m.expert_bytes),
             dtype_name(dt.weights), m.shares.empty() ? "uniform" : "measured (--expert-histogram)");
}

void print_traffic(const char* title, const std::vector<rr::Traffic>& v) {
  long double sum = 0;
  for (const auto& t : v) sum += t.bytes;
  fmt::print("    {:<28} {:>11}\n", title, units::format_bytes(static_cast<double>(sum)));
  for (const auto& t : v)
    fmt::print("      {:<36} {:<9} {:>11}  {}\n", t.name, t.dtype,
               units::format_bytes(static_cast<double>(t.bytes)), t.write ? "write" : "read");
}

void print_step(const rr::InferenceCost& c, const rr::InferenceBound& b) {
  if (c.phase == "decode")
    fmt::print(
        "decode step: batch {}, context {} (each sequence attends to {} keys, its new token's included)\n",
        c.batch, c.context, c.context);
  else
    fmt::print(
        "prefill: batch {} prompts of {} tokens (causal attention; logits of the last token of each)\n",
        c.batch, c.prompt);
  fmt::print("  FLOPs          {}\n", flops_text(b.flops));
  for (const auto& r : b.roofs)
    fmt::print("    {:<28} {:>11} at {} ({})\n", r.name, flops_text(r.flops), r.compute,
               units::format_flops(r.peak));
  fmt::print("  {:<14} {}\n", "bytes (" + b.level + ")", units::format_bytes(b.bytes));
  print_traffic("weights", c.weights);
  print_traffic("KV cache read", c.kv_read);
  print_traffic("K/V written", c.kv_write);
  print_traffic("activations", c.activations);
  fmt::print("  intensity      {:.4g} FLOP/B   (this mix of FLOPs meets the {} roof at {:.4g} FLOP/B)\n",
             b.intensity, b.level, b.ridge_intensity);
  fmt::print("  T_math         {}   (each part's FLOPs at its peak)\n", units::format_seconds(b.t_math));
  fmt::print("  T_memory       {}   (bytes / {} {})\n", units::format_seconds(b.t_memory),
             units::format_rate(b.bandwidth), b.level);
  fmt::print("  T_lower = max  {}   bound by {}\n", units::format_seconds(b.t_lower),
             b.binding == "memory" ? "memory (" + b.level + ")" : b.binding);
  fmt::print("  tokens/s    <= {}   ({} / T_lower)\n", units::format_count(b.tokens_per_s),
             c.phase == "decode" ? "batch" : "batch x prompt");
  fmt::print("  resident       {} ({}): {}\n", units::format_bytes(b.resident_bytes),
             c.phase == "decode" ? "weights + KV cache" : "weights + the prompts' K/V",
             b.fits_level.empty() ? "no level of the chip file holds them"
                                  : "the innermost level that holds them is " + b.fits_level);
  if (c.experts_read > 0) {
    const double tokens = static_cast<double>(c.batch) * (c.phase == "decode" ? 1.0 : double(c.prompt));
    fmt::print(
        "  experts read   {:.4g} per MoE layer (expected: the distinct experts of {} token{}'s choices); "
        "{} per token\n",
        c.experts_read, tokens, tokens == 1 ? "" : "s", units::format_bytes(b.bytes / tokens));
  }
  for (const auto& n : b.notes) fmt::print("  note: {}\n", n);
}

void print_critical(const rr::DecodeCriticalBatch& c) {
  fmt::print("\ncritical batch at context {} ({} {}):\n", c.context, c.level,
             units::format_rate(c.bandwidth));
  if (c.expert_bytes_all > 0)
    fmt::print(
        "  bytes per step = {} (weights but the routed experts) + X(B) (the routed experts read: {} at B = "
        "1, "
        "up to {} when every one is) + B x {} (KV cache {}, embedding row, activations)\n",
        units::format_bytes(c.weight_bytes), units::format_bytes(c.expert_bytes_one),
        units::format_bytes(c.expert_bytes_all), units::format_bytes(c.bytes_per_sequence),
        units::format_bytes(c.kv_bytes_per_sequence));
  else
    fmt::print("  bytes per step = {} (weights) + B x {} (KV cache {}, embedding row, activations)\n",
               units::format_bytes(c.weight_bytes), units::format_bytes(c.bytes_per_sequence),
               units::format_bytes(c.kv_bytes_per_sequence));
  fmt::print(
      "  intensity rises with B to {:.4g} FLOP/B ({} per sequence / {} per sequence); the roofs meet at "
      "{:.4g}\n",
      c.limit_intensity, flops_text(c.flops_per_sequence), units::format_bytes(c.bytes_per_sequence),
      c.ridge_intensity);
  if (c.batch)
    fmt::print(
        "  compute-bound from B = {} (the crossing: B = {:.1f}); weights + KV cache at that batch: {}{}\n",
        *c.batch, c.asymptotic, units::format_bytes(c.resident_bytes),
        c.exceeds_memory ? ", more than the chip's memory holds" : "");
  else if (std::isfinite(c.asymptotic))
    fmt::print("  compute-bound only beyond B = 2^40 (the crossing: B = {:.4g})\n", c.asymptotic);
  else
    fmt::print(
        "  never compute-bound at this context: the bytes each sequence adds (its KV cache and activations) "
        "keep "
        "the intensity below {:.4g} at any batch\n",
        c.ridge_intensity);
  fmt::print("  weights only (no KV cache, no activations: the chapter's critical batch): B = {}\n",
             c.batch_weights_only);
}

// An MoE model's critical batch beside the dense model's of the same active size.
void print_dense_equivalent(const rr::DecodeCriticalBatch& moe, const rr::DecodeCriticalBatch& d) {
  const auto text = [](const rr::DecodeCriticalBatch& c) {
    return c.batch                       ? fmt::format("compute-bound from B = {}", *c.batch)
           : std::isfinite(c.asymptotic) ? std::string("compute-bound only beyond B = 2^40")
                                         : std::string("never compute-bound at this context");
  };
  fmt::print(
      "  the dense model of the same active size (each token's top-k experts always the same ones: the same "
      "FLOPs, {} of weights): {}; weights only B = {}\n",
      units::format_bytes(d.weight_bytes), text(d), d.batch_weights_only);
  if (moe.batch && d.batch)
    fmt::print(
        "  MoE's critical batch is {:.3g}x the dense model's: its bytes grow with the batch until all "
        "experts are read ({:.4g} per MoE layer at B = {})\n",
        static_cast<double>(*moe.batch) / static_cast<double>(*d.batch), moe.experts_read_at_batch,
        *moe.batch);
}

void print_sweep(const rr::DecodeReport& r) {
  fmt::print("\nbatch sweep at context {} ({}):\n", r.critical.context, r.critical.level);
  fmt::print("{:>8} {:>12} {:>11} {:>9} {:>10} {:>10} {:>10} {:>8} {:>12} {:>11}{}\n", "batch", "FLOPs",
             "bytes", "FLOP/B", "T_math", "T_memory", "T_lower", "bound", "tokens/s", "resident",
             r.moe ? fmt::format(" {:>8}", "experts") : std::string());
  for (size_t i = 0; i < r.sweep.size(); ++i) {
    const auto& b = r.sweep[i];
    fmt::print("{:>8} {:>12} {:>11} {:>9.4g} {:>10} {:>10} {:>10} {:>8} {:>12} {:>11}{}{}\n",
               r.sweep_batches[i], flops_text(b.flops), units::format_bytes(b.bytes), b.intensity,
               units::format_seconds(b.t_math), units::format_seconds(b.t_memory),
               units::format_seconds(b.t_lower), b.binding, units::format_count(b.tokens_per_s),
               units::format_bytes(b.resident_bytes),
               r.moe ? fmt::format(" {:>8.4g}", r.moe->sweep_experts_read[i]) : std::string(),
               b.exceeds_memory ? "  (exceeds memory)" : "");
  }
}

}  // namespace

void setup_roofline_decode(CLI::App* parent) {
  auto o = std::make_shared<Opts>();
  auto* c = parent->add_subcommand(
      "decode",
      "generation with a Transformer LM on a chip: a decode step's bytes (weights, KV cache, activations), "
      "FLOPs, time and tokens/s bounds, which roof binds, the critical batch with the KV cache counted; a "
      "prefill");
  o->add_preset_to(c, "the model's context length (the longest sequence it generates)");
  o->size_opt = c->get_option("--size");
  o->vocab_opt = c->get_option("--vocab");
  o->context_opt = c->get_option("--context");
  c->add_option("--config", o->config_file,
                "the model's configuration as a JSON file (ModelConfig's fields)");
  o->add_overrides_to(c);
  c->add_option("--batch", o->batch1, "sequences decoded together")->capture_default_str();
  c->add_option("--context-length", o->context_length,
                "keys each sequence attends to in the step, its new token's included (default --context)");
  c->add_option("--prompt-length", o->prompt_length,
                "also bound the prefill of --batch prompts of this many tokens");
  c->add_option("--weights", o->weights,
                "the layers' linear weights: fp32, bf16 or fp8 (e4m3, 128x128 scales)")
      ->capture_default_str();
  c->add_option("--head", o->head, "lm_head: fp32, bf16 or fp8 (default --weights; bf16 for fp8 weights)");
  c->add_option("--embedding", o->embedding,
                "embedding table: fp32 or bf16 (default --weights; bf16 for fp8)");
  c->add_option("--kv", o->kv, "KV cache: fp32 or bf16 (default fp32 for fp32 weights, else bf16)");
  c->add_option("--hw", o->hw, "chip: h100, tpu-v5e, ..., 'this' (the probe's result), or a chip JSON file")
      ->capture_default_str();
  c->add_option("--level", o->level,
                "memory level the bytes come from (hbm, dram, l3, ...; 'auto': the innermost that holds the "
                "weights and KV cache); default outermost");
  c->add_flag("--sweep-batch", o->sweep,
              "also the steps at batch 1, 2, 4, ... up to past the critical batch");
  c->add_option("--expert-histogram", o->histogram,
                "MoE: a measured routing, a JSON array of one number per expert (the share of the routed "
                "choices, or tokens routed to it); default uniform routing");
  c->add_flag("--json", o->json, "print one JSON document");
  c->callback([o] {
    std::string label;
    const auto cfg = model_config(*o, label);
    const int64_t batch = o->count(o->batch1, "--batch");
    const int64_t context =
        o->context_length.empty() ? cfg.context_length : o->count(o->context_length, "--context-length");
    check(context <= cfg.context_length,
          "--context-length: {} is beyond the model's context of {} tokens (raise --context)", context,
          cfg.context_length);
    int64_t prompt = 0;
    if (!o->prompt_length.empty()) {
      prompt = o->count(o->prompt_length, "--prompt-length");
      check(prompt <= cfg.context_length,
            "--prompt-length: {} is beyond the model's context of {} tokens (raise --context)", prompt,
            cfg.context_length);
    }
    rr::InferenceDtypes dt;
    dt.weights = dtype_flag(o->weights, "--weights", {"fp32", "bf16", "fp8", "fp8_e4m3"});
    if (!o->head.empty()) dt.head = dtype_flag(o->head, "--head", {"fp32", "bf16", "fp8", "fp8_e4m3"});
    if (!o->embedding.empty()) dt.embedding = dtype_flag(o->embedding, "--embedding", {"fp32", "bf16"});
    dt.kv = o->kv.empty() ? (dt.weights == DType::f32 ? DType::f32 : DType::bf16)
                          : dtype_flag(o->kv, "--kv", {"fp32", "bf16"});
    std::vector<double> histogram;
    if (!o->histogram.empty()) {
      check(cfg.is_moe(),
            "--expert-histogram: the model is dense; a routing histogram needs an MoE model "
            "(--experts, or an MoE --size such as moe-tiny)");
      histogram = read_histogram(o->histogram);
    }
    const auto chip = with_flags(chip_flags("--hw"), [&] { return rr::load_chip(o->hw); });
    const auto report = with_flags({{"level", "--level"},
                                    {"shape", "--batch/--context-length/--prompt-length"},
                                    {"expert_shares", "--expert-histogram '" + o->histogram + "'"}},
                                   [&] {
                                     return rr::decode_report(cfg, dt, batch, context, chip, o->level, prompt,
                                                              o->sweep, histogram);
                                   });
    if (o->json) {
      auto j = rr::to_json(report);
      j["model"] = label;
      print_json(j);
      return;
    }
    fmt::print(
        "{}: d_model {}, d_ff {}, {} layers, {} heads ({} kv heads, d_head {}), vocab {} ({:.4g} M "
        "parameters)\n",
        label, cfg.d_model, cfg.d_ff, cfg.num_layers, cfg.num_heads, cfg.kv_heads(), cfg.d_head(),
        cfg.vocab_size, report.params / 1e6);
    if (report.moe) print_moe_header(cfg, *report.moe, report.dtypes);
    const auto& d = report.dtypes;
    fmt::print("weights {}, lm_head {}, embedding {}, KV cache {}, activations {}\n", dtype_name(d.weights),
               dtype_name(d.head_dtype()), dtype_name(d.embedding_dtype()), dtype_name(d.kv),
               dtype_name(d.activation_dtype()));
    fmt::print("chip {} ({})\n\n", chip.id, chip.name);
    print_step(report.step, report.bound);
    if (report.prefill) {
      fmt::print("\n");
      print_step(*report.prefill, *report.prefill_bound);
    }
    print_critical(report.critical);
    if (report.moe) print_dense_equivalent(report.critical, report.moe->dense_equivalent);
    if (o->sweep) print_sweep(report);
  });
}

}  // namespace ridge::cli
