// ridge probe: measures the roofline of the machine at hand — peak FLOP/s per dtype (1 thread and
// all threads) and read bandwidth per memory level from a working-set sweep — and writes it as a
// chip file in the database's schema, so "this" machine is analysed like any published chip.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ridge::probe {

struct ProbeOptions {
  bool quick = false;  // ~10 s instead of ~30 s: fewer trials, sizes and chain counts
  int threads = 0;     // threads for the "all threads" figures; 0 = ridge::get_num_threads()
  int trials = 0;      // trials per figure; 0 = 5 (quick) or 9
  // Largest total working set of the sweep; 0 = 4x the last-level cache (8x in the full run).
  // At least min_max_bytes(threads) and at most the memory available (ridge::Error otherwise).
  int64_t max_bytes = 0;
  bool sweep_one_thread = true;  // also sweep with 1 thread (full run only)
  // Hard limit on the run's time; 0 = about 12 s quick, 50 s full. A busy machine gets fewer
  // clean trials within it rather than a longer run.
  double max_seconds = 0;
  // Called with a short line before each phase (the CLI prints it to stderr); may be empty.
  std::function<void(const std::string&)> progress;
};

// The smallest max_bytes a sweep on `threads` threads can run with: 64 KiB per thread, so the
// sweep (from 8 KiB per thread) has points enough to find a plateau.
int64_t min_max_bytes(int threads);

// One peak kernel: a dtype, the instruction that computes it and the ISA it needs.
struct PeakKernel {
  std::string dtype;               // chip-file key: "fp64", "fp32", "bf16", "int8"
  std::string isa;                 // "amx", "avx512", "avx512bf16", "avx512vnni", "avx2", "scalar"
  std::string instruction;         // "vfmadd231ps zmm", "tdpbf16ps tmm", ...
  double ops_per_instruction = 0;  // FLOP (OP for int8) per instruction per chain
  // Independent accumulators the kernel always runs (AMX: 4 tiles); 0 = a vector kernel, whose count
  // (8, 12, 16 or 24 registers) the probe chooses by measurement.
  int chains = 0;
  // bf16 done as ridge's GEMM may do it: operands widened to fp32 as they are packed, products on the
  // fp32 FMA units (the same instruction as fp32's figure, counted as bf16 work).
  bool widened = false;
};

// Every peak kernel this machine can run on the active path (RIDGE_ISA: a lower path leaves out the
// kernels above it, so its roof is its own), best ISA first within each dtype and way of computing it
// (AMX's tile instructions, the dtype's own vector instruction, bf16 widened onto the fp32 FMAs).
std::vector<PeakKernel> supported_peak_kernels();

// The trials behind one figure. A trial is clean when every thread was on a CPU for at least 95%
// of its wall time (by its thread CPU clock): on a shared machine a trial in which the scheduler
// took a thread away measures the neighbours, not the hardware. Trials are repeated until `want`
// are clean or the time budget is spent; then the fastest unclean ones top up the set.
struct Trials {
  std::vector<double> rates;  // per trial: FLOP/s or bytes/s, all threads together
  int attempted = 0;
  int clean = 0;
  double median() const;
  double best() const;
};

struct PeakResult {
  PeakKernel kernel;
  int chains = 0;                // accumulator chains of the best configuration
  Trials one_thread;             // 1 thread
  Trials all_threads;            // `threads` threads: the repeat with the best median (see needs_repeat)
  int repeats = 0;               // times the all-threads phase was repeated
  double first_all_threads = 0;  // median of the first all-threads attempt, before any repeat
};

// The repeat rule of a compute phase. Compute scales with cores: the all-threads figure should be
// near min(threads, cores) x the one-thread figure. One below `min_scaling` of that is suspect (on
// this kind of shared machine a whole phase sometimes ran at the one-thread rate, and a roof that
// low puts every measured kernel above it), so the phase is repeated, at most `max_repeats` times,
// and the attempt with the best median kept. `cores` <= 0 means unknown (threads is used).
inline constexpr int kMaxPeakRepeats = 2;
bool needs_repeat(double one_thread, double all_threads, int threads, int cores, int repeats_done,
                  int max_repeats = kMaxPeakRepeats, double min_scaling = 0.8);

