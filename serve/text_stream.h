#pragma once
// Generated tokens to text as they come, for streamed replies: which text is final, and where a
// stop string ends the completion (OpenAI's `stop`: the text is cut before it; it is not sent).
//
// Each add() decodes every id so far (the tokenizer's decode needs the context: SentencePiece's
// leading space, a character split across byte tokens) and sends what follows the text already
// sent, holding back
//   - a trailing U+FFFD: the first bytes of a character whose last bytes have not come yet;
//   - the longest end of the text that begins a stop string (it may become one).
// finish() sends what was held back once no token will come. Decoding everything each time costs
// O(n) per token: microseconds for the lengths a context holds, next to a decoding step.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "infer/text_io.h"

namespace strata::serve {

class TextStream {
 public:
  // `codec` is borrowed. Empty stop strings are ignored.
  TextStream(const infer::TextCodec& codec, std::vector<std::string> stop);

  // One generated id in; the text that became final out (maybe empty). After a stop string was
  // found, stopped() is true and further ids are ignored.
  std::string add(std::int32_t id);
  // The held-back text (nothing after a stop).
  std::string finish();

  bool stopped() const { return stopped_; }
  const std::string& text() const { return sent_; }    // sent so far
  std::size_t tokens() const { return ids_.size(); }  // ids added before the stop

 private:
  const infer::TextCodec& codec_;
  std::vector<std::string> stop_;
  std::vector<std::int32_t> ids_;
  std::string sent_;
  std::string full_;  // the last decode
  bool stopped_ = false;
};

}  // namespace strata::serve
