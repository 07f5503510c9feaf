// main() for the offload tests that skip cases the machine cannot run (no io_uring, no
// O_DIRECT, may not mount): GoogleTest exits 0 when tests are skipped, ctest needs 77 to count
// the executable as skipped. The executable exits 77 only when nothing failed and every case
// that was selected was skipped; with some cases run and passed and others skipped it exits 0
// (what ran is a result); a failure exits with GoogleTest's code.
//
// GoogleTest counts a skipped case as neither successful nor failed
// (successful_test_count() excludes skipped_test_count()). tests/offload/skip77_check
// holds each of these outcomes to its exit code.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const auto* unit = ::testing::UnitTest::GetInstance();
  const bool all_skipped = unit->skipped_test_count() > 0 &&
                           unit->skipped_test_count() == unit->test_to_run_count();
  if (rc == 0 && all_skipped && unit->successful_test_count() == 0) return 77;
  return rc;
}
