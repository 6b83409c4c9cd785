#include "template/interpreter.h"

#include <string_view>
#include <utility>

namespace g4::jinja {
namespace {

// Operator names compare as string_views: the length is known at compile time, so a mismatch
// costs one size compare instead of strlen + memcmp.
using namespace std::string_view_literals;

bool HasLinePrefix(const std::string& message) { return message.rfind("line ", 0) == 0; }

Status AtLine(const Status& status, int line) {
  if (status.ok() || HasLinePrefix(status.message())) return status;
  return Status::Errorf("line ", line, ": ", status.message());
}

// What Jinja2 reports when an Undefined is used where a value is needed.
Status UndefinedError(const Value& value) {
  return Status::Error(value.str().empty() ? "undefined value used" : value.str());
}

// A for-loop's `loop` variable. Its keys are built once: loops are the hot path of a render.
Value MakeLoop(const std::vector<Value>& items, size_t i, int depth) {
  static const Value kKeys[] = {Value::String("index"),    Value::String("index0"),   Value::String("revindex"),
                                Value::String("revindex0"), Value::String("first"),    Value::String("last"),
                                Value::String("length"),   Value::String("depth"),    Value::String("depth0"),
                                Value::String("previtem"), Value::String("nextitem"), Value::String("cycle")};
  const auto n = static_cast<int64_t>(items.size());
  const auto k = static_cast<int64_t>(i);
  Value loop = Value::Dict();
  DictData& d = loop.dict();
  d.items.reserve(12);
  d.items.emplace_back(kKeys[0], Value::Int(k + 1));
  d.items.emplace_back(kKeys[1], Value::Int(k));
  d.items.emplace_back(kKeys[2], Value::Int(n - k));
  d.items.emplace_back(kKeys[3], Value::Int(n - k - 1));
  d.items.emplace_back(kKeys[4], Value::Bool(k == 0));
  d.items.emplace_back(kKeys[5], Value::Bool(k == n - 1));
  d.items.emplace_back(kKeys[6], Value::Int(n));
  d.items.emplace_back(kKeys[7], Value::Int(depth));
  d.items.emplace_back(kKeys[8], Value::Int(depth - 1));
  if (i > 0) d.items.emplace_back(kKeys[9], items[i - 1]);
  if (i + 1 < items.size()) d.items.emplace_back(kKeys[10], items[i + 1]);
  d.items.emplace_back(kKeys[11], Value::Function("cycle", [k](Interpreter&, CallArgs& args) -> Result<Value> {
                         if (args.positional.empty()) return Status::Error("no items for cycling given");
                         return args.positional[static_cast<size_t>(k) % args.positional.size()];
                       }));
  return loop;
}

}  // namespace

const Value* Scope::Find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    if (const Value* value = s->vars.Find(name)) return value;
  }
  return nullptr;
}

Status Interpreter::OverBudget() const {
  return Status::Errorf("template exceeded its budget of ", limits_.max_steps, " evaluation steps");
}

Status Interpreter::Render(const Body& body, std::shared_ptr<Scope> globals, std::string* out) {
  out->clear();
  out->reserve(8192);  // a typical chat prompt: the buffer grows at most a few times
  G4_ASSIGN_OR_RETURN(Flow flow, Exec(body, globals, *out));
  (void)flow;
  return OkStatus();
}

