// Fault injection through AioOptions::completion_hook, on both backends: short transfers,
// -EAGAIN and -EINTR, errors. Reads that come back short also get the bytes they did not
// "deliver" scribbled over, so an engine that skipped the rest would return wrong data.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/units.h"
#include "offload/aio_engine.h"
#include "offload/fault_injection.h"
#include "offload/probe.h"
#include "tests/offload/offload_test_util.h"

namespace strata::offload {
namespace {

using testing::fill_random;
using testing::TempDir;

constexpr std::size_t kBlock = 64 * kKiB;
constexpr std::size_t kBytes = 5 * kBlock + 3000;  // five whole pieces and a short tail

void scribble(std::byte* p, std::size_t bytes) { std::memset(p, 0xEE, bytes); }

class AioFaultTest : public ::testing::TestWithParam<AioBackend> {
 protected:
  void SetUp() override {
    if (GetParam() == AioBackend::kIoUring) {
      IoUringProbe p = probe_io_uring();
      if (!p.works) GTEST_SKIP() << "io_uring unavailable: " << p.reason;
    }
    ASSERT_FALSE(dir_.path().empty());
  }

  AioOptions options(CompletionHook hook) const {
    AioOptions o;
    o.block_size = kBlock;
    o.queue_depth = 4;
    o.parallelism = 2;
    o.backend = GetParam();
    o.completion_hook = std::move(hook);
    return o;
  }

  // Writes random bytes through `engine` and reads them back through it; returns the
  // (src, dst) pair for the caller to compare.
  void write_then_read(AioEngine& engine, const std::string& name, std::vector<std::byte>& src,
                       std::vector<std::byte>& dst) {
    AioFile file = AioFile::open(dir_.path() + "/" + name, O_RDWR | O_CREAT, DirectIo::kOff);
    FileId f = engine.add_file(file);
    src.resize(kBytes);
    dst.assign(kBytes, std::byte{0});
    fill_random(src, 4242);
    engine.wait(engine.write(f, 100, src.data(), src.size()));
    engine.wait(engine.read(f, 100, dst.data(), dst.size()));
    engine.remove_file(f);
  }

  TempDir dir_;
};

TEST_P(AioFaultTest, ShortReadsContinueWhereTheyStopped) {
  for (int variant = 0; variant < 2; ++variant) {
    // Every first completion of a read delivers half (variant 0) or 512 bytes (variant 1);
    // what it did not deliver is scribbled over.
    std::atomic<int> shortened{0};
    AioEngine engine(options([&, variant](const Completion& c) {
      if (c.op != IoOp::kRead || c.attempt != 0 || c.result <= 1) return c.result;
      const int keep = variant == 0 ? c.result / 2 : std::min(c.result - 1, 512);
      scribble(c.buffer + keep, c.bytes - static_cast<std::size_t>(keep));
      ++shortened;
      return keep;
    }));
    std::vector<std::byte> src, dst;
    write_then_read(engine, "short-read" + std::to_string(variant), src, dst);
    EXPECT_EQ(src, dst) << "variant " << variant;
    EXPECT_EQ(shortened.load(), 6);
    EXPECT_EQ(engine.stats().short_transfers, 6u);
  }
}

TEST_P(AioFaultTest, ShortWritesContinueWhereTheyStopped) {
  // The kernel wrote everything, but the engine is told only 512 bytes: it must write the rest
  // again from the right offset and the right place in the buffer.
  std::atomic<int> shortened{0};
  AioEngine engine(options([&](const Completion& c) {
    if (c.op != IoOp::kWrite || c.attempt > 2 || c.result <= 512) return c.result;
    ++shortened;
    return 512;
  }));
  std::vector<std::byte> src, dst;
  write_then_read(engine, "short-write", src, dst);
  EXPECT_EQ(src, dst);
  EXPECT_GT(shortened.load(), 6);
  EXPECT_EQ(engine.stats().short_transfers, static_cast<std::uint64_t>(shortened.load()));
}

TEST_P(AioFaultTest, HookSeesTheContinuationOfAShortTransfer) {
  std::mutex m;
  std::vector<Completion> seen;
  std::vector<std::string> paths;
  AioEngine engine(options([&](const Completion& c) {
    std::lock_guard lock(m);
    seen.push_back(c);
    paths.push_back(c.path);
    return c.attempt == 0 ? std::min(c.result, 1000) : c.result;
  }));
  AioFile file = AioFile::open(dir_.path() + "/seen", O_RDWR | O_CREAT, DirectIo::kOff);
  FileId f = engine.add_file(file);
  std::vector<std::byte> data(4096);
  engine.wait(engine.write(f, 8192, data.data(), data.size()));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].offset, 8192u);
  EXPECT_EQ(seen[0].bytes, 4096u);
  EXPECT_EQ(seen[0].buffer, data.data());
  EXPECT_EQ(seen[0].attempt, 0);
  EXPECT_EQ(seen[1].offset, 8192u + 1000);
  EXPECT_EQ(seen[1].bytes, 4096u - 1000);
  EXPECT_EQ(seen[1].buffer, data.data() + 1000);
  EXPECT_EQ(seen[1].attempt, 1);
  EXPECT_EQ(paths[0], file.path());
}

