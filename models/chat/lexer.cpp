#include "models/chat/lexer.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/utf8.h"

namespace strata::models::chat {

const char* const kChatTemplateHint =
    "give strata a template it supports with --chat-template FILE (a Jinja file; "
    "docs/chat_templates.md lists the Jinja subset)";

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& name) : src_(src), name_(name) {}

  std::vector<Token> run() {
    std::size_t text_start = 0;
    bool strip_next = false;  // the previous tag ended with `-`
    while (true) {
      const std::size_t open = find_open(text_start);
      std::string text = src_.substr(text_start, open == std::string::npos ? std::string::npos : open - text_start);
      if (strip_next) {
        const std::size_t first = text.find_first_not_of(" \t\n\r\f\v");
        text.erase(0, first == std::string::npos ? text.size() : first);
      }
      if (open == std::string::npos) {
        emit_text(std::move(text), text_start);
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && (kind == '%' || kind == '#')) {
        // lstrip_blocks: only when the text's last line is whitespace up to the tag and that
        // line starts in this text or the text itself starts a line.
        const std::size_t nl = text.rfind('\n');
        const std::size_t line_start = nl == std::string::npos ? 0 : nl + 1;
        const bool starts_line = nl != std::string::npos || text_start == 0 || src_[text_start - 1] == '\n';
        if (starts_line && text.find_first_not_of(" \t", line_start) == std::string::npos) text.erase(line_start);
      }
      emit_text(std::move(text), text_start);
      std::size_t pos = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        const std::size_t close = src_.find("#}", pos);
        if (close == std::string::npos) fail("the comment is not closed with #}", open);
        strip_next = close > pos && src_[close - 1] == '-';
        text_start = close + 2;
        if (!strip_next && src_[close - 1] != '+') text_start = trim_newline(text_start);
        continue;
      }
      push(kind == '{' ? Token::Kind::kVarBegin : Token::Kind::kBlockBegin, kind == '{' ? "{{" : "{%", open);
      pos = lex_tag(pos, kind == '{' ? '}' : '%', open);
      // pos is at the closer ("}}" or "%}"), possibly preceded by '-' or '+'.
      const std::size_t close = pos;
      std::size_t after = close + 2;
      const bool minus = marker_before_close_ == '-';
      const bool plus = marker_before_close_ == '+';
      push(kind == '{' ? Token::Kind::kVarEnd : Token::Kind::kBlockEnd, kind == '{' ? "}}" : "%}", close);
      strip_next = minus;
      if (!minus && !plus && kind == '%') after = trim_newline(after);
      text_start = after;
    }
    push(Token::Kind::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  // trim_blocks: skip one newline ("\n" or "\r\n") right after a block or comment tag.
  std::size_t trim_newline(std::size_t pos) const {
    if (pos < src_.size() && src_[pos] == '\n') return pos + 1;
    if (pos + 1 < src_.size() && src_[pos] == '\r' && src_[pos + 1] == '\n') return pos + 2;
    return pos;
  }

  std::size_t find_open(std::size_t from) const {
    for (std::size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    }
    return std::string::npos;
  }

  void emit_text(std::string text, std::size_t at) {
    if (!text.empty()) push(Token::Kind::kText, std::move(text), at);
  }

  void push(Token::Kind kind, std::string text, std::size_t offset) {
    auto [line, column] = line_column(offset);
    tokens_.push_back(Token{kind, std::move(text), line, column});
  }

  std::pair<int, int> line_column(std::size_t offset) {
    // Offsets only grow, so the scan resumes where the last one stopped.
    if (offset < lc_offset_) {
      lc_offset_ = 0;
      lc_line_ = 1;
      lc_col_ = 1;
    }
    for (; lc_offset_ < offset && lc_offset_ < src_.size(); ++lc_offset_) {
      if (src_[lc_offset_] == '\n') {
        ++lc_line_;
        lc_col_ = 1;
      } else {
        ++lc_col_;
      }
    }
    return {lc_line_, lc_col_};
  }

  [[noreturn]] void fail(const std::string& what, std::size_t offset) {
    auto [line, column] = line_column(offset);
    throw Error(fmt::format("chat template: {} (line {}, column {})", what, line, column), name_, kChatTemplateHint);
  }

  // Lexes the tokens of one tag from `pos` up to its closer (`}}` when close == '}', `%}` when
  // '%'), outside brackets and strings. Returns the closer's offset; marker_before_close_ is the
  // '-' or '+' right before it (then not a token), else '\0'.
  std::size_t lex_tag(std::size_t pos, char close, std::size_t open) {
    int depth = 0;  // open brackets
    while (true) {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
      if (pos >= src_.size()) fail(close == '}' ? "the {{ is not closed with }}" : "the {% is not closed with %}", open);
      const char c = src_[pos];
      if (depth == 0) {
        auto closes_at = [&](std::size_t p) { return p + 1 < src_.size() && src_[p] == close && src_[p + 1] == '}'; };
        if (closes_at(pos)) {
          marker_before_close_ = '\0';
          return pos;
        }
        if ((c == '-' || c == '+') && closes_at(pos + 1)) {
          marker_before_close_ = c;
          return pos + 1;
        }
      }
      if (is_name_start(c)) {
        std::size_t end = pos;
        while (end < src_.size() && (is_name_start(src_[end]) || is_digit(src_[end]))) ++end;
        push(Token::Kind::kName, src_.substr(pos, end - pos), pos);
        pos = end;
      } else if (is_digit(c)) {
        pos = lex_number(pos);
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        static const char* const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                           "(", ")", "[", "]", "{", "}", ".", ",", ":", "|", "="};
        const char* op = nullptr;
        for (const char* candidate : kOps) {
          if (src_.compare(pos, std::char_traits<char>::length(candidate), candidate) == 0) {
            op = candidate;
            break;
          }
        }
        if (op == nullptr) fail(fmt::format("unexpected character '{}'", c), pos);
        const std::string text(op);
        if (text == "(" || text == "[" || text == "{") ++depth;
        if (text == ")" || text == "]" || text == "}") {
          if (depth == 0) fail(fmt::format("unbalanced '{}'", text), pos);
          --depth;
        }
        push(Token::Kind::kOp, text, pos);
        pos += text.size();
      }
    }
  }

  std::size_t lex_number(std::size_t pos) {
    std::size_t end = pos;
    while (end < src_.size() && (is_digit(src_[end]) || src_[end] == '_')) ++end;
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
      is_float = true;
      ++end;
      while (end < src_.size() && is_digit(src_[end])) ++end;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      std::size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) {
        is_float = true;
        end = e;
        while (end < src_.size() && is_digit(src_[end])) ++end;
      }
    }
    std::string text;
    for (std::size_t i = pos; i < end; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    push(is_float ? Token::Kind::kFloat : Token::Kind::kInt, text, pos);
    return end;
  }

  // A Python string literal: the escapes \n \t \r \\ \' \" \0 \xHH \uHHHH \UHHHHHHHH; any other
  // backslash stays as written (as in Python).
  std::size_t lex_string(std::size_t pos) {
    const char quote = src_[pos];
    std::string value;
    std::size_t p = pos + 1;
    while (true) {
      if (p >= src_.size()) fail("the string literal is not closed", pos);
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) fail("the string literal is not closed", pos);
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '0': value += '\0'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '\n': break;  // a line continuation
        case 'x':
        case 'u':
        case 'U': {
          const std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (p + n > src_.size()) fail("a truncated \\x, \\u or \\U escape", p - 2);
          std::uint32_t cp = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const char h = src_[p + i];
            int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) fail("a malformed \\x, \\u or \\U escape", p - 2);
            cp = cp * 16 + static_cast<std::uint32_t>(d);
          }
          p += n;
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("an escape that is not a Unicode scalar value", p - n - 2);
          utf8_append(value, cp);
          break;
        }
        default:
          value += '\\';
          value += e;
      }
    }
    push(Token::Kind::kString, std::move(value), pos);
    return p + 1;
  }

  const std::string& src_;
  const std::string& name_;
  std::vector<Token> tokens_;
  char marker_before_close_ = '\0';
  std::size_t lc_offset_ = 0;
  int lc_line_ = 1;
  int lc_col_ = 1;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const std::string& source_name) {
  return Lexer(source, source_name).run();
}

}  // namespace strata::models::chat
