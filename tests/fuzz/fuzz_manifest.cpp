// Fuzz target: a checkpoint's manifest.json (runtime/checkpoint Manifest::parse).
// A manifest is checked against its own xxh3 first, so random text rarely gets further; each
// input that is a JSON object is therefore also parsed a second time with its checksum made
// right, which reaches the field checks behind it.
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/manifest.h"
#include "tests/fuzz/fuzz_util.h"

namespace ckpt = strata::runtime::checkpoint;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  strata::fuzz::expect_only_strata_errors([&] { (void)ckpt::Manifest::parse(text, "fuzz/manifest.json"); });

  // Re-signed as the writer signs: xxh3 of dump() of the object without "checksum".
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return 0;
  j.erase("checksum");
  std::string body;
  try {
    body = j.dump();
  } catch (const nlohmann::json::exception&) {
    return 0;  // not UTF-8: no writer produces it, and the first parse covered it
  }
  j["checksum"] = ckpt::xxh3_hex(ckpt::xxh3_of(body));
  const std::string signed_text = j.dump();
  strata::fuzz::expect_only_strata_errors([&] {
    const ckpt::Manifest m = ckpt::Manifest::parse(signed_text, "fuzz/manifest.json");
    // What parses, the writer writes back, and that parses to the same manifest.
    const ckpt::Manifest again = ckpt::Manifest::parse(m.to_json(), "fuzz/manifest.json");
    strata::fuzz::check(again.step == m.step && again.shards == m.shards &&
                            again.files.size() == m.files.size(),
                        "Manifest::parse(m.to_json()) == m");
  });
  return 0;
}
