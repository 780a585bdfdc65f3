// The probe's driver: peaks per dtype, the bandwidth sweep, plateaus, and the chip file.
#include "ridge/probe.hpp"
#include "probe/json.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "probe/internal.hpp"
#include "ridge/core.hpp"
#include "ridge/roofline.hpp"
#include "core/check.hpp"

namespace ridge::probe {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void say(const ProbeOptions& o, const std::string& s) {
  if (o.progress) o.progress(s);
}

// Settings of one run. Why these sizes: a trial must be long against the barrier (microseconds)
// and short against the scheduler's slices on a shared machine, so that a preempted trial is an
// outlier the median drops rather than a bias on every trial.
struct Plan {
  int trials;
  double peak_trial_s, peak_budget_s;  // one peak trial; all trials of one figure
  double scan_trial_s, scan_budget_s;  // the same while choosing the chain count
  std::vector<int> chains;             // chain counts tried
  double bw_trial_s, bw_budget_s;
  int points_per_octave;
  int64_t max_total;
  // Hard limits per phase, so the whole run keeps its promise (quick <= 15 s, full <= 60 s) even
  // on a machine busy enough that trials take many times their nominal length.
  double peaks_s, sweep_s, sweep_one_s;
};

// Shares what is left of a phase's time among the measurements still to come.
struct Schedule {
  double end;
  int left;
  double next() {
    const double n = internal::clock_now();
    const double share = std::max(0.0, end - n) / std::max(left, 1);
    left = std::max(left - 1, 0);
    return n + share;
  }
};

Plan make_plan(const ProbeOptions& o, int threads) {
  Plan p{};
  p.trials = o.trials > 0 ? o.trials : (o.quick ? 5 : 11);
  p.peak_trial_s = o.quick ? 0.003 : 0.005;
  p.peak_budget_s = o.quick ? 0.3 : 0.8;
  p.scan_trial_s = 0.002;
  p.scan_budget_s = o.quick ? 0.06 : 0.15;
  p.chains = {8, 12, 16, 24};
  p.bw_trial_s = o.quick ? 0.002 : 0.003;
  p.bw_budget_s = o.quick ? 0.08 : 0.15;
  p.points_per_octave = o.quick ? 2 : 4;
  p.peaks_s = o.quick ? 3 : 14;
  p.sweep_s = o.quick ? 4.5 : 20;
  p.sweep_one_s = o.quick ? 0 : 10;
  if (o.max_seconds > 0) {  // shrink every phase alike; the nominal total is 10 s quick, 50 s full
    const double scale = o.max_seconds / (p.peaks_s + p.sweep_s + p.sweep_one_s) * 0.85;
    p.peaks_s *= scale;
    p.sweep_s *= scale;
    p.sweep_one_s *= scale;
  }
  const Hierarchy h = hierarchy_for(threads);
  const int64_t llc = h.l3 > 0 ? h.l3 : h.l2 > 0 ? h.l2 : (int64_t{8} << 20);
  p.max_total = o.max_bytes > 0 ? o.max_bytes : std::max<int64_t>((o.quick ? 4 : 8) * llc, int64_t{64} << 20);
  return p;
}

PeakResult measure_dtype(const PeakKernel& k, int threads, const Plan& plan, Schedule& sched,
                         const ProbeOptions& o) {
  PeakResult r;
  r.kernel = k;
  // Choose the chain count on one thread: enough chains to cover latency x throughput, but not
  // so many that the accumulators spill out of the register file. The AMX kernels run their fixed
  // four tiles (probe/amx_peak.inc says why).
  r.chains = k.chains;
  double best = -1;
  for (int c : k.chains > 0 ? std::vector<int>{} : plan.chains) {
    const double m =
        internal::peak_trials(k, c, 1, 3, plan.scan_trial_s, plan.scan_budget_s, sched.next()).best();
    if (m > best) {
      best = m;
      r.chains = c;
    }
  }
  r.one_thread =
      internal::peak_trials(k, r.chains, 1, plan.trials, plan.peak_trial_s, plan.peak_budget_s, sched.next());
  r.all_threads = internal::peak_trials(k, r.chains, threads, plan.trials, plan.peak_trial_s,
                                        plan.peak_budget_s, sched.next());
  r.first_all_threads = r.all_threads.median();
  const int cores = cpu::info().cores;
  while (needs_repeat(r.one_thread.median(), r.all_threads.median(), threads, cores, r.repeats)) {
    ++r.repeats;
    say(o,
        fmt::format("peak {}: {} threads gave {}, below 0.8 x {} x the one-thread {}; repeating ({} of {})",
                    k.dtype, threads, units::format_flops(r.all_threads.median()),
                    std::min(threads, cores > 0 ? cores : threads),
                    units::format_flops(r.one_thread.median()), r.repeats, kMaxPeakRepeats));
    ++sched.left;  // the repeat takes its own share of the phase's time, not the next dtype's
    Trials again = internal::peak_trials(k, r.chains, threads, plan.trials, plan.peak_trial_s,
                                         plan.peak_budget_s, sched.next());
    if (again.median() > r.all_threads.median()) r.all_threads = std::move(again);
  }
  return r;
}

std::vector<int64_t> sweep_sizes(int threads, const Plan& plan) {
  // Per-thread sizes from 8 KiB (so a 2-thread sweep starts at 16 KiB in total and the L1 range
  // holds several points) up to max_total / threads, geometric.
  std::vector<int64_t> out;
  const double top = static_cast<double>(plan.max_total) / threads;
  for (int i = 0;; ++i) {
    const double s = 8192.0 * std::pow(2.0, static_cast<double>(i) / plan.points_per_octave);
    const int64_t b = (static_cast<int64_t>(s) + 4095) / 4096 * 4096;
    if (!out.empty() && b == out.back()) continue;
    if (s > top * 1.0001) break;
    out.push_back(b);
  }
  return out;
}

std::vector<SweepPoint> sweep(int threads, const Plan& plan, double seconds) {
  const auto sizes = sweep_sizes(threads, plan);
  internal::ThreadBuffers bufs(threads, sizes.back());
  const double end = internal::clock_now() + seconds;
  Schedule sched{end, 2 * static_cast<int>(sizes.size())};
  std::vector<SweepPoint> out;
  for (int64_t s : sizes) {
    // The time limit holds: a size reached after it is not measured (each trial passes over the
    // whole working set, seconds at gigabytes), so --max-bytes 4GiB with --max-seconds 1 ends.
    if (out.size() >= 2 && internal::clock_now() > end) break;
    SweepPoint p;
    p.bytes_per_thread = s;
    p.total_bytes = s * threads;
    const Trials rd = internal::bandwidth_trials(bufs, s, false, plan.trials, plan.bw_trial_s,
                                                 plan.bw_budget_s, sched.next());
    const Trials rw = internal::bandwidth_trials(bufs, s, true, plan.trials, plan.bw_trial_s,
                                                 plan.bw_budget_s, sched.next());
    p.read = rd.median();
    p.read_write = rw.median();
    p.attempted = rd.attempted + rw.attempted;
    p.clean = rd.clean + rw.clean;
    out.push_back(p);
  }
  return out;
}

}  // namespace

