// Data-parallel communication: ring collective times on a link and a timeline of each DDP design
// against the backward pass (ridge/roofline/ddp.hpp has the model).
#include "ridge/roofline/ddp.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.hpp"
#include "roofline/json.hpp"
#include "ridge/core/error.hpp"
#include "ridge/roofline/model_buffers.hpp"

namespace ridge::roofline {
namespace {

bool finite_ge0(double v) {
  return std::isfinite(v) && v >= 0;
}

// Link bytes per rank of a collective over the whole buffer, from the cost models of cost.cpp.
double link_bytes(const char* op, double bytes, int64_t ranks) {
  if (ranks < 2 || bytes <= 0) return 0;
  const auto b = static_cast<int64_t>(std::llround(bytes));
  if (std::string(op) == "all-reduce")
    return static_cast<double>(all_reduce(b, ranks, DType::f32).link_bytes());
  if (std::string(op) == "all-gather")
    return static_cast<double>(all_gather(b, ranks, DType::f32).link_bytes());
  return static_cast<double>(reduce_scatter(b, ranks, DType::f32).link_bytes());
}

double latency(const DdpLink& l, int64_t steps) {
  return l.base_latency_s + static_cast<double>(steps) * l.hop_latency_s;
}

struct Timeline {
  double link_free = 0;  // when the link finishes its last collective
  std::vector<DdpSpan> spans;
  void issue(const std::string& what, double bytes, double ready, double duration) {
    const double start = std::max(ready, link_free);
    spans.push_back({what, bytes, start, start + duration});
    link_free = start + duration;
  }
};

}  // namespace

void DdpLink::validate() const {
  check(std::isfinite(bandwidth) && bandwidth > 0, "link bandwidth: must be finite and > 0 bytes/s, got {}",
        bandwidth);
  check(finite_ge0(hop_latency_s), "link latency: must be finite and >= 0 s, got {}", hop_latency_s);
  check(finite_ge0(base_latency_s), "link base latency: must be finite and >= 0 s, got {}", base_latency_s);
  check(ranks >= 1 && ranks <= (int64_t{1} << 20), "ranks: {} is not a rank count (accepted: 1 to 2^20)",
        ranks);
}

std::vector<std::string> ddp_link_presets() {
  return {"nvlink", "ib"};
}

DdpLink ddp_link_preset(const std::string& name, int64_t ranks) {
  const Chip h100 = load_chip("h100");
  DdpLink l;
  l.ranks = ranks;
  // NCCL's tuning model (src/graph/tuning.cc): ring / Simple protocol, 8.4 us per collective and 3.4 us
  // per NVLink step.
  l.base_latency_s = 8.4e-6;
  if (name == "nvlink") {
    l.name = h100.intra_node->name;
    l.bandwidth = h100.intra_node->bandwidth_per_direction.value;
    l.hop_latency_s = 3.4e-6;
    l.source = "bandwidth: hardware/h100.json intra_node (" +
               h100.intra_node->bandwidth_per_direction.source +
               "); latency: NCCL's tuning model, ring/Simple: 8.4 us per collective + 3.4 us per NVLink step";
  } else if (name == "ib") {
    l.name = h100.inter_node->name;
    l.bandwidth = h100.inter_node->bandwidth_per_direction.value;
    l.hop_latency_s = 10e-6;
    l.source =
        "bandwidth: hardware/h100.json inter_node (" + h100.inter_node->bandwidth_per_direction.source +
        "); latency: 8.4 us per collective (NCCL's tuning model, ring/Simple) + 10 us per network step "
        "(an assumption, not a vendor figure: override with --link-latency-us)";
  } else {
    fail_arg("name", "'{}' is not a link preset (accepted: nvlink, ib; or a DdpLink with its own figures)",
             name);
  }
  l.validate();
  return l;
}

double ring_all_reduce_s(double bytes, const DdpLink& l) {
  if (l.ranks < 2 || bytes <= 0) return 0;
  return latency(l, 2 * (l.ranks - 1)) + link_bytes("all-reduce", bytes, l.ranks) / l.bandwidth;
}
double ring_all_gather_s(double bytes, const DdpLink& l) {
  if (l.ranks < 2 || bytes <= 0) return 0;
  return latency(l, l.ranks - 1) + link_bytes("all-gather", bytes, l.ranks) / l.bandwidth;
}
double ring_reduce_scatter_s(double bytes, const DdpLink& l) {
  if (l.ranks < 2 || bytes <= 0) return 0;
  return latency(l, l.ranks - 1) + link_bytes("reduce-scatter", bytes, l.ranks) / l.bandwidth;
}
double ring_broadcast_s(double bytes, const DdpLink& l) {
  if (l.ranks < 2 || bytes <= 0) return 0;
  // Pipelined along the chain: every link carries the whole buffer once.
  return latency(l, l.ranks - 1) + bytes / l.bandwidth;
}

double all_to_all_s(double bytes, const DdpLink& l) {
  if (l.ranks < 2 || bytes <= 0) return 0;
  const double n = static_cast<double>(l.ranks);
  return latency(l, l.ranks - 1) + (n - 1) / n * bytes / l.bandwidth;
}

ExpertParallel expert_parallel(const ModelShape& m, const DdpInput& in, const DdpLink& link,
                               int64_t expert_ranks) {
  check_arg(m.is_moe(), "shape", "expert parallelism needs an MoE model (this one is dense)");
  check_arg(expert_ranks >= 1 && expert_ranks <= (int64_t{1} << 20), "expert_ranks",
            "{} is not a rank count (accepted: 1 to 2^20)", expert_ranks);
  check_arg(m.num_experts % expert_ranks == 0, "expert_ranks",
            "{} ranks do not share out {} experts evenly (accepted: a divisor of {})", expert_ranks,
            m.num_experts, m.num_experts);
  link.validate();
  check_arg(link.ranks % expert_ranks == 0, "expert_ranks",
            "{} does not divide the {} ranks (the ranks form groups that each hold every expert once)",
            expert_ranks, link.ranks);
  ExpertParallel r;
  r.ranks = expert_ranks;
  r.experts_per_rank = m.num_experts / expert_ranks;
  r.moe_layers = m.num_moe_layers();
  r.all_to_alls = 4 * r.moe_layers;
  r.tokens = static_cast<double>(m.batch) * static_cast<double>(m.seq);
  const double rows = r.tokens * static_cast<double>(m.top_k) * static_cast<double>(m.d_model);
  r.dispatch_bytes = rows * static_cast<double>(dtype_size(m.storage.value_or(m.operand)));
  r.combine_bytes = rows * 4;
  const double n = static_cast<double>(expert_ranks);
  r.leaving = (n - 1) / n;
  DdpLink l = link;
  l.ranks = expert_ranks;
  r.dispatch_s = all_to_all_s(r.dispatch_bytes, l);
  r.combine_s = all_to_all_s(r.combine_bytes, l);
  r.shared_forward_s = in.shared_forward_s;
  r.shared_backward_s = in.shared_backward_s;
  const double layers = static_cast<double>(r.moe_layers);
  r.step_s = layers * 2 * (r.dispatch_s + r.combine_s);
  r.hidden_s =
      layers * (std::min(r.dispatch_s, r.shared_forward_s) + std::min(r.dispatch_s, r.shared_backward_s));
  r.exposed_s = r.step_s - r.hidden_s;
  for (const ParamSpec& p : model_parameters(m))
    if (is_expert_stack(p.name)) {
      double b = 4;
      for (int64_t d : p.shape) b *= static_cast<double>(d);
      r.expert_grad_bytes += b;
    }
  r.replicas = link.ranks / expert_ranks;
  DdpLink replicas = link;
  replicas.ranks = r.replicas;
  r.replica_reduce_s = ring_all_reduce_s(r.expert_grad_bytes / n, replicas);
  return r;
}

DdpInput expert_parallel_ddp_input(const DdpInput& in, const ExpertParallel& ep) {
  DdpInput out = in;
  const double total = in.total_bytes();
  out.grads.clear();
  for (const auto& g : in.grads)
    if (!is_expert_stack(g.name)) out.grads.push_back(g);
  // AdamW runs over every parameter at the same rate: the dense ones and 1/N of the experts'.
  if (total > 0) {
    const double stepped = out.total_bytes() + ep.expert_grad_bytes / static_cast<double>(ep.ranks);
    out.optimizer_s = in.optimizer_s * stepped / total;
  }
  return out;
}

DdpPrediction add_expert_parallel(DdpPrediction p, const ExpertParallel& ep) {
  p.comm_s += ep.step_s + ep.replica_reduce_s;
  p.hidden_s += ep.hidden_s;
  p.exposed_s += ep.exposed_s + ep.replica_reduce_s;
  p.step_s += ep.exposed_s + ep.replica_reduce_s;
  return p;
}

double DdpInput::total_bytes() const {
  double s = 0;
  for (const auto& g : grads) s += g.bytes;
  return s;
}
double DdpInput::backward_s() const {
  double s = 0;
  for (double t : backward_group_s) s += t;
  return s;
}

void DdpInput::validate() const {
  check(finite_ge0(forward_s), "forward time: must be finite and >= 0, got {}", forward_s);
  check(finite_ge0(optimizer_s), "optimizer time: must be finite and >= 0, got {}", optimizer_s);
  check(finite_ge0(other_s), "other time: must be finite and >= 0, got {}", other_s);
  for (size_t g = 0; g < backward_group_s.size(); ++g)
    check(finite_ge0(backward_group_s[g]), "backward_group_s[{}]: must be finite and >= 0, got {}", g,
          backward_group_s[g]);
  int prev = 0;
  for (const auto& t : grads) {
    check(finite_ge0(t.bytes), "gradient '{}': bytes must be finite and >= 0, got {}", t.name, t.bytes);
    check(t.group >= 0 && static_cast<size_t>(t.group) < backward_group_s.size(),
          "gradient '{}': group {} is outside the {} backward groups", t.name, t.group,
          backward_group_s.size());
    check(t.group >= prev,
          "gradient '{}': group {} comes after group {} (list the gradients in the order "
          "backward finishes them)",
          t.name, t.group, prev);
    prev = t.group;
  }
}

std::string DdpSetting::label() const {
  const std::string m = mode == "bucketed" ? fmt::format("bucketed {:g} MB", bucket_mb) : mode;
  if (sharding == "zero1") return mode == "flat" ? "zero1" : "zero1 (" + m + ")";
  return sharding == "cs336" ? "cs336 (" + m + ")" : m;
}

void DdpSetting::validate() const {
  check(mode == "naive" || mode == "flat" || mode == "overlap" || mode == "bucketed",
        "mode: '{}' is not a data-parallel mode (accepted: naive, flat, overlap, bucketed)", mode);
  check(sharding == "none" || sharding == "cs336" || sharding == "zero1",
        "sharding: '{}' is not an optimizer sharding scheme (accepted: none, cs336, zero1)", sharding);
  check(mode != "bucketed" || (std::isfinite(bucket_mb) && bucket_mb > 0),
        "bucket_mb: must be finite and > 0, got {}", bucket_mb);
}

nlohmann::json to_json(const DdpPrediction& pred) {
  auto spans_j = nlohmann::json::array();
  for (const auto& s : pred.spans)
    spans_j.push_back({{"what", s.what}, {"bytes", s.bytes}, {"start_s", s.start_s}, {"end_s", s.end_s}});
  return {{"setting", pred.setting.label()},
          {"mode", pred.setting.mode},
          {"bucket_mb", pred.setting.mode == "bucketed" ? nlohmann::json(pred.setting.bucket_mb)
                                                        : nlohmann::json(nullptr)},
          {"sharding", pred.setting.sharding},
          {"collectives", pred.collectives},
          {"bytes", pred.bytes},
          {"comm_s", pred.comm_s},
          {"hidden_s", pred.hidden_s},
          {"exposed_s", pred.exposed_s},
          {"compute_s", pred.compute_s},
          {"step_s", pred.step_s},
          {"spans", spans_j}};
}

DdpPrediction predict_ddp(const DdpInput& in, const DdpLink& link, const DdpSetting& setting) {
  in.validate();
  link.validate();
  setting.validate();
  DdpPrediction p;
  p.setting = setting;
  const double T = in.backward_s();
  const double N = static_cast<double>(link.ranks);
  // When each group's gradients are final, from the start of backward.
  std::vector<double> final_at(in.backward_group_s.size());
  double t = 0;
  for (size_t g = 0; g < final_at.size(); ++g) final_at[g] = t += in.backward_group_s[g];

  Timeline tl;
  const bool sharded = setting.sharding != "none";
  const double opt_s = sharded ? in.optimizer_s / N : in.optimizer_s;
  const bool zero1 = setting.sharding == "zero1";
  // Gradient reduction: collectives over runs of tensors in flat order.
  struct Run {
    size_t first, last;
    double bytes;
  };
  std::vector<Run> runs;
  const double limit = setting.mode == "bucketed" ? setting.bucket_mb * 1e6 : 0;
  for (size_t i = 0; i < in.grads.size(); ++i) {
    const double b = in.grads[i].bytes;
    if (b <= 0) continue;
    const bool join = !runs.empty() && (setting.mode == "flat" ||
                                        (setting.mode == "bucketed" && runs.back().bytes + b <= limit));
    if (join) {
      runs.back().last = i;
      runs.back().bytes += b;
    } else {
      runs.push_back({i, i, b});
    }
  }
  const bool overlapped = setting.mode == "overlap" || setting.mode == "bucketed";
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto& run = runs[r];
    const double ready = overlapped ? final_at[static_cast<size_t>(in.grads[run.last].group)] : T;
    // zero1 reduce-scatters each run (every rank keeps the sum over its shard) where the others
    // all-reduce it; the runs and when they are ready are the same.
    const std::string op = zero1 ? "reduce-scatter " : "all-reduce ";
    const std::string what = setting.mode == "flat"       ? op + "flat gradient"
                             : setting.mode == "bucketed" ? fmt::format("{}bucket {}", op, r)
                                                          : op + in.grads[run.first].name;
    tl.issue(what, run.bytes, ready,
             zero1 ? ring_reduce_scatter_s(run.bytes, link) : ring_all_reduce_s(run.bytes, link));
    p.bytes += run.bytes;
    ++p.collectives;
  }
  for (const auto& s : tl.spans) {
    p.comm_s += s.end_s - s.start_s;
    p.hidden_s += std::max(0.0, std::min(s.end_s, T) - std::min(s.start_s, T));
  }
  double reduce_end = std::max(T, tl.link_free);
  p.exposed_s = reduce_end - T;
  if (zero1) {
    // AdamW on this rank's shard, then the updated parameters all-gathered: nothing left to hide it.
    tl.link_free = reduce_end + opt_s;
    const double before = tl.link_free;
    tl.issue("all-gather parameters", in.total_bytes(), tl.link_free,
             ring_all_gather_s(in.total_bytes(), link));
    p.bytes += in.total_bytes();
    ++p.collectives;
    const double gather = tl.link_free - before;
    p.comm_s += gather;
    p.exposed_s += gather;
  }
  if (setting.sharding == "cs336") {
    // Each rank steps its own tensors, then every tensor is broadcast by its owner.
    tl.link_free = reduce_end + opt_s;
    const double before = tl.link_free;
    for (const auto& g : in.grads) {
      if (g.bytes <= 0) continue;
      tl.issue("broadcast " + g.name, g.bytes, tl.link_free, ring_broadcast_s(g.bytes, link));
      p.bytes += g.bytes;
      ++p.collectives;
    }
    const double bcast = tl.link_free - before;
    p.comm_s += bcast;
    p.exposed_s += bcast;
  }
  p.spans = tl.spans;
  p.compute_s = in.forward_s + T + opt_s + in.other_s;
  p.step_s = p.compute_s + p.exposed_s;
  return p;
}