TEST_P(AioFaultTest, EagainAndEintrAreRetried) {
  // The first three submissions of every piece "fail" (and reads get scribbled over): the
  // engine must resubmit, and the data must come out identical.
  AioEngine engine(options([](const Completion& c) {
    if (c.attempt >= 3) return c.result;
    if (c.op == IoOp::kRead) scribble(c.buffer, c.bytes);
    return c.attempt % 2 == 0 ? -EAGAIN : -EINTR;
  }));
  std::vector<std::byte> src, dst;
  write_then_read(engine, "eagain", src, dst);
  EXPECT_EQ(src, dst);
  AioStats s = engine.stats();
  EXPECT_EQ(s.pieces, 12u);  // 6 per request
  EXPECT_EQ(s.retries, 3 * s.pieces);
}

TEST_P(AioFaultTest, EioFailsTheRequestWithPathOffsetLengthAndErrno) {
  // The third piece of the read (offset 100 + 2 blocks) fails with EIO.
  const std::uint64_t bad_offset = 100 + 2 * kBlock;
  AioEngine engine(options([&](const Completion& c) {
    return c.op == IoOp::kRead && c.offset == bad_offset ? -EIO : c.result;
  }));
  AioFile file = AioFile::open(dir_.path() + "/eio", O_RDWR | O_CREAT, DirectIo::kOff);
  FileId f = engine.add_file(file);
  std::vector<std::byte> data(kBytes);
  engine.wait(engine.write(f, 100, data.data(), data.size()));
  AioHandle h = engine.read(f, 100, data.data(), data.size());
  for (int i = 0; i < 2; ++i) {
    try {
      engine.wait(h);
      FAIL() << "an EIO read succeeded";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(bad_offset)), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(kBlock) + " bytes"), std::string::npos) << msg;
      EXPECT_NE(msg.find("EIO"), std::string::npos) << msg;
      EXPECT_NE(msg.find("read"), std::string::npos) << msg;
    }
  }
  // The engine goes on working for other requests.
  engine.wait(engine.read(f, 100, data.data(), kBlock));
}

TEST_P(AioFaultTest, PersistentEagainIsAnErrorNotAHang) {
  AioEngine engine(options([](const Completion& c) {
    return c.op == IoOp::kRead ? -EAGAIN : c.result;
  }));
  AioFile file = AioFile::open(dir_.path() + "/busy", O_RDWR | O_CREAT, DirectIo::kOff);
  FileId f = engine.add_file(file);
  std::vector<std::byte> data(4096);
  engine.wait(engine.write(f, 0, data.data(), data.size()));
  const auto start = std::chrono::steady_clock::now();
  try {
    engine.wait(engine.read(f, 0, data.data(), data.size()));
    FAIL() << "a read that always answers EAGAIN succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("EAGAIN"), std::string::npos) << msg;
    EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_GE(engine.stats().retries, 999u);
}

TEST_P(AioFaultTest, EnospcOnWriteSaysHowMuchIsFree) {
  AioEngine engine(options([](const Completion& c) {
    return c.op == IoOp::kWrite ? -ENOSPC : c.result;
  }));
  AioFile file = AioFile::open(dir_.path() + "/full", O_RDWR | O_CREAT, DirectIo::kOff);
  FileId f = engine.add_file(file);
  std::vector<std::byte> data(4096);
  try {
    engine.wait(engine.write(f, 0, data.data(), data.size()));
    FAIL() << "an ENOSPC write succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ENOSPC"), std::string::npos) << msg;
    EXPECT_NE(msg.find("free"), std::string::npos) << msg;
    EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;
  }
}

