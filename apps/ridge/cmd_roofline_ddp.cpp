// `ridge roofline ddp`: the analyzer's prediction of data-parallel training for a model size on N chips
// over a link: each DDP design's communication, the part hidden behind backward, the step time, the best
// bucket size, and what optimizer sharding saves in memory per rank; for an MoE model with --expert-parallel
// N, the all-to-all time of its experts sharded over N ranks. Parsing and printing only; the model is
// ridge::roofline's (ridge/roofline/ddp.hpp, docs/distributed.md).
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>

#include "core/check.hpp"
#include "roofline/json.hpp"
#include "cli.hpp"
#include "model_flags.hpp"
#include "ridge/core.hpp"
#include "ridge/model/config.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/roofline.hpp"
#include "ridge/roofline/ddp.hpp"

namespace ridge::cli {

namespace rr = ridge::roofline;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Opts : ridge::cli::ModelFlags {
  std::string hw = "h100", level;
  std::string ranks = "8", link, buckets, expert_parallel;
  std::optional<double> link_gbps, link_latency_us;
  bool json = false;
};

std::string msf(double s) {
  return fmt::format("{:.3f}", s * 1e3);
}
std::string gb(double b) {
  return fmt::format("{:.2f}", b / 1e9);
}

// The link: a preset (nvlink, ib), or the --hw chip's intra_node / inter_node figure, then the overrides.
rr::DdpLink make_link(const Opts& o, const rr::Chip& chip, int64_t ranks) {
  std::string which = o.link;
  if (which.empty()) which = o.link_gbps ? "custom" : "intra_node";
  rr::DdpLink l;
  if (which == "nvlink" || which == "ib") {
    l = rr::ddp_link_preset(which, ranks);
  } else if (which == "intra_node" || which == "inter_node") {
    const auto& lk = which == "intra_node" ? chip.intra_node : chip.inter_node;
    if (!lk) {
      check(o.link_gbps.has_value(),
            "--link: chip '{}' has no {} link figure; give --link nvlink|ib or --link-gbps", chip.id, which);
    }
    // The latencies of the matching preset (NVLink-like inside a node, the network between nodes).
    l = rr::ddp_link_preset(which == "intra_node" ? "nvlink" : "ib", ranks);
    if (lk) {
      l.name = lk->name;
      l.bandwidth = lk->bandwidth_per_direction.value;
      l.source = fmt::format("bandwidth: {} {} ({}); latency as the {} preset", chip.origin, which,
                             lk->bandwidth_per_direction.source, which == "intra_node" ? "nvlink" : "ib");
    }
  } else if (which == "custom") {
    l = rr::ddp_link_preset("nvlink", ranks);
    l.name = "custom";
    l.source =
        "latency: the nvlink preset's (NCCL's tuning model, ring/Simple: 8.4 us per collective + 3.4 us "
        "per step)";
  } else {
    fail("--link: '{}' is not a link (accepted: nvlink, ib, intra_node, inter_node; or --link-gbps)", which);
  }
  if (o.link_gbps) {  // finite and > 0 (its number_in)
    l.bandwidth = *o.link_gbps * 1e9;
    l.source = fmt::format("bandwidth: --link-gbps {:g}; ", *o.link_gbps) + l.source;
  }
  if (o.link_latency_us) {  // finite and >= 0 (its number_in)
    l.hop_latency_s = *o.link_latency_us * 1e-6;
    l.source = fmt::format("per-step latency: --link-latency-us {:g}; ", *o.link_latency_us) + l.source;
  }
  l.validate();
  return l;
}

std::vector<double> parse_buckets(const std::string& s) {
  if (s.empty()) return rr::default_bucket_candidates();
  std::vector<double> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    out.push_back(
        numbers::parse_real(item, "--buckets", {0, kInf, true, false, "MB, as in --buckets 1,10,100"}));
  return out;
}

}  // namespace

