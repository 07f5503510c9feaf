#include "tools/moe_flags.h"

namespace strata::tools {

void add_moe_flags(CLI::App& cmd, std::int64_t& expert_cache_mb, std::string& prefetch, std::string& fetch,
                   std::string& cpu_experts, std::string& profile_path) {
  cmd.add_option("--moe-expert-cache-mb", expert_cache_mb,
                 "a mixture of experts' device cache of experts, in MiB: -1 (default) as much as the transient device "
                 "memory holds (evicted when it is needed), 0 none; the least recently used expert goes first")
      ->check(CLI::Range(std::int64_t{-1}, std::int64_t{1} << 40));
  cmd.add_option("--moe-prefetch", prefetch,
                 "on: while a mixture of experts decodes, the next layer's router runs on the current hidden state and "
                 "the experts it picks start streaming a layer early (a wrong guess costs bytes, never tokens; one rank "
                 "only); off (default): experts are fetched once their own router has run")
      ->check(CLI::IsMember({"on", "off"}));
  cmd.add_option("--moe-fetch", fetch,
                 "routed (default): a mixture's layer fetches only the experts its router picked; all: every expert "
                 "of the layer each step, as dense streaming (DeepSpeed's ZeRO-Inference) moves them, only the picked "
                 "ones computed: a baseline for the bytes routing saves (the same tokens)")
      ->check(CLI::IsMember({"routed", "all"}));
  cmd.add_option("--moe-cpu-experts", cpu_experts,
                 "where a mixture's expert kept in pinned host memory runs: off (default) copied to the device; on on "
                 "the host where it lives (only its tokens cross the link); auto on the host when few enough tokens "
                 "were routed to it for that to be faster, by the --profile machine profile (every count on the host "
                 "backend)")
      ->check(CLI::IsMember({"off", "on", "auto"}));
  cmd.add_option("--profile", profile_path,
                 "the machine profile (`strata bench machine --out FILE`) that --moe-cpu-experts auto decides by");
}

}  // namespace strata::tools
