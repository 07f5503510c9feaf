// Round trips through the I/O engine on both backends (io_uring cases skip where it is
// unavailable), buffered and O_DIRECT, pool (registered) and plain buffers, one and two engine
// threads; request arguments that must be refused; handle semantics.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/units.h"
#include "offload/aio_engine.h"
#include "offload/probe.h"
#include "tests/offload/offload_test_util.h"

namespace strata::offload {
namespace {

using testing::fill_random;
using testing::TempDir;

constexpr std::size_t kBlock = 64 * kKiB;  // small pieces: several per request

struct Param {
  AioBackend backend;
  unsigned parallelism;
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(info.param.backend == AioBackend::kIoUring ? "IoUring" : "Threads") + "P" +
         std::to_string(info.param.parallelism);
}

class AioEngineTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (GetParam().backend == AioBackend::kIoUring) {
      IoUringProbe p = probe_io_uring();
      if (!p.works) GTEST_SKIP() << "io_uring unavailable: " << p.reason;
    }
    ASSERT_FALSE(dir_.path().empty());
  }

  AioOptions options() const {
    AioOptions o;
    o.block_size = kBlock;
    o.queue_depth = 4;
    o.parallelism = GetParam().parallelism;
    o.backend = GetParam().backend;
    return o;
  }

  // Writes `bytes` random bytes at `offset` from `src`, reads them back into `dst`, compares.
  void round_trip(AioEngine& engine, FileId f, std::uint64_t offset, std::byte* src,
                  std::byte* dst, std::size_t bytes, std::uint64_t seed) {
    fill_random({src, bytes}, seed);
    std::memset(dst, 0xab, bytes);
    engine.wait(engine.write(f, offset, src, bytes));
    AioHandle h = engine.read(f, offset, dst, bytes);
    engine.wait(h);
    EXPECT_TRUE(engine.poll(h));
    ASSERT_EQ(std::memcmp(src, dst, bytes), 0) << bytes << " bytes at offset " << offset;
  }

  TempDir dir_;
};

std::vector<std::size_t> buffered_sizes() {
  return {1, 4095, 4096, 4097, kBlock - 4096, kBlock, kBlock + 4096, 3 * kBlock + 123};
}
std::vector<std::size_t> direct_sizes() {
  return {4096, kBlock - 4096, kBlock, kBlock + 4096, 3 * kBlock + 8192};
}

TEST_P(AioEngineTest, BackendIsTheOneAskedFor) {
  AioEngine engine(options());
  const bool uring = GetParam().backend == AioBackend::kIoUring;
  EXPECT_EQ(engine.backend_name(), uring ? "io_uring" : "threads");
  EXPECT_NE(engine.describe().find(uring ? "io_uring" : "threads"), std::string::npos)
      << engine.describe();
}

TEST_P(AioEngineTest, BufferedRoundTripsWithPlainBuffers) {
  AioEngine engine(options());
  AioFile file = AioFile::open(dir_.path() + "/plain", O_RDWR | O_CREAT, DirectIo::kOff);
  EXPECT_FALSE(file.direct());
  FileId f = engine.add_file(file);
  std::uint64_t seed = 1;
  for (std::size_t bytes : buffered_sizes()) {
    // +1: a buffer that is not even 8-byte aligned is fine without O_DIRECT.
    std::vector<std::byte> src(bytes + 1), dst(bytes + 1);
    for (std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{12345}}) {
      round_trip(engine, f, offset, src.data() + 1, dst.data() + 1, bytes, seed++);
    }
  }
  file.sync();
  EXPECT_EQ(file.size_bytes(), 12345 + 3 * kBlock + 123);
  AioStats s = engine.stats();
  EXPECT_EQ(s.fixed_pieces, 0u);
  EXPECT_GT(s.pieces, s.requests);  // the large sizes were cut into pieces
  EXPECT_EQ(s.bytes_read, s.bytes_written);
  engine.remove_file(f);
}

TEST_P(AioEngineTest, BufferedRoundTripsWithPoolBuffers) {
  HostPool pool(64 * kMiB);
  AioEngine engine(options(), &pool);
  AioFile file = AioFile::open(dir_.path() + "/pool", O_RDWR | O_CREAT, DirectIo::kOff);
  FileId f = engine.add_file(file);
  std::uint64_t seed = 100;
  for (std::size_t bytes : buffered_sizes()) {
    HostBuffer src = pool.allocate(bytes, "src");
    HostBuffer dst = pool.allocate(bytes, "dst");
    round_trip(engine, f, 0, src.data(), dst.data(), bytes, seed++);
    round_trip(engine, f, 777, src.data(), dst.data(), bytes, seed++);
  }
  if (GetParam().backend == AioBackend::kIoUring) {
    EXPECT_GT(engine.stats().fixed_pieces, 0u) << "pool buffers should use read/write_fixed";
  } else {
    EXPECT_EQ(engine.stats().fixed_pieces, 0u);
  }
}

