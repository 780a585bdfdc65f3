// Environment knobs: parsed and validated in one place; junk is an error naming the variable.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ridge/core.hpp"

namespace {

using namespace ridge;

std::map<std::string, std::string> g_vars;

const char* lookup(const char* name) {
  const auto it = g_vars.find(name);
  return it == g_vars.end() ? nullptr : it->second.c_str();
}

env::Knobs parse(std::map<std::string, std::string> vars) {
  g_vars = std::move(vars);
  return env::parse_knobs(lookup);
}

void expect_rejected(const std::string& name, const std::string& value) {
  try {
    parse({{name, value}});
    ADD_FAILURE() << name << "='" << value << "' was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(name + ":", 0), 0u) << "names the variable first: " << msg;
    EXPECT_NE(msg.find("'" + value + "'"), std::string::npos) << "quotes the value: " << msg;
    EXPECT_TRUE(msg.find("expected") != std::string::npos || msg.find("accepted") != std::string::npos)
        << "says what is accepted: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(Env, UnsetAndEmptyMeanTheDefaults) {
  for (const auto& k :
       {parse({}), parse({{"RIDGE_GEMM_KC", ""}, {"RIDGE_ATTENTION_BLOCK_Q", ""}, {"RIDGE_ISA", ""}})}) {
    EXPECT_EQ(k.isa, -1);
    EXPECT_EQ(k.gemm_kc, 0);
    EXPECT_EQ(k.gemm_mc, 0);
    EXPECT_EQ(k.gemm_nc, 0);
    EXPECT_FALSE(k.gemm_no_narrow);
    EXPECT_FALSE(k.gemm_scalar_pack);
    EXPECT_EQ(k.attention_block_q, 0);
    EXPECT_EQ(k.attention_block_k, 0);
    EXPECT_EQ(k.omp_threads, 0);
    EXPECT_FALSE(k.jit);
  }
}

TEST(Env, GoodValuesAreParsed) {
  const auto k = parse({{"RIDGE_ISA", "scalar"},
                        {"RIDGE_GEMM_KC", "512"},
                        {"RIDGE_GEMM_MC", "126"},
                        {"RIDGE_GEMM_NC", "4096"},
                        {"RIDGE_GEMM_NO_NARROW", "1"},
                        {"RIDGE_GEMM_SCALAR_PACK", "0"},
                        {"RIDGE_ATTENTION_BLOCK_Q", "32"},
                        {"RIDGE_ATTENTION_BLOCK_K", "1024"},
                        {"RIDGE_JIT", "1"},
                        {"RIDGE_AMX_EMULATE", "1"},
                        {"OMP_NUM_THREADS", "3,2"}});
  EXPECT_EQ(k.isa, static_cast<int>(cpu::Isa::scalar));
  EXPECT_EQ(k.gemm_kc, 512);
  EXPECT_EQ(k.gemm_mc, 126);
  EXPECT_EQ(k.gemm_nc, 4096);
  EXPECT_TRUE(k.gemm_no_narrow);
  EXPECT_FALSE(k.gemm_scalar_pack);
  EXPECT_EQ(k.attention_block_q, 32);
  EXPECT_EQ(k.attention_block_k, 1024);
  EXPECT_EQ(k.omp_threads, 3) << "the first entry of OpenMP's list";
  EXPECT_TRUE(k.jit);
  EXPECT_FALSE(parse({{"RIDGE_JIT", "0"}}).jit);
  EXPECT_TRUE(k.amx_emulate);
  EXPECT_FALSE(parse({{"RIDGE_AMX_EMULATE", "0"}}).amx_emulate);
  EXPECT_FALSE(parse({}).amx_emulate);
}

// The test-only fault-injection pair: both parsed, the rank defaulting to 0, junk and a lone rank
// rejected with one line naming the variable.
TEST(Env, TestDieKnobs) {
  EXPECT_EQ(parse({}).test_die_at_step, 0);
  EXPECT_EQ(parse({}).test_die_rank, -1);
  const auto k = parse({{"RIDGE_TEST_DIE_AT_STEP", "3"}, {"RIDGE_TEST_DIE_RANK", "1"}});
  EXPECT_EQ(k.test_die_at_step, 3);
  EXPECT_EQ(k.test_die_rank, 1);
  EXPECT_EQ(parse({{"RIDGE_TEST_DIE_AT_STEP", "2"}}).test_die_rank, 0);
  for (const char* v : {"0", "-1", "x", "2.5"}) expect_rejected("RIDGE_TEST_DIE_AT_STEP", v);
  expect_rejected("RIDGE_TEST_DIE_RANK", "1");  // without the step
  try {
    parse({{"RIDGE_TEST_DIE_AT_STEP", "2"}, {"RIDGE_TEST_DIE_RANK", "-1"}});
    ADD_FAILURE() << "a negative rank was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("RIDGE_TEST_DIE_RANK:", 0), 0u) << e.what();
  }
}

TEST(Env, JunkIsAnErrorNamingTheVariable) {
  for (const char* v : {"0", "-1", "abc", "16x", "99999999999", "0x10", " 64", "1e3", "17", "2048"}) {
    expect_rejected("RIDGE_ATTENTION_BLOCK_Q", v);
    expect_rejected("RIDGE_ATTENTION_BLOCK_K", v);
  }
  for (const char* v : {"0", "-1", "abc", "16x", "99999999999", "999999999999999999999", "0x8", "1e3"}) {
    expect_rejected("RIDGE_GEMM_KC", v);
    expect_rejected("RIDGE_GEMM_MC", v);
    expect_rejected("RIDGE_GEMM_NC", v);
  }
  for (const char* v : {"yes", "2", "-1", "on"}) {
    expect_rejected("RIDGE_GEMM_NO_NARROW", v);
    expect_rejected("RIDGE_GEMM_SCALAR_PACK", v);
    expect_rejected("RIDGE_JIT", v);
    expect_rejected("RIDGE_AMX_EMULATE", v);
  }
  for (const char* v : {"0", "-1", "abc", "100000", "1025", "16x"}) expect_rejected("OMP_NUM_THREADS", v);
  expect_rejected("RIDGE_ISA", "bogus");
  expect_rejected("RIDGE_ISA", "AVX2");
}

// The dispatch policy's switches (src/core/dispatch.hpp) have one knob each: RIDGE_BF16_ON_FMA and
// RIDGE_FP8_VBMI beside RIDGE_ISA, RIDGE_AMX_EMULATE and RIDGE_JIT. Unset is -1 (the CPU decides); 1 for
// VBMI on a CPU without it is refused, never silently ignored.
TEST(Env, DispatchSwitchesHaveOneKnobEach) {
  EXPECT_EQ(parse({}).bf16_on_fma, -1);
  EXPECT_EQ(parse({}).fp8_vbmi, -1);
  EXPECT_EQ(parse({{"RIDGE_BF16_ON_FMA", ""}}).bf16_on_fma, -1);
  EXPECT_EQ(parse({{"RIDGE_BF16_ON_FMA", "1"}}).bf16_on_fma, 1);
  EXPECT_EQ(parse({{"RIDGE_BF16_ON_FMA", "0"}}).bf16_on_fma, 0);
  EXPECT_EQ(parse({{"RIDGE_FP8_VBMI", "0"}}).fp8_vbmi, 0);
  for (const char* v : {"yes", "2", "-1", "on", "1x"}) {
    expect_rejected("RIDGE_BF16_ON_FMA", v);
    expect_rejected("RIDGE_FP8_VBMI", v);
  }
  if (cpu::info().features.avx512_vbmi)
    EXPECT_EQ(parse({{"RIDGE_FP8_VBMI", "1"}}).fp8_vbmi, 1);
  else
    expect_rejected("RIDGE_FP8_VBMI", "1");
}

// A knob's number (a switch's 0 or 1 too) is read as every number a user types (ridge/core/numbers.hpp): a
// sign is allowed and a leading zero is decimal, as strtol in base 10 (and libgomp, for OMP_NUM_THREADS)
// reads them.
TEST(Env, KnobsReadNumbersByTheOneRule) {
  EXPECT_EQ(parse({{"RIDGE_GEMM_KC", "+8"}}).gemm_kc, 8);
  EXPECT_EQ(parse({{"RIDGE_GEMM_MC", "010"}}).gemm_mc, 10);
  EXPECT_EQ(parse({{"RIDGE_ATTENTION_BLOCK_Q", "032"}}).attention_block_q, 32);
  EXPECT_EQ(parse({{"OMP_NUM_THREADS", "+3,02"}}).omp_threads, 3);
  EXPECT_TRUE(parse({{"RIDGE_JIT", "+1"}}).jit);  // a switch is the integer 0 or 1
  EXPECT_FALSE(parse({{"RIDGE_GEMM_NO_NARROW", "00"}}).gemm_no_narrow);
  try {
    parse({{"RIDGE_GEMM_KC", "1e3"}});
    ADD_FAILURE() << "1e3 was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "RIDGE_GEMM_KC: '1e3' is not a decimal integer (accepted: a decimal integer 1 .. 16384)");
  }
}

// OpenMP's list ("8,2", counts for nested levels): every entry is checked, not only the first that
// ridge uses ("2,junk" was accepted, and libgomp warned about it).
TEST(Env, OmpNumThreadsListHasEveryEntryChecked) {
  EXPECT_EQ(parse({{"OMP_NUM_THREADS", "4,2"}}).omp_threads, 4);
  EXPECT_EQ(parse({{"OMP_NUM_THREADS", "1024,1,7"}}).omp_threads, 1024);
  for (const char* v :
       {"2,junk", "4,0", "4,-1", "2,", ",2", "2,,2", "4,1025", "1e3", "2, 2", "12345678901234567890"})
    expect_rejected("OMP_NUM_THREADS", v);
}

// Before main (the ridge executable's .preinit_array): an OMP_NUM_THREADS that knobs() would refuse
// leaves the environment before libgomp reads it, and is kept for ridge's own error; an empty one
// leaves too (libgomp warns about it; for ridge it is unset); one ridge accepts stays.
TEST(Env, WithholdOpenmpThreadsTakesOutWhatRidgeRefuses) {
  auto withhold = [](std::vector<std::string> entries, std::vector<std::string>* left) {
    std::vector<char*> envp;
    for (auto& e : entries) envp.push_back(e.data());
    envp.push_back(nullptr);
    const char* refused = env::withhold_openmp_threads(envp.data());
    left->clear();
    for (char** p = envp.data(); *p; ++p) left->emplace_back(*p);
    return refused ? std::string(refused) : std::string("(none)");
  };
  std::vector<std::string> left;
  EXPECT_EQ(withhold({"A=1", "OMP_NUM_THREADS=4,2", "B=2"}, &left), "(none)");
  EXPECT_EQ(left, (std::vector<std::string>{"A=1", "OMP_NUM_THREADS=4,2", "B=2"}));
  for (const char* v : {"0", "-1", "junk", "1e3", "12345678901234567890", "2,junk", "1025"}) {
    SCOPED_TRACE(v);
    EXPECT_EQ(withhold({"A=1", std::string("OMP_NUM_THREADS=") + v, "B=2"}, &left), v);
    EXPECT_EQ(left, (std::vector<std::string>{"A=1", "B=2"}));
  }
  EXPECT_EQ(withhold({"OMP_NUM_THREADS=", "A=1"}, &left), "(none)");
  EXPECT_EQ(left, (std::vector<std::string>{"A=1"}));
  // A second entry of the same name (execve allows it) is checked too; the first refused is reported.
  EXPECT_EQ(withhold({"OMP_NUM_THREADS=2", "OMP_NUM_THREADS=0", "OMP_NUM_THREADS=x"}, &left), "0");
  EXPECT_EQ(left, (std::vector<std::string>{"OMP_NUM_THREADS=2"}));
  // Names that only begin the same are not touched.
  EXPECT_EQ(withhold({"OMP_NUM_THREADS_ALL=0", "XOMP_NUM_THREADS=0"}, &left), "(none)");
  EXPECT_EQ(left, (std::vector<std::string>{"OMP_NUM_THREADS_ALL=0", "XOMP_NUM_THREADS=0"}));
  EXPECT_EQ(env::withhold_openmp_threads(nullptr), nullptr);
}

env::Launcher launcher(std::map<std::string, std::string> vars) {
  g_vars = std::move(vars);
  return env::parse_launcher(lookup);
}

TEST(Env, LauncherVariablesAreReadInOnePlace) {
  const auto alone = launcher({});
  EXPECT_FALSE(alone.launched);
  EXPECT_EQ(alone.size, 1);
  EXPECT_EQ(alone.rank, 0);
  EXPECT_FALSE(launcher({{"OMPI_COMM_WORLD_SIZE", ""}}).launched);  // empty is unset, as for the knobs
  const auto ompi = launcher({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"}});
  EXPECT_TRUE(ompi.launched);
  EXPECT_EQ(ompi.size, 4);
  EXPECT_EQ(ompi.rank, 3);
  const auto hydra = launcher({{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}});
  EXPECT_TRUE(hydra.launched);
  EXPECT_EQ(hydra.size, 2);
  EXPECT_EQ(hydra.rank, 1);
  // Open MPI's variables win where both are set.
  EXPECT_EQ(launcher({{"OMPI_COMM_WORLD_SIZE", "3"}, {"PMI_SIZE", "8"}}).size, 3);
  // PMIx alone says this process's rank but not the world size: 0, ask MPI.
  const auto pmix = launcher({{"PMIX_RANK", "5"}});
  EXPECT_TRUE(pmix.launched);
  EXPECT_EQ(pmix.size, 0);
  EXPECT_EQ(pmix.rank, 5);
  EXPECT_TRUE(launcher({{"MPI_LOCALNRANKS", "2"}}).launched);
}

// One rank of a job that may have others (ridge train, main() and the MPI benchmarks all ask this):
// launched, with a world size that is not 1; a launcher that does not say the size counts as several.
TEST(Env, SeveralRanksIsLaunchedWithAWorldThatIsNotOne) {
  EXPECT_FALSE(launcher({}).several_ranks());
  EXPECT_FALSE(launcher({{"OMPI_COMM_WORLD_SIZE", "1"}}).several_ranks());
  EXPECT_FALSE(launcher({{"PMI_SIZE", "1"}, {"PMI_RANK", "0"}}).several_ranks());
  EXPECT_TRUE(launcher({{"OMPI_COMM_WORLD_SIZE", "2"}}).several_ranks());
  EXPECT_TRUE(launcher({{"PMI_SIZE", "8"}, {"PMI_RANK", "7"}}).several_ranks());
  // Open MPI's size wins where both are set.
  EXPECT_FALSE(launcher({{"OMPI_COMM_WORLD_SIZE", "1"}, {"PMI_SIZE", "8"}}).several_ranks());
  EXPECT_TRUE(launcher({{"PMIX_RANK", "0"}}).several_ranks());  // size 0: MPI_Comm_size decides
  EXPECT_TRUE(launcher({{"MPI_LOCALNRANKS", "1"}}).several_ranks());
}

TEST(Env, LauncherJunkIsAnErrorNamingTheVariable) {
  // Every one of them is checked, even where another one would win (never atoi'd to 0).
  auto rejected = [](const std::string& name, const std::string& value) {
    try {
      launcher({{"OMPI_COMM_WORLD_SIZE", "2"}, {name, value}});
      ADD_FAILURE() << name << "='" << value << "' was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(name + ": '" + value + "' is ", 0), 0u) << msg;
      EXPECT_NE(msg.find("(accepted: a decimal integer "), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  };
  for (const char* v : {"abc", "-1", "2x", " 2", "0x2", "99999999999"}) {
    rejected("OMPI_COMM_WORLD_RANK", v);
    rejected("PMI_SIZE", v);
    rejected("PMI_RANK", v);
    rejected("PMIX_RANK", v);
    rejected("MPI_LOCALNRANKS", v);
  }
  for (const char* v : {"abc", "0", "-2", "1.5"}) {
    try {
      launcher({{"OMPI_COMM_WORLD_SIZE", v}});
      ADD_FAILURE() << "OMPI_COMM_WORLD_SIZE='" << v << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("OMPI_COMM_WORLD_SIZE: '", 0), 0u) << e.what();
    }
  }
  try {
    launcher({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "2"}});
    ADD_FAILURE() << "a rank past the world was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "OMPI_COMM_WORLD_RANK: rank 2 is not accepted (expected a rank below the world size 2)");
  }
}

TEST(Env, ThreadLimitIsEnforcedBySetNumThreads) {
  const int before = get_num_threads();
  EXPECT_THROW(set_num_threads(env::kMaxThreads + 1), Error);
  EXPECT_THROW(set_num_threads(100000), Error);
  EXPECT_EQ(get_num_threads(), before);
  EXPECT_GE(get_num_threads(), 1);
  EXPECT_LE(get_num_threads(), env::kMaxThreads);
}

}  // namespace

namespace {

TEST(CheckedProduct, OverflowAndNegativesAreErrorsNamingTheArgument) {
  EXPECT_EQ(checked_product({16, 16, 4096, 64}, "q"), int64_t{16} * 16 * 4096 * 64);
  EXPECT_EQ(checked_product({}, "q"), 1);
  EXPECT_EQ(checked_product({0, int64_t{1} << 62}, "q"), 0);
  EXPECT_EQ(checked_product({int64_t{1} << 31, int64_t{1} << 31}, "q"), int64_t{1} << 62);
  for (auto f : {std::vector<int64_t>{16777216, 16777216, 65536, 64},
                 {int64_t{1} << 62, 2},
                 {int64_t{1} << 31, (int64_t{1} << 31) + 1}}) {
    try {
      if (f.size() == 4)
        checked_product({f[0], f[1], f[2], f[3]}, "q");
      else
        checked_product({f[0], f[1]}, "q");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("q: ", 0), 0u) << e.what();
    }
  }
  EXPECT_THROW(checked_product({4, -1}, "q"), Error);
}

TEST(Memory, CheckFitsAgainstWhatTheMachineHas) {
  const int64_t avail = memory::available_bytes();
  EXPECT_GT(avail, 0);
  EXPECT_LE(avail, memory::physical_bytes());
  EXPECT_NO_THROW(memory::check_fits(1 << 20, "n"));
  EXPECT_THROW(memory::check_fits(2.0 * static_cast<double>(memory::physical_bytes()), "n"), Error);
  // A buffer past physical memory is an error named by its tag, not bad_alloc or a wrap.
  try {
    Buffer<double> b(static_cast<size_t>(memory::physical_bytes()), "too.big");
    ADD_FAILURE() << "allocated more than the machine has";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("too.big: ", 0), 0u) << e.what();
  }
  EXPECT_THROW(Buffer<double>(SIZE_MAX / 4, "wraps"), Error);
}

}  // namespace
