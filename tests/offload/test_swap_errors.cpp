// SwapSpace failures of the world: ENOSPC on a size-limited tmpfs (files left as they were),
// O_DIRECT required where the file system has none, missing / not-a-folder / read-only paths,
// and the 0600 / 0700 modes, checked by an unprivileged child when running as root. Cases
// that need mount(2) skip where this process may not mount (the executable then exits 77).
#include <fcntl.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/units.h"
#include "offload/aio_engine.h"
#include "offload/host_buffer.h"
#include "offload/probe.h"
#include "offload/swap_space.h"
#include "tests/offload/offload_test_util.h"

namespace strata::offload {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::fill_random;

constexpr std::size_t kBlock = 64 * 1024;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::size_t entries_in(const std::string& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

// A file system mounted on a fresh folder for one test, unmounted at its end.
class Mount {
 public:
  Mount(const char* fstype, unsigned long flags, const char* data) {
    if (dir_.path().empty()) {
      error_ = "cannot make a mount point";
      return;
    }
    if (::mount(fstype, dir_.path().c_str(), fstype, flags, data) != 0) {
      error_ = std::string("mount ") + fstype + ": " + errno_text(errno);
      return;
    }
    mounted_ = true;
  }
  ~Mount() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string error_;
};

#define MOUNT_OR_SKIP(var, fstype, flags, data)                            \
  Mount var(fstype, flags, data);                                          \
  if (!var.mounted()) GTEST_SKIP() << "may not mount here: " << var.error()

class SwapErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    AioOptions o;
    o.backend = AioBackend::kThreads;  // the errors here do not depend on the backend
    engine_ = std::make_unique<AioEngine>(o);
  }
  SwapOptions options(std::vector<std::string> paths, DirectIo direct = DirectIo::kAuto) {
    SwapOptions o;
    o.paths = std::move(paths);
    o.block_size = kBlock;
    o.direct = direct;
    return o;
  }
  // The error text of constructing a swap space, or "" when it did not throw.
  std::string construction_error(const SwapOptions& o) {
    try {
      SwapSpace swap(o, *engine_);
    } catch (const Error& e) {
      return e.what();
    }
    return {};
  }
  std::unique_ptr<AioEngine> engine_;
};

TEST_F(SwapErrors, ReserveBeyondTheDiskNamesPathNeedAndFree) {
  MOUNT_OR_SKIP(tmpfs, "tmpfs", 0, "size=8m");
  SwapSpace swap(options({tmpfs.path()}), *engine_);
  const std::string file = swap.stats().paths[0].run_dir + "/swap.bin";
  swap.reserve(2 * kMiB);
  ASSERT_EQ(fs::file_size(file), 2 * kMiB);
  try {
    swap.reserve(32 * kMiB);
    FAIL() << "32 MiB cannot fit in an 8 MiB tmpfs";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, tmpfs.path())) << what;
    EXPECT_TRUE(contains(what, format_bytes(30 * kMiB))) << what;  // the growth needed
    EXPECT_TRUE(contains(what, "free")) << what;
  }
  EXPECT_EQ(fs::file_size(file), 2 * kMiB) << "the file is left as it was";
  EXPECT_EQ(swap.stats().file_bytes, 2 * kMiB);
  EXPECT_EQ(entries_in(tmpfs.path()), 1u);
  swap.reserve(4 * kMiB);  // still usable
  EXPECT_EQ(fs::file_size(file), 4 * kMiB);
}

TEST_F(SwapErrors, AllocateBeyondTheDiskLeavesEverythingAsItWas) {
  MOUNT_OR_SKIP(tmpfs, "tmpfs", 0, "size=8m");
  SwapSpace swap(options({tmpfs.path()}), *engine_);
  ExtentId a = swap.allocate({"a", StateKind::kParam, 0}, 4 * kMiB);
  const SwapStats before = swap.stats();
  const std::string file = before.paths[0].run_dir + "/swap.bin";
  try {
    swap.allocate({"b", StateKind::kParam, 0}, 6 * kMiB);
    FAIL() << "10 MiB cannot fit in an 8 MiB tmpfs";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, tmpfs.path())) << what;
    EXPECT_TRUE(contains(what, format_bytes(6 * kMiB))) << what;
    EXPECT_TRUE(contains(what, "free")) << what;
  }
  const SwapStats after = swap.stats();
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.file_bytes, before.file_bytes);
  EXPECT_EQ(after.extents, 1u);
  EXPECT_EQ(fs::file_size(file), before.file_bytes);
  EXPECT_FALSE(swap.find({"b", StateKind::kParam, 0}).has_value());
  // What fits still works, and the data of `a` is intact.
  ExtentId c = swap.allocate({"c", StateKind::kParam, 0}, 2 * kMiB);
  HostBuffer src = HostBuffer::allocate(4 * kMiB, "src");
  HostBuffer dst = HostBuffer::allocate(4 * kMiB, "dst");
  fill_random(src.bytes(), 3);
  swap.engine().wait(swap.write(a, src.data(), 4 * kMiB));
  swap.engine().wait(swap.write(c, src.data(), 2 * kMiB));
  swap.engine().wait(swap.read(a, dst.data(), 4 * kMiB));
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), 4 * kMiB), 0);
}

