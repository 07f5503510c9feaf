#include "models/chat/evaluator.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "models/chat/builtins.h"
#include "models/chat/lexer.h"

namespace strata::models::chat {
namespace {

// What executing a body ended with: normally, or at a break / continue of the innermost loop.
enum class Flow { kNormal, kBreak, kContinue };

// The template's own raise_exception(): kept apart from other failures so that its message
// reaches the user untouched.
struct Raised {
  std::string message;
  int line;
};

class Evaluator {
 public:
  Evaluator(const Program& program, const Object& globals, std::optional<std::time_t> now)
      : program_(program), now_(now) {
    scopes_.push_back(globals);
  }

  std::string run() {
    try {
      // A break or continue outside a loop is ignored, as nothing encloses it.
      (void)exec_body(program_.body);
    } catch (const Raised& r) {
      throw Error(r.message, fmt::format("{}, raise_exception at line {}", program_.source_name, r.line));
    }
    return std::move(out_);
  }

 private:
  // --- errors and bounds ---
  [[noreturn]] void fail(int line, int column, const std::string& what) const {
    throw Error(fmt::format("chat template: {} (line {}, column {})", what, line, column), program_.source_name,
                kChatTemplateHint);
  }
  [[noreturn]] void fail(const Expr& e, const std::string& what) const { fail(e.line, e.column, what); }

  void step(int line, int column) {
    if (++steps_ > kMaxSteps) fail(line, column, fmt::format("the template ran more than {} steps", kMaxSteps));
  }

  Value checked(const Expr& e, Value v) const {
    if (v.is_string() && v.as_string().size() > kMaxStringBytes) {
      fail(e, fmt::format("a string longer than {} bytes", kMaxStringBytes));
    }
    if (v.depth() > kMaxValueDepth) fail(e, fmt::format("lists or dicts nested deeper than {}", kMaxValueDepth));
    return v;
  }

  // --- scopes ---
  Value lookup(const std::string& name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      for (const auto& [k, v] : *scope) {
        if (k == name) return v;
      }
    }
    return {};
  }
  void assign(const std::string& name, Value v) {
    auto& scope = scopes_.back();
    for (auto& [k, old] : scope) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    scope.emplace_back(name, std::move(v));
  }