TEST_P(AioFaultTest, ShortDirectReadsStayAligned) {
  // A short O_DIRECT transfer stops on a block boundary; the continuation must keep the
  // buffer, offset and length aligned (the kernel answers EINVAL otherwise).
  ODirectProbe probe = probe_o_direct(dir_.path());
  if (!probe.works) GTEST_SKIP() << "no O_DIRECT in " << dir_.path() << ": " << probe.reason;
  std::atomic<int> shortened{0};
  AioEngine engine(options([&](const Completion& c) {
    if (c.attempt != 0 || c.result <= 4096) return c.result;
    const int keep = c.result / 2 / 4096 * 4096;
    if (c.op == IoOp::kRead) scribble(c.buffer + keep, c.bytes - static_cast<std::size_t>(keep));
    ++shortened;
    return keep;
  }));
  HostBuffer src = HostBuffer::allocate(4 * kBlock, "src");
  HostBuffer dst = HostBuffer::allocate(4 * kBlock, "dst");
  fill_random(src.bytes(), 99);
  AioFile file = AioFile::open(dir_.path() + "/direct", O_RDWR | O_CREAT, DirectIo::kRequire);
  FileId f = engine.add_file(file);
  engine.wait(engine.write(f, 4096, src.data(), src.size()));
  engine.wait(engine.read(f, 4096, dst.data(), dst.size()));
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
  EXPECT_EQ(shortened.load(), 8);
}

// An error of io_uring_submit_and_wait itself (not EINTR / EAGAIN / EBUSY / ETIME) makes the
// ring unusable: it must fail the lane's requests with the path, the offset and the errno, and
// the lane must neither retry nor hang (Note [A failed ring] in uring_backend.cpp). Injected
// through AioOptions::submit_hook, after a call that put pieces in the ring, so the pieces the
// kernel took finish first and only the ones it never got fail.
class AioSubmitFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    IoUringProbe p = probe_io_uring();
    if (!p.works) GTEST_SKIP() << "io_uring unavailable: " << p.reason;
    ASSERT_FALSE(dir_.path().empty());
  }

  // One ring with 4 pieces in flight: a 6-piece request fails at its fifth piece.
  static AioOptions options(SubmitHook hook) {
    AioOptions o;
    o.block_size = kBlock;
    o.queue_depth = 4;
    o.parallelism = 1;
    o.backend = AioBackend::kIoUring;
    o.submit_hook = std::move(hook);
    return o;
  }

  TempDir dir_;
};

TEST_F(AioSubmitFaultTest, UnexpectedErrorFailsTheRequestAndTheLaneStops) {
  std::atomic<bool> broken{false};
  std::atomic<int> calls{0};
  AioEngine engine(options([&](const SubmitCall& c) {
    ++calls;
    return broken.load() && c.in_flight > 0 ? -EBADFD : c.result;
  }));
  AioFile file = AioFile::open(dir_.path() + "/badfd", O_RDWR | O_CREAT, DirectIo::kOff);
  FileId f = engine.add_file(file);
  std::vector<std::byte> data(6 * kBlock);
  fill_random(data, 7);
  engine.wait(engine.write(f, 4096, data.data(), data.size()));

  broken = true;
  const auto start = std::chrono::steady_clock::now();
  try {
    engine.wait(engine.read(f, 4096, data.data(), data.size()));
    FAIL() << "a read on a ring whose submit failed succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;
    EXPECT_NE(msg.find("read of " + std::to_string(kBlock) + " bytes at offset " +
                       std::to_string(4096 + 4 * kBlock)),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("io_uring_submit_and_wait"), std::string::npos) << msg;
    EXPECT_NE(msg.find(errno_text(EBADFD)), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));

  // The lane is closed: later requests fail at once, and nothing calls submit again.
  const int calls_after = calls.load();
  try {
    engine.wait(engine.write(f, 0, data.data(), kBlock));
    FAIL() << "a write on a closed lane succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("write of " + std::to_string(kBlock) + " bytes at offset 0"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("EBADFD"), std::string::npos) << msg;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(calls.load(), calls_after) << "the closed lane kept submitting";
  engine.remove_file(f);
}

TEST_F(AioSubmitFaultTest, PiecesTheKernelTookStillComplete) {
  std::vector<std::byte> data(6 * kBlock);
  fill_random(data, 8);
  const std::string path = dir_.path() + "/taken";
  {
    AioEngine engine(options([](const SubmitCall& c) {
      return c.in_flight > 0 ? -EOWNERDEAD : c.result;
    }));
    AioFile file = AioFile::open(path, O_RDWR | O_CREAT | O_TRUNC, DirectIo::kOff);
    FileId f = engine.add_file(file);
    try {
      engine.wait(engine.write(f, 0, data.data(), data.size()));
      FAIL() << "a write through a failed ring succeeded";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find("at offset " + std::to_string(4 * kBlock)), std::string::npos) << msg;
      EXPECT_NE(msg.find("EOWNERDEAD"), std::string::npos) << msg;
    }
    EXPECT_NO_THROW(engine.wait_all());  // reported once; nothing is left in flight
    engine.remove_file(f);
  }
  // The four pieces in the ring when the call failed were collected and are on disk.
  AioFile file = AioFile::open(path, O_RDONLY, DirectIo::kOff);
  std::vector<std::byte> back(4 * kBlock);
  ASSERT_EQ(::pread(file.fd(), back.data(), back.size(), 0), static_cast<ssize_t>(back.size()));
  EXPECT_EQ(std::memcmp(back.data(), data.data(), back.size()), 0);
}

