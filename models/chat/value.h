#pragma once
// The values a chat template computes with: Jinja's (Python's) undefined, none, booleans,
// integers, floats, strings, lists and dicts, plus namespace() objects and the few global
// functions. Internal to models/chat.
//
// Lists and dicts are shared (std::shared_ptr) as Python shares them: `set x = messages` copies
// a pointer, not the messages. Templates never mutate a list or a dict (transformers renders in
// Jinja's ImmutableSandboxedEnvironment); the one mutable object is a namespace, whose
// attributes `set ns.attr = ...` assigns, seen through every name that holds it.
//
// Dicts keep insertion order (Python's dict does, and tojson / items() print in that order);
// lookups are linear, which is fine for the handful of keys a message or a tool has.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::models::chat {

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kNamespace, kFunction };

  Value() = default;  // undefined
  static Value none();
  static Value boolean(bool b);
  static Value integer(std::int64_t i);
  static Value floating(double d);
  static Value string(std::string s);
  static Value array(Array items);
  // A tuple: a list that prints as Python prints a tuple, "('k', 1)" (items(), literals in
  // parentheses) and is not equal to a list.
  static Value tuple(Array items);
  bool is_tuple() const { return tuple_; }
  static Value object(Object items);
  static Value make_namespace(Object items);
  // A global function (raise_exception, strftime_now, namespace, range), called by name.
  static Value function(std::string name);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_array() const { return kind_ == Kind::kArray; }
  // A dict or a namespace: what has attributes / keys.
  bool is_mapping() const { return kind_ == Kind::kObject || kind_ == Kind::kNamespace; }

  bool as_bool() const { return b_; }
  std::int64_t as_int() const { return i_; }
  double as_double() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : d_; }
  const std::string& as_string() const { return *s_; }
  const Array& as_array() const { return *a_; }
  const Object& as_object() const { return *o_; }
  Object& mutable_namespace() { return *o_; }  // kNamespace only
  const std::string& function_name() const { return *s_; }

  // Python's truth: undefined, none, false, 0, 0.0, "", [], {} are false; a namespace is true.
  bool truthy() const;
  // The value of `key` in a dict or namespace; undefined when absent.
  Value get(std::string_view key) const;
  // Python's ==, deep for lists and dicts (1 == 1.0, True == 1).
  bool equals(const Value& other) const;
  // What {{ x }} prints: str(x) in Python ("None", "True", "['a', 1]", "{'k': 'v'}"); "" for undefined.
  std::string to_output() const;
  // Python's repr(): strings quoted as Python quotes them.
  std::string repr() const;
  // json.dumps(x, ensure_ascii=False, indent=indent) (indent < 0: none): what transformers' tojson does.
  std::string to_json(int indent) const;
  // "string", "list", ... (for messages).
  const char* type_name() const;
  // How deeply lists and dicts nest in it (a string: 0, [[1]]: 2). The evaluator bounds it so
  // that printing or freeing a value never recurses without limit.
  std::uint32_t depth() const { return depth_; }

 private:
  void write_json(std::string& out, int indent, int depth) const;

  Kind kind_ = Kind::kUndefined;
  std::uint32_t depth_ = 0;
  bool tuple_ = false;
  bool b_ = false;
  std::int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const Array> a_;
  std::shared_ptr<Object> o_;
};

// Python's repr of a float (shortest round-trip, "1.0", "1e+20", "inf").
std::string python_float_repr(double d);

}  // namespace strata::models::chat
