#pragma once
// UTF-8 encoding of one code point, shared by the tokenizer (byte-level BPE's byte table) and the
// chat templates' string escapes.
#include <cstdint>
#include <string>

namespace strata {

// Appends the UTF-8 bytes of code point `cp` (at most U+10FFFF; the caller checks) to `out`.
void utf8_append(std::string& out, std::uint32_t cp);

}  // namespace strata
