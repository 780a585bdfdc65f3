// Timing of the probe's kernels: peak FLOP/s and bandwidth, one trial = all threads running the
// same kernel between two barriers, timed by the master thread, so a figure is the rate the
// threads reach together (the slowest thread sets it, as it does for a parallel kernel).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <functional>

#include "probe/internal.hpp"
#include "probe/kernels.hpp"
#include "ridge/core.hpp"
#include "ridge/probe.hpp"
#include "core/check.hpp"

namespace ridge::probe {
namespace {

using detail::PeakFn;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The compiler cannot drop a kernel whose result reaches a volatile store.
volatile double g_sink = 0;

struct KernelEntry {
  PeakKernel info;
  PeakFn fn;
  bool (*available)();
};

// Each kernel runs where the CPU has its instructions and the active path (RIDGE_ISA, default the best)
// is at or above its tier: `RIDGE_ISA=avx2 ridge probe` measures the roof of the AVX2 tier on any host,
// so the AVX2 kernels are held to their own peak, not to the wider units' one.
bool at_or_below_active(cpu::Isa isa) {
  return static_cast<int>(isa) <= static_cast<int>(cpu::active_isa());
}
bool has_avx512() {
  const auto& f = cpu::info().features;
  return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && at_or_below_active(cpu::Isa::avx512);
}
bool has_avx512bf16() {
  return has_avx512() && cpu::info().features.avx512_bf16 && at_or_below_active(cpu::Isa::avx512bf16);
}
bool has_avx512vnni() {
  return has_avx512() && cpu::info().features.avx512_vnni;
}
bool has_avx2() {
  const auto& f = cpu::info().features;
  return f.avx2 && f.fma && at_or_below_active(cpu::Isa::avx2);
}
bool has_amx() {
  // the CPU's tiles, the OS's tile state and Linux's grant
  return cpu::supported(cpu::Isa::amx) && at_or_below_active(cpu::Isa::amx);
}
bool always() {
  return true;
}

// Best ISA first within each dtype. The probe measures the first entry of each dtype's ways of computing
// it: its vector instruction, bf16 widened onto the fp32 FMAs, and where the CPU has AMX the tiles; the
// chip file takes the fastest (roof_peak).
const std::vector<KernelEntry>& kernel_table() {
  static const std::vector<KernelEntry> t = {
      {{"fp64", "avx512", "vfmadd231pd zmm", 16}, detail::peak_fp64_avx512, has_avx512},
      {{"fp64", "avx2", "vfmadd231pd ymm", 8}, detail::peak_fp64_avx2, has_avx2},
      {{"fp64", "scalar", "mulsd+addsd (baseline x86-64)", 2}, detail::peak_fp64_scalar, always},
      {{"fp32", "avx512", "vfmadd231ps zmm", 32}, detail::peak_fp32_avx512, has_avx512},
      {{"fp32", "avx2", "vfmadd231ps ymm", 16}, detail::peak_fp32_avx2, has_avx2},
      {{"fp32", "scalar", "mulss+addss (baseline x86-64)", 2}, detail::peak_fp32_scalar, always},
      {{"bf16", "amx", "tdpbf16ps tmm", 16 * 16 * 32 * 2, 4}, detail::peak_bf16_amx, has_amx},
      {{"bf16", "avx512bf16", "vdpbf16ps zmm", 64}, detail::peak_bf16_avx512bf16, has_avx512bf16},
      {{"bf16", "avx512", "vfmadd231ps zmm, widened", 32, 0, true}, detail::peak_fp32_avx512, has_avx512},
      {{"bf16", "avx2", "vfmadd231ps ymm, widened", 16, 0, true}, detail::peak_fp32_avx2, has_avx2},
      {{"int8", "amx", "tdpbssd tmm", 16 * 16 * 64 * 2, 4}, detail::peak_int8_amx, has_amx},
      {{"int8", "avx512vnni", "vpdpbusd zmm", 128}, detail::peak_int8_avx512vnni, has_avx512vnni},
  };
  return t;
}

const KernelEntry& find_entry(const PeakKernel& k) {
  for (const auto& e : kernel_table())
    if (e.info.dtype == k.dtype && e.info.isa == k.isa) {
      check(e.available(), "probe: this CPU, or the path RIDGE_ISA chose, cannot run the {} {} kernel",
            k.dtype, k.isa);
      return e;
    }
  fail("probe: no {} kernel for isa '{}'", k.dtype, k.isa);
}

double thread_cpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs `work(tid, reps)` on `threads` threads. First it grows `reps` until one call lasts about
// `seconds` of the master's CPU time (CPU time, so a preempted calibration does not shrink the
// trials; this phase doubles as the warm-up that brings the clocks up), then runs trials between
// barriers until `want` are clean or `budget_s` has passed. `units_per_rep` is the FLOP or bytes
// one thread does per rep.
// After `budget_s` it stops once `want` trials ran, clean or not; after `hard_deadline` (an
// absolute now() time) it stops after the current trial, so a whole probe keeps its time limit
// even on a machine so busy that trials take ten times their nominal length.
template <typename Work>
Trials run_trials(int threads, int want, double seconds, double budget_s, double hard_deadline,
                  double units_per_rep, Work work) {
  std::vector<double> cpu(static_cast<size_t>(threads), 0.0), clean, dirty;
  int64_t reps = 1;
  int team = 1, attempted = 0;
  double start = 0;
  bool calibrated = false, done = false;
  const double deadline = now() + budget_s;
#pragma omp parallel num_threads(threads)
  {
    const auto tid = static_cast<size_t>(omp_get_thread_num());
    double local = 0;
    for (;;) {
#pragma omp barrier
#pragma omp master
      team = omp_get_num_threads();
      const double c0 = thread_cpu();
      local += work(tid, reps);
      cpu[tid] = thread_cpu() - c0;
#pragma omp barrier
#pragma omp master
      {
        const double t = cpu[0];
        if (t >= seconds / 4 || reps > (int64_t{1} << 40) || now() > hard_deadline) {
          reps = std::max<int64_t>(
              1, static_cast<int64_t>(static_cast<double>(reps) * seconds / std::max(t, 1e-9)));
          calibrated = true;
        } else {
          reps *= t < seconds / 64 ? 8 : 2;
        }
      }
#pragma omp barrier
      if (calibrated) break;
    }
    for (;;) {
#pragma omp barrier
#pragma omp master
      start = now();
      const double c0 = thread_cpu();
      local += work(tid, reps);
      cpu[tid] = thread_cpu() - c0;
#pragma omp barrier
#pragma omp master
      {
        const double wall = std::max(now() - start, 1e-9);
        const double rate = static_cast<double>(team) * units_per_rep * static_cast<double>(reps) / wall;
        bool ok = true;
        for (int t = 0; t < team; ++t) ok = ok && cpu[static_cast<size_t>(t)] >= 0.95 * wall;
        (ok ? clean : dirty).push_back(rate);
        ++attempted;
        const double t = now();
        done = static_cast<int>(clean.size()) >= want || (attempted >= want && t > deadline) ||
               t > hard_deadline;
      }
#pragma omp barrier
      if (done) break;
    }
#pragma omp critical
    g_sink = g_sink + local;
  }
  Trials out;
  out.attempted = attempted;
  out.clean = static_cast<int>(clean.size());
  out.rates = clean;
  std::sort(dirty.begin(), dirty.end(), std::greater<>());
  for (size_t i = 0; static_cast<int>(out.rates.size()) < want && i < dirty.size(); ++i)
    out.rates.push_back(dirty[i]);
  return out;
}

using BwRead = double (*)(const void*, size_t, int64_t);
using BwUpdate = void (*)(void*, size_t, int64_t);

struct BwKernels {
  BwRead read;
  BwUpdate update;
  const char* isa;
};

BwKernels bw_kernels() {
  if (has_avx512()) return {detail::read_avx512, detail::update_avx512, "avx512"};
  if (has_avx2()) return {detail::read_avx2, detail::update_avx2, "avx2"};
  return {detail::read_scalar, detail::update_scalar, "scalar"};
}

int64_t round_buffer(int64_t bytes) {
  return std::max<int64_t>(4096, (bytes + 4095) / 4096 * 4096);
}

}  // namespace

std::vector<PeakKernel> supported_peak_kernels() {
  std::vector<PeakKernel> out;
  for (const auto& e : kernel_table())
    if (e.available()) out.push_back(e.info);
  return out;
}

Trials measure_peak(const PeakKernel& k, int chains, int threads, int trials, double seconds,
                    double budget_s) {
  return internal::peak_trials(k, chains, threads, trials, seconds, budget_s, 1e300);
}

namespace internal {

double clock_now() {
  return now();
}

Trials peak_trials(const PeakKernel& k, int chains, int threads, int trials, double seconds, double budget_s,
                   double hard_deadline) {
  check(threads >= 1, "probe: threads must be >= 1 (got {})", threads);
  check(trials >= 1, "probe: trials must be >= 1 (got {})", trials);
  check(seconds > 0 && budget_s >= 0, "probe: trial time must be positive");
  const KernelEntry& e = find_entry(k);
  if (e.info.chains > 0)
    check(chains == e.info.chains, "probe: the {} {} kernel runs {} accumulators (got chains {})", k.dtype,
          k.isa, e.info.chains, chains);
  else
    check(chains == 8 || chains == 12 || chains == 16 || chains == 24,
          "probe: chains must be 8, 12, 16 or 24 (got {})", chains);
  const double per_rep = chains * e.info.ops_per_instruction;
  return run_trials(threads, trials, seconds, budget_s, hard_deadline, per_rep,
                    [&](size_t, int64_t reps) { return e.fn(chains, reps); });
}

const char* bandwidth_isa() {
  return bw_kernels().isa;
}

ThreadBuffers::ThreadBuffers(int threads, int64_t bytes_per_thread) : bytes(round_buffer(bytes_per_thread)) {
  bufs.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) bufs.emplace_back(static_cast<size_t>(bytes), "probe sweep buffer");
    // Each thread touches its own buffer first, so its pages come from that thread's memory node.
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    if (t < threads) std::memset(bufs[static_cast<size_t>(t)].data(), t + 1, static_cast<size_t>(bytes));
  }
}

