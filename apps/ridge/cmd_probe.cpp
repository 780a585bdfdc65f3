// `ridge probe`: measure this machine's roofline and write it as a chip file ("--hw this").
#include <fmt/format.h>

#include <cmath>
#include <iostream>

#include "cli.hpp"
#include "ridge/core.hpp"
#include "ridge/probe.hpp"
#include "core/check.hpp"
#include "probe/json.hpp"

namespace {

using ridge::units::format_bytes;
using ridge::units::format_flops;
using ridge::units::format_rate;

void print_table(const ridge::probe::ProbeResult& r, const std::string& path) {
  const auto& in = ridge::cpu::info();
  fmt::print("machine    {} ({} logical CPUs), {} threads\n", in.brand, in.logical_cpus, r.threads);
  fmt::print("probe      {} run, {} trials per figure (median), {:.1f} s, {}\n", r.quick ? "quick" : "full",
             r.trials, r.seconds, r.date);
  fmt::print("\npeak       {:<24} {:>7} {:>16} {:>16} {:>9}\n", "instruction", "chains", "1 thread",
             fmt::format("{} threads", r.threads), "scaling");
  for (const auto& p : r.peaks)
    fmt::print("{:<10} {:<24} {:>7} {:>16} {:>16} {:>8.2f}x\n", p.kernel.dtype, p.kernel.instruction,
               p.chains, format_flops(p.one_thread.median()), format_flops(p.all_threads.median()),
               p.one_thread.median() > 0 ? p.all_threads.median() / p.one_thread.median() : 0.0);
  // A dtype with several figures (bf16 widened onto the FMAs, AMX tiles): the chip file takes the fastest.
  std::string roofs;
  for (const auto& p : r.peaks) {
    const auto* roof = ridge::probe::roof_peak(r.peaks, p.kernel.dtype);
    const std::string one = p.kernel.dtype + ": " + roof->kernel.instruction;
    if (roof != &p && roofs.find(one) == std::string::npos) roofs += (roofs.empty() ? "" : ", ") + one;
  }
  if (!roofs.empty()) fmt::print("roof       {} (the faster instruction, as in the chip file)\n", roofs);
  fmt::print("amx        {}\n", ridge::probe::amx_status(r));
  for (const auto& p : r.peaks)
    if (p.repeats > 0)
      fmt::print(
          "note: {} all-threads phase repeated {}x: the first gave {}, too little scaling over one thread; "
          "kept the best\n",
          p.kernel.dtype, p.repeats, format_flops(p.first_all_threads));

  auto find = [](const std::vector<ridge::probe::Plateau>& v,
                 const std::string& l) -> const ridge::probe::Plateau* {
    for (const auto& p : v)
      if (p.level == l) return &p;
    return nullptr;
  };
  fmt::print("\nbandwidth  {:<22} {:>14} {:>14} {:>14} {:>7}\n", "plateau (total bytes)", "read",
             "read+write", "read, 1 thr", "spread");
  for (const char* level : {"l1", "l2", "l3", "dram"}) {
    const auto* p = find(r.plateaus, level);
    if (!p) {
      fmt::print("{:<10} (no sweep point inside its range)\n", level);
      continue;
    }
    const auto* p1 = find(r.plateaus_one, level);
    fmt::print("{:<10} {:<22} {:>14} {:>14} {:>14} {:>6.0f}%\n", level,
               format_bytes(double(p->lo)) + " .. " + format_bytes(double(p->hi)), format_rate(p->read),
               format_rate(p->read_write), p1 ? format_rate(p1->read) : std::string("-"), 100 * p->spread);
  }

  fmt::print("\nsweep ({} threads; total working set -> read, read+write)\n", r.threads);
  // Every other point of a full sweep keeps the table to one screen; the file has them all.
  const size_t step = r.sweep.size() > 30 ? 2 : 1;
  for (size_t i = 0; i < r.sweep.size(); i += step) {
    const auto& s = r.sweep[i];
    fmt::print("  {:>11} {:>14} {:>14}\n", format_bytes(double(s.total_bytes)), format_rate(s.read),
               format_rate(s.read_write));
  }
  fmt::print("\nwrote {} (use it as --hw this, or --hw {})\n", path, path);
}

// On a busy machine most trials are disturbed and the figures come out low; say so.
void warn_if_noisy(const ridge::probe::ProbeResult& r) {
  int clean = 0, attempted = 0;
  for (const auto& p : r.peaks) {
    clean += p.one_thread.clean + p.all_threads.clean;
    attempted += p.one_thread.attempted + p.all_threads.attempted;
  }
  for (const auto& s : r.sweep) {
    clean += s.clean;
    attempted += s.attempted;
  }
  if (attempted > 0 && clean < attempted / 2)
    ridge::cli::say("probe: ",
                    fmt::format("warning: only {} of {} trials ran with every thread on a CPU; the "
                                "machine is busy and these figures are likely low; rerun when it is idle",
                                clean, attempted));
}

void setup(CLI::App& root) {
  auto* cmd = root.add_subcommand("probe",
                                  "measure this machine's peak FLOP/s and bandwidth per memory level, "
                                  "and write them as a chip file");
  static bool quick = false, json = false;
  static int threads = 0, trials = 0;
  static double max_seconds = 0;
  static std::string out, max_bytes;
  cmd->add_flag("--quick", quick, "a shorter run (at most ~15 s) with fewer trials and sweep points");
  cmd->add_option("--threads", threads, "threads for the all-threads figures (default: ridge's thread count)")
      ->transform(ridge::cli::integer_in(1, 4096));
  cmd->add_option("--trials", trials,
                  "trials per figure, of which the median is reported (default 5 quick, 11)")
      ->transform(ridge::cli::integer_in(1, 1000));
  cmd->add_option("--max-seconds", max_seconds, "time limit of the run (default ~12 s quick, ~50 s)")
      ->transform(ridge::cli::number_in(0.1, 3600));
  cmd->add_option("--max-bytes", max_bytes,
                  "largest total working set of the sweep, e.g. 256MiB (default 4x the last-level cache, 8x "
                  "without --quick)");
  auto* out_opt = cmd->add_option(
      "-o,--output", out, "chip file to write (default: $RIDGE_HOME/this.json or ~/.cache/ridge/this.json)");
  cmd->add_flag("--json", json, "print the chip file as one JSON document instead of the table");
  cmd->callback([out_opt] {
    ridge::check(out_opt->count() == 0 || !out.empty(),
                 "-o/--output: empty path (expected a chip file to write)");
    const int cpus = ridge::cpu::info().logical_cpus;
    ridge::check(threads <= std::max(cpus, 1),
                 "--threads: {} exceeds the {} logical CPUs here (expected 1..{})", threads, cpus, cpus);
    const std::string path = out.empty() ? ridge::probe::default_output_path() : out;
    // A bad output path is found before the measurement, not after it.
    ridge::files::check_name_fits(path, "-o");  // before -o's folder is made
    const ridge::cli::FlagNames out_flag = {{"path", "-o"}};
    ridge::cli::with_flags(out_flag, [&] { ridge::probe::check_writable(path); });
    ridge::probe::ProbeOptions o;
    o.quick = quick;
    o.threads = threads;
    o.trials = trials;
    o.max_seconds = max_seconds;
    if (!max_bytes.empty()) {
      o.max_bytes = ridge::numbers::parse_bytes(max_bytes, "--max-bytes");
      const int t = threads > 0 ? threads : ridge::get_num_threads();
      const int64_t least = ridge::probe::min_max_bytes(t);
      ridge::check(o.max_bytes >= least, "--max-bytes: '{}' is too small (at least {} for {} threads)",
                   max_bytes, ridge::units::format_bytes(static_cast<double>(least)), t);
      ridge::memory::check_fits(static_cast<double>(o.max_bytes), "--max-bytes " + max_bytes);
    }
    o.progress = [](const std::string& s) { ridge::cli::say("probe: ", s); };
    const auto r = ridge::cli::with_flags({{"threads", "--threads"}}, [&] { return ridge::probe::run(o); });
    const auto chip = ridge::probe::to_chip_json(r);
    ridge::cli::with_flags(out_flag, [&] { ridge::probe::write_chip_file(chip, path); });
    warn_if_noisy(r);
    if (json) {
      ridge::cli::print_json(chip);
      ridge::cli::say("probe: wrote ", path);
    } else {
      print_table(r, path);
    }
  });
}

}  // namespace

RIDGE_COMMAND(probe, setup);