void setup_roofline_ddp(CLI::App* parent) {
  auto o = std::make_shared<Opts>();
  auto* c = parent->add_subcommand(
      "ddp",
      "data-parallel training of a Transformer LM on N chips: each DDP design's communication, hidden and "
      "exposed time, step time, best bucket size, memory saved by optimizer sharding");
  o->add_to(c, "sequences per rank (the global batch is batch x ranks)");
  c->add_option("--hw", o->hw, "chip: h100, a100, ..., 'this' (the probe's result), or a chip JSON file")
      ->capture_default_str();
  c->add_option("--level", o->level, "memory level to bound compute against; default outermost");
  c->add_option("--ranks", o->ranks, "data-parallel ranks (chips)")->capture_default_str();
  c->add_option("--link", o->link,
                "nvlink, ib (H100 presets), intra_node or inter_node (the --hw chip's figure; default "
                "intra_node)");
  c->add_option("--link-gbps", o->link_gbps, "link bandwidth, GB/s one way per rank (overrides --link's)")
      ->transform(number_in(0, kInf, true));
  c->add_option("--link-latency-us", o->link_latency_us, "latency per ring step in microseconds (overrides)")
      ->transform(number_in(0, kInf));
  c->add_option("--buckets", o->buckets, "bucket sizes to try, MB (default 1,2,5,10,25,50,100,250,1000)");
  c->add_option(
      "--expert-parallel", o->expert_parallel,
      "MoE: shard the experts over groups of N ranks (a divisor of --ranks and of --experts) and add "
      "the all-to-all time of dispatching the tokens to them and combining them back");
  c->add_flag("--json", o->json, "print one JSON document");
  c->callback([o] {
    bool custom = false;
    const auto cfg = o->config(custom);
    const int64_t ranks = numbers::parse_integer(o->ranks, "--ranks", {1, 1 << 20, numbers::Suffix::count});
    const auto shape = o->shape(cfg), global = o->shape(cfg, ranks);
    const int64_t batch = shape.batch, ctx = shape.seq;
    const auto chip = with_flags(chip_flags("--hw"), [&] { return rr::load_chip(o->hw); });
    const auto link = make_link(*o, chip, ranks);
    const auto cands = parse_buckets(o->buckets);
    const std::string label = o->label(custom);

    const FlagNames flags = {{"layers", "--layers"}, {"level", "--level"}};
    auto in = with_flags(flags, [&] { return rr::ddp_input(shape, chip, o->level); });
    // Expert parallelism: the exchange priced apart, the data-parallel part without the experts' gradients
    // (each whole at its owner), and each mode's step with the exchange's exposed time.
    std::optional<rr::ExpertParallel> ep;
    if (!o->expert_parallel.empty()) {
      const int64_t n = numbers::parse_integer(o->expert_parallel, "--expert-parallel",
                                               {1, 1 << 20, numbers::Suffix::count});
      check(cfg.is_moe(),
            "--expert-parallel: the model is dense; expert parallelism shards an MoE model's experts (give "
            "--experts, or an MoE --size such as moe-small)");
      check(ranks % n == 0,
            "--expert-parallel: {} does not divide --ranks {} (the ranks form groups of N that share out the "
            "experts; accepted: a divisor of {})",
            n, ranks, ranks);
      ep = with_flags({{"expert_ranks", "--expert-parallel"}},
                      [&] { return rr::expert_parallel(shape, in, link, n); });
      in = rr::expert_parallel_ddp_input(in, *ep);
    }
    const auto one = with_flags(flags, [&] { return rr::ddp_input(global, chip, o->level); });
    const double one_s = one.forward_s + one.backward_s() + one.optimizer_s + one.other_s;

    std::vector<rr::DdpSetting> settings;
    for (const char* m : {"naive", "flat", "overlap"}) settings.push_back({m, 25, "none"});
    auto sweep = rr::best_bucket(in, link, cands);
    if (ep)
      for (auto& p : sweep.tried) p = rr::add_expert_parallel(p, *ep);
    const double best_mb = sweep.tried[sweep.best].setting.bucket_mb;
    settings.push_back({"bucketed", 25, "none"});
    if (best_mb != 25) settings.push_back({"bucketed", best_mb, "none"});
    // ridge train refuses optimizer sharding with expert parallelism (each rank steps only its experts).
    if (!ep) {
      settings.push_back({"bucketed", best_mb, "cs336"});
      settings.push_back({"flat", 25, "zero1"});
      settings.push_back({"bucketed", best_mb, "zero1"});
    }
    std::vector<rr::DdpPrediction> preds;
    for (const auto& s : settings) {
      preds.push_back(rr::predict_ddp(in, link, s));
      if (ep) preds.back() = rr::add_expert_parallel(preds.back(), *ep);
    }
    // Under expert parallelism a rank holds its 1/N of the routed experts (their gradients are fp32, 4 bytes
    // a parameter).
    const double all_params = static_cast<double>(rr::model_param_count(shape));
    const double held =
        ep ? all_params - ep->expert_grad_bytes / 4 * (1 - 1.0 / static_cast<double>(ep->ranks)) : all_params;
    const auto mem = rr::ddp_memory(held, shape.operand, ranks);

    if (o->json) {
      nlohmann::json modes = nlohmann::json::array(), tried = nlohmann::json::array();
      for (const auto& p : preds) {
        auto j = roofline::to_json(p);
        j.erase("spans");
        j["speedup_vs_one_chip"] = one_s / p.step_s;
        modes.push_back(j);
      }
      for (const auto& p : sweep.tried)
        tried.push_back({{"bucket_mb", p.setting.bucket_mb},
                         {"collectives", p.collectives},
                         {"comm_s", p.comm_s},
                         {"exposed_s", p.exposed_s},
                         {"step_s", p.step_s}});
      nlohmann::json j = {{"model", label},
                          {"params", static_cast<double>(rr::model_param_count(shape))},
                          {"batch_per_rank", batch},
                          {"context", ctx},
                          {"precision", o->precision},
                          {"chip", chip.id},
                          {"link",
                           {{"name", link.name},
                            {"bandwidth", link.bandwidth},
                            {"hop_latency_s", link.hop_latency_s},
                            {"base_latency_s", link.base_latency_s},
                            {"ranks", ranks},
                            {"source", link.source}}},
                          {"phases_s",
                           {{"forward", in.forward_s},
                            {"backward", in.backward_s()},
                            {"optimizer", in.optimizer_s},
                            {"other", in.other_s}}},
                          {"gradient_bytes", in.total_bytes()},
                          {"modes", modes},
                          {"buckets", tried},
                          {"best_bucket_mb", best_mb},
                          {"one_chip_global_batch_step_s", one_s},
                          {"memory_per_rank", roofline::to_json(mem)}};
      // An MoE model's added keys (a dense model's document is what it was).
      if (cfg.is_moe()) j["params_active"] = static_cast<double>(rr::model_active_param_count(shape));
      if (ep)
        j["expert_parallel"] = {{"ranks", ep->ranks},
                                {"experts_per_rank", ep->experts_per_rank},
                                {"params_per_rank", held},
                                {"moe_layers", ep->moe_layers},
                                {"all_to_alls", ep->all_to_alls},
                                {"tokens_per_rank", ep->tokens},
                                {"dispatch_bytes", ep->dispatch_bytes},
                                {"combine_bytes", ep->combine_bytes},
                                {"leaving", ep->leaving},
                                {"dispatch_s", ep->dispatch_s},
                                {"combine_s", ep->combine_s},
                                {"shared_forward_s", ep->shared_forward_s},
                                {"shared_backward_s", ep->shared_backward_s},
                                {"step_s", ep->step_s},
                                {"hidden_s", ep->hidden_s},
                                {"exposed_s", ep->exposed_s},
                                {"expert_grad_bytes", ep->expert_grad_bytes},
                                {"replicas", ep->replicas},
                                {"replica_reduce_s", ep->replica_reduce_s}};
      print_json(j);
      return;
    }
    fmt::print("{}: d_model {}, d_ff {}, {} layers, {}, vocab {} ({:.0f} M parameters), {} operands\n", label,
               cfg.d_model, cfg.d_ff, cfg.num_layers, heads_text(cfg.num_heads, cfg.kv_heads()),
               cfg.vocab_size, static_cast<double>(rr::model_param_count(shape)) / 1e6, o->precision);
    if (cfg.is_moe())
      fmt::print("MoE: {}; {:.0f} M active per token\n", moe_text(cfg),
                 static_cast<double>(rr::model_active_param_count(shape)) / 1e6);
    fmt::print("{} ranks x batch {} x context {} (global batch {}); chip {} ({})\n", ranks, batch, ctx,
               batch * ranks, chip.id, chip.name);
    fmt::print("link {}: {} one way per rank, {} per collective + {} per ring step\n  ({})\n", link.name,
               ridge::units::format_rate(link.bandwidth), ridge::units::format_seconds(link.base_latency_s),
               ridge::units::format_seconds(link.hop_latency_s), link.source);
    fmt::print(
        "per rank (roofline bounds): forward {} ms, backward {} ms over {} groups, AdamW {} ms, other {} ms; "
        "gradients {} MB fp32{}\n\n",
        msf(in.forward_s), msf(in.backward_s()), in.backward_group_s.size(), msf(in.optimizer_s),
        msf(in.other_s), fmt::format("{:.1f}", in.total_bytes() / 1e6),
        ep ? " (the dense ones; AdamW over them and 1/N of the experts)" : "");
    fmt::print("{:<22} {:>6} {:>10} {:>10} {:>11} {:>10} {:>9}\n", "mode", "colls", "comm ms", "hidden ms",
               "exposed ms", "step ms", "speedup");
    for (const auto& p : preds)
      fmt::print("{:<22} {:>6} {:>10} {:>10} {:>11} {:>10} {:>8.2f}x\n", p.setting.label(), p.collectives,
                 msf(p.comm_s), msf(p.hidden_s), msf(p.exposed_s), msf(p.step_s), one_s / p.step_s);
    fmt::print(
        "\none chip on the global batch of {}: step {} ms (speedup = that / the mode's step; ideal {}x)\n",
        batch * ranks, msf(one_s), ranks);
    std::string tried;
    for (const auto& p : sweep.tried)
      tried += fmt::format("{}{:g} MB {} ms", tried.empty() ? "" : ", ", p.setting.bucket_mb, msf(p.step_s));
    fmt::print("best bucket: {:g} MB (step {} ms); tried: {}\n\n", best_mb,
               msf(sweep.tried[sweep.best].step_s), tried);
    fmt::print("memory per rank, GB     {:>10} {:>10}\n", "replicated", "sharded");
    fmt::print("  {:<21} {:>10} {:>10}\n", fmt::format("parameters ({})", ridge::dtype_name(shape.operand)),
               gb(mem.params), gb(mem.params));
    if (mem.master > 0)
      fmt::print("  fp32 master copies    {:>10} {:>10}\n", gb(mem.master), gb(mem.sharded_master));
    fmt::print("  gradients (fp32)      {:>10} {:>10}\n", gb(mem.grads), gb(mem.grads));
    fmt::print("  AdamW m, v (fp32)     {:>10} {:>10}\n", gb(mem.optimizer), gb(mem.sharded_optimizer));
    fmt::print("  total                 {:>10} {:>10}  (sharding saves {} GB per rank, {:.0f}%)\n",
               gb(mem.total()), gb(mem.sharded_total()), gb(mem.total() - mem.sharded_total()),
               100.0 * (mem.total() - mem.sharded_total()) / mem.total());
    fmt::print("activations and workspace not included (see 'ridge roofline model', 'ridge memory')\n");
    if (ep)
      fmt::print(
          "expert parallel: a rank holds {:.2f}M of the {:.2f}M parameters (its {} of the {} experts of each "
          "MoE "
          "layer); ridge train shards no optimizer state with it, so the replicated column is what a rank "
          "holds\n",
          held / 1e6, all_params / 1e6, ep->experts_per_rank, cfg.num_experts);
    if (ep) {
      fmt::print(
          "\nexpert parallel: the {} experts sharded over groups of {} of the {} ranks ({} per rank); 4 "
          "all-to-alls per MoE layer and step (dispatch and combine, forward and backward)\n",
          cfg.num_experts, ep->ranks, ranks, ep->experts_per_rank);
      const auto mb = [](double b) { return fmt::format("{:.3g}", b / 1e6); };
      fmt::print(
          "  dispatch {} MB per rank ({:.0f} tokens x top-{} x d_model {} x {} B), combine {} MB (x 4 B), "
          "{:.0f}% of each leaving the rank: {} ms and {} ms over {}\n",
          mb(ep->dispatch_bytes), ep->tokens, cfg.top_k, cfg.d_model,
          ridge::dtype_size(shape.storage.value_or(shape.operand)), mb(ep->combine_bytes), 100 * ep->leaving,
          msf(ep->dispatch_s), msf(ep->combine_s), link.name);
      fmt::print(
          "  {} MoE layers: {} all-to-alls, {} ms per step, {} ms of it behind the shared experts ({} ms "
          "forward, {} ms backward per layer), {} ms exposed\n",
          ep->moe_layers, ep->all_to_alls, msf(ep->step_s), msf(ep->hidden_s), msf(ep->shared_forward_s),
          msf(ep->shared_backward_s), msf(ep->exposed_s));
      fmt::print(
          "  the experts' gradients ({} MB fp32) are reduced by no mode above (each whole at its owner){}; "
          "each mode's comm and step above include the all-to-alls, AdamW steps the dense parameters and "
          "1/{} of the experts\n",
          fmt::format("{:.1f}", ep->expert_grad_bytes / 1e6),
          ep->replicas > 1 ? fmt::format(", but across the {} replicas of each shard: {} ms exposed",
                                         ep->replicas, msf(ep->replica_reduce_s))
                           : std::string(),
          ep->ranks);
    }
  });
}

}  // namespace ridge::cli