// The injector of fault_injection.h (STRATA_FAULT_INJECTION): the n-th piece of a kind on a
// matching file, once. One lane with one piece in flight, so that the n-th piece is the one at
// offset 100 + (n - 1) * kBlock.
class FaultInjectionTest : public AioFaultTest {
 protected:
  AioOptions sequential(const std::string& specs) const {
    AioOptions o = options(fault_hook(parse_fault_specs(specs)));
    o.parallelism = 1;
    o.queue_depth = 1;
    return o;
  }
  // Writes kBytes of random data at offset 100 of `name` and reads them back; throws what the
  // engine throws.
  void round_trip(AioEngine& engine, const std::string& name) {
    src_.resize(kBytes);
    dst_.assign(kBytes, std::byte{0});
    fill_random(src_, 77);
    AioFile file = AioFile::open(dir_.path() + "/" + name, O_RDWR | O_CREAT, DirectIo::kOff);
    FileId f = engine.add_file(file);
    try {
      engine.wait(engine.write(f, 100, src_.data(), src_.size()));
      engine.wait(engine.read(f, 100, dst_.data(), dst_.size()));
    } catch (...) {
      engine.remove_file(f);
      throw;
    }
    engine.remove_file(f);
  }
  std::vector<std::byte> src_, dst_;
};

TEST(FaultSpecs, ParseAndDescribe) {
  const std::vector<FaultSpec> s = parse_fault_specs("read:40:EIO:exp_avg;write:3:ENOSPC;read:1:short:/a:b;"
                                                     "write:2:corrupt;read:5:EAGAIN;read:6:EINTR");
  ASSERT_EQ(s.size(), 6u);
  EXPECT_EQ(s[0].op, IoOp::kRead);
  EXPECT_EQ(s[0].nth, 40u);
  EXPECT_EQ(s[0].kind, FaultKind::kErrno);
  EXPECT_EQ(s[0].errnum, EIO);
  EXPECT_EQ(s[0].path_contains, "exp_avg");
  EXPECT_EQ(s[1].op, IoOp::kWrite);
  EXPECT_EQ(s[1].errnum, ENOSPC);
  EXPECT_EQ(s[1].path_contains, "");
  EXPECT_EQ(s[2].kind, FaultKind::kShort);
  EXPECT_EQ(s[2].path_contains, "/a:b");
  EXPECT_EQ(s[3].kind, FaultKind::kCorrupt);
  EXPECT_EQ(s[4].kind, FaultKind::kRetry);
  EXPECT_EQ(s[4].errnum, EAGAIN);
  EXPECT_EQ(s[5].kind, FaultKind::kRetry);
  EXPECT_EQ(s[5].errnum, EINTR);
  EXPECT_EQ(describe(s[0]), "read piece 40 of a file matching \"exp_avg\": EIO");
  for (const char* bad : {"read", "read:0:EIO", "read:x:EIO", "seek:1:EIO", "read:1:EWHAT", "read:1:"}) {
    try {
      parse_fault_specs(bad, "STRATA_FAULT_INJECTION");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("STRATA_FAULT_INJECTION"), std::string::npos) << e.what();
    }
  }
}

TEST_P(FaultInjectionTest, PermanentErrorsNameTheFileTheOffsetAndTheErrno) {
  for (const auto& [spec, op, errname] : {std::tuple{"read:3:EIO", "read", "EIO"},
                                          std::tuple{"write:3:ENOSPC", "write", "ENOSPC"},
                                          std::tuple{"write:3:EROFS", "write", "EROFS"}}) {
    AioEngine engine(sequential(spec));
    try {
      round_trip(engine, "permanent");
      ADD_FAILURE() << spec << ": no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(dir_.path() + "/permanent"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string(op) + " of " + std::to_string(kBlock) + " bytes at offset " +
                         std::to_string(100 + 2 * kBlock)),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find(errname), std::string::npos) << msg;
    }
  }
}

