// Cases for the check of main_skip77.cpp: each ctest selects some of them with --gtest_filter
// and expects_exit.cmake compares the exit code with the one main_skip77 must give.
#include <gtest/gtest.h>

namespace {

TEST(Skip77Pass, Passes) { SUCCEED(); }
TEST(Skip77Skip, Skips) { GTEST_SKIP() << "skipped on purpose"; }
TEST(Skip77Skip, AlsoSkips) { GTEST_SKIP() << "skipped on purpose"; }
TEST(Skip77Fail, Fails) { ADD_FAILURE() << "fails on purpose"; }

}  // namespace