Result<Interpreter::Flow> Interpreter::Exec(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const NodePtr& node : body) {
    G4_ASSIGN_OR_RETURN(Flow flow, ExecNode(*node, scope, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::ExecNode(const Node& node, const ScopePtr& scope, std::string& out) {
  G4_RETURN_IF_ERROR(Charge(1));
  auto append = [&](const std::string& text) -> Status {
    output_bytes_ += text.size();
    if (output_bytes_ > limits_.max_output_bytes) {
      return Status::Errorf("line ", node.line, ": template output exceeds ", limits_.max_output_bytes, " bytes");
    }
    out += text;
    return OkStatus();
  };
  switch (node.kind) {
    case NodeKind::kText:
      G4_RETURN_IF_ERROR(append(node.text));
      return Flow::kNormal;
    case NodeKind::kOutput: {
      G4_ASSIGN_OR_RETURN(Value value, Eval(*node.expr, scope));
      G4_RETURN_IF_ERROR(append(value.ToString()));
      return Flow::kNormal;
    }
    case NodeKind::kIf:
      for (size_t i = 0; i < node.conditions.size(); ++i) {
        G4_ASSIGN_OR_RETURN(Value condition, Eval(*node.conditions[i], scope));
        if (condition.Truthy()) return Exec(node.bodies[i], scope, out);
      }
      return Exec(node.else_body, scope, out);
    case NodeKind::kFor:
      return ExecFor(node, scope, out);
    case NodeKind::kSet:
      G4_RETURN_IF_ERROR(ExecSet(node, scope));
      return Flow::kNormal;
    case NodeKind::kSetBlock:
    case NodeKind::kFilterBlock: {
      std::string captured;
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      G4_ASSIGN_OR_RETURN(Flow flow, Exec(node.bodies[0], inner, captured));
      (void)flow;
      Value value = Value::String(std::move(captured));
      if (node.filter) {
        auto filter_scope = std::make_shared<Scope>();
        filter_scope->parent = scope;
        filter_scope->vars["\x01block"] = value;
        G4_ASSIGN_OR_RETURN(value, Eval(*node.filter, filter_scope));
      }
      if (node.kind == NodeKind::kFilterBlock) {
        G4_RETURN_IF_ERROR(append(value.ToString()));
      } else {
        G4_RETURN_IF_ERROR(Assign(node.targets, value, *scope, node.line));
      }
      return Flow::kNormal;
    }
    case NodeKind::kMacro:
      scope->vars[node.name] = MakeMacro(node, scope);
      return Flow::kNormal;
    case NodeKind::kCallBlock:
      G4_RETURN_IF_ERROR(ExecCallBlock(node, scope, out));
      return Flow::kNormal;
    case NodeKind::kBreak:
      return Flow::kBreak;
    case NodeKind::kContinue:
      return Flow::kContinue;
    case NodeKind::kScope:
      return Exec(node.bodies[0], scope, out);
  }
  return Flow::kNormal;
}

Status Interpreter::Assign(const std::vector<std::string>& targets, const Value& value, Scope& scope, int line) {
  if (targets.size() == 1) {
    scope.vars[targets[0]] = value;
    return OkStatus();
  }
  auto items = Iterate(value);
  if (!items.ok()) return AtLine(Status::Errorf("cannot unpack non-iterable ", TypeName(value), " object"), line);
  if (items->size() != targets.size()) {
    return Status::Errorf("line ", line, ": ", items->size() > targets.size() ? "too many" : "not enough",
                          " values to unpack (expected ", targets.size(), ", got ", items->size(), ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = (*items)[i];
  return OkStatus();
}

Result<Interpreter::Flow> Interpreter::ExecFor(const Node& node, const ScopePtr& scope, std::string& out) {
  G4_ASSIGN_OR_RETURN(Value iterable, Eval(*node.expr, scope));
  auto listed = Iterate(iterable);
  if (!listed.ok()) return AtLine(listed.status(), node.line);
  std::vector<Value> items = std::move(listed).value();
  if (node.filter) {  // `for x in xs if cond`: loop.* counts only the items kept
    std::vector<Value> kept;
    for (Value& item : items) {
      G4_RETURN_IF_ERROR(AtLine(Charge(1), node.line));
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      G4_RETURN_IF_ERROR(Assign(node.targets, item, *probe, node.line));
      G4_ASSIGN_OR_RETURN(Value keep, Eval(*node.filter, probe));
      if (keep.Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto else_scope = std::make_shared<Scope>();
    else_scope->parent = scope;
    return Exec(node.else_body, else_scope, out);
  }
  const Value* outer_loop = node.uses_loop ? scope->Find("loop") : nullptr;
  int depth = 1;
  if (outer_loop && outer_loop->is_dict()) {
    if (const Value* d = outer_loop->dict().FindString("depth"); d && d->is_int()) depth = static_cast<int>(d->as_int()) + 1;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    G4_RETURN_IF_ERROR(AtLine(Charge(1), node.line));  // an empty body still costs
    auto iteration = std::make_shared<Scope>();
    iteration->parent = scope;
    G4_RETURN_IF_ERROR(Assign(node.targets, items[i], *iteration, node.line));
    if (node.uses_loop) iteration->vars["loop"] = MakeLoop(items, i, depth);
    G4_ASSIGN_OR_RETURN(Flow flow, Exec(node.bodies[0], iteration, out));
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Status Interpreter::ExecSet(const Node& node, const ScopePtr& scope) {
  G4_ASSIGN_OR_RETURN(Value value, Eval(*node.expr, scope));
  if (node.attribute.empty()) return Assign(node.targets, value, *scope, node.line);
  const Value* target = scope->Find(node.targets[0]);
  if (!target || !target->is_namespace()) {
    return Status::Errorf("line ", node.line, ": cannot assign attribute on non-namespace object");
  }
  target->dict().Set(Value::String(node.attribute), std::move(value));
  return OkStatus();
}

Value Interpreter::MakeMacro(const Node& node, const ScopePtr& scope) {
  // The macro holds its defining scope weakly: that scope holds the macro.
  std::weak_ptr<Scope> closure = scope;
  const Node* macro = &node;
  return Value::Function(node.name, [macro, closure](Interpreter& interp, CallArgs& args) -> Result<Value> {
    ScopePtr parent = closure.lock();
    if (!parent) return Status::Errorf("macro '", macro->name, "' called after its scope ended");
    return interp.CallMacro(*macro, parent, args);
  });
}

Result<Value> Interpreter::CallMacro(const Node& node, const ScopePtr& closure, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    return Status::Errorf("line ", node.line, ": macro calls nested deeper than ", limits_.max_call_depth);
  }
  auto scope = std::make_shared<Scope>();
  scope->parent = closure;
  const auto& params = node.params;
  std::vector<bool> bound(params.size(), false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < params.size()) {
      scope->vars[params[i].name] = args.positional[i];
      bound[i] = true;
    } else if (node.catch_varargs) {
      varargs.push_back(args.positional[i]);
    } else {
      return Status::Errorf("macro '", node.name, "' takes not more than ", params.size(), " argument(s)");
    }
  }
  Value kwargs = Value::Dict();
  for (auto& [key, value] : args.keyword) {
    size_t p = 0;
    while (p < params.size() && params[p].name != key) ++p;
    if (p < params.size()) {
      if (bound[p]) return Status::Errorf("macro '", node.name, "' got multiple values for argument '", key, "'");
      scope->vars[key] = value;
      bound[p] = true;
    } else if (key == "caller") {
      scope->vars["caller"] = value;
    } else if (node.catch_kwargs) {
      kwargs.dict().Set(Value::String(key), value);
    } else {
      return Status::Errorf("macro '", node.name, "' takes no keyword argument '", key, "'");
    }
  }
  ++call_depth_;
  for (size_t p = 0; p < params.size(); ++p) {
    if (bound[p]) continue;
    if (params[p].default_value) {
      auto value = Eval(*params[p].default_value, scope);
      if (!value.ok()) {
        --call_depth_;
        return value.status();
      }
      scope->vars[params[p].name] = std::move(value).value();
    } else {
      scope->vars[params[p].name] = Value::Undefined(Str("'", params[p].name, "' is undefined"));
    }
  }
  if (node.catch_varargs) scope->vars["varargs"] = Value::Tuple(std::move(varargs));
  if (node.catch_kwargs) scope->vars["kwargs"] = kwargs;
  std::string out;
  auto flow = Exec(node.bodies[0], scope, out);
  --call_depth_;
  if (!flow.ok()) return flow.status();
  return Value::String(std::move(out));
}

Status Interpreter::ExecCallBlock(const Node& node, const ScopePtr& scope, std::string& out) {
  const Expr& call = *node.expr;
  G4_ASSIGN_OR_RETURN(Value callee, Eval(*call.children[0], scope));
  G4_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, 1, scope));
  std::weak_ptr<Scope> closure = scope;
  const Node* block = &node;
  args.keyword.emplace_back("caller", Value::Function("caller", [block, closure](Interpreter& in, CallArgs& a) -> Result<Value> {
    ScopePtr parent = closure.lock();
    if (!parent) return Status::Error("caller() called after its scope ended");
    auto s = std::make_shared<Scope>();
    s->parent = parent;
    if (a.positional.size() > block->params.size()) {
      return Status::Errorf("caller takes not more than ", block->params.size(), " argument(s)");
    }
    for (auto& [k, v] : a.keyword) {
      bool known = false;
      for (const MacroParam& p : block->params) known = known || p.name == k;
      if (!known) return Status::Errorf("caller takes no keyword argument '", k, "'");
      s->vars[k] = v;
    }
    for (size_t i = 0; i < block->params.size(); ++i) {
      const MacroParam& p = block->params[i];
      if (i < a.positional.size()) {
        s->vars[p.name] = a.positional[i];
      } else if (s->vars.count(p.name)) {
        continue;
      } else if (p.default_value) {
        G4_ASSIGN_OR_RETURN(s->vars[p.name], in.Eval(*p.default_value, s));
      } else {
        s->vars[p.name] = Value::Undefined(Str("'", p.name, "' is undefined"));
      }
    }
    return in.RenderCaller(*block, s);
  }));
  auto result = Call(callee, args);
  if (!result.ok()) return AtLine(result.status(), node.line);
  const std::string text = result->ToString();
  output_bytes_ += text.size();
  if (output_bytes_ > limits_.max_output_bytes) {
    return Status::Errorf("line ", node.line, ": template output exceeds ", limits_.max_output_bytes, " bytes");
  }
  out += text;
  return OkStatus();
}

Result<Value> Interpreter::RenderCaller(const Node& block, const ScopePtr& scope) {
  if (call_depth_ >= limits_.max_call_depth) {
    return Status::Errorf("line ", block.line, ": macro calls nested deeper than ", limits_.max_call_depth);
  }
  ++call_depth_;
  std::string out;
  auto flow = Exec(block.bodies[0], scope, out);
  --call_depth_;
  if (!flow.ok()) return flow.status();
  return Value::String(std::move(out));
}

Result<Value> Interpreter::Call(const Value& callee, CallArgs& args) {
  if (callee.is_callable()) return callee.callable().function(*this, args);
  if (callee.is_undefined()) return UndefinedError(callee);
  return Status::Errorf("'", TypeName(callee), "' object is not callable");
}

Result<Value> Interpreter::ApplyFilter(const std::string& name, const Value& value, CallArgs& args) {
  return RunFilter(*this, name, value, args);
}

Result<bool> Interpreter::ApplyTest(const std::string& name, const Value& value, CallArgs& args) {
  return RunTest(*this, name, value, args);
}

Result<CallArgs> Interpreter::EvalArgs(const Expr& expr, size_t first, const ScopePtr& scope) {
  CallArgs args;
  args.line = expr.line;
  for (size_t i = first; i < expr.children.size(); ++i) {
    G4_ASSIGN_OR_RETURN(Value value, Eval(*expr.children[i], scope));
    args.positional.push_back(std::move(value));
  }
  for (const auto& [key, value_expr] : expr.kwargs) {
    G4_ASSIGN_OR_RETURN(Value value, Eval(*value_expr, scope));
    args.keyword.emplace_back(key, std::move(value));
  }
  return args;
}

Result<Value> Interpreter::Eval(const Expr& expr, const ScopePtr& scope) {
  Status charged = Charge(1);
  if (!charged.ok()) return AtLine(charged, expr.line);
  auto result = EvalInner(expr, scope);
  if (!result.ok()) return AtLine(result.status(), expr.line);
  // Big values cost in proportion to their size, so that doubling loops run out of budget.
  if (result->is_string() && result->str().size() > 256) {
    if (result->str().size() > limits_.max_output_bytes) {
      return Status::Errorf("line ", expr.line, ": string value exceeds ", limits_.max_output_bytes, " bytes");
    }
    Status s = Charge(result->str().size() / 256);
    if (!s.ok()) return AtLine(s, expr.line);
  } else if (result->is_list() && result->list().items.size() > 64) {
    Status s = Charge(result->list().items.size() / 16);
    if (!s.ok()) return AtLine(s, expr.line);
  }
  return result;
}

Result<Value> Interpreter::EvalInner(const Expr& expr, const ScopePtr& scope) {
  switch (expr.kind) {
    case ExprKind::kLiteral:
      return expr.value;
    case ExprKind::kName: {
      const Value* value = scope->Find(expr.name);
      if (value) return *value;
      return Value::Undefined("'" + expr.name + "' is undefined");
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(expr.children.size());
      for (const ExprPtr& child : expr.children) {
        G4_ASSIGN_OR_RETURN(Value item, Eval(*child, scope));
        items.push_back(std::move(item));
      }
      return expr.kind == ExprKind::kList ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Value dict = Value::Dict();
      for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        G4_ASSIGN_OR_RETURN(Value key, Eval(*expr.children[i], scope));
        if (key.is_list() && !key.list().is_tuple) return Status::Error("unhashable type: 'list'");
        if (key.is_dict()) return Status::Error("unhashable type: 'dict'");
        G4_ASSIGN_OR_RETURN(Value value, Eval(*expr.children[i + 1], scope));
        dict.dict().Set(std::move(key), std::move(value));
      }
      return dict;
    }
    case ExprKind::kAttribute: {
      G4_ASSIGN_OR_RETURN(Value target, Eval(*expr.children[0], scope));
      return GetAttribute(target, expr.name);
    }
    case ExprKind::kSubscript: {
      G4_ASSIGN_OR_RETURN(Value target, Eval(*expr.children[0], scope));
      G4_ASSIGN_OR_RETURN(Value key, Eval(*expr.children[1], scope));
      return GetItem(target, key);
    }
    case ExprKind::kSlice: {
      G4_ASSIGN_OR_RETURN(Value target, Eval(*expr.children[0], scope));
      Value parts[3] = {Value::None(), Value::None(), Value::None()};
      for (int i = 0; i < 3; ++i) {
        if (expr.children[1 + i]) { G4_ASSIGN_OR_RETURN(parts[i], Eval(*expr.children[1 + i], scope)); }
      }
      return Slice(target, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kCall:
      return EvalCall(expr, scope);
    case ExprKind::kFilter: {
      G4_ASSIGN_OR_RETURN(Value value, Eval(*expr.children[0], scope));
      G4_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, 1, scope));
      return ApplyFilter(expr.name, value, args);
    }
    case ExprKind::kTest: {
      G4_ASSIGN_OR_RETURN(Value value, Eval(*expr.children[0], scope));
      G4_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, 1, scope));
      G4_ASSIGN_OR_RETURN(bool passed, ApplyTest(expr.name, value, args));
      return Value::Bool(passed != expr.negated);
    }
    case ExprKind::kUnary: {
      G4_ASSIGN_OR_RETURN(Value operand, Eval(*expr.children[0], scope));
      if (expr.name == "not"sv) return Value::Bool(!operand.Truthy());
      if (operand.is_undefined()) return UndefinedError(operand);
      if (operand.is_float()) return Value::Float(expr.name == "-"sv ? -operand.as_double() : operand.as_double());
      if (operand.is_number()) {
        const int64_t i = operand.as_int();
        if (expr.name == "-"sv && i == INT64_MIN) return Status::Error("integer overflow");
        return Value::Int(expr.name == "-"sv ? -i : i);
      }
      return Status::Errorf("bad operand type for unary ", expr.name, ": '", TypeName(operand), "'");
    }
    case ExprKind::kBinary:
      return EvalBinary(expr, scope);
    case ExprKind::kCompare:
      return EvalCompare(expr, scope);
    case ExprKind::kCondition: {
      G4_ASSIGN_OR_RETURN(Value condition, Eval(*expr.children[0], scope));
      if (condition.Truthy()) return Eval(*expr.children[1], scope);
      if (expr.children[2]) return Eval(*expr.children[2], scope);
      return Value::Undefined("the inline if-expression evaluated to false and no else section was defined");
    }
  }
  return Status::Error("internal: unknown expression");
}

Result<Value> Interpreter::EvalBinary(const Expr& expr, const ScopePtr& scope) {
  G4_ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0], scope));
  if (expr.name == "and"sv) return left.Truthy() ? Eval(*expr.children[1], scope) : Result<Value>(left);
  if (expr.name == "or"sv) return left.Truthy() ? Result<Value>(left) : Eval(*expr.children[1], scope);
  G4_ASSIGN_OR_RETURN(Value right, Eval(*expr.children[1], scope));
  return BinaryOp(expr.name, left, right, limits_.max_output_bytes);
}

