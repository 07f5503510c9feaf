#include "models/chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace strata::models::chat {

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::integer(std::int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::floating(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.d_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::array(Array items) {
  Value v;
  v.kind_ = Kind::kArray;
  for (const auto& item : items) v.depth_ = std::max(v.depth_, item.depth_);
  ++v.depth_;
  v.a_ = std::make_shared<const Array>(std::move(items));
  return v;
}

Value Value::tuple(Array items) {
  Value v = array(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::object(Object items) {
  Value v;
  v.kind_ = Kind::kObject;
  for (const auto& item : items) v.depth_ = std::max(v.depth_, item.second.depth_);
  ++v.depth_;
  v.o_ = std::make_shared<Object>(std::move(items));
  return v;
}

Value Value::make_namespace(Object items) {
  Value v = object(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::function(std::string name) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return d_ != 0;
    case Kind::kString: return !s_->empty();
    case Kind::kArray: return !a_->empty();
    case Kind::kObject: return !o_->empty();
    case Kind::kNamespace:
    case Kind::kFunction: return true;
  }
  return false;
}

Value Value::get(std::string_view key) const {
  if (!is_mapping()) return {};
  for (const auto& [k, v] : *o_) {
    if (k == key) return v;
  }
  return {};
}

bool Value::equals(const Value& other) const {
  // Python: bool is an int, and ints compare equal to floats of the same value.
  auto numeric = [](const Value& v) { return v.kind_ == Kind::kInt || v.kind_ == Kind::kFloat || v.kind_ == Kind::kBool; };
  if (numeric(*this) && numeric(other)) {
    auto as_num = [](const Value& v) { return v.kind_ == Kind::kBool ? (v.b_ ? 1.0 : 0.0) : v.as_double(); };
    if (kind_ != Kind::kFloat && other.kind_ != Kind::kFloat) {
      auto as_i = [](const Value& v) { return v.kind_ == Kind::kBool ? std::int64_t{v.b_} : v.i_; };
      return as_i(*this) == as_i(other);
    }
    return as_num(*this) == as_num(other);
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return *s_ == *other.s_;
    case Kind::kArray: {
      if (a_->size() != other.a_->size() || tuple_ != other.tuple_) return false;
      for (std::size_t i = 0; i < a_->size(); ++i) {
        if (!(*a_)[i].equals((*other.a_)[i])) return false;
      }
      return true;
    }
    case Kind::kObject: {
      if (o_->size() != other.o_->size()) return false;
      for (const auto& [k, v] : *o_) {
        bool found = false;
        for (const auto& [ok, ov] : *other.o_) {
          if (ok == k) {
            if (!v.equals(ov)) return false;
            found = true;
            break;
          }
        }
        if (!found) return false;
      }
      return true;
    }
    case Kind::kNamespace: return o_ == other.o_;  // identity, as Python objects
    case Kind::kFunction: return *s_ == *other.s_;
    default: return false;
  }
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits and exponent, then Python's layout: positional for
  // 1e-4 <= |d| < 1e16, else d.ddde+XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const auto e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exp10 = std::stoi(sci.substr(e_pos + 1));
  const bool negative = !mantissa.empty() && mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exp10 >= 16 || exp10 < -4) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out + e;
  }
  if (exp10 < 0) return out + "0." + std::string(static_cast<std::size_t>(-exp10 - 1), '0') + digits;
  const auto int_digits = static_cast<std::size_t>(exp10 + 1);
  if (digits.size() <= int_digits) return out + digits + std::string(int_digits - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

std::string Value::to_output() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return *s_;
    default: return repr();
  }
}

namespace {

// Python's repr of a str: single quotes unless the text has a single quote and no double one.
std::string python_str_repr(const std::string& s) {
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == static_cast<unsigned char>(q)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\x%02x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += q;
  return out;
}

void write_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\u%04x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);  // ensure_ascii=False: UTF-8 passes through
        }
    }
  }
  out += '"';
}

}  // namespace

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return python_float_repr(d_);
    case Kind::kString: return python_str_repr(*s_);
    case Kind::kArray: {
      std::string out = tuple_ ? "(" : "[";
      for (std::size_t i = 0; i < a_->size(); ++i) {
        if (i) out += ", ";
        out += (*a_)[i].repr();
      }
      if (tuple_) return out + (a_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::kObject: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : *o_) {
        if (!first) out += ", ";
        first = false;
        out += python_str_repr(k) + ": " + v.repr();
      }
      return out + "}";
    }
    case Kind::kNamespace: return "<Namespace>";
    case Kind::kFunction: return "<function " + *s_ + ">";
  }
  return "";
}

void Value::write_json(std::string& out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(d), ' ');
  };
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += b_ ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(i_); return;
    case Kind::kFloat:
      if (std::isnan(d_)) out += "NaN";
      else if (std::isinf(d_)) out += d_ > 0 ? "Infinity" : "-Infinity";
      else out += python_float_repr(d_);
      return;
    case Kind::kString: write_json_string(out, *s_); return;
    case Kind::kArray: {
      if (a_->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t i = 0; i < a_->size(); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        (*a_)[i].write_json(out, indent, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Kind::kObject:
    case Kind::kNamespace: {
      if (o_->empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [k, v] : *o_) {
        if (!first) out += indent < 0 ? ", " : ",";
        first = false;
        newline(depth + 1);
        write_json_string(out, k);
        out += ": ";
        v.write_json(out, indent, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Kind::kFunction: out += "null"; return;
  }
}

std::string Value::to_json(int indent) const {
  std::string out;
  write_json(out, indent, 0);
  return out;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "boolean";
    case Kind::kInt: return "integer";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kArray: return "list";
    case Kind::kObject: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kFunction: return "function";
  }
  return "?";
}

}  // namespace strata::models::chat