TEST_P(AioEngineTest, DirectRoundTrips) {
  ODirectProbe probe = probe_o_direct(dir_.path());
  if (!probe.works) GTEST_SKIP() << "no O_DIRECT in " << dir_.path() << ": " << probe.reason;
  HostPool pool(64 * kMiB);
  AioEngine engine(options(), &pool);
  AioFile file = AioFile::open(dir_.path() + "/direct", O_RDWR | O_CREAT | O_EXCL,
                               DirectIo::kRequire);
  ASSERT_TRUE(file.direct());
  FileId f = engine.add_file(file);
  std::uint64_t seed = 200;
  for (std::size_t bytes : direct_sizes()) {
    for (std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{8192}}) {
      HostBuffer src = pool.allocate(bytes, "src");  // registered
      HostBuffer dst = pool.allocate(bytes, "dst");
      round_trip(engine, f, offset, src.data(), dst.data(), bytes, seed++);
      HostBuffer plain_src = HostBuffer::allocate(bytes, "plain src");  // not registered
      HostBuffer plain_dst = HostBuffer::allocate(bytes, "plain dst");
      round_trip(engine, f, offset, plain_src.data(), plain_dst.data(), bytes, seed++);
    }
  }
  if (GetParam().backend == AioBackend::kIoUring) {
    EXPECT_GT(engine.stats().fixed_pieces, 0u);
  }
}

TEST_P(AioEngineTest, MultiSegmentRequestsAcrossFiles) {
  AioEngine engine(options());
  AioFile a = AioFile::open(dir_.path() + "/a", O_RDWR | O_CREAT, DirectIo::kOff);
  AioFile b = AioFile::open(dir_.path() + "/b", O_RDWR | O_CREAT, DirectIo::kOff);
  FileId fa = engine.add_file(a);
  FileId fb = engine.add_file(b);
  std::vector<std::byte> s1(kBlock * 2 + 5), s2(100), s3(kBlock + 1);
  fill_random(s1, 1);
  fill_random(s2, 2);
  fill_random(s3, 3);
  std::vector<IoSegment> writes = {{fa, 0, s1.data(), s1.size()},
                                   {fb, 4096, s2.data(), s2.size()},
                                   {fa, 5 * kBlock, s3.data(), s3.size()}};
  std::atomic<int> completions{0};
  engine.wait(engine.submit(IoOp::kWrite, writes, [&] { ++completions; }));
  EXPECT_EQ(completions.load(), 1);

  std::vector<std::byte> d1(s1.size()), d2(s2.size()), d3(s3.size());
  std::vector<IoSegment> reads = {{fa, 5 * kBlock, d3.data(), d3.size()},
                                  {fa, 0, d1.data(), d1.size()},
                                  {fb, 4096, d2.data(), d2.size()}};
  AioHandle h = engine.submit(IoOp::kRead, reads, [&] { ++completions; });
  engine.wait(h);
  engine.wait(h);  // a second wait of a done request returns at once
  EXPECT_EQ(completions.load(), 2);
  EXPECT_EQ(d1, s1);
  EXPECT_EQ(d2, s2);
  EXPECT_EQ(d3, s3);
}

TEST_P(AioEngineTest, MisalignedDirectSegmentIsRefusedAtSubmit) {
  ODirectProbe probe = probe_o_direct(dir_.path());
  if (!probe.works) GTEST_SKIP() << "no O_DIRECT in " << dir_.path() << ": " << probe.reason;
  AioEngine engine(options());
  AioFile file = AioFile::open(dir_.path() + "/d", O_RDWR | O_CREAT, DirectIo::kRequire);
  FileId f = engine.add_file(file);
  HostBuffer buf = HostBuffer::allocate(3 * 4096, "buf");
  auto expect_refused = [&](std::uint64_t offset, std::byte* p, std::size_t bytes) {
    try {
      engine.write(f, offset, p, bytes);
      ADD_FAILURE() << "misaligned O_DIRECT write accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("misaligned O_DIRECT write"), std::string::npos) << msg;
      EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;
    }
  };
  expect_refused(100, buf.data(), 4096);         // offset
  expect_refused(0, buf.data() + 512, 4096);     // buffer
  expect_refused(0, buf.data(), 4096 + 512);     // length
  engine.wait_all();  // nothing was started
  EXPECT_EQ(engine.stats().requests, 0u);
}