int64_t min_max_bytes(int threads) {
  return (int64_t{64} << 10) * std::max(threads, 1);
}

bool needs_repeat(double one_thread, double all_threads, int threads, int cores, int repeats_done,
                  int max_repeats, double min_scaling) {
  if (repeats_done >= max_repeats || threads <= 1 || !(one_thread > 0)) return false;
  const int scale = cores > 0 ? std::min(threads, cores) : threads;
  if (scale <= 1) return false;
  return !(all_threads >= min_scaling * scale * one_thread);
}

ProbeResult run(const ProbeOptions& o) {
  const double t0 = now();
  ProbeResult r;
  r.threads = o.threads > 0 ? o.threads : get_num_threads();
  check_arg(r.threads <= 4096, "threads", "{} is more threads than any machine has", r.threads);
  if (o.max_bytes != 0) {  // an empty size list crashed the sweep; a size beyond memory ended in bad_alloc
    check(o.max_bytes >= min_max_bytes(r.threads), "max_bytes: {} is too small (at least {} for {} threads)",
          units::format_bytes(static_cast<double>(o.max_bytes)),
          units::format_bytes(static_cast<double>(min_max_bytes(r.threads))), r.threads);
    memory::check_fits(static_cast<double>(o.max_bytes), "max_bytes");
  }
  r.quick = o.quick;
  r.date = utc_now();
  const Plan plan = make_plan(o, r.threads);
  r.trials = plan.trials;
  r.hierarchy = hierarchy_for(r.threads);

  // Per dtype the best vector kernel and, where they exist, bf16 widened onto the fp32 FMAs and the
  // tile kernel as well: each is measured and shown, and the chip file takes the fastest (roof_peak),
  // so the comparison is made on measurements rather than assumed (Intel's cores run vdpbf16ps at half
  // the rate of their fp32 FMAs, AMD's Zen 4 at twice).
  std::vector<std::string> seen;
  std::vector<PeakKernel> best;
  int measurements = 0;
  for (const auto& k : supported_peak_kernels()) {
    const std::string unit = k.dtype + (k.isa == "amx" ? " tiles" : k.widened ? " widened" : " vector");
    if (std::find(seen.begin(), seen.end(), unit) != seen.end()) continue;  // best ISA only
    seen.push_back(unit);
    best.push_back(k);
    measurements += k.chains > 0 ? 2 : static_cast<int>(plan.chains.size()) + 2;
  }
  r.amx_absent = cpu::amx_off_reason();
  Schedule sched{internal::clock_now() + plan.peaks_s, measurements};
  for (const auto& k : best) {
    say(o, "peak " + k.dtype + " (" + k.instruction + ")");
    r.peaks.push_back(measure_dtype(k, r.threads, plan, sched, o));
  }

  say(o, "bandwidth sweep, " + std::to_string(r.threads) + " threads, up to " +
             units::format_bytes(static_cast<double>(plan.max_total)));
  r.sweep = sweep(r.threads, plan, plan.sweep_s);
  r.plateaus = find_plateaus(r.sweep, r.hierarchy);
  if (!o.quick && o.sweep_one_thread && r.threads > 1) {
    say(o, "bandwidth sweep, 1 thread");
    Plan one = plan;
    one.points_per_octave = 2;
    one.max_total = std::max<int64_t>(plan.max_total / 2, 4 * hierarchy_for(1).l3);
    r.sweep_one = sweep(1, one, plan.sweep_one_s);
    r.plateaus_one = find_plateaus(r.sweep_one, hierarchy_for(1));
  }
  r.seconds = now() - t0;
  return r;
}

