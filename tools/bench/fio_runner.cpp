#include "tools/bench/fio_runner.h"

#include "core/error.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "offload/probe.h"

extern char** environ;

namespace strata::tools {
namespace {

// What a child process printed and how it ended.
struct ChildOutput {
  int spawn_errno = 0;  // posix_spawnp failed (ENOENT: no such program)
  int exit_code = -1;   // exit status, or 128 + signal
  std::string out;
  std::string err;
};

class Pipe {
 public:
  Pipe() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) fds_[0] = fds_[1] = -1;
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  bool ok() const { return fds_[0] >= 0; }
  int read_end() const { return fds_[0]; }
  int write_end() const { return fds_[1]; }
  void close_read() {
    if (fds_[0] >= 0) ::close(fds_[0]);
    fds_[0] = -1;
  }
  void close_write() {
    if (fds_[1] >= 0) ::close(fds_[1]);
    fds_[1] = -1;
  }

 private:
  int fds_[2] = {-1, -1};
};

// Runs argv with stdout and stderr captured (both drained together, so that neither pipe can
// fill up and stall the child) and stdin from /dev/null; waits for it.
ChildOutput run_child(const std::vector<std::string>& args) {
  ChildOutput result;
  Pipe out, err;
  if (!out.ok() || !err.ok()) {
    result.spawn_errno = errno;
    return result;
  }
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.write_end(), 1);
  posix_spawn_file_actions_adddup2(&actions, err.write_end(), 2);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  out.close_write();
  err.close_write();
  if (rc != 0) {
    result.spawn_errno = rc;
    return result;
  }

  pollfd fds[2] = {{out.read_end(), POLLIN, 0}, {err.read_end(), POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  char chunk[65536];
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, chunk, sizeof chunk);
      if (n > 0) {
        sinks[i]->append(chunk, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;  // end of file (or a broken pipe): poll ignores negative fds
        --open_fds;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return result;
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// The last non-empty line of a child's stderr (or stdout), for one-line reasons.
std::string last_line(const std::string& text) {
  std::string_view t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
  const std::size_t nl = t.rfind('\n');
  return std::string(nl == std::string_view::npos ? t : t.substr(nl + 1));
}

std::string spawn_reason(const std::string& fio, int errnum) {
  if (errnum == ENOENT) {
    return fmt::format("{} not found (Debian: apt-get install fio; or give --fio PATH)", fio);
  }
  return fmt::format("cannot run {}: {}", fio, errno_text(errnum));
}

}  // namespace

std::vector<std::string> fio_command(const FioJob& job) {
  const std::uint64_t per_job = job.bytes / job.numjobs;
  const char* rw = job.write ? (job.random ? "randwrite" : "write") : (job.random ? "randread" : "read");
  std::vector<std::string> args = {
      job.fio,
      "--name=strata-bench-nvme",
      "--filename=" + job.path,
      "--allow_file_create=0",  // the benchmark's prefilled file, never one fio lays out
      fmt::format("--rw={}", rw),
      fmt::format("--bs={}", job.block_size),
      fmt::format("--size={}", per_job),
      fmt::format("--numjobs={}", job.numjobs),
      "--ioengine=io_uring",
      fmt::format("--iodepth={}", job.queue_depth),
  };
  // Engine options go after --ioengine.
  if (job.fixed) {
    args.push_back("--fixedbufs=1");
    args.push_back("--registerfiles=1");
  }
  for (const char* tail : {"--direct=1", "--group_reporting", "--output-format=json"}) {
    args.push_back(tail);
  }
  // Job k starts at k * per_job: its own contiguous slice, as the engine deals a segment's
  // pieces to its threads.
  if (job.numjobs > 1) args.push_back(fmt::format("--offset_increment={}", per_job));
  return args;
}

std::string fio_command_line(const FioJob& job) {
  std::string line;
  for (const std::string& a : fio_command(job)) line += (line.empty() ? "" : " ") + a;
  return line;
}

FioResult run_fio(const FioJob& job) {
  FioResult r;
  if (job.numjobs == 0 || job.block_size == 0 || job.bytes % (job.block_size * job.numjobs) != 0) {
    r.error = fmt::format("{} bytes are not a multiple of bs {} x numjobs {}", job.bytes,
                          job.block_size, job.numjobs);
    return r;
  }
  const ChildOutput child = run_child(fio_command(job));
  if (child.spawn_errno != 0) {
    r.error = spawn_reason(job.fio, child.spawn_errno);
    return r;
  }
  if (child.exit_code != 0) {
    const std::string why = last_line(child.err.empty() ? child.out : child.err);
    r.error = fmt::format("{} exited with status {}{}{}", job.fio, child.exit_code,
                          why.empty() ? "" : ": ", why);
    return r;
  }
  // fio may print notes before the report on stdout: the report is the first '{' onwards.
  const std::size_t brace = child.out.find('{');
  const auto report = nlohmann::json::parse(
      brace == std::string::npos ? std::string_view() : std::string_view(child.out).substr(brace),
      nullptr, false);
  if (report.is_discarded() || !report.contains("jobs") || !report["jobs"].is_array() ||
      report["jobs"].empty()) {
    r.error = fmt::format("{} printed no JSON report with jobs (stdout: '{}')", job.fio,
                          last_line(child.out));
    return r;
  }
  // --group_reporting: one entry for all numjobs jobs; its bandwidth is their sum.
  const nlohmann::json& entry = report["jobs"][0];
  const char* side = job.write ? "write" : "read";
  if (entry.value("error", 0) != 0 || !entry.contains(side)) {
    r.error = fmt::format("{} reported error {} for the job", job.fio, entry.value("error", -1));
    return r;
  }
  const nlohmann::json& stats = entry[side];
  r.io_bytes = stats.value("io_bytes", std::uint64_t{0});
  r.runtime_s = stats.value("runtime", 0.0) / 1000.0;  // fio reports milliseconds
  const double bw_bytes = stats.value("bw_bytes", 0.0);
  if (r.io_bytes != job.bytes || bw_bytes <= 0) {
    r.error = fmt::format("{} moved {} of the {} bytes asked (bw_bytes {})", job.fio, r.io_bytes,
                          job.bytes, bw_bytes);
    return r;
  }
  r.gbps = bw_bytes / 1e9;
  r.ok = true;
  return r;
}

std::string fio_version(const std::string& fio, std::string* why) {
  const ChildOutput child = run_child({fio, "--version"});
  if (child.spawn_errno != 0) {
    if (why != nullptr) *why = spawn_reason(fio, child.spawn_errno);
    return {};
  }
  const std::string version = last_line(child.out);
  if (child.exit_code != 0 || version.empty()) {
    if (why != nullptr) {
      *why = fmt::format("{} --version exited with status {}", fio, child.exit_code);
    }
    return {};
  }
  return version;
}

}  // namespace strata::tools
