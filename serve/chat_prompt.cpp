#include "serve/chat_prompt.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strata::serve {

std::vector<std::int32_t> chat_prompt_ids(const models::chat::ChatTemplate& chat, const infer::TextCodec& codec,
                                          const std::vector<ChatTurn>& messages, std::optional<bool> enable_thinking) {
  std::vector<models::chat::Message> turns;
  turns.reserve(messages.size());
  for (const ChatTurn& m : messages) turns.push_back({m.role, m.content});
  models::chat::RenderOptions options;
  options.add_generation_prompt = true;
  options.enable_thinking = enable_thinking;
  std::string text;
  try {
    text = chat.render(turns, options);
  } catch (const Error& e) {
    ApiError err;
    err.message = fmt::format("the model's chat template refused the messages: {}", e.what());
    err.param = "messages";
    throw ApiException(std::move(err));
  }
  try {
    return codec.encode(text, /*add_special=*/false);
  } catch (const Error& e) {
    ApiError err;
    err.message = fmt::format("the rendered conversation cannot be tokenized: {}", e.what());
    err.param = "messages";
    throw ApiException(std::move(err));
  }
}

}  // namespace strata::serve