const PeakResult* roof_peak(const std::vector<PeakResult>& peaks, const std::string& dtype) {
  const PeakResult* best = nullptr;
  for (const auto& p : peaks)
    if (p.kernel.dtype == dtype && (!best || p.all_threads.median() > best->all_threads.median())) best = &p;
  return best;
}

std::string amx_status(const ProbeResult& r) {
  const bool measured =
      std::any_of(r.peaks.begin(), r.peaks.end(), [](const PeakResult& p) { return p.kernel.isa == "amx"; });
  if (measured) return "measured: tdpbf16ps and tdpbssd, four accumulator tiles, no loads in the timed loop";
  return "not on this machine: " + (r.amx_absent.empty() ? std::string("not measured") : r.amx_absent);
}

// The roofline module owns the rule, so "--hw this" always reads what the probe wrote.
std::string default_output_path() {
  return roofline::probe_result_path();
}

void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  check_arg(!path.empty(), "path", "empty file name (expected a chip file to write)");
  // The chip file's folder is made if missing (~/.cache/ridge on a first run, or -o out/chip.json);
  // a path with no folder part is written in the current one.
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::is_directory(dir, ec)) {
    ec.clear();
    fs::create_directories(dir, ec);
    check_arg(!ec, "path", "cannot create folder '{}' for '{}': {}", dir.string(), path, ec.message());
  }
  files::check_writable(path, "path");
}

void write_chip_file(const nlohmann::json& chip, const std::string& path) {
  check_writable(path);
  // A regular file through a temporary and a rename (a reader never sees half a file); a symlink
  // written through, a device such as /dev/null written in place, never replaced.
  files::write_text(path, chip.dump(2) + "\n", "path");
}

}  // namespace ridge::probe
