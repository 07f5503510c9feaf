// Fuzz target: tokenizer.json (models/tokenizer Tokenizer::load). A tokenizer that loads then
// encodes a fixed text (ASCII, digits, non-ASCII, a special token) and decodes the ids back.
#include <string_view>

#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  strata::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static strata::fuzz::InputFile file;
  file.write(data, size);
  strata::fuzz::expect_only_strata_errors([&] {
    const auto tokenizer = strata::models::Tokenizer::load(file.path());
    constexpr std::string_view kText = "Hello world, 1234 caf\xc3\xa9 <|endoftext|>  x\n";
    const auto ids = tokenizer.encode(kText, /*add_special=*/true);
    (void)tokenizer.decode(ids);
    (void)tokenizer.decode(ids, /*skip_special=*/true);
  });
  return 0;
}