TEST_P(AioEngineTest, ReadPastTheEndIsAnError) {
  AioEngine engine(options());
  AioFile file = AioFile::open(dir_.path() + "/short", O_RDWR | O_CREAT, DirectIo::kOff);
  FileId f = engine.add_file(file);
  std::vector<std::byte> data(4096);
  fill_random(data, 9);
  engine.wait(engine.write(f, 0, data.data(), data.size()));

  std::vector<std::byte> out(3 * kBlock);
  AioHandle h = engine.read(f, 0, out.data(), out.size());  // 4 KiB exist, 192 KiB asked
  for (int i = 0; i < 2; ++i) {  // every wait of a failed request throws
    try {
      engine.wait(h);
      FAIL() << "a read past the end succeeded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("past the end of the file"), std::string::npos)
          << e.what();
      EXPECT_EQ(e.where(), file.path());
    }
  }
  engine.wait_all();  // reported by wait(): not thrown again

  AioHandle far = engine.read(f, 10 * kBlock, out.data(), 100);  // wholly past the end
  EXPECT_THROW(engine.wait_all(), Error);  // nobody waited for it: wait_all reports it once
  engine.wait_all();
  EXPECT_THROW(engine.wait(far), Error);
}

TEST_P(AioEngineTest, DirectReadPastAnUnalignedEndIsAnError) {
  // An O_DIRECT read that reaches the end of a file whose size is not a multiple of 4 KiB comes
  // back short by a count that is not block-aligned. Continuing at that unaligned offset makes
  // the kernel answer EINVAL ("the buffer, offset and length must suit the device's block
  // size"), which blames the caller's alignment; the truth is a read past the end of the file.
  ODirectProbe probe = probe_o_direct(dir_.path());
  if (!probe.works) GTEST_SKIP() << "no O_DIRECT in " << dir_.path() << ": " << probe.reason;
  AioEngine engine(options());
  AioFile file = AioFile::open(dir_.path() + "/direct-short", O_RDWR | O_CREAT | O_EXCL,
                               DirectIo::kRequire);
  ASSERT_TRUE(file.direct());
  ASSERT_EQ(::ftruncate(file.fd(), 5000), 0);  // one block and 904 bytes
  FileId f = engine.add_file(file);
  HostBuffer out = HostBuffer::allocate(8192, "out");
  try {
    engine.wait(engine.read(f, 0, out.data(), out.size()));
    FAIL() << "a read past the end succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("past the end of the file"), std::string::npos)
        << e.what();
  }
  engine.remove_file(f);
}

TEST_P(AioEngineTest, PollNeverBlocksAndEmptyHandlesAreDone) {
  AioEngine engine(options());
  AioHandle empty;
  EXPECT_FALSE(empty);
  EXPECT_TRUE(engine.poll(empty));
  engine.wait(empty);  // returns at once

  AioFile file = AioFile::open(dir_.path() + "/poll", O_RDWR | O_CREAT, DirectIo::kOff);
  FileId f = engine.add_file(file);
  std::vector<std::byte> data(kBlock * 2);
  fill_random(data, 5);
  // on_complete holds the request open until the test lets it go: poll must say "not done".
  std::atomic<bool> release{false};
  std::atomic<bool> entered{false};
  const IoSegment seg{f, 0, data.data(), data.size()};
  AioHandle h = engine.submit(IoOp::kWrite, {&seg, 1}, [&] {
    entered = true;
    while (!release.load()) std::this_thread::yield();
  });
  EXPECT_TRUE(h);
  while (!entered.load()) std::this_thread::yield();
  EXPECT_FALSE(engine.poll(h));
  release = true;
  engine.wait(h);
  EXPECT_TRUE(engine.poll(h));
}

TEST_P(AioEngineTest, OnCompleteExceptionBecomesTheRequestError) {
  AioEngine engine(options());
  AioFile file = AioFile::open(dir_.path() + "/cb", O_RDWR | O_CREAT, DirectIo::kOff);
  FileId f = engine.add_file(file);
  std::vector<std::byte> data(10000);
  const IoSegment seg{f, 0, data.data(), data.size()};
  AioHandle h = engine.submit(IoOp::kWrite, {&seg, 1},
                              [] { throw Error("checksum mismatch", "extent 7"); });
  EXPECT_THROW(
      {
        try {
          engine.wait(h);
        } catch (const Error& e) {
          EXPECT_EQ(e.what_happened(), "checksum mismatch");
          throw;
        }
      },
      Error);
  EXPECT_THROW(engine.wait(h), Error);
}

