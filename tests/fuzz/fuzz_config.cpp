// Fuzz target: the DeepSpeed-style config reader (runtime/config parse_config).
// Input: the config text, then, after each NUL byte, one "key.path=value" override.
// Checked beyond "only strata::Error": an accepted config prints to JSON that parses back to the
// same Config (config.h's promise), and resolve_config() on it throws nothing but Error.
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/config.h"
#include "tests/fuzz/fuzz_util.h"

namespace cfg = strata::runtime::config;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  strata::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::size_t nul = input.find('\0');
  std::string_view text = input.substr(0, nul);
  std::vector<std::string> overrides;
  while (nul != std::string_view::npos && overrides.size() < 4) {
    input.remove_prefix(nul + 1);
    nul = input.find('\0');
    overrides.emplace_back(input.substr(0, nul));
  }

  strata::fuzz::expect_only_strata_errors([&] {
    const cfg::Config config = cfg::parse_config(text, "fuzz.json", overrides).config;
    const std::string printed = cfg::config_to_json(config);
    cfg::Config again;
    try {
      again = cfg::parse_config(printed, "printed").config;
    } catch (const strata::Error& e) {
      std::fprintf(stderr, "fuzz: the printed config does not parse: %s\n%s\n", e.what(),
                   printed.c_str());
      std::abort();
    }
    strata::fuzz::check(again == config, "parse_config(config_to_json(c)).config == c");
    (void)cfg::unresolved_auto_keys(config);
    cfg::ResolveInputs inputs;
    inputs.world_size = 2;
    inputs.hidden_size = 768;
    inputs.host_memory_bytes = std::uint64_t{64} << 30;
    inputs.cpu_count = 8;
    (void)cfg::resolve_config(config, inputs);
  });
  return 0;
}
