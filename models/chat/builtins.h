#pragma once
// Jinja's filters and tests and Python's string and dict methods, as far as chat templates use
// them (the names parser.cpp accepts; the evaluator calls these with evaluated arguments).
// They throw BuiltinError with a message; the evaluator adds the template's line and column and
// turns it into a strata::Error.
//
// Python semantics where templates can tell: strip() strips Unicode whitespace, len() counts
// code points, split() with no separator splits on runs of whitespace, tojson is transformers'
// json.dumps(ensure_ascii=False). Differences, by design: upper(), lower(), title() and
// capitalize() change ASCII letters only (no template of the tested families applies them to
// non-ASCII text).
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/chat/value.h"

namespace strata::models::chat {

// The most bytes one string value (and the rendered output) may hold, and the deepest a list or
// dict may nest: bounds that no chat prompt comes near and that keep a hostile template's memory
// and recursion finite.
inline constexpr std::size_t kMaxStringBytes = std::size_t{16} << 20;
inline constexpr std::uint32_t kMaxValueDepth = 128;
// The most characters a string iterated one by one (a for loop, join, list, map ...) may have: a
// 16 MiB string made 16 M values of one character, and a fuzzed template that joined such strings
// with long separators ran for more than 10 s (tests/fuzz/corpus/chat_template/join-of-joins).
inline constexpr std::size_t kMaxIteratedChars = 100'000;

class BuiltinError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `keyword_name`; null when neither was given.
  const Value* get(std::size_t index, std::string_view keyword_name) const;
  std::size_t count() const { return positional.size() + keyword.size(); }
};

// Whether a name is implemented: what the parser lets through (anything else is refused when
// the template is loaded). Functions are the globals the evaluator calls (evaluator.cpp).
bool is_filter(std::string_view name);
bool is_test(std::string_view name);
bool is_method(std::string_view name);
bool is_function(std::string_view name);

Value apply_filter(std::string_view name, const Value& subject, const Args& args);
bool apply_test(std::string_view name, const Value& subject, const Args& args);
Value call_method(const Value& object, std::string_view name, const Args& args);

// Items a `for` iterates: a list's, a dict's keys, a string's characters (code points), nothing
// for undefined. Throws BuiltinError for anything else (none, numbers).
Array iterate(const Value& v);

// UTF-8 code points of `s` (each as its bytes); invalid bytes count one each, as Python's
// surrogateescape would.
std::vector<std::string> code_points(const std::string& s);

}  // namespace strata::models::chat
