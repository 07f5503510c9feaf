#pragma once
// `strata --version` and `strata version`: the release, the git commit the binary was built from
// ("-dirty" when tracked files differed from it) and whether the CUDA backend is compiled in.
#include <string>

#include <CLI/CLI.hpp>

namespace strata::tools {

// Three lines: "strata 0.1.0", "commit 3689b1e0a1b2", "CUDA: compiled in (architectures 90)".
std::string version_text();

void add_version_command(CLI::App& app);  // strata version

}  // namespace strata::tools
