#pragma once
// The chat template's source as tokens, with Jinja's whitespace rules already applied to the
// text between tags, as transformers configures Jinja (trim_blocks=True, lstrip_blocks=True):
//   - `{%-`, `{{-`, `{#-` strip all whitespace (newlines too) before the tag; `-%}`, `-}}`,
//     `-#}` strip all whitespace after it;
//   - lstrip_blocks: spaces and tabs from the start of a line up to a `{%` or `{#` are removed
//     (not before `{{`; `{%+` keeps them);
//   - trim_blocks: the first newline after a `%}` or `#}` is removed (`+%}` keeps it).
// Comments `{# ... #}` leave no token. Inside `{{ }}` and `{% %}` the tokens are Jinja's:
// names, string literals (Python escapes), integers, floats and operators; a `}}` or `%}` inside
// brackets or a string literal does not end the tag (Jinja balances brackets the same way).
//
// Errors (an unterminated tag, string or comment, a character Jinja has no token for) throw
// strata::Error naming line and column.
#include <cstdint>
#include <string>
#include <vector>

namespace strata::models::chat {

struct Token {
  enum class Kind { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Kind kind = Kind::kEof;
  std::string text;  // kText: the text (whitespace rules applied); kString: the unescaped value;
                     // kName/kOp/kInt/kFloat: as written
  int line = 1;      // 1-based, of the token's first character
  int column = 1;    // 1-based, in bytes
};

// `source_name` goes into error messages ("tokenizer_config.json of /models/x").
std::vector<Token> tokenize(const std::string& source, const std::string& source_name);

// The hint of every error about a template's syntax or its unsupported features.
extern const char* const kChatTemplateHint;

}  // namespace strata::models::chat