// Two paths, the second too small: the first file, already grown, is shrunk back.
TEST_F(SwapErrors, AFailedGrowthOnOnePathRollsBackTheOthers) {
  MOUNT_OR_SKIP(tmpfs, "tmpfs", 0, "size=8m");
  TempDir big;
  SwapSpace swap(options({big.path(), tmpfs.path()}), *engine_);
  EXPECT_THROW(swap.reserve(24 * kMiB), Error);  // 12 MiB per path
  for (const SwapPathStats& p : swap.stats().paths) {
    EXPECT_EQ(p.file_bytes, 0u) << p.path;
    EXPECT_EQ(fs::file_size(p.run_dir + "/swap.bin"), 0u) << p.path;
  }
  // An extent striped over both paths whose second part does not fit.
  EXPECT_THROW(swap.allocate({"x", StateKind::kMaster, 0}, 20 * kMiB), Error);
  for (const SwapPathStats& p : swap.stats().paths) {
    EXPECT_EQ(p.used_bytes, 0u) << p.path;
    EXPECT_EQ(fs::file_size(p.run_dir + "/swap.bin"), 0u) << p.path;
  }
  swap.reserve(8 * kMiB);
  EXPECT_EQ(swap.stats().file_bytes, 8 * kMiB);
}

TEST_F(SwapErrors, ReserveAtConstructionLeavesNothingBehind) {
  MOUNT_OR_SKIP(tmpfs, "tmpfs", 0, "size=8m");
  SwapOptions o = options({tmpfs.path()});
  o.reserve_bytes = 64 * kMiB;
  const std::string what = construction_error(o);
  EXPECT_TRUE(contains(what, tmpfs.path())) << what;
  EXPECT_TRUE(contains(what, format_bytes(64 * kMiB))) << what;
  EXPECT_EQ(entries_in(tmpfs.path()), 0u) << "no run folder left";
}

// probe_o_direct in a scratch folder of `dir` (on a file system without O_DIRECT, open with
// O_CREAT creates the file before refusing O_DIRECT, and the probe leaves it behind).
ODirectProbe probe_in_scratch(const std::string& dir) {
  const std::string scratch = dir + "/probe-scratch";
  fs::create_directory(scratch);
  ODirectProbe probe = probe_o_direct(scratch);
  fs::remove_all(scratch);
  return probe;
}

// tmpfs gained O_DIRECT in Linux 6.6; ramfs has none. The first of them without O_DIRECT is
// used: kRequire must name it, kAuto must work (buffered).
TEST_F(SwapErrors, DirectRequiredWhereTheFileSystemHasNone) {
  MOUNT_OR_SKIP(tmpfs, "tmpfs", 0, "size=8m");
  std::unique_ptr<Mount> ramfs;
  std::string dir = tmpfs.path();
  ODirectProbe probe = probe_in_scratch(dir);
  if (probe.works) {
    ramfs = std::make_unique<Mount>("ramfs", 0, nullptr);
    if (!ramfs->mounted()) GTEST_SKIP() << "tmpfs has O_DIRECT here and " << ramfs->error();
    dir = ramfs->path();
    probe = probe_in_scratch(dir);
    if (probe.works) GTEST_SKIP() << "both tmpfs and ramfs have O_DIRECT here";
  }
  const std::string what = construction_error(options({dir}, DirectIo::kRequire));
  EXPECT_TRUE(contains(what, dir)) << what;
  EXPECT_TRUE(contains(what, probe.fs_type)) << what;
  EXPECT_TRUE(contains(what, "O_DIRECT")) << what;
  EXPECT_EQ(entries_in(dir), 0u);

  SwapSpace swap(options({dir}, DirectIo::kAuto), *engine_);
  EXPECT_FALSE(swap.stats().paths[0].direct);
  ExtentId id = swap.allocate({"wpe", StateKind::kParam, 0}, kBlock + 3);
  HostBuffer src = HostBuffer::allocate(kBlock + 3, "src");
  HostBuffer dst = HostBuffer::allocate(kBlock + 3, "dst");
  fill_random(src.bytes(), 5);
  swap.engine().wait(swap.write(id, src.data(), src.size()));
  swap.engine().wait(swap.read(id, dst.data(), dst.size()));
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
}

