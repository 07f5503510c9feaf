// Fuzz target: safetensors files (models/io SafetensorsFile::open), header and layout.
// open() promises that no accessor reads outside the file whatever its bytes; so every
// accepted file has each tensor's first and last byte read (ASan catches a read outside the
// mapping) and each name looked up.
#include "models/io/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static strata::fuzz::InputFile file;
  file.write(data, size);
  strata::fuzz::expect_only_strata_errors([&] {
    const auto st = strata::models::SafetensorsFile::open(file.path());
    unsigned sum = 0;
    for (const strata::models::TensorInfo& t : st.tensors()) {
      const auto bytes = st.bytes(t);
      strata::fuzz::check(bytes.size() == t.end - t.begin, "bytes(t).size() == end - begin");
      strata::fuzz::check(bytes.size() == t.numel * strata::models::tensor_dtype_size(t.dtype),
                          "bytes(t).size() == numel * dtype size");
      if (!bytes.empty()) sum += static_cast<unsigned>(bytes.front()) + static_cast<unsigned>(bytes.back());
      strata::fuzz::check(st.find(t.name) == &t, "find(name) is the tensor");
    }
    (void)sum;
  });
  return 0;
}
