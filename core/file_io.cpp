#include "core/file_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include "core/error.h"

namespace strata {
namespace fs = std::filesystem;

namespace {

std::string parent_of(const std::string& path) {
  fs::path p = fs::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

}  // namespace

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw system_error(e, "open (to fsync)", path);
  }
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0 && e != EINVAL) throw system_error(e, "fsync", path, "the disk may be failing or full");
}

void write_file(const std::string& path, const std::string& text, bool sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    throw system_error(e, "open", path, "check that the folder exists and is writable");
  }
  auto fail = [&](const char* call) {
    const int e = errno;
    ::close(fd);
    ::unlink(path.c_str());
    return system_error(e, call, path, e == ENOSPC ? "free space on that disk" : "");
  };
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw fail("write");
    done += static_cast<std::size_t>(n);
  }
  if (sync && ::fsync(fd) != 0) throw fail("fsync");
  ::close(fd);
}

void write_file_atomic(const std::string& path, const std::string& text,
                       const std::function<void(const std::string& step)>& after) {
  const std::string tmp = parent_of(path) + "/." + fs::path(path).filename().string() + ".tmp";
  write_file(tmp, text, /*sync=*/true);
  if (after) after("write " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    throw system_error(e, "rename", tmp + " -> " + path, "check the folder's permissions and free space");
  }
  fsync_path(parent_of(path));
  if (after) after("rename " + tmp + " -> " + path);
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error("cannot read " + path + ": " + std::strerror(errno), path,
                "check that the file exists, is complete and is readable");
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace strata
