// Walks the AST with Jinja2's semantics: scoping (a for-loop iteration and a macro call get
// their own scope, if-blocks do not), loop controls, macros with caller(), filters and tests.
// Every render is bounded: output size, evaluation steps and call depth have limits, so a
// hostile template ends in an error, never a hang or a stack overflow.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "template/ast.h"
#include "template/value.h"

namespace g4::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;
  uint64_t max_steps = 5'000'000;  // evaluations and loop iterations (a 20-turn chat: ~20k)
  int max_call_depth = 200;         // nested macro calls
};

// A scope holds few names (loop targets, `loop`, macro parameters): a flat list beats a hash map.
class ScopeVars {
 public:
  Value& operator[](const std::string& name) {
    for (auto& [k, v] : entries_) {
      if (k == name) return v;
    }
    if (entries_.empty()) entries_.reserve(4);  // most scopes hold a loop target and `loop`
    entries_.emplace_back(name, Value());
    return entries_.back().second;
  }
  const Value* Find(const std::string& name) const {
    for (const auto& [k, v] : entries_) {
      if (k == name) return &v;
    }
    return nullptr;
  }
  size_t count(const std::string& name) const { return Find(name) ? 1 : 0; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
};

struct Scope {
  ScopeVars vars;
  std::shared_ptr<Scope> parent;
  const Value* Find(const std::string& name) const;
};

class Interpreter {
 public:
  explicit Interpreter(RenderLimits limits) : limits_(limits) {}

  Status Render(const Body& body, std::shared_ptr<Scope> globals, std::string* out);

  // Shared with the filter, test and method tables.
  Result<Value> Call(const Value& callee, CallArgs& args);
  Result<Value> ApplyFilter(const std::string& name, const Value& value, CallArgs& args);
  Result<bool> ApplyTest(const std::string& name, const Value& value, CallArgs& args);
  // Charges `n` steps (or bytes of work) against the render's budget. Inline: every evaluation
  // calls it, and the in-budget path must not leave the caller.
  Status Charge(uint64_t n) {
    steps_ += n;
    if (steps_ > limits_.max_steps) [[unlikely]] return OverBudget();
    return OkStatus();
  }
  size_t max_output_bytes() const { return limits_.max_output_bytes; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Status OverBudget() const;
  using ScopePtr = std::shared_ptr<Scope>;

  Result<Flow> Exec(const Body& body, const ScopePtr& scope, std::string& out);
  Result<Flow> ExecNode(const Node& node, const ScopePtr& scope, std::string& out);
  Result<Flow> ExecFor(const Node& node, const ScopePtr& scope, std::string& out);
  Status ExecSet(const Node& node, const ScopePtr& scope);
  Status ExecCallBlock(const Node& node, const ScopePtr& scope, std::string& out);
  Value MakeMacro(const Node& node, const ScopePtr& scope);
  Result<Value> CallMacro(const Node& node, const ScopePtr& closure, CallArgs& args);
  Result<Value> RenderCaller(const Node& block, const ScopePtr& scope);
  Status Assign(const std::vector<std::string>& targets, const Value& value, Scope& scope, int line);

  Result<Value> Eval(const Expr& expr, const ScopePtr& scope);
  Result<Value> EvalInner(const Expr& expr, const ScopePtr& scope);
  Result<CallArgs> EvalArgs(const Expr& expr, size_t first, const ScopePtr& scope);
  Result<Value> EvalBinary(const Expr& expr, const ScopePtr& scope);
  Result<Value> EvalCompare(const Expr& expr, const ScopePtr& scope);
  Result<Value> EvalCall(const Expr& expr, const ScopePtr& scope);

  RenderLimits limits_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  size_t output_bytes_ = 0;  // across nested captures, so the budget holds for the whole render
};

// Python semantics shared by the interpreter and the filters.
Result<Value> GetAttribute(const Value& target, const std::string& name);  // a.b
Result<Value> GetItem(const Value& target, const Value& key);              // a[b]
Result<Value> Slice(const Value& target, const Value& start, const Value& stop, const Value& step);
Result<std::vector<Value>> Iterate(const Value& value);  // for-loop iteration: str -> chars, dict -> keys
Result<bool> Contains(const Value& container, const Value& item);
Result<int64_t> Length(const Value& value);
Result<Value> BinaryOp(const std::string& op, const Value& a, const Value& b, size_t max_bytes);

// The built-in filter and test tables (filters.cc) and Python methods (methods.cc).
Result<Value> RunFilter(Interpreter& interp, const std::string& name, const Value& value, CallArgs& args);
Result<bool> RunTest(Interpreter& interp, const std::string& name, const Value& value, CallArgs& args);
bool HasTest(const std::string& name);
bool HasFilter(const std::string& name);
// Returns the bound method `name` of `target`, or nullopt when the type has no such method.
std::optional<Value> GetMethod(const Value& target, const std::string& name);
// Python json.dumps(value, ensure_ascii=False, indent, separators, sort_keys).
Result<std::string> ToJson(const Value& value, int indent, const std::string& item_separator,
                           const std::string& key_separator, bool sort_keys);
// printf-style `format % args`.
Result<std::string> PercentFormat(const std::string& format, const Value& args);

// Helpers to read call arguments: positional index or keyword name, else the default.
const Value* FindArg(const CallArgs& args, size_t position, const char* keyword);
Status CheckArgs(const CallArgs& args, const char* function, size_t max_positional,
                 std::initializer_list<const char*> keywords);

}  // namespace g4::jinja
