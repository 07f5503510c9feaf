// probe_io_uring: sets up real rings. Where io_uring is unavailable (old kernel, seccomp in a
// container, kernel.io_uring_disabled) the probe must say why, and the tests that need a ring
// are skipped: this executable then exits 77.
#include <gtest/gtest.h>

#include "offload/probe.h"

namespace strata::offload {
namespace {

TEST(ProbeIoUring, ReportsKernelAndAReasonWhenItFails) {
  IoUringProbe p = probe_io_uring();
  EXPECT_FALSE(p.kernel.empty());
  if (!p.works) {
    EXPECT_FALSE(p.reason.empty());
  } else {
    EXPECT_TRUE(p.reason.empty()) << p.reason;
  }
}

TEST(ProbeIoUring, NopAndReadGoThroughTheRing) {
  IoUringProbe p = probe_io_uring();
  if (!p.works) GTEST_SKIP() << "io_uring unavailable: " << p.reason;
  EXPECT_TRUE(p.nop_ok);
  // The read needs a writable temporary folder; without one it is skipped with a note.
  EXPECT_TRUE(p.read_ok || !p.read_note.empty());
  // DEFER_TASKRUN is tried with SINGLE_ISSUER, which it requires.
  if (p.defer_taskrun) {
    EXPECT_TRUE(p.single_issuer);
  }
}

TEST(ProbeIoUring, RepeatableWithoutLeakingRings) {
  IoUringProbe first = probe_io_uring();
  if (!first.works) GTEST_SKIP() << "io_uring unavailable: " << first.reason;
  // Rings pin locked memory: a probe that leaked them would fail after a few hundred runs.
  for (int i = 0; i < 300; ++i) {
    IoUringProbe again = probe_io_uring();
    ASSERT_TRUE(again.works) << "run " << i << ": " << again.reason;
  }
}

}  // namespace
}  // namespace strata::offload

// GoogleTest exits 0 when tests are skipped; ctest needs 77 to count them as skipped.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  if (rc == 0 && ::testing::UnitTest::GetInstance()->skipped_test_count() > 0) return 77;
  return rc;
}
