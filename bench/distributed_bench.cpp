// Benchmarks run as MPI ranks (`mpirun -np N ridge bench ...`, N >= 2):
//
//   allreduce  fp32 all-reduce, all-gather and reduce-scatter over buffer sizes: median and spread of the
//              slowest rank's time per call, algorithm and bus bandwidth (NCCL tests' definitions), and the
//              analyzer's ring prediction with this machine's probed memory bandwidth as the link.
//   ddp        the training step of every data-parallel design (naive, flat, overlap, bucketed 1, 10, 100,
//              1000 MB, cs336 and zero1 sharding) against the single-process step on the same global batch,
//              with communication, hidden and exposed time (distributed::CommStats), per-rank peak memory and
//              the analyzer's prediction; --trace writes one merged trace, one process row per rank.
//
// Every rank runs the same cases in the same order; rank 0 prints the rows (the others discard theirs).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/check.hpp"
#include "bench/json.hpp"
#include "bench/registry.hpp"
#include "roofline/json.hpp"
#include "model/json.hpp"
#include "ridge/bench.hpp"
#include "ridge/core.hpp"
#include "ridge/roofline.hpp"
#include "ridge/roofline/ddp.hpp"

#ifdef RIDGE_HAVE_DISTRIBUTED
#include <mpi.h>

#include "distributed/trace_merge.hpp"
#include "ridge/distributed.hpp"
#include "ridge/model/config.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/train.hpp"
#endif

