#pragma once
// A chat request's messages to prompt ids: rendered with the model's chat template
// (models/chat/chat_template.h), then tokenized without the tokenizer's own special tokens (the
// template writes them, as transformers' apply_chat_template(tokenize=True) does).
#include <cstdint>
#include <optional>
#include <vector>

#include "infer/text_io.h"
#include "models/chat/chat_template.h"
#include "serve/openai_api.h"

namespace strata::serve {

// Throws ApiException (400) when the template refuses the conversation (its raise_exception,
// e.g. roles that do not alternate) or the text cannot be tokenized.
std::vector<std::int32_t> chat_prompt_ids(const models::chat::ChatTemplate& chat, const infer::TextCodec& codec,
                                          const std::vector<ChatTurn>& messages, std::optional<bool> enable_thinking);

}  // namespace strata::serve
