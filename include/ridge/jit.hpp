// Kernels compiled at run time: ridge writes a kernel's C++ source for the exact shape and ISA at
// hand, the system C++ compiler builds it into a shared object, and dlopen loads it. Built objects are
// kept in an on-disk cache (DeepGEMM's design, stricter): one directory per key, the key a SHA-256 of
// everything that decides the bytes (source, flags, compiler, CPU, ridge version), each entry checked
// (owner, no symlinks, checksum of the very bytes loaded) before it is used. Off unless RIDGE_JIT=1;
// whenever the JIT cannot serve a kernel, get() answers nullptr and the ahead-of-time kernels run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ridge::jit {

struct Settings {
  bool enabled = false;        // RIDGE_JIT=0|1 (default 0)
  std::string cache_dir;       // RIDGE_JIT_CACHE_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/ridge/jit
  std::string compiler;        // RIDGE_JIT_CXX, else "c++" (searched on PATH)
  int compile_timeout_s = 60;  // a compile (or `--version`) running longer is killed (its process group)
};
// The settings of this process's environment (a bad RIDGE_JIT is ridge::Error, as for every knob).
Settings settings();

struct Kernel {
  std::string name;                // readable, for `ridge jit list` (e.g. "small_m_f32_avx512_m12_k768")
  std::string source;              // one complete, self-contained C++ translation unit
  std::vector<std::string> flags;  // extra compiler flags (ISA flags such as -mavx512f ...)
  std::string symbol;              // an extern "C" function the unit defines
};

// The address of k.symbol, compiled and cached as needed; nullptr when the JIT is off or cannot build
// it (no compiler, compile error, timeout, unusable cache dir): then one notice per process on stderr,
// "ridge: JIT off for this process: <why>; the ahead-of-time kernels run". And off it is: after the
// first failure every request not already served answers nullptr without starting a compile (until
// forget_in_process()), so a compiler that hangs costs one deadline (compile_timeout_s, which also
// covers its first `--version`), not one per kernel.
// ridge::Error only for a malformed `k` (empty source, a symbol that is not a C identifier, a flag
// that does not start with '-'). Thread-safe; the loaded code stays mapped for the life of the process.
void* get(const Kernel& k, const Settings& s);
void* get(const Kernel& k);  // get(k, settings())

enum class Source { memory, disk, compiled, none };
const char* source_name(Source s);  // "memory", "disk", "compiled", "none"
// How this thread's last get() was served (for benchmarks and tests).
Source last_source();
// Drops the in-process map (remembered failures too, which turns the JIT back on after a failure), so
// the next get() reads the disk cache again (a benchmark times a disk hit; tests). Loaded code stays
// loaded.
void forget_in_process();

struct Entry {
  std::string key, name, path;  // key: the directory's name; path: the directory
  int64_t bytes = 0;            // the entry's files together
  bool valid = false;           // get() would load it (for its source, with this compiler and CPU)
  std::string why;              // when not valid: why not
};
// The entries in s.cache_dir, each checked as get() would; empty when the directory does not exist.
// ridge::Error naming s.cache_dir when it exists but is not a usable cache (a symlink, a file, not ours).
std::vector<Entry> list(const Settings& s);
// Removes ridge's entries (valid or not) and the temporaries of builds whose process is gone; returns
// how many it removed. Errors as for list().
int64_t clear(const Settings& s);

// What the key holds of the machine: "vendor family model" and the CPU features ridge dispatches on.
std::string cpu_signature();
// The compiler as the key holds it: its resolved path and the first line of `<cxx> --version`;
// "" when there is none (not found, not executable, `--version` fails or hangs).
std::string compiler_signature(const Settings& s);

// The flags every kernel is compiled with, before Kernel::flags.
const std::vector<std::string>& base_flags();

}  // namespace ridge::jit
