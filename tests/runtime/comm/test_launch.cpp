// detect_launch(): how the process was started, read from the launcher's environment.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
#include "runtime/launch/launch.h"

namespace strata::runtime {
namespace {

// Clears every launcher variable for the test and restores nothing: each test sets its own.
void clear_launch_env() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
                        "PMIX_RANK"}) {
    ::unsetenv(v);
  }
}

TEST(Launch, AloneIsRankZeroOfOne) {
  clear_launch_env();
  launch::LaunchInfo l = launch::detect_launch();
  EXPECT_FALSE(l.under_mpirun);
  EXPECT_EQ(l.rank, 0);
  EXPECT_EQ(l.world, 1);
  EXPECT_EQ(l.local_rank, 0);
  EXPECT_EQ(l.local_world, 1);
  EXPECT_EQ(l.launcher, "none");
}

TEST(Launch, OpenMpiAndMpichAreRead) {
  clear_launch_env();
  ::setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  launch::LaunchInfo l = launch::detect_launch();
  EXPECT_TRUE(l.under_mpirun);
  EXPECT_EQ(l.rank, 5);
  EXPECT_EQ(l.world, 8);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_world, 4);  // 2 nodes of 4 (strata train --config auto's ranks per node)
  EXPECT_EQ(l.launcher, "Open MPI");

  clear_launch_env();
  ::setenv("PMI_RANK", "2", 1);
  ::setenv("PMI_SIZE", "3", 1);
  ::setenv("MPI_LOCALRANKID", "2", 1);
  l = launch::detect_launch();
  EXPECT_EQ(l.rank, 2);
  EXPECT_EQ(l.world, 3);
  EXPECT_EQ(l.local_rank, 2);
  EXPECT_EQ(l.local_world, 0);  // MPI_LOCALNRANKS not set: unknown
  clear_launch_env();
}

TEST(Launch, MalformedOrIncompleteEnvironmentIsAnError) {
  clear_launch_env();
  ::setenv("OMPI_COMM_WORLD_RANK", "two", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_THROW(launch::detect_launch(), Error);
  ::setenv("OMPI_COMM_WORLD_RANK", "4", 1);  // rank >= size
  EXPECT_THROW(launch::detect_launch(), Error);
  clear_launch_env();
  ::setenv("PMIX_RANK", "0", 1);  // a rank without a world size must not run as one rank
  try {
    launch::detect_launch();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "PMIX_RANK");
  }
  clear_launch_env();
}

}  // namespace
}  // namespace strata::runtime
