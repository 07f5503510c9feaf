#include "models/chat/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include <fmt/format.h>

namespace strata::models::chat {
namespace {

// What is implemented below (and the evaluator's global functions); the parser refuses the rest.
constexpr std::string_view kFilters[] = {
    "abs", "capitalize", "count", "d", "default", "first", "float", "int", "items", "join", "last", "length",
    "list", "lower", "map", "reject", "rejectattr", "replace", "reverse", "safe", "select", "selectattr",
    "string", "sum", "title", "tojson", "trim", "upper"};
constexpr std::string_view kTests[] = {
    "!=", "<", "<=", "==", ">", ">=", "boolean", "defined", "divisibleby", "eq", "equalto", "even", "false",
    "float", "ge", "gt", "in", "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none", "number",
    "odd", "sequence", "string", "true", "undefined", "upper"};
constexpr std::string_view kMethods[] = {
    "capitalize", "endswith", "get", "items", "keys", "lower", "lstrip", "replace", "rstrip", "split",
    "startswith", "strip", "title", "upper", "values"};
constexpr std::string_view kFunctions[] = {"dict", "namespace", "raise_exception", "range", "strftime_now"};
template <std::size_t N>
bool contains(const std::string_view (&list)[N], std::string_view name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

[[noreturn]] void fail(const std::string& what) { throw BuiltinError(what); }

void check_size(std::size_t bytes) {
  if (bytes > kMaxStringBytes) fail(fmt::format("a string longer than {} bytes", kMaxStringBytes));
}

std::string need_string(const Value& v, std::string_view what) {
  if (!v.is_string()) fail(fmt::format("{} expects a string, got {}", what, v.type_name()));
  return v.as_string();
}

std::int64_t need_int(const Value& v, std::string_view what) {
  if (v.kind() == Value::Kind::kInt) return v.as_int();
  if (v.kind() == Value::Kind::kBool) return v.as_bool() ? 1 : 0;
  fail(fmt::format("{} expects an integer, got {}", what, v.type_name()));
}

// Python's str.isspace() code points.
bool is_unicode_space(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::uint32_t decode(const std::string& cp) {
  const auto b = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(cp[i])); };
  switch (cp.size()) {
    case 1: return b(0) < 0x80 ? b(0) : 0xFFFFFFFFu;  // an invalid byte is no character
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

// The length of the UTF-8 sequence starting at s[i] (1 for an invalid byte, as code_points()).
std::size_t sequence_length(const std::string& s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (std::size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

// Python's str.strip / lstrip / rstrip: `chars` null strips whitespace. Only the ends are
// decoded (a long message is not split into code points).
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<std::string> set;
  const bool by_chars = chars != nullptr && !chars->is_none();
  if (by_chars) set = code_points(need_string(*chars, "strip()"));
  auto drop = [&](std::size_t at, std::size_t n) {
    const std::string cp = s.substr(at, n);
    if (!by_chars) return is_unicode_space(decode(cp));
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  std::size_t begin = 0;
  std::size_t end = s.size();
  if (left) {
    while (begin < end) {
      const std::size_t n = sequence_length(s, begin);
      if (!drop(begin, n)) break;
      begin += n;
    }
  }
  if (right) {
    while (end > begin) {
      // The last sequence: back over continuation bytes to a lead byte whose sequence ends at `end`.
      std::size_t start = end - 1;
      while (start > begin && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      std::size_t n = end - start;
      if (sequence_length(s, start) != n) {
        start = end - 1;
        n = 1;
      }
      if (!drop(start, n)) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

std::string ascii_map(std::string s, int (*f)(int)) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(c));
  }
  return s;
}
int to_upper(int c) { return (c >= 'a' && c <= 'z') ? c - 32 : c; }
int to_lower(int c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

std::string title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (letter) c = static_cast<char>(prev_letter ? to_lower(c) : to_upper(c));
    prev_letter = letter || static_cast<unsigned char>(c) >= 0x80;
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_map(s, to_lower);
  if (!out.empty()) out[0] = static_cast<char>(to_upper(out[0]));
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, std::int64_t count) {
  std::string out;
  std::size_t pos = 0;
  std::int64_t done = 0;
  if (from.empty()) {
    // Python inserts `to` between code points (and at both ends).
    const auto cps = code_points(s);
    for (std::size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) out += cps[i];
      check_size(out.size());
    }
    return out;
  }
  while (true) {
    const std::size_t hit = (count < 0 || done < count) ? s.find(from, pos) : std::string::npos;
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    check_size(out.size());
    pos = hit + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  check_size(out.size());
  return out;
}

Value split(const std::string& s, const Value* sep, std::int64_t maxsplit) {
  Array parts;
  if (sep == nullptr || sep->is_none()) {
    // Runs of whitespace, no empty parts.
    const auto cps = code_points(s);
    std::string cur;
    bool in_word = false;
    for (std::size_t i = 0; i < cps.size(); ++i) {
      const bool space = is_unicode_space(decode(cps[i]));
      if (space && in_word && (maxsplit < 0 || static_cast<std::int64_t>(parts.size()) < maxsplit)) {
        parts.push_back(Value::string(cur));
        cur.clear();
        in_word = false;
      } else if (!space || in_word) {
        if (!in_word && maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) >= maxsplit) {
          // The rest as it is (Python keeps its trailing whitespace).
          std::string rest;
          for (std::size_t j = i; j < cps.size(); ++j) rest += cps[j];
          parts.push_back(Value::string(std::move(rest)));
          return Value::array(std::move(parts));
        }
        cur += cps[i];
        in_word = true;
      }
    }
    if (in_word) parts.push_back(Value::string(cur));
    return Value::array(std::move(parts));
  }
  const std::string d = need_string(*sep, "split()");
  if (d.empty()) fail("split(): empty separator");
  std::size_t pos = 0;
  while (maxsplit < 0 || static_cast<std::int64_t>(parts.size()) < maxsplit) {
    const std::size_t hit = s.find(d, pos);
    if (hit == std::string::npos) break;
    parts.push_back(Value::string(s.substr(pos, hit - pos)));
    pos = hit + d.size();
  }
  parts.push_back(Value::string(s.substr(pos)));
  return Value::array(std::move(parts));
}

bool affix_matches(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    const std::string x = need_string(a, prefix ? "startswith()" : "endswith()");
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_array()) {
    return std::any_of(affix.as_array().begin(), affix.as_array().end(), one);
  }
  return one(affix);
}

Value items_of(const Value& v) {
  if (v.is_undefined()) return Value::array({});
  if (!v.is_mapping()) fail(fmt::format("items() of a {}", v.type_name()));
  Array out;
  for (const auto& [k, val] : v.as_object()) out.push_back(Value::tuple({Value::string(k), val}));
  return Value::array(std::move(out));
}

// Jinja's attribute lookup for selectattr / map / join(attribute=...): "a.b" walks dicts.
Value attribute(const Value& v, const std::string& path) {
  Value cur = v;
  std::size_t pos = 0;
  while (true) {
    const std::size_t dot = path.find('.', pos);
    cur = cur.get(path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

// The arguments after the first `skip` positional ones (for select's and selectattr's test).
Args rest_args(const Args& args, std::size_t skip) {
  Args out;
  for (std::size_t i = skip; i < args.positional.size(); ++i) out.positional.push_back(args.positional[i]);
  out.keyword = args.keyword;
  return out;
}

Value select(const Value& subject, const Args& args, bool by_attr, bool keep_matching) {
  Array out;
  std::string attr;
  std::size_t skip = 0;
  if (by_attr) {
    const Value* a = args.get(0, "attribute");
    if (a == nullptr) fail("selectattr / rejectattr need an attribute");
    attr = need_string(*a, "selectattr()");
    skip = 1;
  }
  const Value* test = args.positional.size() > skip ? &args.positional[skip] : nullptr;
  const Args test_args = rest_args(args, skip + 1);
  for (const auto& item : iterate(subject)) {
    const Value v = by_attr ? attribute(item, attr) : item;
    const bool hit = test == nullptr ? v.truthy() : apply_test(need_string(*test, "select()"), v, test_args);
    if (hit == keep_matching) out.push_back(item);
  }
  return Value::array(std::move(out));
}

std::int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: {
      std::int64_t n = 0;
      for (std::size_t i = 0; i < v.as_string().size(); i += sequence_length(v.as_string(), i)) ++n;
      return n;
    }
    case Value::Kind::kArray: return static_cast<std::int64_t>(v.as_array().size());
    case Value::Kind::kObject:
    case Value::Kind::kNamespace: return static_cast<std::int64_t>(v.as_object().size());
    default: fail(fmt::format("length of a {}", v.type_name()));
  }
}

}  // namespace

bool is_filter(std::string_view name) { return contains(kFilters, name); }
bool is_test(std::string_view name) { return contains(kTests, name); }
bool is_method(std::string_view name) { return contains(kMethods, name); }
bool is_function(std::string_view name) { return contains(kFunctions, name); }

const Value* Args::get(std::size_t index, std::string_view keyword_name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == keyword_name) return &v;
  }
  return nullptr;
}

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = sequence_length(s, i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

Array iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kArray: return v.as_array();
    case Value::Kind::kObject: {
      Array keys;
      for (const auto& kv : v.as_object()) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      const std::string& s = v.as_string();
      std::size_t count = 0;
      for (std::size_t i = 0; i < s.size(); i += sequence_length(s, i)) ++count;
      if (count > kMaxIteratedChars) {
        fail(fmt::format("a string of {} characters iterated one by one (at most {})", count, kMaxIteratedChars));
      }
      Array chars;
      for (auto& cp : code_points(v.as_string())) chars.push_back(Value::string(std::move(cp)));
      return chars;
    }
    default: fail(fmt::format("a {} is not iterable", v.type_name()));
  }
}

Value apply_filter(std::string_view name, const Value& subject, const Args& args) {
  if (name == "trim") return Value::string(strip(subject.to_output(), args.get(0, "chars"), true, true));
  if (name == "length" || name == "count") return Value::integer(length(subject));
  if (name == "tojson") {
    const Value* indent = args.get(0, "indent");
    return Value::string(subject.to_json(indent == nullptr || indent->is_none() ? -1 : static_cast<int>(std::clamp<std::int64_t>(need_int(*indent, "tojson(indent)"), 0, 64))));
  }
  if (name == "upper") return Value::string(ascii_map(subject.to_output(), to_upper));
  if (name == "lower") return Value::string(ascii_map(subject.to_output(), to_lower));
  if (name == "capitalize") return Value::string(capitalize(subject.to_output()));
  if (name == "title") return Value::string(title(subject.to_output()));
  if (name == "string") return Value::string(subject.to_output());
  if (name == "safe") return subject;
  if (name == "default" || name == "d") {
    const Value* fallback = args.get(0, "default_value");
    const Value* boolean = args.get(1, "boolean");
    const bool use = subject.is_undefined() || (boolean != nullptr && boolean->truthy() && !subject.truthy());
    if (!use) return subject;
    return fallback != nullptr ? *fallback : Value::string("");
  }
  if (name == "join") {
    const Value* sep = args.get(0, "d");
    const Value* attr = args.get(1, "attribute");
    const std::string d = sep == nullptr ? "" : sep->to_output();
    std::string out;
    bool first = true;
    for (const auto& item : iterate(subject)) {
      if (!first) out += d;
      first = false;
      out += (attr == nullptr ? item : attribute(item, attr->to_output())).to_output();
      check_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "selectattr") return select(subject, args, true, true);
  if (name == "rejectattr") return select(subject, args, true, false);
  if (name == "select") return select(subject, args, false, true);
  if (name == "reject") return select(subject, args, false, false);
  if (name == "map") {
    Array out;
    const Value* attr = args.get(99, "attribute");
    if (attr != nullptr) {
      const Value* fallback = args.get(99, "default");
      for (const auto& item : iterate(subject)) {
        Value v = attribute(item, attr->to_output());
        out.push_back(v.is_undefined() && fallback != nullptr ? *fallback : v);
      }
    } else {
      if (args.positional.empty()) fail("map() needs a filter name or attribute=");
      const std::string filter = need_string(args.positional[0], "map()");
      if (filter == "map") fail("map('map') is not supported");
      static const std::string_view kMappable[] = {"trim", "length", "count", "tojson", "upper", "lower",
                                                   "capitalize", "title", "string", "int", "float", "abs", "first",
                                                   "last", "list", "items", "reverse", "default", "d", "join", "replace"};
      if (std::find(std::begin(kMappable), std::end(kMappable), filter) == std::end(kMappable)) {
        fail(fmt::format("map('{}'): not a filter strata maps", filter));
      }
      const Args inner = rest_args(args, 1);
      for (const auto& item : iterate(subject)) out.push_back(apply_filter(filter, item, inner));
    }
    return Value::array(std::move(out));
  }
  if (name == "list") return Value::array(iterate(subject));
  if (name == "items") return items_of(subject);
  if (name == "first" || name == "last") {
    const Array items = iterate(subject);
    if (items.empty()) return {};
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (subject.is_string()) {
      auto cps = code_points(subject.as_string());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value::string(std::move(out));
    }
    Array items = iterate(subject);
    std::reverse(items.begin(), items.end());
    return Value::array(std::move(items));
  }
  if (name == "replace") {
    if (args.positional.size() < 2) fail("replace() needs two arguments");
    const Value* count = args.get(2, "count");
    return Value::string(replace(subject.to_output(), args.positional[0].to_output(), args.positional[1].to_output(),
                                 count == nullptr || count->is_none() ? -1 : need_int(*count, "replace(count)")));
  }
  if (name == "int") {
    if (subject.kind() == Value::Kind::kInt) return subject;
    if (subject.kind() == Value::Kind::kFloat && std::isfinite(subject.as_double()) && std::fabs(subject.as_double()) < 9e18) {
      return Value::integer(static_cast<std::int64_t>(subject.as_double()));
    }
    if (subject.kind() == Value::Kind::kBool) return Value::integer(subject.as_bool() ? 1 : 0);
    if (subject.is_string()) {
      const std::string s = strip(subject.as_string(), nullptr, true, true);
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value::integer(v);
    }
    const Value* fallback = args.get(0, "default");
    return fallback != nullptr ? *fallback : Value::integer(0);
  }
  if (name == "float") {
    if (subject.is_number()) return Value::floating(subject.as_double());
    if (subject.is_string()) {
      const std::string s = strip(subject.as_string(), nullptr, true, true);
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return Value::floating(v);
    }
    const Value* fallback = args.get(0, "default");
    return fallback != nullptr ? *fallback : Value::floating(0.0);
  }
  if (name == "abs") {
    if (subject.kind() == Value::Kind::kInt) {
      if (subject.as_int() == INT64_MIN) fail("abs() overflows");
      return Value::integer(std::llabs(subject.as_int()));
    }
    if (subject.kind() == Value::Kind::kFloat) return Value::floating(std::fabs(subject.as_double()));
    fail(fmt::format("abs() of a {}", subject.type_name()));
  }
  if (name == "sum") {
    const Value* attr = args.get(99, "attribute");
    const Value* start = args.get(1, "start");
    std::int64_t isum = start == nullptr ? 0 : need_int(*start, "sum(start)");
    double fsum = 0;
    bool is_float = false;
    for (const auto& item : iterate(subject)) {
      const Value v = attr == nullptr ? item : attribute(item, attr->to_output());
      if (v.kind() == Value::Kind::kFloat) {
        is_float = true;
        fsum += v.as_double();
      } else if (__builtin_add_overflow(isum, need_int(v, "sum()"), &isum)) {
        fail("sum() overflows");
      }
    }
    return is_float ? Value::floating(fsum + static_cast<double>(isum)) : Value::integer(isum);
  }
  fail(fmt::format("filter '{}' is not implemented", name));  // the parser lets through only the above
}

bool apply_test(std::string_view name, const Value& v, const Args& args) {
  const Value* arg = args.get(0, "value");
  auto need_arg = [&]() -> const Value& {
    if (arg == nullptr) fail(fmt::format("test '{}' needs an argument", name));
    return *arg;
  };
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.kind() == K::kInt || v.kind() == K::kFloat || v.kind() == K::kBool;
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.as_bool();
  if (name == "false") return v.kind() == K::kBool && !v.as_bool();
  if (name == "mapping") return v.kind() == K::kObject;
  // Jinja's Undefined is iterable (and has __len__ / __getitem__), so both tests hold for it.
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_array() || v.kind() == K::kObject;
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_array() || v.kind() == K::kObject;
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    const std::string s = v.as_string();
    return name == "lower" ? ascii_map(s, to_lower) == s : ascii_map(s, to_upper) == s;
  }
  if (name == "even" || name == "odd" || name == "divisibleby") {
    const std::int64_t i = need_int(v, name);
    if (name == "even") return i % 2 == 0;
    if (name == "odd") return i % 2 != 0;
    const std::int64_t d = need_int(need_arg(), name);
    if (d == 0) fail("divisibleby(0)");
    return d == -1 || i % d == 0;
  }
  if (name == "equalto" || name == "eq" || name == "==") return v.equals(need_arg());
  if (name == "ne" || name == "!=") return !v.equals(need_arg());
  if (name == "in") {
    const Value& container = need_arg();
    if (container.is_string()) return v.is_string() && container.as_string().find(v.as_string()) != std::string::npos;
    if (container.is_mapping()) return v.is_string() && !container.get(v.as_string()).is_undefined();
    const Array items = iterate(container);
    return std::any_of(items.begin(), items.end(), [&](const Value& x) { return x.equals(v); });
  }
  if (name == "lt" || name == "<" || name == "le" || name == "<=" || name == "gt" || name == ">" || name == "ge" ||
      name == ">=") {
    const Value& other = need_arg();
    int cmp = 0;
    if (v.is_number() && other.is_number()) {
      cmp = v.as_double() < other.as_double() ? -1 : v.as_double() > other.as_double() ? 1 : 0;
    } else if (v.is_string() && other.is_string()) {
      cmp = v.as_string().compare(other.as_string());
    } else {
      fail(fmt::format("cannot order a {} and a {}", v.type_name(), other.type_name()));
    }
    if (name == "lt" || name == "<") return cmp < 0;
    if (name == "le" || name == "<=") return cmp <= 0;
    if (name == "gt" || name == ">") return cmp > 0;
    return cmp >= 0;
  }
  fail(fmt::format("test '{}' is not implemented", name));
}

Value call_method(const Value& object, std::string_view name, const Args& args) {
  if (object.is_string()) {
    const std::string& s = object.as_string();
    if (name == "strip") return Value::string(strip(s, args.get(0, "chars"), true, true));
    if (name == "lstrip") return Value::string(strip(s, args.get(0, "chars"), true, false));
    if (name == "rstrip") return Value::string(strip(s, args.get(0, "chars"), false, true));
    if (name == "startswith" || name == "endswith") {
      const Value* affix = args.get(0, "prefix");
      if (affix == nullptr) fail(fmt::format("{}() needs an argument", name));
      return Value::boolean(affix_matches(s, *affix, name == "startswith"));
    }
    if (name == "split") {
      const Value* maxsplit = args.get(1, "maxsplit");
      return split(s, args.get(0, "sep"), maxsplit == nullptr ? -1 : need_int(*maxsplit, "split(maxsplit)"));
    }
    if (name == "replace") {
      if (args.positional.size() < 2) fail("replace() needs two arguments");
      const Value* count = args.get(2, "count");
      return Value::string(replace(s, need_string(args.positional[0], "replace()"),
                                   need_string(args.positional[1], "replace()"),
                                   count == nullptr ? -1 : need_int(*count, "replace(count)")));
    }
    if (name == "upper") return Value::string(ascii_map(s, to_upper));
    if (name == "lower") return Value::string(ascii_map(s, to_lower));
    if (name == "title") return Value::string(title(s));
    if (name == "capitalize") return Value::string(capitalize(s));
  } else if (object.is_mapping()) {
    if (name == "items") return items_of(object);
    if (name == "get") {
      const Value* key = args.get(0, "key");
      if (key == nullptr) fail("get() needs a key");
      const Value v = key->is_string() ? object.get(key->as_string()) : Value();
      if (!v.is_undefined()) return v;
      const Value* fallback = args.get(1, "default");
      return fallback != nullptr ? *fallback : Value::none();
    }
    if (name == "keys" || name == "values") {
      Array out;
      for (const auto& [k, v] : object.as_object()) out.push_back(name == "keys" ? Value::string(k) : v);
      return Value::array(std::move(out));
    }
  }
  fail(fmt::format("a {} has no method '{}()'", object.type_name(), name));
}

}  // namespace strata::models::chat
