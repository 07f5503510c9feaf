#include "models/chat/parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"
#include "models/chat/builtins.h"
#include "models/chat/lexer.h"

namespace strata::models::chat {
namespace {

// Statements Jinja has and strata does not evaluate.
constexpr std::string_view kUnsupportedStatements[] = {
    "autoescape", "block", "call", "do", "extends", "filter", "from", "import", "include", "macro", "raw", "with"};

bool is_unsupported_statement(std::string_view name) {
  return std::find(std::begin(kUnsupportedStatements), std::end(kUnsupportedStatements), name) !=
         std::end(kUnsupportedStatements);
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& source_name)
      : tokens_(std::move(tokens)), name_(source_name) {}

  Program run() {
    Program program;
    program.source_name = name_;
    program.body = parse_body({});
    if (peek().kind != Token::Kind::kEof) {
      fail(fmt::format("'{{% {} %}}' without the block it closes", peek().text), peek());
    }
    return program;
  }

 private:
  // --- tokens ---
  const Token& peek(std::size_t ahead = 0) const {
    const std::size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool is_op(std::string_view op, std::size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kOp && peek(ahead).text == op;
  }
  bool is_name(std::string_view name, std::size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kName && peek(ahead).text == name;
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) fail(fmt::format("expected '{}', found {}", op, describe(peek())), peek());
    next();
  }
  void expect_name(std::string_view name) {
    if (!is_name(name)) fail(fmt::format("expected '{}', found {}", name, describe(peek())), peek());
    next();
  }
  void expect_block_end() {
    if (peek().kind != Token::Kind::kBlockEnd) fail(fmt::format("expected '%}}', found {}", describe(peek())), peek());
    next();
  }
  std::string expect_identifier() {
    if (peek().kind != Token::Kind::kName) fail(fmt::format("expected a name, found {}", describe(peek())), peek());
    return next().text;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kEof: return "the end of the template";
      case Token::Kind::kText: return "text";
      case Token::Kind::kString: return "a string";
      case Token::Kind::kVarEnd: return "'}}'";
      case Token::Kind::kBlockEnd: return "'%}'";
      default: return "'" + t.text + "'";
    }
  }

  [[noreturn]] void fail(const std::string& what, const Token& at) const {
    throw Error(fmt::format("chat template: {} (line {}, column {})", what, at.line, at.column), name_,
                kChatTemplateHint);
  }
  [[noreturn]] void unsupported(const std::string& construct, const Token& at) const {
    fail(fmt::format("unsupported construct {}: strata evaluates a subset of Jinja", construct), at);
  }

