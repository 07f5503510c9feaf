#pragma once
// The Python helpers of the benchmarks (tools/bench/*.py: the PyTorch side of a comparison),
// found and launched the same way by every `strata bench` command.
#include <filesystem>
#include <optional>
#include <string>

namespace strata::tools {

// `given` when it is a file (nullopt when it is not); else tools/bench/<name> next to the
// binary (the build tree's copy), in the source tree, then under the current folder (a
// checkout's root, as on a GPU machine that got the binaries carried).
std::optional<std::filesystem::path> find_bench_script(const std::string& name,
                                                       const std::string& given = {});

// The source tree's folder `relative` (e.g. "tests/reference"), else the same folder under the
// current folder; nullopt when neither exists.
std::optional<std::filesystem::path> source_folder(const std::string& relative);

// `s` quoted for /bin/sh.
std::string shell_quote(const std::string& s);

}  // namespace strata::tools
