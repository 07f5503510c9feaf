#pragma once
// The mixture-of-experts flags of strata infer and strata serve (infer/server.h's ServerSetup
// takes them): --moe-expert-cache-mb, --moe-prefetch, --moe-fetch, --moe-cpu-experts and --profile.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace strata::tools {

void add_moe_flags(CLI::App& command, std::int64_t& expert_cache_mb, std::string& prefetch, std::string& fetch,
                   std::string& cpu_experts, std::string& profile_path);

}  // namespace strata::tools