TEST_P(AioEngineTest, DroppedEmptyRequestWithAFailingOnCompleteIsReportedByWaitAll) {
  // A request whose segments are all empty completes at once, on the submitting thread; if its
  // on_complete throws and its handle is dropped, wait_all() must still report the error, as
  // it does for every other request (aio_engine.h: "its error is then reported by wait_all()").
  AioEngine engine(options());
  AioFile file = AioFile::open(dir_.path() + "/empty", O_RDWR | O_CREAT, DirectIo::kOff);
  FileId f = engine.add_file(file);
  const IoSegment seg{f, 0, nullptr, 0};
  engine.submit(IoOp::kRead, {&seg, 1}, [] { throw Error("verification failed", "extent 9"); });
  EXPECT_THROW(engine.wait_all(), Error);
  engine.wait_all();  // reported once
  engine.remove_file(f);
}

TEST_P(AioEngineTest, BadArgumentsAreRefused) {
  AioEngine engine(options());
  std::byte b[16];
  EXPECT_THROW(engine.read(12345, 0, b, sizeof b), Error);  // unknown file
  EXPECT_THROW(engine.submit(IoOp::kRead, {}), Error);      // zero segments
}

// The activity hook (Note [Disk activity]): per kind, one report per request, ending at its
// completion with its bytes; the reports of one kind never overlap; a removed hook hears nothing.
TEST_P(AioEngineTest, ActivityHookReportsEachRequestWithoutOverlap) {
  struct Report {
    IoOp op;
    std::int64_t start_ns, end_ns;
    std::uint64_t bytes;
  };
  std::mutex mutex;
  std::vector<Report> reports;
  AioEngine engine(options());
  engine.set_activity_hook([&](IoOp op, std::int64_t start, std::int64_t end, std::uint64_t bytes) {
    std::lock_guard lock(mutex);
    reports.push_back({op, start, end, bytes});
  });
  AioFile file = AioFile::open(dir_.path() + "/activity", O_RDWR | O_CREAT, DirectIo::kOff);
  FileId f = engine.add_file(file);
  constexpr int kRequests = 6;
  const std::size_t bytes = 2 * kBlock + 100;
  std::vector<std::vector<std::byte>> src(kRequests, std::vector<std::byte>(bytes));
  std::vector<std::vector<std::byte>> dst(kRequests, std::vector<std::byte>(bytes));
  std::vector<AioHandle> handles;
  for (int i = 0; i < kRequests; ++i) {
    fill_random(src[i], static_cast<std::uint64_t>(i));
    handles.push_back(engine.write(f, i * bytes, src[i].data(), bytes));
  }
  for (const AioHandle& h : handles) engine.wait(h);
  handles.clear();
  for (int i = 0; i < kRequests; ++i) handles.push_back(engine.read(f, i * bytes, dst[i].data(), bytes));
  for (const AioHandle& h : handles) engine.wait(h);
  engine.set_activity_hook({});
  engine.wait(engine.read(f, 0, dst[0].data(), bytes));  // not reported: the hook is gone

  std::lock_guard lock(mutex);
  ASSERT_EQ(reports.size(), 2u * kRequests);
  for (IoOp op : {IoOp::kWrite, IoOp::kRead}) {
    std::uint64_t total = 0;
    std::int64_t last_end = 0;
    int n = 0;
    for (const Report& r : reports) {
      if (r.op != op) continue;
      EXPECT_LE(r.start_ns, r.end_ns);
      EXPECT_GE(r.start_ns, last_end) << "reports of one kind overlap";
      EXPECT_EQ(r.bytes, bytes);
      last_end = r.end_ns;
      total += r.bytes;
      ++n;
    }
    EXPECT_EQ(n, kRequests);
    EXPECT_EQ(total, kRequests * bytes);
  }
  engine.remove_file(f);
}

INSTANTIATE_TEST_SUITE_P(Backends, AioEngineTest,
                         ::testing::Values(Param{AioBackend::kIoUring, 1},
                                           Param{AioBackend::kIoUring, 2},
                                           Param{AioBackend::kThreads, 1},
                                           Param{AioBackend::kThreads, 2}),
                         param_name);

// --- not per backend ---------------------------------------------------------------------