std::vector<double> default_bucket_candidates() {
  return {1, 2, 5, 10, 25, 50, 100, 250, 1000};
}

BucketSweep best_bucket(const DdpInput& in, const DdpLink& link, const std::vector<double>& candidates) {
  check(!candidates.empty(), "bucket candidates: the list is empty");
  BucketSweep s;
  for (double mb : candidates) {
    check(std::isfinite(mb) && mb > 0, "bucket candidates: {} MB is not a bucket size (finite, > 0)", mb);
    DdpSetting set;
    set.mode = "bucketed";
    set.bucket_mb = mb;
    s.tried.push_back(predict_ddp(in, link, set));
    const auto& best = s.tried[s.best];
    const auto& cur = s.tried.back();
    if (cur.step_s < best.step_s - 1e-12 ||
        (std::abs(cur.step_s - best.step_s) <= 1e-12 && cur.setting.bucket_mb < best.setting.bucket_mb))
      s.best = s.tried.size() - 1;
  }
  return s;
}

DdpInput ddp_input(const ModelShape& m, const Chip& chip, const std::string& level) {
  // The timeline lists every layer's nine gradients (and a CS336 broadcast of each): memory and time
  // grow with the layer count, so a count past any real model's is refused before anything is
  // allocated (10^9 layers took 24 GB before the kernel killed it). The largest models have ~100.
  constexpr int64_t kMaxLayers = 4096;
  check_arg(m.num_layers >= 1 && m.num_layers <= kMaxLayers, "layers",
            "{} is not accepted by the data-parallel timeline (1 .. {}; it lists every layer's gradients)",
            m.num_layers, kMaxLayers);
  const auto ops = model_step_ops(m);
  const auto L = m.num_layers;
  DdpInput in;
  in.backward_group_s.assign(static_cast<size_t>(L + 3), 0.0);
  BoundOptions bo;
  bo.level = level;
  for (const auto& op : ops) {
    // A chip without the op's peak runs it at fp32, else bf16, else fp16 (as model::step_roofline does).
    Cost c = op.cost;
    if (!chip.has_peak(c.compute)) {
      std::string alt;
      for (const char* k : {"fp32", "bf16", "fp16"})
        if (alt.empty() && chip.has_peak(k)) alt = k;
      check(!alt.empty(), "chip {}: has no {}, fp32, bf16 or fp16 peak to bound the model's ops with",
            chip.id, c.compute);
      c.compute = alt;
    }
    const double t1 = bound(c, chip, bo).t_lower;
    const double t = t1 * static_cast<double>(op.count);
    if (op.moe && op.name.find("shared") != std::string::npos)
      (op.pass == "forward" ? in.shared_forward_s : in.shared_backward_s) += t1;
    if (op.pass == "forward") {
      in.forward_s += t;
    } else if (op.pass == "optimizer") {
      (op.name == "adamw" ? in.optimizer_s : in.other_s) += t;
    } else if (op.name == "embedding backward") {
      in.backward_group_s.back() += t;
    } else if (op.name == "final norm backward") {
      in.backward_group_s[1] += t;
    } else if (op.name.find("lm_head") != std::string::npos || op.name.find("loss") != std::string::npos ||
               op.name.find("dlogits") != std::string::npos) {
      in.backward_group_s[0] += t;  // loss and lm_head
    } else {
      // A block op: every layer's, or (an MoE model's feed-forward) the MoE layers' or the dense layers'.
      // Backward runs the layers in reverse: group 2 is layer L-1, group L+1 layer 0 (model_parameters).
      for (int64_t l = 0; l < L; ++l)
        if (op.count == L || op.moe == m.moe_layer(l))
          in.backward_group_s[static_cast<size_t>(2 + (L - 1 - l))] += t1;
    }
  }
  // The gradients as the model lays out its parameters (fp32), in the order they become final.
  for (const ParamSpec& p : model_parameters(m)) {
    double bytes = 4;
    for (int64_t d : p.shape) bytes *= static_cast<double>(d);
    in.grads.push_back({p.name, bytes, p.group});
  }
  return in;
}

