#pragma once
// Template source to Program, once, when a ChatTemplate is made. Everything outside the subset
// strata evaluates is refused here, not at render time, with a strata::Error naming the
// construct, its line and column, and --chat-template FILE as the way out: statements other
// than if / for / set / break / continue / generation (macro, call, include, import, extends,
// block, raw, filter blocks, `set` blocks, ...), filters, tests, methods and global functions
// that strata does not implement (builtins.h: is_filter, is_test, is_method, is_function).
//
// Nesting is bounded (kMaxNesting) so that a hostile template cannot overflow the stack.
#include <string>

#include "models/chat/ast.h"

namespace strata::models::chat {

inline constexpr int kMaxNesting = 200;

Program parse_template(const std::string& source, const std::string& source_name);

}  // namespace strata::models::chat