Trials bandwidth_trials(ThreadBuffers& b, int64_t bytes_per_thread, bool update, int trials, double seconds,
                        double budget_s, double hard_deadline) {
  const int threads = static_cast<int>(b.bufs.size());
  const int64_t bytes = std::min(round_buffer(bytes_per_thread), b.bytes);
  const BwKernels k = bw_kernels();
  const double per_rep = static_cast<double>(bytes) * (update ? 2 : 1);
  return run_trials(threads, trials, seconds, budget_s, hard_deadline, per_rep,
                    [&](size_t tid, int64_t reps) {
                      void* p = b.bufs[std::min(tid, b.bufs.size() - 1)].data();
                      if (update) {
                        k.update(p, static_cast<size_t>(bytes), reps);
                        return 0.0;
                      }
                      return k.read(p, static_cast<size_t>(bytes), reps);
                    });
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace internal

Trials measure_bandwidth(int64_t bytes_per_thread, int threads, bool update, int trials, double seconds,
                         double budget_s) {
  check(threads >= 1, "probe: threads must be >= 1 (got {})", threads);
  check(trials >= 1, "probe: trials must be >= 1 (got {})", trials);
  check(seconds > 0 && budget_s >= 0, "probe: trial time must be positive");
  check(bytes_per_thread >= 1 && bytes_per_thread <= (int64_t{1} << 36),
        "probe: bytes per thread must be between 1 B and 64 GiB (got {})", bytes_per_thread);
  internal::ThreadBuffers b(threads, bytes_per_thread);
  return internal::bandwidth_trials(b, bytes_per_thread, update, trials, seconds, budget_s, 1e300);
}

double Trials::median() const {
  return internal::median(rates);
}
double Trials::best() const {
  return rates.empty() ? 0 : *std::max_element(rates.begin(), rates.end());
}

}  // namespace ridge::probe