  // --- statements ---
  Flow exec_body(const Body& body) {
    for (const Stmt& s : body) {
      const Flow f = exec(s);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  void emit(const std::string& text, int line, int column) {
    if (out_.size() + text.size() > kMaxStringBytes) {
      fail(line, column, fmt::format("the output is longer than {} bytes", kMaxStringBytes));
    }
    out_ += text;
  }

  Flow exec(const Stmt& s) {
    step(s.line, s.column);
    switch (s.kind) {
      case Stmt::Kind::kText: emit(s.text, s.line, s.column); return Flow::kNormal;
      case Stmt::Kind::kOutput: emit(eval(*s.expr).to_output(), s.line, s.column); return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (std::size_t i = 0; i < s.conds.size(); ++i) {
          if (eval(*s.conds[i]).truthy()) return exec_body(s.bodies[i]);
        }
        if (s.bodies.size() > s.conds.size()) return exec_body(s.bodies.back());
        return Flow::kNormal;
      case Stmt::Kind::kFor: return exec_for(s);
      case Stmt::Kind::kSet: {
        Value v = eval(*s.expr);
        if (s.targets.size() == 1) {
          assign(s.targets[0], std::move(v));
          return Flow::kNormal;
        }
        Value ns = lookup(s.targets[0]);
        if (ns.kind() != Value::Kind::kNamespace) {
          fail(s.line, s.column, fmt::format("'{}' is not a namespace(): cannot set its attribute '{}'", s.targets[0], s.targets[1]));
        }
        if (holds_namespace(v)) fail(s.line, s.column, "a namespace cannot hold a namespace");
        auto& attrs = ns.mutable_namespace();
        for (auto& [k, old] : attrs) {
          if (k == s.targets[1]) {
            old = std::move(v);
            return Flow::kNormal;
          }
        }
        attrs.emplace_back(s.targets[1], std::move(v));
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
      case Stmt::Kind::kBlock: return exec_body(s.bodies[0]);
    }
    return Flow::kNormal;
  }

  static bool holds_namespace(const Value& v) {
    if (v.kind() == Value::Kind::kNamespace) return true;
    if (v.is_array()) return std::any_of(v.as_array().begin(), v.as_array().end(), holds_namespace);
    if (v.kind() == Value::Kind::kObject) {
      return std::any_of(v.as_object().begin(), v.as_object().end(), [](const auto& kv) { return holds_namespace(kv.second); });
    }
    return false;
  }

  // Binds the loop's target names to `item` in the innermost scope.
  void bind_targets(const Stmt& s, const Value& item) {
    if (s.targets.size() == 1) {
      assign(s.targets[0], item);
      return;
    }
    if (!item.is_array() || item.as_array().size() != s.targets.size()) {
      fail(s.line, s.column, fmt::format("cannot unpack a {} into {} names", item.type_name(), s.targets.size()));
    }
    for (std::size_t i = 0; i < s.targets.size(); ++i) assign(s.targets[i], item.as_array()[i]);
  }

  Flow exec_for(const Stmt& s) {
    Array items;
    try {
      items = iterate(eval(*s.expr));
    } catch (const BuiltinError& e) {
      fail(*s.expr, e.what());
    }
    if (s.filter) {
      // The loop's `if` filters before loop.index and loop.length are counted (as Jinja).
      Array kept;
      for (const auto& item : items) {
        scopes_.emplace_back();
        bind_targets(s, item);
        const bool keep = eval(*s.filter).truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      scopes_.emplace_back();
      const Flow f = exec_body(s.bodies[1]);
      scopes_.pop_back();
      return f == Flow::kNormal ? Flow::kNormal : f;
    }
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < n; ++i) {
      step(s.line, s.column);  // an empty body still costs a step per iteration
      scopes_.emplace_back();
      bind_targets(s, items[static_cast<std::size_t>(i)]);
      if (s.uses_loop) {
        Object loop = {
            {"index", Value::integer(i + 1)},
            {"index0", Value::integer(i)},
            {"revindex", Value::integer(n - i)},
            {"revindex0", Value::integer(n - i - 1)},
            {"first", Value::boolean(i == 0)},
            {"last", Value::boolean(i == n - 1)},
            {"length", Value::integer(n)},
            {"depth", Value::integer(loop_depth_ + 1)},
            {"depth0", Value::integer(loop_depth_)},
            {"previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)] : Value()},
            {"nextitem", i + 1 < n ? items[static_cast<std::size_t>(i + 1)] : Value()},
        };
        assign("loop", Value::object(std::move(loop)));
      }
      ++loop_depth_;
      const Flow f = exec_body(s.bodies[0]);
      --loop_depth_;
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // --- expressions ---
  Value eval(const Expr& e) {
    step(e.line, e.column);
    try {
      return checked(e, eval_inner(e));
    } catch (const BuiltinError& err) {
      fail(e, err.what());
    }
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.literal;
      case Expr::Kind::kName: return lookup(e.name);
      case Expr::Kind::kAttr: {
        const Value obj = eval(*e.children[0]);
        if (obj.is_undefined()) fail(e, fmt::format("cannot read '.{}' of an undefined value", e.name));
        return obj.get(e.name);  // undefined for a missing key or a non-dict (as Jinja)
      }
      case Expr::Kind::kIndex: return index(e, eval(*e.children[0]), eval(*e.children[1]));
      case Expr::Kind::kSlice: return slice(e);
      case Expr::Kind::kCall: return call(e);
      case Expr::Kind::kFilter: {
        const Value subject = eval(*e.children[0]);
        return apply_filter(e.name, subject, args_of(e, 1));
      }
      case Expr::Kind::kTest: {
        const Value subject = eval(*e.children[0]);
        return Value::boolean(apply_test(e.name, subject, args_of(e, 1)) != e.negated);
      }
      case Expr::Kind::kUnary: {
        const Value v = eval(*e.children[0]);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.kind() == Value::Kind::kInt) {
          if (e.name == "+") return v;
          if (v.as_int() == INT64_MIN) fail(e, "integer overflow");
          return Value::integer(-v.as_int());
        }
        if (v.kind() == Value::Kind::kFloat) return Value::floating(e.name == "-" ? -v.as_double() : v.as_double());
        fail(e, fmt::format("unary '{}' of a {}", e.name, v.type_name()));
      }
      case Expr::Kind::kBinary: return binary(e);
      case Expr::Kind::kList: {
        Array items;
        for (const auto& c : e.children) items.push_back(eval(*c));
        return e.name == "tuple" ? Value::tuple(std::move(items)) : Value::array(std::move(items));
      }
      case Expr::Kind::kDict: {
        Object items;
        for (std::size_t i = 0; i + 1 < e.children.size(); i += 2) {
          const Value key = eval(*e.children[i]);
          if (!key.is_string()) fail(*e.children[i], fmt::format("a dict key must be a string, not a {}", key.type_name()));
          Value v = eval(*e.children[i + 1]);
          auto it = std::find_if(items.begin(), items.end(), [&](const auto& kv) { return kv.first == key.as_string(); });
          if (it != items.end()) it->second = std::move(v);
          else items.emplace_back(key.as_string(), std::move(v));
        }
        return Value::object(std::move(items));
      }
      case Expr::Kind::kCond:
        if (eval(*e.children[1]).truthy()) return eval(*e.children[0]);
        return e.children[2] ? eval(*e.children[2]) : Value();
    }
    return {};
  }

  Args args_of(const Expr& e, std::size_t first) {
    Args args;
    const std::size_t n_kw = e.kw_names.size();
    const std::size_t n_pos = e.children.size() - first - n_kw;
    for (std::size_t i = 0; i < n_pos; ++i) args.positional.push_back(eval(*e.children[first + i]));
    for (std::size_t i = 0; i < n_kw; ++i) args.keyword.emplace_back(e.kw_names[i], eval(*e.children[first + n_pos + i]));
    return args;
  }

  // Python's index normalization; nullopt when out of range.
  static std::optional<std::size_t> normalize(std::int64_t i, std::size_t size) {
    const auto n = static_cast<std::int64_t>(size);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return std::nullopt;
    return static_cast<std::size_t>(i);
  }

  Value index(const Expr& e, const Value& obj, const Value& key) {
    if (obj.is_undefined()) fail(e, "cannot index an undefined value");
    if (obj.is_mapping()) return key.is_string() ? obj.get(key.as_string()) : Value();
    if (key.kind() != Value::Kind::kInt) return {};
    if (obj.is_array()) {
      auto i = normalize(key.as_int(), obj.as_array().size());
      return i ? obj.as_array()[*i] : Value();
    }
    if (obj.is_string()) {
      const auto cps = code_points(obj.as_string());
      auto i = normalize(key.as_int(), cps.size());
      return i ? Value::string(cps[*i]) : Value();
    }
    return {};
  }

  Value slice(const Expr& e) {
    const Value obj = eval(*e.children[0]);
    auto bound = [&](int child) -> std::optional<std::int64_t> {
      if (!e.children[static_cast<std::size_t>(child)]) return std::nullopt;
      const Value v = eval(*e.children[static_cast<std::size_t>(child)]);
      if (v.is_none()) return std::nullopt;
      if (v.kind() != Value::Kind::kInt) fail(e, fmt::format("a slice bound must be an integer, not a {}", v.type_name()));
      return v.as_int();
    };
    const auto start = bound(1);
    const auto stop = bound(2);
    const std::int64_t step = bound(3).value_or(1);
    if (step == 0) fail(e, "a slice step of 0");
    std::vector<std::string> cps;
    std::size_t size = 0;
    if (obj.is_array()) {
      size = obj.as_array().size();
    } else if (obj.is_string()) {
      cps = code_points(obj.as_string());
      size = cps.size();
    } else {
      fail(e, fmt::format("cannot slice a {}", obj.type_name()));
    }
    // Python's slice.indices().
    const auto n = static_cast<std::int64_t>(size);
    auto clamp = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
      if (!v) return fallback;
      std::int64_t x = *v;
      if (x < 0) x += n;
      if (step > 0) return std::clamp<std::int64_t>(x, 0, n);
      return std::clamp<std::int64_t>(x, -1, n - 1);
    };
    const std::int64_t lo = clamp(start, step > 0 ? 0 : n - 1);
    const std::int64_t hi = clamp(stop, step > 0 ? n : -1);
    Array items;
    std::string text;
    for (std::int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
      if (obj.is_array()) items.push_back(obj.as_array()[static_cast<std::size_t>(i)]);
      else text += cps[static_cast<std::size_t>(i)];
    }
    if (!obj.is_array()) return Value::string(std::move(text));
    return obj.is_tuple() ? Value::tuple(std::move(items)) : Value::array(std::move(items));
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.children[0];
    if (callee.kind == Expr::Kind::kAttr) {
      const Value obj = eval(*callee.children[0]);
      if (obj.is_undefined()) fail(e, fmt::format("cannot call '.{}()' of an undefined value", callee.name));
      return call_method(obj, callee.name, args_of(e, 1));
    }
    const Value fn = lookup(callee.name);
    if (fn.kind() != Value::Kind::kFunction) fail(e, fmt::format("'{}' is not a function here", callee.name));
    const Args args = args_of(e, 1);
    const std::string& name = fn.function_name();
    if (name == "raise_exception") {
      const Value* msg = args.get(0, "message");
      throw Raised{msg == nullptr ? std::string() : msg->to_output(), e.line};
    }
    if (name == "strftime_now") {
      const Value* format = args.get(0, "format");
      if (format == nullptr || !format->is_string()) fail(e, "strftime_now() needs a format string");
      return Value::string(strftime_now(e, format->as_string()));
    }
    if (name == "namespace" || name == "dict") {
      Object attrs;
      for (const auto& v : args.positional) {
        if (!v.is_mapping()) fail(e, fmt::format("{}() takes a dict, not a {}", name, v.type_name()));
        for (const auto& kv : v.as_object()) attrs.push_back(kv);
      }
      for (const auto& kv : args.keyword) {
        auto it = std::find_if(attrs.begin(), attrs.end(), [&](const auto& a) { return a.first == kv.first; });
        if (it != attrs.end()) it->second = kv.second;
        else attrs.push_back(kv);
      }
      if (name == "dict") return Value::object(std::move(attrs));
      for (const auto& kv : attrs) {
        if (holds_namespace(kv.second)) fail(e, "a namespace cannot hold a namespace");
      }
      return Value::make_namespace(std::move(attrs));
    }
    if (name == "range") {
      std::int64_t start = 0;
      std::int64_t stop = 0;
      std::int64_t step = 1;
      auto integer = [&](const Value& v) {
        if (v.kind() != Value::Kind::kInt) fail(e, fmt::format("range() takes integers, not a {}", v.type_name()));
        return v.as_int();
      };
      if (args.positional.size() == 1) {
        stop = integer(args.positional[0]);
      } else if (args.positional.size() == 2 || args.positional.size() == 3) {
        start = integer(args.positional[0]);
        stop = integer(args.positional[1]);
        if (args.positional.size() == 3) step = integer(args.positional[2]);
      } else {
        fail(e, "range() takes 1 to 3 arguments");
      }
      if (step == 0) fail(e, "range() with a step of 0");
      Array items;
      for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (static_cast<std::int64_t>(items.size()) >= kMaxRange) fail(e, fmt::format("a range of more than {} items", kMaxRange));
        items.push_back(Value::integer(i));
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
      }
      return Value::array(std::move(items));
    }
    fail(e, fmt::format("'{}()' is not implemented", name));
  }

  std::string strftime_now(const Expr& e, const std::string& format) const {
    const std::time_t t = now_.value_or(std::time(nullptr));
    std::tm tm{};
    if (::localtime_r(&t, &tm) == nullptr) fail(e, "strftime_now(): the time cannot be converted");
    if (format.size() > 256) fail(e, "strftime_now(): a format longer than 256 bytes");
    std::string buf(1024, '\0');
    const std::size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
    if (n == 0 && !format.empty()) fail(e, "strftime_now(): the formatted time is empty or too long");
    buf.resize(n);
    return buf;
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and" || op == "or") {
      Value l = eval(*e.children[0]);
      if ((op == "and") != l.truthy()) return l;  // Python returns the deciding operand
      return eval(*e.children[1]);
    }
    const Value l = eval(*e.children[0]);
    const Value r = eval(*e.children[1]);
    if (op == "==") return Value::boolean(l.equals(r));
    if (op == "!=") return Value::boolean(!l.equals(r));
    if (op == "in" || op == "not in") {
      Args a;
      a.positional.push_back(r);
      if (r.is_none()) fail(e, "'in' a none value");
      return Value::boolean(apply_test("in", l, a) != (op == "not in"));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      Args a;
      a.positional.push_back(r);
      return Value::boolean(apply_test(op, l, a));
    }
    if (op == "~") {
      std::string s = l.to_output();
      const std::string rs = r.to_output();
      if (s.size() + rs.size() > kMaxStringBytes) fail(e, fmt::format("a string longer than {} bytes", kMaxStringBytes));
      return Value::string(s + rs);
    }
    if (l.is_undefined() || r.is_undefined()) fail(e, fmt::format("'{}' with an undefined value", op));
    if (op == "+" && l.is_string() && r.is_string()) {
      if (l.as_string().size() + r.as_string().size() > kMaxStringBytes) {
        fail(e, fmt::format("a string longer than {} bytes", kMaxStringBytes));
      }
      return Value::string(l.as_string() + r.as_string());
    }
    if (op == "+" && l.is_array() && r.is_array()) {
      Array items = l.as_array();
      items.insert(items.end(), r.as_array().begin(), r.as_array().end());
      return Value::array(std::move(items));
    }
    if (op == "*" && l.is_string() && r.kind() == Value::Kind::kInt) {
      const std::int64_t times = std::max<std::int64_t>(0, r.as_int());
      if (times > 0 && l.as_string().size() > kMaxStringBytes / static_cast<std::uint64_t>(times)) {
        fail(e, fmt::format("a string longer than {} bytes", kMaxStringBytes));
      }
      std::string s;
      for (std::int64_t i = 0; i < times; ++i) s += l.as_string();
      return Value::string(std::move(s));
    }
    if (op == "%" && l.is_string()) fail(e, "string formatting with '%' is not supported");
    return arithmetic(e, op, l, r);
  }

  Value arithmetic(const Expr& e, const std::string& op, const Value& l, const Value& r) const {
    auto numeric = [](const Value& v) { return v.is_number() || v.kind() == Value::Kind::kBool; };
    if (!numeric(l) || !numeric(r)) fail(e, fmt::format("'{}' of a {} and a {}", op, l.type_name(), r.type_name()));
    auto as_int = [](const Value& v) { return v.kind() == Value::Kind::kBool ? std::int64_t{v.as_bool()} : v.as_int(); };
    auto as_double = [](const Value& v) { return v.kind() == Value::Kind::kBool ? (v.as_bool() ? 1.0 : 0.0) : v.as_double(); };
    const bool ints = l.kind() != Value::Kind::kFloat && r.kind() != Value::Kind::kFloat;
    if (ints && op != "/") {
      const std::int64_t a = as_int(l);
      const std::int64_t b = as_int(r);
      std::int64_t out = 0;
      bool overflow = false;
      if (op == "+") overflow = __builtin_add_overflow(a, b, &out);
      else if (op == "-") overflow = __builtin_sub_overflow(a, b, &out);
      else if (op == "*") overflow = __builtin_mul_overflow(a, b, &out);
      else if (op == "//" || op == "%") {
        if (b == 0) fail(e, "integer division or modulo by zero");
        if (a == INT64_MIN && b == -1) fail(e, "integer overflow");
        // Python floors the quotient; the remainder takes the divisor's sign.
        std::int64_t q = a / b;
        std::int64_t m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) {
          --q;
          m += b;
        }
        out = op == "//" ? q : m;
      } else if (op == "**") {
        if (b < 0) return Value::floating(std::pow(static_cast<double>(a), static_cast<double>(b)));
        out = 1;
        for (std::int64_t i = 0; i < b && !overflow; ++i) {
          overflow = __builtin_mul_overflow(out, a, &out);
          if (out == 0 || out == 1) break;
        }
        if (!overflow && out == 1 && a == -1) out = (b % 2 == 0) ? 1 : -1;
      }
      if (overflow) fail(e, "integer overflow (strata's integers are 64-bit)");
      return Value::integer(out);
    }
    const double a = as_double(l);
    const double b = as_double(r);
    if (op == "+") return Value::floating(a + b);
    if (op == "-") return Value::floating(a - b);
    if (op == "*") return Value::floating(a * b);
    if (op == "**") return Value::floating(std::pow(a, b));
    if (b == 0) fail(e, "division by zero");
    if (op == "/") return Value::floating(a / b);
    if (op == "//") return Value::floating(std::floor(a / b));
    const double m = std::fmod(a, b);
    return Value::floating((m != 0 && ((m < 0) != (b < 0))) ? m + b : m);
  }

  const Program& program_;
  std::optional<std::time_t> now_;
  std::vector<Object> scopes_;  // [0]: globals and top-level sets; then one per loop iteration
  std::string out_;
  std::uint64_t steps_ = 0;
  std::int64_t loop_depth_ = 0;
};

}  // namespace

std::string render_program(const Program& program, const Object& globals, std::optional<std::time_t> now) {
  return Evaluator(program, globals, now).run();
}

}  // namespace strata::models::chat
