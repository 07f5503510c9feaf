// Fuzz target: llm.c token files (models/io read_token_file): the 1024-byte header, the count,
// the size; then the vocabulary check on what was read.
#include "models/io/token_file.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static strata::fuzz::InputFile file;
  file.write(data, size);
  strata::fuzz::expect_only_strata_errors([&] {
    const strata::models::TokenData tokens = strata::models::read_token_file(file.path());
    strata::fuzz::check(tokens.size() * tokens.token_bytes() + strata::models::kTokenFileHeaderBytes == size,
                        "1024 + 2 (or 4) * tokens == file size");
    tokens.validate(50257);
  });
  return 0;
}