// Measures one kernel: `threads` threads each running `chains` chains (8, 12, 16 or 24; the kernel's
// own `chains` where it has one, 4 for AMX) for about
// `seconds` per trial, `trials` trials within about `budget_s`. Throws ridge::Error for a kernel
// the CPU lacks or a nonsensical count.
Trials measure_peak(const PeakKernel& k, int chains, int threads, int trials, double seconds,
                    double budget_s = 1.0);

struct SweepPoint {
  int64_t bytes_per_thread = 0;
  int64_t total_bytes = 0;       // working set of all threads together
  double read = 0;               // bytes/s read, all threads, median
  double read_write = 0;         // bytes/s read + written (in-place update), all threads, median
  int attempted = 0, clean = 0;  // trials of both kernels
};

// Bandwidth of one working set, `threads` threads each walking its own buffer of
// `bytes_per_thread`. `update` = in-place read+write (both directions counted) instead of read.
Trials measure_bandwidth(int64_t bytes_per_thread, int threads, bool update, int trials, double seconds,
                         double budget_s = 1.0);

// Where a level's plateau lies and its bandwidth.
struct Plateau {
  std::string level;       // "l1", "l2", "l3", "dram"
  int64_t capacity = 0;    // bytes of that level available to the threads (0 for dram)
  int64_t lo = 0, hi = 0;  // total working-set range whose points were used
  int points = 0;
  double read = 0;  // bytes/s, median over the range
  double read_write = 0;
  double spread = 0;  // (max - min) / median of read over the range: how flat it is
};

// Cache capacities as seen by a sweep with `threads` threads, in total working-set bytes.
struct Hierarchy {
  int64_t l1 = 0, l2 = 0, l3 = 0;  // aggregate over the threads; 0 = level unknown
};
Hierarchy hierarchy_for(int threads);

// Finds the plateau of every level: the points whose total working set lies well inside the
// range a level serves (more than 2x the level below, at most half of the level itself; dram from
// 2x the last cache), medians over them; a level whose range holds no point is widened to the
// whole range between the neighbouring capacities, and dropped if still empty. `sweep` must be
// sorted by total_bytes.
std::vector<Plateau> find_plateaus(const std::vector<SweepPoint>& sweep, const Hierarchy& h);

struct ProbeResult {
  std::string date;  // UTC, ISO 8601
  int threads = 0;
  int trials = 0;
  bool quick = false;
  double seconds = 0;  // wall time of the whole probe
  // Per dtype the best vector kernel, and where the CPU has AMX (cpu::supported(Isa::amx)) the tile
  // kernel too: bf16 and int8 then have two figures, and the chip file takes the faster (roof_peak).
  std::vector<PeakResult> peaks;
  std::string amx_absent;             // why the AMX peaks were not measured; empty when they were
  std::vector<SweepPoint> sweep;      // all threads
  std::vector<SweepPoint> sweep_one;  // one thread (empty in quick runs)
  std::vector<Plateau> plateaus;      // all threads
  std::vector<Plateau> plateaus_one;  // one thread
  Hierarchy hierarchy;
};

ProbeResult run(const ProbeOptions& opts);

// The figure the chip file gives `dtype`: of the peaks measured for it, the one with the highest
// all-threads median, i.e. the fastest instruction the machine has for it (on an AMX machine the tile
// instruction, unless it measured slower); the first on a tie; nullptr when none was measured.
const PeakResult* roof_peak(const std::vector<PeakResult>& peaks, const std::string& dtype);

// One line on the AMX figures of a result, for the table and the chip file's measured.amx:
// "measured: tdpbf16ps and tdpbssd, ..." or "not on this machine: <amx_absent>".
std::string amx_status(const ProbeResult& r);

// The chip file (kind "cpu", id "this", peak_flops per dtype from roof_peak, memory levels dram, l3,
// l2, l1, the details under "measured") as JSON text; the JSON document itself is in the private header
// src/probe/json.hpp (to_chip_json).
std::string chip_json_text(const ProbeResult& r, int indent = 2);

// Where `ridge probe` writes by default: $RIDGE_HOME/this.json, else ~/.cache/ridge/this.json.
std::string default_output_path();
// Creates the parent folders of `path` and checks a file can be written there; ridge::Error
// about the argument `path` otherwise.
void check_writable(const std::string& path);

}  // namespace ridge::probe
