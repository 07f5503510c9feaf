// main() for the offload tests that skip cases the machine cannot run (no io_uring, no
// O_DIRECT, may not mount): GoogleTest exits 0 when tests are skipped, ctest needs 77 to count
// the executable as skipped. An executable with some cases run and some skipped reports 77
// only when nothing failed and nothing at all ran.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  const auto* unit = ::testing::UnitTest::GetInstance();
  if (rc == 0 && unit->successful_test_count() == unit->skipped_test_count() &&
      unit->skipped_test_count() > 0) {
    return 77;
  }
  return rc;
}
