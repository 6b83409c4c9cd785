// The parsed form of a template: expressions and statements, each remembering its source line
// for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace g4::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind : uint8_t {
  kLiteral,    // value
  kName,       // name
  kList,       // children
  kTuple,      // children
  kDict,       // children: key, value, key, value, ...
  kAttribute,  // children[0].name
  kSubscript,  // children[0][children[1]]
  kSlice,      // children[0][children[1]:children[2]:children[3]] (null = omitted)
  kCall,       // children[0](children[1..], kwargs)
  kFilter,     // children[0] | name(children[1..], kwargs)
  kTest,       // children[0] is [not] name(children[1..], kwargs); negated
  kUnary,      // name in {"-", "+", "not"}: children[0]
  kBinary,     // children[0] name children[1]: + - * / // % ** ~ and or
  kCompare,    // children[0] ops[0] children[1] ops[1] children[2] ...
  kCondition,  // children[1] if children[0] else children[2] (children[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
  bool negated = false;          // kTest
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

enum class NodeKind : uint8_t {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // conditions[i] -> bodies[i]; else_body
  kFor,       // targets in expr [if filter]: body; else_body
  kSet,       // targets (or namespace attribute) = expr
  kSetBlock,  // {% set target %}body{% endset %}, optional filter chain in expr (applied to caller)
  kMacro,     // name(params) body
  kCallBlock, // {% call(params) expr %}body{% endcall %}
  kFilterBlock,
  kBreak,
  kContinue,
  kScope,  // a body rendered in place ({% generation %}, {% with %} without bindings)
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kFor iterable, kSet value, kCallBlock call
  ExprPtr filter;                    // kFor condition; kSetBlock / kFilterBlock filter (on a kName "caller" placeholder)
  std::vector<std::string> targets;  // kFor / kSet names (several: tuple unpacking)
  std::string attribute;             // kSet to namespace attribute: targets[0].attribute
  std::string name;                  // kMacro
  std::vector<MacroParam> params;    // kMacro, kCallBlock
  std::vector<ExprPtr> conditions;   // kIf
  std::vector<Body> bodies;          // kIf branches; others use bodies[0]
  Body else_body;                    // kIf, kFor
  bool uses_loop = true;             // kFor: the body mentions `loop` (else no loop object is built)
  bool catch_varargs = false;        // kMacro: extra arguments land in varargs / kwargs
  bool catch_kwargs = false;
};

}  // namespace g4::jinja
