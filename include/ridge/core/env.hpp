// Every environment variable ridge reads, in one place. The knobs (RIDGE_ISA, RIDGE_GEMM_*,
// RIDGE_ATTENTION_BLOCK_*, RIDGE_JIT, RIDGE_AMX_EMULATE, RIDGE_BF16_ON_FMA, RIDGE_FP8_VBMI,
// OMP_NUM_THREADS) are parsed and validated once, at first use, and then read from memory: kernels
// never call getenv. A bad value is a ridge::Error that names the variable
// and says what is accepted, so the CLI prints one line and exits 2.
#pragma once

#include <cstdint>
#include <string>

namespace ridge::env {

// The most threads ridge runs a kernel on (--threads, OMP_NUM_THREADS, set_num_threads): far
// above any core count, well below where creating the threads fails.
inline constexpr int kMaxThreads = 1024;

struct Knobs {
  // RIDGE_ISA: -1 when unset (the best path the machine has), else the cpu::Isa value it names.
  int isa = -1;
  // RIDGE_GEMM_KC / _MC / _NC: block sizes overriding the derived ones; 0 when unset.
  int64_t gemm_kc = 0, gemm_mc = 0, gemm_nc = 0;
  // RIDGE_GEMM_NO_NARROW=1: no decode (narrow) path; RIDGE_GEMM_SCALAR_PACK=1: no vector packer.
  bool gemm_no_narrow = false, gemm_scalar_pack = false;
  // RIDGE_ATTENTION_BLOCK_Q / _K: queries and keys per attention block; 0 when unset.
  int attention_block_q = 0, attention_block_k = 0;
  // RIDGE_JIT=1: kernels may be compiled at run time (ridge/jit.hpp); off by default.
  bool jit = false;
  // RIDGE_AMX_EMULATE=1: the AMX kernels run on the tile emulator (src/core/amx.hpp), on any machine,
  // in place of the path's own bf16 and FP8 kernels; slow, for checking. Off by default.
  bool amx_emulate = false;
  // RIDGE_BF16_ON_FMA=0|1: blocked bf16 on the avx512bf16 path on vdpbf16ps (0) or on the fp32 FMAs (1);
  // -1 when unset (by the CPU's vendor). RIDGE_FP8_VBMI=0|1: FP8's widening with byte permutes off or on
  // (1 only on a CPU with AVX512_VBMI); -1 when unset (on where the CPU has it). What each switch
  // decides is src/core/dispatch.hpp's.
  int bf16_on_fma = -1, fp8_vbmi = -1;
  // OMP_NUM_THREADS: the default thread count; 0 when unset. A list ("8,2", OpenMP's counts for nested
  // levels) has every entry checked against 1 .. kMaxThreads, and this is its first.
  int omp_threads = 0;
  // Test-only fault injection for data-parallel training (never set them in real runs):
  // RIDGE_TEST_DIE_AT_STEP=N (N >= 1) makes rank RIDGE_TEST_DIE_RANK (default 0) exit with status 3
  // in the middle of the backward pass of optimizer step N, after its first gradient reduction of that
  // step has started (so a non-blocking one is outstanding in the overlap and bucketed modes). 0 and
  // -1 when unset; RIDGE_TEST_DIE_RANK alone is an error.
  int64_t test_die_at_step = 0;
  int test_die_rank = -1;
};

// The knobs of this process, parsed at the first call (a bad value throws at every call until the
// variable is fixed; nothing is cached from a failed parse).
const Knobs& knobs();

// Parses the knobs from a lookup function instead of the process environment (tests).
Knobs parse_knobs(const char* (*lookup)(const char* name));

// OpenMP's runtime (libgomp) reads OMP_NUM_THREADS in its own constructor, before main, and prints a
// warning of its own about a value it cannot read, before ridge can say anything. So the ridge
// executable runs before_openmp from its .preinit_array (apps/ridge/main.cpp), which the loader calls
// before any shared library's constructor: it takes an OMP_NUM_THREADS that knobs() would refuse out of
// the environment, so libgomp never sees it, and keeps it, so that knobs() refuses it with ridge's one
// line; an empty one (the default, as unset) is taken out too. A value knobs() accepts is left alone.
// Neither allocates nor throws: nothing of the C++ runtime is set up yet when it runs.
//
// withhold_openmp_threads does the work on `envp` (a null-terminated array, changed in place: the
// entries after one taken out move up) and returns the first refused value (nullptr when none was);
// before_openmp calls it on the process's environment and keeps what it returns for knobs().
const char* withhold_openmp_threads(char** envp) noexcept;
void before_openmp(int argc, char** argv, char** envp) noexcept;

// What the MPI launcher told this process, read before MPI_Init from the variables mpirun sets:
// Open MPI's OMPI_COMM_WORLD_SIZE / OMPI_COMM_WORLD_RANK, MPICH and Hydra's PMI_SIZE / PMI_RANK,
// PMIx's PMIX_RANK, and MPI_LOCALNRANKS. Not RIDGE_ knobs, but read here and only here, so distributed, the
// CLI and the benchmarks agree; a value that is not a whole number throws (never read as 0).
struct Launcher {
  // A launcher started this process: OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK or MPI_LOCALNRANKS is set.
  bool launched = false;
  // The world size (OMPI_COMM_WORLD_SIZE, else PMI_SIZE): 1 when not launched, 0 when launched by one
  // that does not say (PMIx alone), so that MPI_Comm_size is the one to ask.
  int size = 1;
  int rank = 0;  // OMPI_COMM_WORLD_RANK, else PMI_RANK, else PMIX_RANK; 0 when none is set
  // This process is one rank of a job that may have others, so it must take part in MPI (ridge train
  // runs data-parallel, main() joins the ranks' agreement, the MPI benchmarks run): a launcher started
  // it and did not say the world is 1. A size of 0 (the launcher did not say) counts as several:
  // MPI_Comm_size answers once MPI starts, and a rank that went on alone would leave its peers waiting
  // in their first collective and write the same files they do. The one definition of the check.
  bool several_ranks() const { return launched && size != 1; }
};
// Parsed at each call (cheap, and a test that sets the variables sees them).
Launcher launcher();
Launcher parse_launcher(const char* (*lookup)(const char* name));

// A variable that names a path or a program (RIDGE_HOME, RIDGE_HW_DIR, RIDGE_TOOLS_DIR,
// RIDGE_SHAPES_DIR, RIDGE_PYTHON, RIDGE_JIT_CACHE_DIR, RIDGE_JIT_CXX, XDG_CACHE_HOME, HOME, PATH): "" when
// unset. Read at each call, never in a hot path, so a test or a program that sets one sees it.
std::string text(const char* name);

}  // namespace ridge::env
