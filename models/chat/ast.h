#pragma once
// The parsed template: statements (text, {{ }} output, if, for, set, break, continue) over
// expressions. Two plain node structs, one `kind` each, rather than a class per node: the
// evaluator switches on the kind, and the layouts below say which child is which.
#include <memory>
#include <string>
#include <vector>

#include "models/chat/value.h"

namespace strata::models::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kAttr,     // children[0].name
    kIndex,    // children[0][children[1]]
    kSlice,    // children[0][children[1]:children[2]:children[3]] (null children: omitted)
    kCall,     // children[0](children[1..]); the last kw_names.size() arguments are keyword ones
    kFilter,   // children[0] | name(children[1..]); kw_names as for kCall
    kTest,     // children[0] is [not] name(children[1..]); negated
    kUnary,    // name ("-", "+", "not") children[0]
    kBinary,   // children[0] name children[1]; name: + - * / // % ** ~ and or in "not in" == != < > <= >=
    kList,     // [children...]; name "tuple" for (a, b)
    kDict,     // {children[0]: children[1], ...}
    kCond,     // children[0] if children[1] else children[2] (children[2] null: undefined)
  };
  Kind kind = Kind::kLiteral;
  std::string name;
  Value literal;
  std::vector<ExprPtr> children;
  std::vector<std::string> kw_names;
  bool negated = false;
  int height = 1;  // 1 + the tallest child's (bounded by the parser)
  int line = 0;
  int column = 0;
};

struct Stmt;
using Body = std::vector<Stmt>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conds[i] -> bodies[i]; bodies.size() == conds.size() + 1 when there is an else
    kFor,       // for targets in expr [if filter]: bodies[0]; bodies[1]: the else body (may be empty)
    kSet,       // set name = expr, or set name.attr = expr (attr non-empty)
    kBreak,
    kContinue,
    kBlock,     // bodies[0], rendered in place ({% generation %}, transformers' assistant-mask tag)
  };
  Kind kind = Kind::kText;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  std::vector<std::string> targets;  // kFor: one or two names; kSet: {name} or {name, attr}
  bool uses_loop = false;            // kFor: `loop` is named inside (else it is not built)
  int line = 0;
  int column = 0;
};

// The whole template, and the name its errors carry.
struct Program {
  Body body;
  std::string source_name;
};

}  // namespace strata::models::chat
