#include "tools/bench/bench_nvme_disk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <chrono>
#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "core/units.h"
#include "offload/host_buffer.h"
#include "runtime/config/config.h"
#include "runtime/tiers/io_options.h"

namespace strata::tools {
namespace {

constexpr std::uint64_t kDefaultSizeBytes = kGiB;
constexpr std::uint64_t kMinShrunkSizeBytes = 64 * kMiB;  // never shrink --size below this

// The scratch file's path, where the signal handler can reach it (unlink is
// async-signal-safe; std::string is not).
char g_scratch_path[PATH_MAX] = {};

extern "C" void remove_scratch_and_die(int sig) {
  if (g_scratch_path[0] != '\0') ::unlink(g_scratch_path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

// The mount is the longest mount point that prefixes the folder's canonical path.
std::string describe_mount(const std::string& dir) {
  std::error_code ec;
  const std::string path = std::filesystem::canonical(dir, ec).string();
  std::ifstream in("/proc/self/mountinfo");
  std::string line, best_point, best_fs, best_source, best_dev;
  while (std::getline(in, line)) {
    // id parent major:minor root mount_point options [optional...] - fstype source super
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    const std::size_t sep = line.find(" - ");
    if (sep == std::string::npos || ec) continue;
    const bool prefix = point == "/" || path == point || path.rfind(point + "/", 0) == 0;
    if (!prefix || point.size() < best_point.size()) continue;
    std::istringstream tail(line.substr(sep + 3));
    best_point = point;
    best_dev = dev;
    tail >> best_fs >> best_source;
  }
  if (best_fs.empty()) return "unknown file system (no /proc/self/mountinfo entry)";
  std::string text = fmt::format("{} on {} ({}, mounted at {}", best_fs, best_source, best_dev,
                                 best_point);
  // A partition's queue is its disk's: try the node, then its parent.
  for (const char* up : {"", "/.."}) {
    const std::string base = fmt::format("/sys/dev/block/{}{}", best_dev, up);
    const std::string rotational = read_first_line(base + "/queue/rotational");
    if (rotational.empty()) continue;
    // "none [mq-deadline] kyber bfq": the one in brackets is in use.
    std::string scheduler = read_first_line(base + "/queue/scheduler");
    const std::size_t open = scheduler.find('['), close = scheduler.find(']');
    if (open != std::string::npos && close > open) {
      scheduler = scheduler.substr(open + 1, close - open - 1);
    }
    text += fmt::format("; rotational {}, scheduler {}", rotational, scheduler);
    const std::string model = read_first_line(base + "/device/model");
    if (!model.empty()) text += ", model " + model;
    break;
  }
  return text + ")";
}

std::string resolve_bench_dir(const std::string& given) {
  if (!given.empty()) return given;
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/var/tmp";
}

offload::ODirectProbe check_bench_dir(const std::string& dir) {
  const std::string hint = "give --dir a writable folder on a disk file system (ext4, xfs), "
                           "e.g. --dir /var/tmp; not tmpfs (/dev/shm, often /tmp)";
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) {
    throw Error("cannot use the folder: " + errno_text(errno), dir, hint);
  }
  if (!S_ISDIR(st.st_mode)) throw Error("not a folder", dir, hint);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw Error("the folder is not writable: " + errno_text(errno), dir, hint);
  }
  offload::ODirectProbe probe = offload::probe_o_direct(dir);
  // Linux 6.6+ lets tmpfs accept O_DIRECT: it works, but it measures memory, not a disk.
  if (probe.fs_type == "tmpfs" || probe.fs_type == "ramfs") {
    throw Error(fmt::format("the folder is on {}: memory, not a disk", probe.fs_type), dir, hint);
  }
  if (!probe.works) {
    throw Error(fmt::format("O_DIRECT does not work here ({}): {}",
                            probe.fs_type.empty() ? "unknown file system" : probe.fs_type,
                            probe.reason),
                dir, hint);
  }
  return probe;
}

std::uint64_t resolve_bench_size(const std::string& size_text, const std::string& dir,
                                 std::FILE* text) {
  std::uint64_t size = kDefaultSizeBytes;
  if (!size_text.empty()) {
    const auto bytes = parse_bytes(size_text);
    if (!bytes || *bytes == 0 || *bytes % offload::kDirectIoAlignment != 0) {
      throw Error(fmt::format("'{}' is not a file size for O_DIRECT", size_text), "--size",
                  "give a positive multiple of 4 KiB, e.g. 256M or 1G");
    }
    size = *bytes;
  }
  struct statvfs vfs{};
  if (::statvfs(dir.c_str(), &vfs) != 0) throw system_error(errno, "statvfs", dir);
  const std::uint64_t free_bytes = std::uint64_t{vfs.f_bavail} * vfs.f_frsize;
  const std::uint64_t quarter = free_bytes / 4 / (8 * kMiB) * (8 * kMiB);
  if (size <= quarter) return size;
  if (quarter < kMinShrunkSizeBytes) {
    throw Error(fmt::format("only {} free: the benchmark writes at most a quarter of the free "
                            "space, which is less than --size {} and less than {}",
                            format_bytes(free_bytes), format_bytes(size),
                            format_bytes(kMinShrunkSizeBytes)),
                dir, "free some space, or give --dir a folder on another disk");
  }
  std::fprintf(text, "size: %s shrunk to %s, a quarter of the %s free in %s\n",
               format_bytes(size).c_str(), format_bytes(quarter).c_str(),
               format_bytes(free_bytes).c_str(), dir.c_str());
  return quarter;
}

ScratchFile::ScratchFile(const std::string& dir)
    : path_(fmt::format("{}/strata-bench-nvme-{}.bin", dir, ::getpid())) {
  STRATA_ASSERT(path_.size() < sizeof g_scratch_path);
  file_ = offload::AioFile::open(path_, O_RDWR | O_CREAT | O_EXCL, offload::DirectIo::kRequire);
  std::memcpy(g_scratch_path, path_.c_str(), path_.size() + 1);
  struct sigaction action{};
  action.sa_handler = remove_scratch_and_die;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &action, &previous_[i]);
}

ScratchFile::~ScratchFile() {
  file_ = offload::AioFile();  // closed before it is unlinked
  ::unlink(path_.c_str());
  g_scratch_path[0] = '\0';
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
}

void ScratchFile::reserve(std::uint64_t bytes) const {
  if (const int rc = ::posix_fallocate(file_.fd(), 0, static_cast<off_t>(bytes)); rc != 0) {
    throw system_error(rc, "posix_fallocate", path_ + " (" + format_bytes(bytes) + ")",
                       "give a smaller --size or a --dir with more free space");
  }
}

offload::AioOptions run_aio_options(const nlohmann::json& config, const models::ModelSpec& model) {
  runtime::config::ResolveInputs resolve;
  resolve.hidden_size = static_cast<std::uint64_t>(model.hidden_size());
  return runtime::tiers::aio_options(runtime::config::resolve_config(
      runtime::config::parse_config(config.dump(), "strata bench").config, resolve));
}

DiskRates measure_disk_rates(const offload::AioOptions& aio, const std::string& path, std::uint64_t bytes,
                             bool read_back) {
  using Clock = std::chrono::steady_clock;
  constexpr std::size_t kRequestBytes = 64 * kMiB;
  bytes = (bytes + offload::kDirectIoAlignment - 1) / offload::kDirectIoAlignment * offload::kDirectIoAlignment;
  offload::AioEngine engine(aio);
  const offload::HostBuffer buffer = offload::HostBuffer::allocate(kRequestBytes, "the disk limit's buffer");
  std::mt19937_64 rng(0x5eed);
  auto* words = reinterpret_cast<std::uint64_t*>(buffer.data());
  for (std::size_t i = 0; i < buffer.size() / 8; ++i) words[i] = rng();
  // One pass over the file: every request submitted at once, then (writing) fdatasync; GB/s.
  // Reading back, one buffer serves every request: the bytes are not looked at, only timed.
  auto pass = [&](bool write) {
    const offload::AioFile file =
        write ? offload::AioFile::open(path, O_WRONLY | O_CREAT | O_EXCL, offload::DirectIo::kAuto, 0644)
              : offload::AioFile::open(path, O_RDONLY, offload::DirectIo::kAuto, 0);
    const offload::FileId id = engine.add_file(file);
    const Clock::time_point t0 = Clock::now();
    for (std::uint64_t offset = 0; offset < bytes; offset += buffer.size()) {
      const auto piece = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), bytes - offset));
      if (write) {
        engine.write(id, offset, buffer.data(), piece);
      } else {
        engine.read(id, offset, buffer.data(), piece);
      }
    }
    engine.wait_all();
    if (write) file.sync();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    engine.remove_file(id);
    return static_cast<double>(bytes) / seconds / 1e9;
  };
  DiskRates rates;
  rates.write_gbps = pass(true);
  if (read_back) rates.read_gbps = pass(false);
  if (::unlink(path.c_str()) != 0) throw system_error(errno, "unlink", path);
  return rates;
}