TEST_P(FaultInjectionTest, TransientFaultsGiveIdenticalData) {
  for (const char* spec : {"read:2:EAGAIN", "read:2:EINTR", "write:2:EAGAIN", "read:2:short", "write:5:short",
                           "read:1:short;read:2:EINTR;write:4:short;write:5:EAGAIN"}) {
    AioEngine engine(sequential(spec));
    EXPECT_NO_THROW(round_trip(engine, "transient")) << spec;
    EXPECT_EQ(src_, dst_) << spec;
    const AioStats s = engine.stats();
    EXPECT_GE(s.retries + s.short_transfers, 1u) << spec << ": nothing was injected";
  }
}

TEST_P(FaultInjectionTest, ShortTransfersStayAlignedForODirect) {
  // A short O_DIRECT transfer that stopped off a 4 KiB boundary would read as the end of the
  // file (aio_request.h): the injector cuts on a boundary, and skips pieces under 8 KiB (the
  // 3000-byte tail here) for the next one that has room.
  ODirectProbe probe = probe_o_direct(dir_.path());
  if (!probe.works) GTEST_SKIP() << "no O_DIRECT in " << dir_.path() << ": " << probe.reason;
  AioOptions o = options(fault_hook(parse_fault_specs("read:1:short;write:2:short")));
  o.parallelism = 1;
  o.queue_depth = 1;
  o.block_size = 3 * 4096;  // pieces of 12 KiB and a 4 KiB tail
  AioEngine engine(o);
  HostBuffer src = HostBuffer::allocate(4 * 4096, "src");
  HostBuffer dst = HostBuffer::allocate(4 * 4096, "dst");
  fill_random(src.bytes(), 5);
  AioFile file = AioFile::open(dir_.path() + "/direct-short", O_RDWR | O_CREAT, DirectIo::kRequire);
  FileId f = engine.add_file(file);
  engine.wait(engine.write(f, 0, src.data(), src.size()));  // write 2 is the 4 KiB tail: no room
  engine.wait(engine.read(f, 0, dst.data(), dst.size()));
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
  EXPECT_EQ(engine.stats().short_transfers, 1u);  // the read's; the write's never found a piece
  engine.remove_file(f);
}

TEST_P(FaultInjectionTest, CorruptBlocksDifferInOneByte) {
  // Without checksums (the swap space's) nothing notices: the damage is exactly one byte, in
  // the buffer (read) or in the file (write), at the n-th piece.
  for (const char* spec : {"read:4:corrupt", "write:4:corrupt"}) {
    AioEngine engine(sequential(spec));
    EXPECT_NO_THROW(round_trip(engine, std::string("corrupt-") + spec[0])) << spec;
    std::size_t differ = 0, at = 0;
    for (std::size_t i = 0; i < kBytes; ++i) {
      if (src_[i] != dst_[i]) ++differ, at = i;
    }
    EXPECT_EQ(differ, 1u) << spec;
    EXPECT_EQ(at, 3 * kBlock) << spec;
  }
}

TEST_P(FaultInjectionTest, OnlyMatchingFilesAndOnlyOnce) {
  {
    AioEngine engine(sequential("read:1:EIO:no-such-file"));
    EXPECT_NO_THROW(round_trip(engine, "other"));
  }
  AioEngine engine(sequential("read:2:EIO:twice"));
  EXPECT_THROW(round_trip(engine, "twice"), Error);
  EXPECT_NO_THROW(round_trip(engine, "twice"));  // the 2nd read is behind: no fault again
  EXPECT_EQ(src_, dst_);
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultInjectionTest,
                         ::testing::Values(AioBackend::kIoUring, AioBackend::kThreads),
                         [](const ::testing::TestParamInfo<AioBackend>& p) {
                           return std::string(p.param == AioBackend::kIoUring ? "IoUring" : "Threads");
                         });

INSTANTIATE_TEST_SUITE_P(Backends, AioFaultTest,
                         ::testing::Values(AioBackend::kIoUring, AioBackend::kThreads),
                         [](const ::testing::TestParamInfo<AioBackend>& p) {
                           return std::string(p.param == AioBackend::kIoUring ? "IoUring"
                                                                              : "Threads");
                         });

}  // namespace
}  // namespace strata::offload
