// The Mixture-of-Experts flags (issue 40), declared once for every command that sizes a model (`ridge
// roofline model`, `roofline decode`, `roofline ddp` through ModelFlags; `ridge train`, `ridge generate`):
// --experts, --top-k, --shared-experts, --d-expert, --moe-layers, --router, --balance, and for training
// --aux-loss-coef and --bias-speed. add_to declares them; apply sets them on a ModelConfig (a preset's, a
// file's) and checks them, every error one line in the flags' words.
#pragma once

#include <CLI/CLI.hpp>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "core/check.hpp"
#include "ridge/core/numbers.hpp"
#include "ridge/model/config.hpp"
#include "ridge/model/moe.hpp"

namespace ridge::cli {

struct MoeFlags {
  std::string experts, top_k, shared, d_expert, layers, router, balance, aux_loss_coef, bias_speed;
  // Each flag's option once declared: a flag given with an empty value ("--moe-layers ''") counts as given
  // and is refused by its parser, not taken for absent.
  std::vector<std::pair<const std::string*, const CLI::Option*>> options;
  // `ridge generate` has a sampling --top-k; there the experts' is --expert-top-k.
  std::string top_k_flag = "--top-k";
  bool training = false;

  // Declares the flags on `c`, bound to this object (which must outlive the parse); --aux-loss-coef and
  // --bias-speed only for a command that trains.
  void add_to(CLI::App* c, const std::string& top_k_name = "--top-k", bool trains = false) {
    top_k_flag = top_k_name;
    training = trains;
    options.clear();
    auto add = [&](const std::string& name, std::string& text, const std::string& help) {
      options.emplace_back(&text, c->add_option(name, text, help));
    };
    add("--experts", experts,
        "Mixture of Experts: routed experts per MoE layer (0: a dense model; default: the size's)");
    add(top_k_flag, top_k, "MoE: experts each token passes through, 1 .. --experts");
    add("--shared-experts", shared, "MoE: always-on shared experts per MoE layer (default 0)");
    add("--d-expert", d_expert, "MoE: an expert's hidden width (default: --d-ff)");
    add("--moe-layers", layers,
        "MoE: the layers whose feed-forward is MoE: all (default), or indices and ranges: 1,3,5 or 0-3 or "
        "2-");
    add("--router", router, "MoE: the router's gate, softmax (Mixtral) or sigmoid (DeepSeek-V3)");
    add("--balance", balance,
        "MoE: load balancing, aux (Switch's auxiliary loss) or bias (DeepSeek-V3's, loss-free)");
    if (!training) return;
    add("--aux-loss-coef", aux_loss_coef, "MoE: the auxiliary loss's coefficient (--balance aux)");
    add("--bias-speed", bias_speed, "MoE: the balance bias's update per step (--balance bias)");
  }
  bool given(const std::string& text) const {
    if (!text.empty()) return true;
    for (const auto& [t, o] : options)
      if (t == &text) return o->count() > 0;
    return false;
  }

  // The flags given, in the order add_to declares them: {flag, text}.
  std::vector<std::pair<std::string, std::string>> given() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [flag, text] : std::initializer_list<std::pair<std::string, const std::string*>>{
             {"--experts", &experts},
             {top_k_flag, &top_k},
             {"--shared-experts", &shared},
             {"--d-expert", &d_expert},
             {"--moe-layers", &layers},
             {"--router", &router},
             {"--balance", &balance},
             {"--aux-loss-coef", &aux_loss_coef},
             {"--bias-speed", &bias_speed}})
      if (given(*text)) out.emplace_back(flag, *text);
    return out;
  }

  // Sets the given flags on `cfg` and checks what they make; returns whether any was given. --experts 0
  // makes the model dense (every MoE field back to its default); any other MoE flag needs an MoE model.
  bool apply(model::ModelConfig& cfg) const {
    const auto flags = given();
    if (flags.empty()) return false;
    constexpr int64_t kMax = int64_t{1} << 40;
    const auto integer = [](const std::string& text, const std::string& flag, int64_t lo) {
      return numbers::parse_integer(text, flag, {lo, kMax, numbers::Suffix::count});
    };
    const auto real = [](const std::string& text, const char* flag) {
      return numbers::parse_real(text, flag, {0, std::numeric_limits<double>::infinity()});
    };
    const int64_t base_top_k = cfg.top_k;
    if (given(experts)) {
      const int64_t e = integer(experts, "--experts", 0);
      // --experts 0: a dense model, every MoE field at its default (validate() holds a dense model to them).
      if (e == 0)
        static_cast<roofline::ModelArch&>(cfg) = {.vocab_size = cfg.vocab_size,
                                                  .context_length = cfg.context_length,
                                                  .d_model = cfg.d_model,
                                                  .num_layers = cfg.num_layers,
                                                  .num_heads = cfg.num_heads,
                                                  .d_ff = cfg.d_ff,
                                                  .rope_theta = cfg.rope_theta,
                                                  .num_kv_heads = cfg.num_kv_heads,
                                                  .rms_norm_eps = cfg.rms_norm_eps};
      cfg.num_experts = e;
    }
    for (const auto& [flag, text] : flags) {
      if (flag == "--experts" || cfg.is_moe()) continue;
      fail(
          "{}: '{}' is an MoE setting, but {} (accepted: with --experts 1 or more, or an MoE --size such "
          "as moe-tiny)",
          flag, text, !given(experts) ? "the model is dense" : "--experts 0 makes the model dense");
    }
    if (!cfg.is_moe()) return true;
    if (given(top_k)) {
      cfg.top_k = integer(top_k, top_k_flag, 1);
      check(cfg.top_k <= cfg.num_experts, "{}: {} is above --experts {} (accepted: 1 .. {})", top_k_flag,
            cfg.top_k, cfg.num_experts, cfg.num_experts);
    } else {
      check(base_top_k >= 1, "--experts: needs {} too (the experts each token passes through, 1 .. {})",
            top_k_flag, cfg.num_experts);
      check(base_top_k <= cfg.num_experts,
            "--experts: {} is below the size's top-k of {} (accepted: {} or more, or give {})",
            cfg.num_experts, base_top_k, base_top_k, top_k_flag);
    }
    if (given(shared)) cfg.num_shared_experts = integer(shared, "--shared-experts", 0);
    if (given(d_expert)) cfg.d_expert = integer(d_expert, "--d-expert", 1);
    if (given(layers)) cfg.moe_layers = model::parse_moe_layers(layers, cfg.num_layers, "--moe-layers");
    if (given(router)) cfg.router = model::moe::parse_gate(router, "--router");
    if (given(balance)) cfg.balance = model::moe::parse_balance(balance, "--balance");
    if (given(aux_loss_coef)) cfg.aux_loss_coef = real(aux_loss_coef, "--aux-loss-coef");
    if (given(bias_speed)) cfg.bias_update_speed = real(bias_speed, "--bias-speed");
    return true;
  }
};

}  // namespace ridge::cli