  // Bounds recursion (nested blocks and expressions).
  struct Nest {
    explicit Nest(Parser& p, const Token& at) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail(fmt::format("nesting deeper than {} levels", kMaxNesting), at);
    }
    ~Nest() { --p_.depth_; }
    Parser& p_;
  };

  // --- statements ---
  // Statements until a `{% name %}` with name in `ends` (left unconsumed, after its `{%`), or the end.
  Body parse_body(std::initializer_list<std::string_view> ends) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == Token::Kind::kEof) return body;
      if (t.kind == Token::Kind::kText) {
        Stmt s;
        s.kind = Stmt::Kind::kText;
        s.text = t.text;
        s.line = t.line;
        s.column = t.column;
        body.push_back(std::move(s));
        next();
        continue;
      }
      if (t.kind == Token::Kind::kVarBegin) {
        next();
        Stmt s;
        s.kind = Stmt::Kind::kOutput;
        s.line = t.line;
        s.column = t.column;
        s.expr = parse_expression(true);
        if (peek().kind != Token::Kind::kVarEnd) fail(fmt::format("expected '}}}}', found {}", describe(peek())), peek());
        next();
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind != Token::Kind::kBlockBegin) fail(fmt::format("unexpected {}", describe(t)), t);
      const Token& keyword = peek(1);
      if (keyword.kind == Token::Kind::kName &&
          std::find(ends.begin(), ends.end(), std::string_view(keyword.text)) != ends.end()) {
        next();  // the `{%`; the caller reads the keyword
        return body;
      }
      next();
      body.push_back(parse_statement(t));
    }
  }

  Stmt parse_statement(const Token& open) {
    Nest nest(*this, open);
    const Token& kw = peek();
    if (kw.kind != Token::Kind::kName) fail(fmt::format("expected a statement after '{{%', found {}", describe(kw)), kw);
    const std::string keyword = kw.text;
    Stmt s;
    s.line = kw.line;
    s.column = kw.column;
    if (keyword == "if") {
      next();
      s.kind = Stmt::Kind::kIf;
      s.conds.push_back(parse_expression(true));
      expect_block_end();
      while (true) {
        s.bodies.push_back(parse_body({"elif", "else", "endif"}));
        if (peek().kind == Token::Kind::kEof) fail("'{% if %}' is not closed with '{% endif %}'", kw);
        const std::string end = next().text;
        if (end == "elif") {
          s.conds.push_back(parse_expression(true));
          expect_block_end();
          continue;
        }
        expect_block_end();
        if (end == "else") {
          s.bodies.push_back(parse_body({"endif"}));
          if (peek().kind == Token::Kind::kEof) fail("'{% if %}' is not closed with '{% endif %}'", kw);
          next();
          expect_block_end();
        }
        return s;
      }
    }
    if (keyword == "for") {
      next();
      s.kind = Stmt::Kind::kFor;
      s.targets.push_back(expect_identifier());
      while (is_op(",")) {
        next();
        s.targets.push_back(expect_identifier());
      }
      if (s.targets.size() > 2) unsupported("'{% for %}' unpacking more than two names", kw);
      expect_name("in");
      s.expr = parse_expression(false);
      if (is_name("if")) {
        next();
        s.filter = parse_expression(false);
      }
      if (is_name("recursive")) unsupported("'{% for ... recursive %}'", peek());
      const int loop_refs_before = loop_refs_;
      expect_block_end();
      s.bodies.push_back(parse_body({"else", "endfor"}));
      if (peek().kind == Token::Kind::kEof) fail("'{% for %}' is not closed with '{% endfor %}'", kw);
      if (next().text == "else") {
        expect_block_end();
        s.bodies.push_back(parse_body({"endfor"}));
        if (peek().kind == Token::Kind::kEof) fail("'{% for %}' is not closed with '{% endfor %}'", kw);
        next();
      } else {
        s.bodies.emplace_back();
      }
      expect_block_end();
      s.uses_loop = loop_refs_ != loop_refs_before;
      return s;
    }
    if (keyword == "set") {
      next();
      s.kind = Stmt::Kind::kSet;
      s.targets.push_back(expect_identifier());
      if (is_op(".")) {
        next();
        s.targets.push_back(expect_identifier());
      }
      if (is_op(",")) unsupported("'{% set a, b = ... %}'", peek());
      if (peek().kind == Token::Kind::kBlockEnd) unsupported("'{% set %}' block (set ... endset)", kw);
      expect_op("=");
      s.expr = parse_expression(true);
      expect_block_end();
      return s;
    }
    if (keyword == "break" || keyword == "continue") {
      next();
      s.kind = keyword == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_block_end();
      return s;
    }
    if (keyword == "generation") {
      next();
      s.kind = Stmt::Kind::kBlock;
      expect_block_end();
      s.bodies.push_back(parse_body({"endgeneration"}));
      if (peek().kind == Token::Kind::kEof) fail("'{% generation %}' is not closed with '{% endgeneration %}'", kw);
      next();
      expect_block_end();
      return s;
    }
    if (is_unsupported_statement(keyword)) unsupported(fmt::format("'{{% {} %}}'", keyword), kw);
    fail(fmt::format("unknown statement '{{% {} %}}'", keyword), kw);
  }

  // --- expressions (Jinja's precedence, loosest first) ---
  static ExprPtr make(Expr::Kind kind, const Token& at, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->name = std::move(name);
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  ExprPtr binary(const Token& at, std::string op, ExprPtr l, ExprPtr r) {
    auto e = make(Expr::Kind::kBinary, at, std::move(op));
    add(*e, std::move(l));
    add(*e, std::move(r));
    return e;
  }

  // Appends a child, keeping the tree's height bounded: a long chain (a.b.c..., a + b + c ...)
  // is built without recursion but evaluated and freed recursively.
  void add(Expr& parent, ExprPtr child) {
    if (child) {
      parent.height = std::max(parent.height, child->height + 1);
      if (parent.height > kMaxNesting) {
        fail(fmt::format("an expression nested deeper than {} levels", kMaxNesting), Token{{}, {}, parent.line, parent.column});
      }
    }
    parent.children.push_back(std::move(child));
  }

  // with_cond: whether `a if b else c` is allowed (not in a for loop's iterable or filter).
  ExprPtr parse_expression(bool with_cond) {
    Nest nest(*this, peek());
    ExprPtr e = parse_or();
    while (with_cond && is_name("if")) {
      const Token& at = next();
      auto cond = make(Expr::Kind::kCond, at);
      add(*cond, std::move(e));
      add(*cond, parse_or());
      if (is_name("else")) {
        next();
        add(*cond, parse_expression(true));
      } else {
        add(*cond, nullptr);
      }
      e = std::move(cond);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      e = binary(at, "or", std::move(e), parse_and());
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      e = binary(at, "and", std::move(e), parse_not());
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token& at = next();
      Nest nest(*this, at);
      auto e = make(Expr::Kind::kUnary, at, "not");
      add(*e, parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    // Chained comparisons (a < b < c) are `a < b and b < c` in Jinja; strata refuses them rather
    // than evaluate b twice.
    int compares = 0;
    while (true) {
      const Token& at = peek();
      std::string op;
      if (at.kind == Token::Kind::kOp && (at.text == "==" || at.text == "!=" || at.text == "<" || at.text == ">" ||
                                          at.text == "<=" || at.text == ">=")) {
        op = at.text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        next();
        next();
      } else {
        return e;
      }
      if (++compares > 1) unsupported("chained comparison (a < b < c)", at);
      e = binary(at, op, std::move(e), parse_math1());
    }
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      e = binary(at, at.text, std::move(e), parse_concat());
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& at = next();
      e = binary(at, "~", std::move(e), parse_math2());
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      // Python's printf-style formatting is not implemented; a literal format string shows it
      // now (a computed one fails when rendered).
      if (at.text == "%" && e->kind == Expr::Kind::kLiteral && e->literal.is_string()) {
        unsupported("string formatting with '%'", at);
      }
      e = binary(at, at.text, std::move(e), parse_pow());
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      e = binary(at, "**", std::move(e), parse_unary(true));
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this, peek());
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& at = next();
      e = make(Expr::Kind::kUnary, at, at.text);
      add(*e, parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filters(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Token::Kind::kName: {
        next();
        if (t.text == "true" || t.text == "True") return literal(t, Value::boolean(true));
        if (t.text == "false" || t.text == "False") return literal(t, Value::boolean(false));
        if (t.text == "none" || t.text == "None") return literal(t, Value::none());
        if (t.text == "loop") ++loop_refs_;
        return make(Expr::Kind::kName, t, t.text);
      }
      case Token::Kind::kString: {
        std::string s = next().text;
        while (peek().kind == Token::Kind::kString) s += next().text;  // adjacent literals join
        return literal(t, Value::string(std::move(s)));
      }
      case Token::Kind::kInt: {
        next();
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(t.text.c_str(), &end, 10);
        if (errno == ERANGE) fail(fmt::format("the integer {} is too large", t.text), t);
        return literal(t, Value::integer(v));
      }
      case Token::Kind::kFloat: {
        next();
        return literal(t, Value::floating(std::strtod(t.text.c_str(), nullptr)));
      }
      case Token::Kind::kOp: {
        if (t.text == "(") {
          next();
          if (is_op(")")) {
            next();
            return make(Expr::Kind::kList, t, "tuple");
          }
          ExprPtr first = parse_expression(true);
          if (!is_op(",")) {
            expect_op(")");
            return first;
          }
          auto tuple = make(Expr::Kind::kList, t, "tuple");
          add(*tuple, std::move(first));
          while (is_op(",")) {
            next();
            if (is_op(")")) break;
            add(*tuple, parse_expression(true));
          }
          expect_op(")");
          return tuple;
        }
        if (t.text == "[") {
          next();
          auto list = make(Expr::Kind::kList, t);
          while (!is_op("]")) {
            add(*list, parse_expression(true));
            if (!is_op(",")) break;
            next();
          }
          expect_op("]");
          return list;
        }
        if (t.text == "{") {
          next();
          auto dict = make(Expr::Kind::kDict, t);
          while (!is_op("}")) {
            add(*dict, parse_expression(true));
            expect_op(":");
            add(*dict, parse_expression(true));
            if (!is_op(",")) break;
            next();
          }
          expect_op("}");
          return dict;
        }
        break;
      }
      default: break;
    }
    fail(fmt::format("expected an expression, found {}", describe(t)), t);
  }

  static ExprPtr literal(const Token& at, Value v) {
    auto e = make(Expr::Kind::kLiteral, at);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& at = next();
        if (peek().kind == Token::Kind::kInt) {
          auto idx = make(Expr::Kind::kIndex, at);
          add(*idx, std::move(e));
          add(*idx, parse_primary());
          e = std::move(idx);
          continue;
        }
        auto attr = make(Expr::Kind::kAttr, at, expect_identifier());
        add(*attr, std::move(e));
        e = std::move(attr);
      } else if (is_op("[")) {
        const Token& at = next();
        Nest nest(*this, at);
        e = parse_subscript(std::move(e), at);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, const Token& at) {
    // [i] or [start:stop:step] with any part omitted.
    ExprPtr parts[3];
    int colons = 0;
    if (!is_op(":")) parts[0] = parse_expression(true);
    while (is_op(":") && colons < 2) {
      next();
      ++colons;
      if (!is_op(":") && !is_op("]")) parts[colons] = parse_expression(true);
    }
    expect_op("]");
    if (colons == 0) {
      auto idx = make(Expr::Kind::kIndex, at);
      add(*idx, std::move(obj));
      add(*idx, std::move(parts[0]));
      return idx;
    }
    auto slice = make(Expr::Kind::kSlice, at);
    add(*slice, std::move(obj));
    for (auto& p : parts) add(*slice, std::move(p));
    return slice;
  }

  // Arguments of a call, a filter or a test: `(a, b, key=c)`.
  void parse_args(Expr& into) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) unsupported("'*args' / '**kwargs' in a call", peek());
      if (peek().kind == Token::Kind::kName && is_op("=", 1)) {
        into.kw_names.push_back(next().text);
        next();
        add(into, parse_expression(true));
      } else {
        if (!into.kw_names.empty()) fail("a positional argument after a keyword argument", peek());
        add(into, parse_expression(true));
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    const Token& at = peek();
    // What can be called is known now: a method of a value, or a global function.
    if (callee->kind == Expr::Kind::kAttr) {
      if (!is_method(callee->name)) unsupported(fmt::format("method '.{}()'", callee->name), at);
    } else if (callee->kind == Expr::Kind::kName) {
      if (!is_function(callee->name)) unsupported(fmt::format("call of '{}()'", callee->name), at);
    } else {
      unsupported("call of an expression", at);
    }
    auto call = make(Expr::Kind::kCall, at);
    add(*call, std::move(callee));
    parse_args(*call);
    return call;
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        next();
        const Token& name_tok = peek();
        std::string name = expect_identifier();
        while (is_op(".")) {  // dotted filter names (none supported; named whole in the error)
          next();
          name += "." + expect_identifier();
        }
        if (!is_filter(name)) unsupported(fmt::format("filter '|{}'", name), name_tok);
        auto f = make(Expr::Kind::kFilter, name_tok, name);
        add(*f, std::move(e));
        if (is_op("(")) parse_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        next();
        const Token& name_tok = peek();
        bool negated = false;
        if (is_name("not")) {
          next();
          negated = true;
        }
        const Token& test_tok = peek();
        std::string name;
        if (test_tok.kind == Token::Kind::kName) {
          name = next().text;
        } else if (test_tok.kind == Token::Kind::kOp &&
                   (test_tok.text == "==" || test_tok.text == "!=" || test_tok.text == "<" || test_tok.text == ">" ||
                    test_tok.text == "<=" || test_tok.text == ">=")) {
          name = next().text;
        } else {
          fail(fmt::format("expected a test name after 'is', found {}", describe(test_tok)), test_tok);
        }
        if (!is_test(name)) unsupported(fmt::format("test 'is {}'", name), test_tok);
        auto t = make(Expr::Kind::kTest, name_tok, name);
        t->negated = negated;
        add(*t, std::move(e));
        const Token& arg = peek();
        if (is_op("(")) {
          parse_args(*t);
        } else if ((arg.kind == Token::Kind::kName || arg.kind == Token::Kind::kString ||
                    arg.kind == Token::Kind::kInt || arg.kind == Token::Kind::kFloat || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if")) {
          // One argument without parentheses: `x is divisibleby 3`, `x is equalto 'a'`.
          add(*t, parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int loop_refs_ = 0;  // names `loop` parsed so far
  const std::string& name_;
};

}  // namespace

Program parse_template(const std::string& source, const std::string& source_name) {
  return Parser(tokenize(source, source_name), source_name).run();
}

}  // namespace strata::models::chat
