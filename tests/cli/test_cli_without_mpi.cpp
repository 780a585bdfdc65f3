// A ridge built without MPI (none found, or RIDGE_WITH_MPI=OFF as in the `minimal` preset) answers every
// request for data parallelism with one line and exit status 2, before any work: --ddp, --shard-optimizer,
// a launch by mpirun with several ranks, and the MPI benchmarks. In a build with MPI these are the
// tests/cli/test_cli_dist*.cpp runs instead, so this file holds no test there.
#include <gtest/gtest.h>

#include <string>

#include "run.hpp"

#ifndef RIDGE_HAVE_DISTRIBUTED

namespace {

using ridge::test::run;

const std::string kBuiltWithout =
    "this ridge was built without MPI (scripts/setup installs OpenMPI; then rebuild)\n";
const std::string kTrain =
    "train --layers 1 --d-model 32 --heads 2 --d-ff 48 --vocab 64 --context 8 --steps 1 ";

}  // namespace

TEST(CliWithoutMpi, DataParallelTrainingIsOneLineAndStatus2) {
  for (const char* args : {"--ddp flat", "--ddp bucketed --bucket-mb 1", "--shard-optimizer zero1"}) {
    const auto r = run(kTrain + args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err, "ridge: --ddp: " + kBuiltWithout) << args;
    EXPECT_EQ(r.out, "") << args;  // refused before the model is built or anything printed
  }
}

TEST(CliWithoutMpi, ARankOfAnMpirunJobIsOneLineAndStatus2) {
  // What OpenMPI's and MPICH's launchers set for each rank of `mpirun -np 2`.
  for (const char* env : {"OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1", "PMI_SIZE=2 PMI_RANK=0"}) {
    const auto r = run(kTrain, env);
    EXPECT_EQ(r.code, 2) << env;
    EXPECT_EQ(r.err, "ridge: --ddp: " + kBuiltWithout) << env;
    EXPECT_EQ(r.out, "") << env;
  }
}

TEST(CliWithoutMpi, MpiBenchmarksAreOneLineAndStatus2) {
  for (const std::string name : {"allreduce", "ddp"}) {
    const auto r = run("bench " + name + " --quick");
    EXPECT_EQ(r.code, 2) << name;
    EXPECT_EQ(r.err, "ridge: bench " + name + ": " + kBuiltWithout) << name;
  }
}

#endif