namespace ridge {
namespace {

#ifdef RIDGE_HAVE_DISTRIBUTED

double r3(double x) {
  return std::round(x * 1000) / 1000;
}

// The MPI side: the input checks run before MPI starts (a lone process is refused there: a singleton
// init can hang or fail where no launcher runs), and an error they find goes to main(), which takes part
// in the ranks' agreement with it, so a bad argument is one line for the job. Then one Session, whose
// first collective is distributed::agree_to_start on the context's fingerprint: every rank runs the same
// sweep with the same options, or every rank stops with one line naming the first option that differs. After
// that, an error on one rank ends every rank (distributed::abort_all): the others are in collectives.
void require_ranks(const std::string& name) {
  check(
      env::launcher().several_ranks(),
      "bench {}: needs at least 2 MPI ranks; run it as 'mpirun -np 2 ridge bench {}' (this process is alone)",
      name, name);
}

// The end of a sweep under --trace (collective): every rank's trace merged into one file by rank 0, which
// says so on stderr (`rows`: how the ranks appear in it). The library's errors about its argument "trace"
// name the flag the path was given as.
void write_trace(bench::Context& ctx, int rank, int world, const char* rows) {
  if (ctx.trace_file.empty()) return;
  distributed::sync_trace();
  size_t n = 0;
  try {
    n = distributed::write_merged_trace(ctx.trace_file);
  } catch (const Error& e) {
    if (e.argument() == "trace") throw e.renamed("--trace");
    throw;
  }
  ctx.trace_written = true;
  if (rank == 0)
    std::fprintf(stderr, "trace: %zu events from %d ranks%s -> %s\n", n, world, rows, ctx.trace_file.c_str());
}

double max_over_ranks(double x) {
  return distributed::max(x);
}

bench::Measurement from_samples(std::vector<double> s, int warmup) {
  bench::Measurement m;
  m.samples = std::move(s);
  m.stats = bench::compute_stats(m.samples);
  m.warmup = warmup;
  return m;
}

// Samples of fn: each the slowest rank's time (every rank gets the same value, so every rank stops after
// the same sample), with the options' warm-up, iteration count and time limits.
bench::Measurement measure_collective(const std::function<void()>& fn, const bench::Options& o) {
  for (int i = 0; i < o.warmup; ++i) fn();
  std::vector<double> samples;
  double total = 0;
  while (true) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    fn();
    const double t = max_over_ranks(MPI_Wtime() - t0);
    samples.push_back(t);
    total += t;
    const bool enough = static_cast<int>(samples.size()) >= o.iters && total >= o.min_time_s;
    if (enough || (o.max_time_s > 0 && total >= o.max_time_s)) break;
  }
  return from_samples(std::move(samples), o.warmup);
}

// The link the analyzer predicts with: this machine's probed memory bandwidth, no latency.
std::optional<roofline::DdpLink> memory_link(const bench::Context& ctx, int world) {
  const roofline::Chip* chip = ctx.chip();
  if (!chip || chip->memory.empty()) return std::nullopt;
  roofline::DdpLink l;
  l.name = "memory (" + chip->memory_level().level + ")";
  l.bandwidth = chip->bandwidth();
  l.ranks = world;
  l.source = "this machine's probe: " + chip->memory_level().bandwidth.source;
  return l;
}

// ------------------------------------------------------------------------------ allreduce
// "16 MB" for whole decimal megabytes (the sizes' unit), else the byte count.
std::string size_label(int64_t s) {
  return s % 1'000'000 == 0 ? fmt::format("{} MB", s / 1'000'000) : fmt::format("{} B", s);
}

void run_allreduce(bench::Context& ctx) {
  const auto& g = ctx.grid;
  std::vector<int64_t> sizes;
  std::vector<std::string> ops;
  {
    g.check_keys({"size", "op"}, "allreduce");
    sizes = g.bytes("size", ctx.quick ? std::vector<int64_t>{1'000'000, 16'000'000}
                                      : std::vector<int64_t>{1'000'000, 4'000'000, 16'000'000, 64'000'000,
                                                             256'000'000, 1'024'000'000});
    ops = g.values("op", {"allreduce", "allgather", "reducescatter"});
    for (const auto& op : ops)
      check(op == "allreduce" || op == "allgather" || op == "reducescatter",
            "bench allreduce: op '{}' (accepted: allreduce, allgather, reducescatter)", op);
    require_ranks("allreduce");
    const int64_t N = std::max(env::launcher().size, 2);  // 0 when the launcher does not say: at least 2
    // Every rank holds a buffer of S and one of S/N; mpirun may put all N ranks on this machine.
    for (int64_t s : sizes) {
      check(s >= 4 * N, "--set size: {} bytes is less than one fp32 per rank ({} ranks)", s, N);
      check(s / 4 <= INT32_MAX, "--set size: {} floats is beyond MPI's int counts", s / 4);
      memory::check_fits(
          static_cast<double>(s + s / N) * static_cast<double>(N),
          fmt::format("--set size: {} on {} ranks", units::format_bytes(static_cast<double>(s)), N));
    }
  }
  distributed::Session session;
  distributed::agree_to_start("", ctx.fingerprint);
  const int rank = session.rank(), world = session.size();
  const int64_t N = world;
  const auto link = memory_link(ctx, world);
  if (rank == 0)
    ctx.progress.start(sizes.size() * ops.size());
  else
    ctx.sink.discard();
  try {
    for (const auto& op : ops)
      for (int64_t s : sizes) {
        // A whole number of fp32 per rank: the size rounded down to a multiple of 4 N bytes.
        const int64_t part = s / 4 / N, n = part * N, bytes = n * 4;
        Buffer<float> a(static_cast<size_t>(n), "allreduce.a"), b(static_cast<size_t>(part), "allreduce.b");
        std::fill(a.begin(), a.end(), 1.0f);
        std::fill(b.begin(), b.end(), 1.0f);
        std::function<void()> fn;
        double factor = 0;
        if (op == "allreduce") {
          // In place: the values grow N-fold per call (to inf after ~128 calls, which costs the same).
          fn = [&] {
            MPI_Allreduce(MPI_IN_PLACE, a.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          };
          factor = 2.0 * static_cast<double>(N - 1) / static_cast<double>(N);
        } else if (op == "allgather") {
          fn = [&] {
            MPI_Allgather(b.data(), static_cast<int>(part), MPI_FLOAT, a.data(), static_cast<int>(part),
                          MPI_FLOAT, MPI_COMM_WORLD);
          };
          factor = static_cast<double>(N - 1) / static_cast<double>(N);
        } else {
          fn = [&] {
            MPI_Reduce_scatter_block(a.data(), b.data(), static_cast<int>(part), MPI_FLOAT, MPI_SUM,
                                     MPI_COMM_WORLD);
          };
          factor = static_cast<double>(N - 1) / static_cast<double>(N);
        }
        bench::Measurement m;
        {
          RIDGE_RANGE(fmt::format("{} {}", op, size_label(s)));
          m = measure_collective(fn, ctx.options);
        }
        if (rank != 0) continue;
        bench::Row row;
        row.case_ = {{"op", op}, {"size", size_label(s)}, {"ranks", world}};
        if (bytes != s) row.extra["bytes_used"] = bytes;
        row.dtype = "fp32";
        row.threads = 1;
        row.set_time(m);
        const double t = m.stats.median;
        // NCCL tests: algbw = S / t; busbw = algbw x 2(n-1)/n (all-reduce) or (n-1)/n (all-gather,
        // reduce-scatter), the bandwidth a link would need for the ring to take t.
        row.extra["algbw_gbps"] = r3(static_cast<double>(bytes) / t / 1e9);
        row.extra["busbw_gbps"] = r3(static_cast<double>(bytes) / t / 1e9 * factor);
        if (link) {
          const auto S = static_cast<double>(bytes);
          const double pred = op == "allreduce"   ? roofline::ring_all_reduce_s(S, *link)
                              : op == "allgather" ? roofline::ring_all_gather_s(S, *link)
                                                  : roofline::ring_reduce_scatter_s(S, *link);
          row.extra["predicted_ms"] = r3(pred * 1e3);
          row.extra["error_pct"] = std::round(100.0 * (pred - t) / t);
          row.note = fmt::format("link = probed {} {:.1f} GB/s", link->name, link->bandwidth / 1e9);
        } else {
          row.note = "no probe result: run 'ridge probe' for the prediction";
        }
        ctx.emit(std::move(row));
        ctx.progress.tick(fmt::format("allreduce {} {}", op, size_label(s)));
      }
  } catch (const std::exception& e) {
    distributed::abort_all(e.what());
  }
  write_trace(ctx, rank, world, "");
}

// ------------------------------------------------------------------------------ ddp
struct Mode {
  std::string name;  // "single", "naive", ..., "bucketed", "cs336", "zero1"
  double bucket_mb = 25;
  std::string label() const { return name == "bucketed" ? fmt::format("bucketed {:g} MB", bucket_mb) : name; }
};

std::vector<Mode> parse_modes(const std::vector<std::string>& v) {
  std::vector<Mode> out;
  for (const auto& s : v) {
    Mode m;
    const auto colon = s.find(':');
    m.name = s.substr(0, colon);
    check(m.name == "single" || m.name == "naive" || m.name == "flat" || m.name == "overlap" ||
              m.name == "bucketed" || m.name == "cs336" || m.name == "zero1",
          "bench ddp: mode '{}' (accepted: single, naive, flat, overlap, bucketed:MB, cs336, zero1)", s);
    if (colon != std::string::npos) {
      check(m.name == "bucketed", "bench ddp: mode '{}': only bucketed takes a size (bucketed:MB)", s);
      m.bucket_mb = numbers::parse_real(
          std::string_view(s).substr(colon + 1), "bench ddp: mode '" + s + "'",
          {0, std::numeric_limits<double>::infinity(), true, false, "MB, as in bucketed:25"});
    }
    out.push_back(m);
  }
  return out;
}

// Records when each backward group ends (for the analyzer's input) without changing the step.
struct GroupClock : model::StepHooks {
  std::vector<double> at;
  double reduce_at = 0;
  void group_final(int g) override {
    if (static_cast<size_t>(g) >= at.size()) at.resize(static_cast<size_t>(g) + 1);
    at[static_cast<size_t>(g)] = MPI_Wtime();
  }
  void reduce_gradients(std::span<float>) override { reduce_at = MPI_Wtime(); }
};

double median(std::vector<double> v) {
  return v.empty() ? 0.0 : bench::quantile(v, 0.5);
}

// A preset with the grid's overrides (vocab, d_model, d_ff, layers, heads, kv_heads: one value each).
model::ModelConfig model_config(const bench::Grid& g, const std::string& size, int64_t context) {
  auto c = model::preset(size, g.has("vocab") ? g.counts("vocab").at(0) : 10000, context);
  if (g.has("d_model")) c.d_model = g.counts("d_model").at(0);
  if (g.has("d_ff")) c.d_ff = g.counts("d_ff").at(0);
  if (g.has("layers")) c.num_layers = g.counts("layers").at(0);
  if (g.has("heads")) c.num_heads = g.counts("heads").at(0);
  if (g.has("kv_heads")) c.num_kv_heads = g.counts("kv_heads").at(0);
  check(c.d_model % c.num_heads == 0 && c.d_head() % 2 == 0,
        "bench ddp: heads {} must divide d_model {} into an even head size", c.num_heads, c.d_model);
  check(c.num_heads % c.kv_heads() == 0,
        "bench ddp: kv_heads {} does not divide heads {} (accepted: a divisor of {})", c.kv_heads(),
        c.num_heads, c.num_heads);
  c.validate();
  // The trainers below take the default path (FlashAttention): found here, before the ranks start, so it
  // is one line for the job rather than one from each rank's trainer.
  try {
    model::check_attention_path(c, model::TrainConfig{}.attention);
  } catch (const Error& e) {
    fail("--set d_model/--set heads: {}", e.what());
  }
  return c;
}

void run_ddp(bench::Context& ctx) {
  const auto& g = ctx.grid;
  std::vector<std::string> sizes, precs;
  std::vector<int64_t> ctxs, batches;
  std::vector<Mode> modes;
  {
    g.check_keys({"size", "context", "batch", "precision", "mode", "vocab", "d_model", "d_ff", "layers",
                  "heads", "kv_heads"},
                 "ddp");
    sizes = g.values("size", {"tiny"});
    ctxs = g.counts("context", {ctx.quick ? 64 : 128});
    batches = g.counts("batch", {2});
    precs = g.values("precision", {"fp32"});
    modes = parse_modes(g.values("mode", {"single", "naive", "flat", "overlap", "bucketed:1", "bucketed:10",
                                          "bucketed:100", "bucketed:1000", "cs336", "zero1"}));
    for (const auto& p : precs) model::parse_precision(p);
    for (const auto& s : sizes)
      for (int64_t T : ctxs) model_config(g, s, T);
    for (int64_t b : batches) check(b >= 1, "bench ddp: batch {} must be >= 1", b);
    require_ranks("ddp");
  }
  if (!ctx.quick && !ctx.warmup_given) ctx.options.warmup = 2;  // --warmup always wins
  distributed::Session session;
  distributed::agree_to_start("", ctx.fingerprint);
  const int rank = session.rank(), world = session.size();
  if (rank != 0) ctx.sink.discard();
  try {
    if (!ctx.trace_file.empty()) {
      trace::set_thread_name(fmt::format("rank {} main", rank));
      distributed::sync_trace();
    }
    // The link the analyzer predicts with, measured here so that the prediction tests the overlap model and
    // not a link figure: the per-collective latency is a 4-byte all-reduce's time, the bandwidth the bus
    // bandwidth of a 16 MB one (what MPI over shared memory sustains on this machine, now).
    roofline::DdpLink link;
    link.name = "MPI, measured";
    link.ranks = world;
    {
      bench::Options o;
      o.warmup = 5;
      o.iters = 50;
      float x = 1;
      link.base_latency_s =
          measure_collective([&] { MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
                             o)
              .stats.median;
      o.warmup = 1;
      o.iters = 5;
      const int64_t n = 4'000'000;
      Buffer<float> buf(static_cast<size_t>(n), "ddp.link");
      std::fill(buf.begin(), buf.end(), 1.0f);
      const double t = measure_collective(
                           [&] {
                             MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                                           MPI_COMM_WORLD);
                           },
                           o)
                           .stats.median;
      // busbw = 2(N-1)/N S / t, with the latency taken out.
      const double N = world;
      link.bandwidth =
          2 * (N - 1) / N * 4.0 * static_cast<double>(n) / std::max(1e-9, t - link.base_latency_s);
      link.source = fmt::format("measured in this run: latency {:.1f} us, bus bandwidth {:.2f} GB/s",
                                link.base_latency_s * 1e6, link.bandwidth / 1e9);
    }
    if (rank == 0) std::fprintf(stderr, "ddp: analyzer link %s\n", link.source.c_str());
    if (rank == 0)
      ctx.progress.start(sizes.size() * ctxs.size() * batches.size() * precs.size() * modes.size());

    for (const auto& s : sizes)
      for (int64_t T : ctxs)
        for (int64_t B : batches)
          for (const auto& prec : precs) {
            const auto cfg = model_config(g, s, T);
            model::TrainConfig tc;
            tc.batch = B;
            tc.seq = T;
            tc.precision = model::parse_precision(prec);
            tc.seed = 1;
            tc.lr_max = 1e-4;  // the steps only need to be steps, not to learn
            // Tokens of the global batch; rank r takes rows [r B, (r + 1) B).
            const int64_t GB = B * world;
            std::vector<int32_t> in(static_cast<size_t>(GB * T)), tg(in.size());
            std::mt19937 rng(11);
            std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(cfg.vocab_size - 1));
            for (size_t i = 0; i < in.size(); ++i) in[i] = tok(rng), tg[i] = tok(rng);
            const int32_t* my_in = in.data() + static_cast<size_t>(rank * B * T);
            const int32_t* my_tg = tg.data() + static_cast<size_t>(rank * B * T);

            // The analyzer's input: this model's gradients and the phases of one rank's step on its slice,
            // measured with every rank stepping alone at once (the machine as loaded as in the DDP runs).
            roofline::DdpInput din;
            {
              model::Trainer tr(cfg, tc);
              GroupClock clk;
              tr.set_hooks(&clk);
              std::vector<std::vector<double>> groups;
              std::vector<double> fwd, total, tail;
              for (int i = 0; i < ctx.options.warmup + std::max(ctx.quick ? 2 : 3, ctx.options.iters / 2);
                   ++i) {
                MPI_Barrier(MPI_COMM_WORLD);
                const double f0 = MPI_Wtime();
                tr.model().forward(my_in, my_tg, B, T);
                const double f1 = MPI_Wtime();
                clk.at.clear();
                const double t0 = MPI_Wtime();
                tr.step(my_in, my_tg);
                const double t1 = MPI_Wtime();
                if (i < ctx.options.warmup) continue;
                fwd.push_back(f1 - f0);
                total.push_back(t1 - t0);
                tail.push_back(t1 - clk.reduce_at);
                std::vector<double> gs(clk.at.size());
                for (size_t k = 0; k < clk.at.size(); ++k) gs[k] = clk.at[k] - (k ? clk.at[k - 1] : t0);
                groups.push_back(gs);
              }
              const auto& tens = tr.model().tensors();
              din.forward_s = median(fwd);
              din.optimizer_s = median(tail);
              din.backward_group_s.assign(groups.front().size(), 0.0);
              for (size_t k = 0; k < din.backward_group_s.size(); ++k) {
                std::vector<double> v;
                for (const auto& gs : groups) v.push_back(gs[k]);
                din.backward_group_s[k] = median(v);
              }
              // Group 0's time ran the forward too (the step's forward comes before any group ends).
              din.backward_group_s[0] = std::max(0.0, din.backward_group_s[0] - din.forward_s);
              for (const auto& t : tens)
                din.grads.push_back({t.name, 4.0 * static_cast<double>(t.numel), t.group});
            }

            std::optional<double> single_ms;
            for (const auto& mode : modes) {
              RIDGE_RANGE("ddp " + mode.label());
              memory::reset_peak();
              const int64_t base = memory::current_bytes();
              std::vector<double> steps, comm, hidden, exposed;
              int64_t peak = 0;
              {
                model::TrainConfig t2 = tc;
                if (mode.name == "single") t2.batch = GB;  // every rank steps the whole global batch alone
                distributed::DdpConfig dc;
                dc.mode = mode.name == "naive"      ? distributed::DdpMode::naive
                          : mode.name == "overlap"  ? distributed::DdpMode::overlap
                          : mode.name == "bucketed" ? distributed::DdpMode::bucketed
                                                    : distributed::DdpMode::flat;
                dc.bucket_mb = mode.bucket_mb;
                dc.sharding = mode.name == "cs336"   ? distributed::Sharding::cs336
                              : mode.name == "zero1" ? distributed::Sharding::zero1
                                                     : distributed::Sharding::none;
                // A sharded mode's trainer never holds the whole AdamW state, as in `ridge train`.
                std::tie(t2.optimizer_begin, t2.optimizer_end) =
                    distributed::initial_optimizer_range(dc.sharding, cfg.param_count(), world, rank);
                model::Trainer tr(cfg, t2);
                std::optional<distributed::DataParallel> dp;
                if (mode.name != "single") dp.emplace(tr, dc);
                // The peak of the steps: live state (the sharded optimizer's share only) plus each step's
                // own.
                memory::reset_peak();
                const int32_t* xi = mode.name == "single" ? in.data() : my_in;
                const int32_t* xt = mode.name == "single" ? tg.data() : my_tg;
                bench::Options o = ctx.options;
                for (int i = 0; i < o.warmup; ++i) {
                  RIDGE_RANGE("warm-up step");
                  tr.step(xi, xt);
                }
                double spent = 0;
                while (true) {
                  MPI_Barrier(MPI_COMM_WORLD);
                  const double t0 = MPI_Wtime();
                  {
                    RIDGE_RANGE("step");
                    tr.step(xi, xt);
                  }
                  const double t = max_over_ranks(MPI_Wtime() - t0);
                  steps.push_back(t);
                  spent += t;
                  if (dp) {
                    const auto& cs = dp->last_stats();
                    comm.push_back(distributed::mean(cs.comm_s));
                    hidden.push_back(distributed::mean(cs.hidden_s));
                    exposed.push_back(distributed::mean(cs.exposed_s));
                  }
                  const bool enough = static_cast<int>(steps.size()) >= o.iters && spent >= o.min_time_s;
                  if (enough || (o.max_time_s > 0 && spent >= o.max_time_s)) break;
                }
                peak =
                    static_cast<int64_t>(distributed::max(static_cast<double>(memory::peak_bytes() - base)));
              }
              const auto m = from_samples(steps, ctx.options.warmup);
              if (mode.name == "single") single_ms = m.median_ms();
              if (rank != 0) continue;
              bench::Row row;
              const bool custom = g.has("vocab") || g.has("d_model") || g.has("d_ff") || g.has("layers") ||
                                  g.has("heads") || g.has("kv_heads");
              row.case_ = {{"mode", mode.label()},
                           {"size", custom ? s + "*" : s},
                           {"context", T},
                           {"batch", B},
                           {"ranks", world}};
              row.dtype = prec;
              row.set_time(m);
              row.extra["global_batch"] = mode.name == "single" ? GB : B * world;
              if (!comm.empty()) {
                row.extra["comm_ms"] = r3(median(comm) * 1e3);
                row.extra["hidden_ms"] = r3(median(hidden) * 1e3);
                row.extra["exposed_ms"] = r3(median(exposed) * 1e3);
              }
              row.extra["peak_mib"] = std::round(static_cast<double>(peak) / (1 << 20) * 10) / 10;
              if (single_ms && mode.name != "single") row.extra["speedup"] = r3(*single_ms / m.median_ms());
              if (mode.name != "single") {
                roofline::DdpSetting st;
                st.mode = mode.name == "cs336" || mode.name == "zero1" ? "flat" : mode.name;
                st.bucket_mb = mode.bucket_mb;
                st.sharding = mode.name == "cs336" || mode.name == "zero1" ? mode.name : "none";
                const auto p = roofline::predict_ddp(din, link, st);
                row.extra["pred_comm_ms"] = r3(p.comm_s * 1e3);
                row.extra["pred_step_ms"] = r3(p.step_s * 1e3);
                row.extra["step_err_pct"] =
                    std::round(100.0 * (p.step_s * 1e3 - m.median_ms()) / m.median_ms());
                if (!comm.empty() && median(comm) > 0)
                  row.extra["comm_err_pct"] = std::round(100.0 * (p.comm_s - median(comm)) / median(comm));
              }
              if (mode.name == "single")
                row.note = fmt::format("every rank steps the global batch of {} alone, at once", GB);
              ctx.emit(std::move(row));
              ctx.progress.tick(fmt::format("ddp {} {} ctx={} batch={}", mode.label(), s, T, B));
            }
          }
  } catch (const std::exception& e) {
    distributed::abort_all(e.what());
  }
  write_trace(ctx, rank, world, " (one process row each)");
}

#else  // without MPI

void run_allreduce(bench::Context&) {
  fail("bench allreduce: this ridge was built without MPI (scripts/setup installs OpenMPI; then rebuild)");
}
void run_ddp(bench::Context&) {
  fail("bench ddp: this ridge was built without MPI (scripts/setup installs OpenMPI; then rebuild)");
}

#endif

}  // namespace
}  // namespace ridge

RIDGE_BENCHMARK(
    allreduce, "allreduce",
    "MPI all-reduce, all-gather, reduce-scatter (fp32, 1 MB..1 GB): bus bandwidth vs the ring model "
    "(mpirun -np N)",
    ridge::run_allreduce);
RIDGE_BENCHMARK(
    ddp, "ddp",
    "data-parallel training step of every DDP mode and sharded optimizer vs one process, with the "
    "analyzer's prediction (mpirun -np N)",
    ridge::run_ddp);
