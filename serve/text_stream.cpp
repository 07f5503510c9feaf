#include "serve/text_stream.h"

#include <algorithm>
#include <string_view>

namespace strata::serve {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// How many bytes at the end of `text` could be the start of a stop string.
std::size_t stop_prefix_at_end(std::string_view text, const std::vector<std::string>& stops) {
  std::size_t held = 0;
  for (const std::string& s : stops) {
    for (std::size_t n = std::min(s.size() - 1, text.size()); n > held; --n) {
      if (text.substr(text.size() - n) == std::string_view(s).substr(0, n)) {
        held = n;
        break;
      }
    }
  }
  return held;
}

}  // namespace

TextStream::TextStream(const infer::TextCodec& codec, std::vector<std::string> stop) : codec_(codec) {
  for (std::string& s : stop) {
    if (!s.empty()) stop_.push_back(std::move(s));
  }
}

std::string TextStream::add(std::int32_t id) {
  if (stopped_) return {};
  ids_.push_back(id);
  full_ = codec_.decode(ids_);
  // The decoder keeps what it decoded before (it only ever appends), except a U+FFFD standing
  // for an unfinished character; the text sent is a prefix of every later decode.
  if (full_.compare(0, sent_.size(), sent_) != 0) return {};
  // A stop string anywhere in what was not sent, or across its start.
  std::size_t longest = 0;
  for (const std::string& s : stop_) longest = std::max(longest, s.size());
  const std::size_t from = sent_.size() > longest ? sent_.size() - longest : 0;
  std::size_t cut = std::string::npos;
  for (const std::string& s : stop_) {
    const std::size_t at = full_.find(s, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = cut > sent_.size() ? full_.substr(sent_.size(), cut - sent_.size()) : std::string();
    sent_ += out;
    return out;
  }
  std::size_t end = full_.size();
  while (end >= sent_.size() + kReplacement.size() &&
         std::string_view(full_).substr(end - kReplacement.size(), kReplacement.size()) == kReplacement) {
    end -= kReplacement.size();
  }
  end -= std::min(end - sent_.size(), stop_prefix_at_end(std::string_view(full_).substr(0, end), stop_));
  std::string out = full_.substr(sent_.size(), end - sent_.size());
  sent_ += out;
  return out;
}

std::string TextStream::finish() {
  if (stopped_ || full_.compare(0, sent_.size(), sent_) != 0) return {};
  std::string out = full_.substr(sent_.size());
  sent_ += out;
  return out;
}

}  // namespace strata::serve