TEST(AioEngineOptions, OutOfRangeOptionsAreRefused) {
  auto refused = [](AioOptions o, const char* key) {
    o.backend = AioBackend::kThreads;
    try {
      AioEngine engine(o);
      ADD_FAILURE() << "accepted options with a bad " << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), key) << e.what();
    }
  };
  AioOptions o;
  o.block_size = 1000;
  refused(o, "aio.block_size");
  o = {};
  o.block_size = 0;
  refused(o, "aio.block_size");
  o = {};
  o.queue_depth = 0;
  refused(o, "aio.queue_depth");
  o = {};
  o.parallelism = 65;
  refused(o, "aio.intra_op_parallelism");
}

TEST(AioEngineOptions, SingleSubmitNoOverlapAndSqpollStillRoundTrip) {
  IoUringProbe p = probe_io_uring();
  if (!p.works) GTEST_SKIP() << "io_uring unavailable: " << p.reason;
  TempDir dir;
  // 0: one submit per SQE; 1: whole batches only; 2: SQPOLL (dropped where refused).
  for (int variant = 0; variant < 3; ++variant) {
    AioOptions o;
    o.block_size = 4096;
    o.backend = AioBackend::kIoUring;
    o.single_submit = variant == 0;
    o.overlap_events = variant != 1;
    o.sqpoll = variant == 2;
    AioEngine engine(o);
    AioFile file = AioFile::open(dir.path() + "/f" + std::to_string(variant), O_RDWR | O_CREAT,
                                 DirectIo::kOff);
    FileId f = engine.add_file(file);
    std::vector<std::byte> src(20 * 4096 + 7), dst(src.size());
    fill_random(src, 77 + variant);
    engine.wait(engine.write(f, 0, src.data(), src.size()));
    engine.wait(engine.read(f, 0, dst.data(), dst.size()));
    EXPECT_EQ(src, dst);
  }
}

TEST(AioFileOpen, MissingFolderNamesThePath) {
  try {
    AioFile::open("/nonexistent-strata-dir/x", O_RDWR | O_CREAT, DirectIo::kAuto);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "/nonexistent-strata-dir/x");
    EXPECT_NE(std::string(e.what()).find("ENOENT"), std::string::npos) << e.what();
  }
}

// The checks of RequireDirectWhereTheFileSystemRefusesIt, on a file system in `dir` that
// refuses O_DIRECT. Returns an empty string when they pass, else what failed.
std::string check_direct_refused(const std::string& dir) {
  const std::string path = dir + "/required";
  try {
    AioFile::open(path, O_RDWR | O_CREAT | O_EXCL, DirectIo::kRequire);
    return "DirectIo::kRequire succeeded";
  } catch (const Error& e) {
    if (e.where() != path) return std::string("the error does not name the path: ") + e.what();
    if (std::string(e.what()).find("O_DIRECT") == std::string::npos) {
      return std::string("the error does not say O_DIRECT: ") + e.what();
    }
  }
  // kAuto falls back to buffered I/O on the same file system, and O_EXCL still works: the
  // refused attempt left no file behind.
  AioFile f = AioFile::open(path, O_RDWR | O_CREAT | O_EXCL, DirectIo::kAuto);
  if (f.direct()) return "DirectIo::kAuto opened with O_DIRECT where it is refused";
  return {};
}

TEST(AioFileOpen, RequireDirectWhereTheFileSystemRefusesIt) {
  // tmpfs refused O_DIRECT before Linux 6.6. Where it accepts it, a ramfs (which never has
  // O_DIRECT) is mounted in a child process's own mount namespace, when this process may.
  ODirectProbe shm = probe_o_direct("/dev/shm");
  if (!shm.works && shm.reason.find("EINVAL") != std::string::npos) {
    TempDir dir("/dev/shm");
    ASSERT_FALSE(dir.path().empty());
    std::string failure = check_direct_refused(dir.path());
    EXPECT_TRUE(failure.empty()) << failure;
    return;
  }
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    if (::unshare(CLONE_NEWNS) != 0) {
      out = "skip: unshare(CLONE_NEWNS): " + errno_text(errno);
    } else if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
               ::mount("none", dir.path().c_str(), "ramfs", 0, nullptr) != 0) {
      out = "skip: cannot mount a ramfs: " + errno_text(errno);
    } else {
      out = check_direct_refused(dir.path());
    }
    [[maybe_unused]] ssize_t n = ::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  if (out.rfind("skip: ", 0) == 0) GTEST_SKIP() << "/dev/shm accepts O_DIRECT and " << out.substr(6);
  EXPECT_TRUE(out.empty()) << out;
}

}  // namespace
}  // namespace strata::offload
