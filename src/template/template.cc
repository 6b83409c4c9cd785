#include "template/template.h"

#include <cmath>
#include <ctime>

#include "template/parser.h"

namespace g4::jinja {
namespace {

template <class Json>
Value ConvertJson(const Json& json, int depth) {
  if (depth > 512) return Value::None();  // nlohmann's parser stops far earlier
  switch (json.type()) {
    case Json::value_t::null: return Value::None();
    case Json::value_t::boolean: return Value::Bool(json.template get<bool>());
    case Json::value_t::number_integer: return Value::Int(json.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const auto u = json.template get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Value::Float(static_cast<double>(u)) : Value::Int(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float: return Value::Float(json.template get<double>());
    case Json::value_t::string: return Value::String(json.template get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(ConvertJson(item, depth + 1));
      return Value::List(std::move(items));
    }
    case Json::value_t::object: {
      Value dict = Value::Dict();
      dict.dict().items.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) {
        dict.dict().items.emplace_back(Value::String(it.key()), ConvertJson(it.value(), depth + 1));
      }
      return dict;
    }
    default: return Value::None();
  }
}

// Jinja2 refuses unknown filters and tests when it compiles, even in branches never taken.
Status CheckNames(const Expr& expr) {
  if (expr.kind == ExprKind::kFilter && !HasFilter(expr.name)) {
    return Status::Errorf("line ", expr.line, ": no filter named '", expr.name, "'");
  }
  if (expr.kind == ExprKind::kTest && !HasTest(expr.name)) {
    return Status::Errorf("line ", expr.line, ": no test named '", expr.name, "'");
  }
  for (const ExprPtr& child : expr.children) {
    if (child) G4_RETURN_IF_ERROR(CheckNames(*child));
  }
  for (const auto& [key, value] : expr.kwargs) G4_RETURN_IF_ERROR(CheckNames(*value));
  return OkStatus();
}

Status CheckNames(const Body& body) {
  for (const NodePtr& node : body) {
    for (const Expr* e : {node->expr.get(), node->filter.get()}) {
      if (e) G4_RETURN_IF_ERROR(CheckNames(*e));
    }
    for (const ExprPtr& c : node->conditions) G4_RETURN_IF_ERROR(CheckNames(*c));
    for (const MacroParam& p : node->params) {
      if (p.default_value) G4_RETURN_IF_ERROR(CheckNames(*p.default_value));
    }
    for (const Body& b : node->bodies) G4_RETURN_IF_ERROR(CheckNames(b));
    G4_RETURN_IF_ERROR(CheckNames(node->else_body));
  }
  return OkStatus();
}

void AddGlobals(Scope& globals) {
  globals.vars["raise_exception"] = Value::Function("raise_exception", [](Interpreter&, CallArgs& args) -> Result<Value> {
    return Status::Error(args.positional.empty() ? std::string("raise_exception() called") : args.positional[0].ToString());
  });
  globals.vars["strftime_now"] = Value::Function("strftime_now", [](Interpreter&, CallArgs& args) -> Result<Value> {
    if (args.positional.empty() || !args.positional[0].is_string()) return Status::Error("strftime_now() needs a format string");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buffer[512];
    const size_t n = std::strftime(buffer, sizeof(buffer), args.positional[0].str().c_str(), &local);
    return Value::String(std::string(buffer, n));
  });
  globals.vars["range"] = Value::Function("range", [](Interpreter&, CallArgs& args) -> Result<Value> {
    int64_t start = 0, stop = 0, step = 1;
    for (const Value& a : args.positional) {
      if (!a.is_int() && !a.is_bool()) return Status::Errorf("'", TypeName(a), "' object cannot be interpreted as an integer");
    }
    if (args.positional.size() == 1) {
      stop = args.positional[0].as_int();
    } else if (args.positional.size() == 2 || args.positional.size() == 3) {
      start = args.positional[0].as_int();
      stop = args.positional[1].as_int();
      if (args.positional.size() == 3) step = args.positional[2].as_int();
    } else {
      return Status::Errorf("range expected 1 to 3 arguments, got ", args.positional.size());
    }
    if (step == 0) return Status::Error("range() arg 3 must not be zero");
    const double count = step > 0 ? std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step))
                                  : std::ceil((static_cast<double>(start) - static_cast<double>(stop)) / -static_cast<double>(step));
    if (count > 100000) return Status::Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    std::vector<Value> items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.push_back(Value::Int(i));
    return Value::List(std::move(items));
  });
  globals.vars["namespace"] = Value::Function("namespace", [](Interpreter&, CallArgs& args) -> Result<Value> {
    Value ns = Value::Namespace();
    for (const Value& a : args.positional) {
      if (!a.is_dict()) return Status::Error("namespace() positional argument must be a mapping");
      for (const auto& [k, v] : a.dict().items) ns.dict().Set(k, v);
    }
    for (const auto& [k, v] : args.keyword) ns.dict().Set(Value::String(k), v);
    return ns;
  });
  globals.vars["dict"] = Value::Function("dict", [](Interpreter&, CallArgs& args) -> Result<Value> {
    Value d = Value::Dict();
    for (const Value& a : args.positional) {
      if (!a.is_dict()) return Status::Error("dict() positional argument must be a mapping");
      for (const auto& [k, v] : a.dict().items) d.dict().Set(k, v);
    }
    for (const auto& [k, v] : args.keyword) d.dict().Set(Value::String(k), v);
    return d;
  });
}

}  // namespace

Value FromJson(const nlohmann::ordered_json& json) { return ConvertJson(json, 0); }
Value FromJson(const nlohmann::json& json) { return ConvertJson(json, 0); }

Result<Template> Template::Parse(std::string_view source) {
  G4_ASSIGN_OR_RETURN(Body body, ParseTemplate(source));
  G4_RETURN_IF_ERROR(CheckNames(body));
  return Template(std::make_shared<const Body>(std::move(body)));
}

Result<std::string> Template::Render(const nlohmann::ordered_json& context, const RenderLimits& limits) const {
  return RenderValue(FromJson(context), limits);
}

Result<std::string> Template::Render(const nlohmann::json& context, const RenderLimits& limits) const {
  return RenderValue(FromJson(context), limits);
}

Result<std::string> Template::RenderValue(const Value& context, const RenderLimits& limits) const {
  auto globals = std::make_shared<Scope>();
  AddGlobals(*globals);
  if (context.is_dict()) {
    for (const auto& [k, v] : context.dict().items) globals->vars[k.str()] = v;
  } else if (!context.is_none()) {
    return Status::Error("template context must be a JSON object");
  }
  Interpreter interpreter(limits);
  std::string out;
  G4_RETURN_IF_ERROR(interpreter.Render(*body_, globals, &out));
  return out;
}

}  // namespace g4::jinja
