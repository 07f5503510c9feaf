#include "tools/bench/bench_scripts.h"

#include <string_view>
#include <system_error>
#include <vector>

#ifndef STRATA_SOURCE_DIR
#define STRATA_SOURCE_DIR ""
#endif

namespace strata::tools {

namespace fs = std::filesystem;

std::optional<fs::path> find_bench_script(const std::string& name, const std::string& given) {
  std::error_code ec;
  if (!given.empty()) {
    if (fs::is_regular_file(given, ec)) return fs::path(given);
    return std::nullopt;
  }
  std::vector<fs::path> candidates;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / "bench" / name);  // build tree copy
  if (std::string_view(STRATA_SOURCE_DIR).size() > 0) {
    candidates.push_back(fs::path(STRATA_SOURCE_DIR) / "tools" / "bench" / name);
  }
  candidates.push_back(fs::path("tools") / "bench" / name);  // run from a checkout's root
  for (const fs::path& p : candidates) {
    if (fs::is_regular_file(p, ec)) return fs::absolute(p, ec);
  }
  return std::nullopt;
}

std::optional<fs::path> source_folder(const std::string& relative) {
  std::error_code ec;
  if (!std::string_view(STRATA_SOURCE_DIR).empty()) {
    const fs::path p = fs::path(STRATA_SOURCE_DIR) / relative;
    if (fs::is_directory(p, ec)) return p;
  }
  if (fs::is_directory(relative, ec)) return fs::absolute(relative, ec);  // a checkout's root
  return std::nullopt;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace strata::tools