double measure_file_read_rate(const offload::AioOptions& aio, const std::string& path, std::uint64_t bytes) {
  using Clock = std::chrono::steady_clock;
  constexpr std::size_t kRequestBytes = 64 * kMiB;
  const std::uint64_t size = std::filesystem::file_size(path);
  bytes = std::min(bytes, size) / offload::kDirectIoAlignment * offload::kDirectIoAlignment;
  if (bytes == 0) throw Error(path + " holds less than one O_DIRECT block: nothing to time a read of");
  offload::AioEngine engine(aio);
  const offload::HostBuffer buffer =
      offload::HostBuffer::allocate(static_cast<std::size_t>(std::min<std::uint64_t>(kRequestBytes, bytes)),
                                    "the disk limit's buffer");
  const offload::AioFile file = offload::AioFile::open(path, O_RDONLY, offload::DirectIo::kAuto, 0);
  const offload::FileId id = engine.add_file(file);
  const Clock::time_point t0 = Clock::now();
  for (std::uint64_t offset = 0; offset < bytes; offset += buffer.size()) {
    engine.read(id, offset, buffer.data(), static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), bytes - offset)));
  }
  engine.wait_all();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  engine.remove_file(id);
  return static_cast<double>(bytes) / seconds / 1e9;
}

}  // namespace strata::tools
