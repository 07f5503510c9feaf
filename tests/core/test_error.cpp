// core/error.h: what an Error says, SYS_CHECK's errno, STRATA_ASSERT's report.
#include "core/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(Error, ComposesWhatWhereAndWhatToDo) {
  Error e("the file is short", "/data/model.safetensors", "download it again");
  EXPECT_STREQ(e.what(), "the file is short [/data/model.safetensors]. What to do: download it again");
  EXPECT_EQ(e.what_happened(), "the file is short");
  EXPECT_EQ(e.where(), "/data/model.safetensors");
  EXPECT_EQ(e.hint(), "download it again");
  EXPECT_STREQ(Error("bare").what(), "bare");
}

TEST(SysCheck, ReportsTheErrnoOfTheCallNotOfBuildingTheMessage) {
  try {
    // Building `where` changes errno after the failed call: the report must keep ENOENT.
    SYS_CHECK(::open("/nonexistent-strata-dir/x", O_RDONLY), (errno = EPERM, std::string("model file")),
              "check the path");
    FAIL() << "SYS_CHECK did not throw";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("No such file or directory (errno 2)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("::open"), std::string::npos) << msg;
    EXPECT_EQ(e.where(), "model file");
    EXPECT_EQ(e.hint(), "check the path");
  }
}

TEST(SysCheck, PassesTheResultThrough) {
  int fd = SYS_CHECK(::open("/dev/null", O_RDONLY), "/dev/null");
  EXPECT_GE(fd, 0);
  ::close(fd);
}

TEST(StrataAssertDeathTest, AbortsWithConditionMessageAndLocation) {
  EXPECT_DEATH(STRATA_ASSERT(1 + 1 == 3, "arithmetic"),
               "assertion failed: 1 \\+ 1 == 3 \\(arithmetic\\) at .*test_error.cpp:[0-9]+");
  EXPECT_DEATH(STRATA_ASSERT(false), "assertion failed: false at .*test_error.cpp");
}

}  // namespace
}  // namespace strata