Result<Value> Interpreter::EvalCompare(const Expr& expr, const ScopePtr& scope) {
  G4_ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0], scope));
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    G4_ASSIGN_OR_RETURN(Value right, Eval(*expr.children[i + 1], scope));
    const std::string& op = expr.ops[i];
    bool result = false;
    if (op == "=="sv || op == "!="sv) {
      result = ValuesEqual(left, right) == (op == "=="sv);
    } else if (op == "in"sv || op == "notin"sv) {
      G4_ASSIGN_OR_RETURN(bool found, Contains(right, left));
      result = found == (op == "in"sv);
    } else {
      if (left.is_undefined()) return UndefinedError(left);
      if (right.is_undefined()) return UndefinedError(right);
      const bool flip = op == ">"sv || op == ">="sv;
      G4_ASSIGN_OR_RETURN(bool less, flip ? ValueLess(right, left) : ValueLess(left, right));
      result = less || ((op == "<="sv || op == ">="sv) && ValuesEqual(left, right));
    }
    if (!result) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

Result<Value> Interpreter::EvalCall(const Expr& expr, const ScopePtr& scope) {
  G4_ASSIGN_OR_RETURN(Value callee, Eval(*expr.children[0], scope));
  G4_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, 1, scope));
  return Call(callee, args);
}

}  // namespace g4::jinja