// A missing swap folder whose parent exists is made, as DeepSpeed makes nvme_path; one whose
// parent is missing too is refused, naming it.
TEST_F(SwapErrors, MissingFolderIsMadeWhenItsParentExists) {
  TempDir dir;
  const std::string made = dir.path() + "/made/";
  {
    SwapSpace swap(options({made}), *engine_);
    EXPECT_TRUE(std::filesystem::is_directory(made));
  }
  EXPECT_TRUE(std::filesystem::is_directory(made)) << "the folder the user named stays";
  const std::string what = construction_error(options({dir.path() + "/missing/deeper"}));
  EXPECT_TRUE(contains(what, dir.path() + "/missing/deeper")) << what;
  EXPECT_TRUE(contains(what, "does not exist")) << what;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/missing"));
}

TEST_F(SwapErrors, BadPathsAreNamed) {
  TempDir dir;
  std::string what = construction_error(options({dir.path() + "/missing/deeper"}));
  EXPECT_TRUE(contains(what, dir.path() + "/missing/deeper")) << what;
  EXPECT_TRUE(contains(what, "does not exist")) << what;

  const std::string file = dir.path() + "/plain";
  std::ofstream(file).put('x');
  what = construction_error(options({file}));
  EXPECT_TRUE(contains(what, file)) << what;
  EXPECT_TRUE(contains(what, "not a folder")) << what;
  what = construction_error(options({file + "/below"}));
  EXPECT_TRUE(contains(what, "not a folder")) << what;

  // A good path followed by a bad one: the good one's run folder is removed again.
  what = construction_error(options({dir.path(), dir.path() + "/missing/deeper"}));
  EXPECT_TRUE(contains(what, "does not exist")) << what;
  EXPECT_EQ(entries_in(dir.path()), 1u) << "only `plain` is left";

  EXPECT_TRUE(contains(construction_error(options({})), "no swap path")) << "empty list";
  SwapOptions o = options({dir.path()});
  o.block_size = 1000;
  EXPECT_TRUE(contains(construction_error(o), "block_size"));
}

TEST_F(SwapErrors, UnwritablePathIsNamed) {
  std::unique_ptr<Mount> ro;
  std::unique_ptr<TempDir> plain;
  std::string dir;
  if (::geteuid() == 0) {
    // Permissions do not stop root; a read-only file system does.
    ro = std::make_unique<Mount>("tmpfs", MS_RDONLY, "size=1m");
    if (!ro->mounted()) GTEST_SKIP() << "root, and may not mount a read-only tmpfs: " << ro->error();
    dir = ro->path();
  } else {
    plain = std::make_unique<TempDir>();
    ASSERT_EQ(::chmod(plain->path().c_str(), 0500), 0);
    dir = plain->path();
  }
  const std::string what = construction_error(options({dir}));
  if (plain) ::chmod(plain->path().c_str(), 0700);
  EXPECT_TRUE(contains(what, dir)) << what;
  EXPECT_TRUE(contains(what, "not writable")) << what;
}

// Every file 0600, the folder 0700; as root, an unprivileged user cannot read the swap file.
TEST_F(SwapErrors, FilesArePrivate) {
  TempDir parent;
  ASSERT_EQ(::chmod(parent.path().c_str(), 0755), 0);  // traversable, so only the modes guard
  const mode_t old_umask = ::umask(0);  // modes must not depend on the umask
  SwapSpace swap(options({parent.path()}), *engine_);
  ::umask(old_umask);
  const std::string run_dir = swap.stats().paths[0].run_dir;
  const std::string data = run_dir + "/swap.bin";
  auto mode_of = [](const std::string& path) {
    struct stat st{};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  };
  EXPECT_EQ(mode_of(run_dir), 0700u);
  EXPECT_EQ(mode_of(run_dir + "/lock"), 0600u);
  EXPECT_EQ(mode_of(data), 0600u);

  if (::geteuid() != 0) GTEST_SKIP() << "the unprivileged-reader check needs root to drop to nobody";
  // A child that becomes nobody and tries to open the file. Only async-signal-safe calls
  // after fork (the engine has threads). Exit codes: 0 EACCES, 1 opened, 2 other errno,
  // 3 cannot drop privileges.
  ASSERT_EQ(::chmod(run_dir.c_str(), 0755), 0);  // let nobody reach the file: the file mode is
                                                 // then the only guard
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(3);
    int fd = ::open(data.c_str(), O_RDONLY);
    if (fd >= 0) _exit(1);
    _exit(errno == EACCES ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::chmod(run_dir.c_str(), 0700);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "nobody could open swap.bin (1) or failed otherwise (2, 3)";
  // And with the folder's own 0700, nobody cannot even reach it.
  pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(3);
    int fd = ::open(data.c_str(), O_RDONLY);
    if (fd >= 0) _exit(1);
    _exit(errno == EACCES ? 0 : 2);
  }
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace strata::offload
