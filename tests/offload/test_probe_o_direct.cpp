// probe_o_direct: a real O_DIRECT file where it works, the reason where it does not.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "offload/probe.h"

namespace strata::offload {
namespace {

namespace fs = std::filesystem;

// A fresh folder under `parent`, removed at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& parent) {
    std::string templ = parent + "/strata-probe-test-XXXXXX";
    if (::mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::size_t entries_in(const std::string& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(ProbeODirect, MissingFolderIsReportedWithTheReason) {
  ODirectProbe p = probe_o_direct("/nonexistent/strata/folder");
  EXPECT_FALSE(p.works);
  EXPECT_EQ(p.dir, "/nonexistent/strata/folder");
  EXPECT_NE(p.reason.find("ENOENT"), std::string::npos) << p.reason;
}

TEST(ProbeODirect, AFileIsNotAFolder) {
  TempDir tmp(fs::temp_directory_path().string());
  ASSERT_FALSE(tmp.path().empty());
  const std::string file = tmp.path() + "/plain";
  { std::FILE* f = std::fopen(file.c_str(), "w"); ASSERT_NE(f, nullptr); std::fclose(f); }
  ODirectProbe p = probe_o_direct(file);
  EXPECT_FALSE(p.works);
  EXPECT_NE(p.reason.find("ENOTDIR"), std::string::npos) << p.reason;
}

TEST(ProbeODirect, UnwritableFolderIsReported) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only folders";
  TempDir tmp(fs::temp_directory_path().string());
  ASSERT_FALSE(tmp.path().empty());
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0500), 0);
  ODirectProbe p = probe_o_direct(tmp.path());
  ::chmod(tmp.path().c_str(), 0700);
  EXPECT_FALSE(p.works);
  EXPECT_NE(p.reason.find("EACCES"), std::string::npos) << p.reason;
}

// tmpfs refused O_DIRECT before Linux 6.6 and accepts it since: either answer is the truth,
// but the file system must be named, and a refusal must say why.
TEST(ProbeODirect, TmpfsIsNamedAndEitherWorksOrSaysWhy) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm here";
  TempDir tmp("/dev/shm");
  if (tmp.path().empty()) GTEST_SKIP() << "/dev/shm is not writable here";
  ODirectProbe p = probe_o_direct(tmp.path());
  EXPECT_EQ(p.fs_type, "tmpfs");
  if (!p.works) {
    EXPECT_FALSE(p.reason.empty());
  }
  EXPECT_GT(p.total_bytes, 0u);
  EXPECT_EQ(entries_in(tmp.path()), 0u) << "the probe file must be removed";
}

TEST(ProbeODirect, CurrentFolderReportsFileSystemAndSpace) {
  TempDir tmp(fs::current_path().string());
  if (tmp.path().empty()) GTEST_SKIP() << "the current folder is not writable";
  ODirectProbe p = probe_o_direct(tmp.path());
  EXPECT_FALSE(p.fs_type.empty());
  EXPECT_GT(p.total_bytes, 0u);
  EXPECT_LE(p.free_bytes, p.total_bytes);
  if (!p.works) {
    EXPECT_FALSE(p.reason.empty());
  } else {
    EXPECT_TRUE(p.reason.empty()) << p.reason;
  }
  EXPECT_EQ(entries_in(tmp.path()), 0u) << "the probe file must be removed";
}

}  // namespace
}  // namespace strata::offload