nlohmann::json to_json(const DdpMemory& mem) {
  return {{"params", mem.params},
          {"master", mem.master},
          {"grads", mem.grads},
          {"optimizer", mem.optimizer},
          {"total", mem.total()},
          {"sharded_master", mem.sharded_master},
          {"sharded_optimizer", mem.sharded_optimizer},
          {"sharded_total", mem.sharded_total()},
          {"saved", mem.total() - mem.sharded_total()}};
}

DdpMemory ddp_memory(double P, DType operand, int64_t ranks) {
  check(std::isfinite(P) && P > 0, "param_count: must be finite and > 0, got {}", P);
  check(ranks >= 1 && ranks <= (int64_t{1} << 20), "ranks: {} is not a rank count (accepted: 1 to 2^20)",
        ranks);
  check(operand == DType::f32 || operand == DType::bf16 || operand == DType::fp16,
        "operand: {} is not a training precision (accepted: f32, bf16, fp16)", dtype_name(operand));
  const double N = static_cast<double>(ranks);
  DdpMemory m;
  m.params = static_cast<double>(dtype_size(operand)) * P;
  m.master = operand == DType::f32 ? 0 : 4 * P;
  m.grads = 4 * P;
  m.optimizer = 8 * P;  // AdamW m and v, fp32
  m.sharded_master = m.master / N;
  m.sharded_optimizer = m.optimizer / N;
  return m;
}

}  // namespace ridge::roofline
