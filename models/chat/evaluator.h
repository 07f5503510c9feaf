#pragma once
// Renders a parsed Program with the given globals, as Jinja renders a template (see
// chat_template.h for the semantics strata follows and where it departs).
//
// Scoping follows Jinja: a `for` body is a new scope for each iteration (what it `set`s does not
// outlive the iteration); `if` is not a scope; `set` at the top level assigns a global. Reading
// an attribute or an item of an undefined value, arithmetic on one, or calling a missing method
// is an error, as in Jinja; printing, testing or iterating one is not.
//
// Bounds, so that any template finishes: kMaxSteps evaluation steps, kMaxStringBytes of output
// and per string, kMaxValueDepth nesting of lists and dicts, and ranges of at most kMaxRange.
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>

#include "models/chat/ast.h"

namespace strata::models::chat {

inline constexpr std::uint64_t kMaxSteps = 1'000'000;
inline constexpr std::int64_t kMaxRange = 100'000;

// `now`: the time strftime_now() formats (local time, as Python's datetime.now()); unset: the
// clock. Throws strata::Error: a raise_exception() in the template carries the template's message
// as what_happened() (where: the template and line); any other failure names line and column.
std::string render_program(const Program& program, const Object& globals, std::optional<std::time_t> now);

}  // namespace strata::models::chat
