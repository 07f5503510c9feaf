// Fuzz target: chat templates (models/chat ChatTemplate::from_source, then render). The input is
// the template's source; its first byte, when present, picks the render options (so that the
// add_generation_prompt and enable_thinking branches are reached too). A template is parsed, and
// when it parses it is rendered for a fixed conversation with unicode, whitespace and a
// template-looking message. Every failure must be a strata::Error; the interpreter's bounds
// (nesting, steps, string bytes, value depth) keep any input finite.
#include <string>
#include <vector>

#include "models/chat/chat_template.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  strata::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using strata::models::chat::ChatTemplate;
  using strata::models::chat::Message;
  using strata::models::chat::RenderOptions;
  RenderOptions options;
  options.now = 1725364800;
  if (size > 0) {
    options.add_generation_prompt = (data[0] & 1) != 0;
    if (data[0] & 2) options.enable_thinking = (data[0] & 4) != 0;
  }
  const std::string source(reinterpret_cast<const char*>(data), size);
  static const std::vector<Message> kMessages = {
      {"system", "  You are helpful.\n"},
      {"user", "Hello {{ x }} {% if %} caf\xc3\xa9 \xf0\x9f\x9a\x80"},
      {"assistant", "<think>\nhm\n</think>\n\nHi!"},
      {"user", "\t2 + 2?\n"},
  };
  strata::fuzz::expect_only_strata_errors([&] {
    const auto t = ChatTemplate::from_source(source, "<s>", "</s>");
    (void)t.render(kMessages, options);
    (void)t.render({}, options);
  });
  return 0;
}
