// Python semantics of attribute and item access, slicing, iteration, arithmetic, json.dumps
// and %-formatting, as Jinja2's sandbox applies them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "template/interpreter.h"

namespace g4::jinja {
namespace {

Status UndefinedError(const Value& value) {
  return Status::Error(value.str().empty() ? "undefined value used" : value.str());
}

Value MissingAttribute(const Value& target, const std::string& name) {
  return Value::Undefined(std::string("'") + TypeName(target) + " object' has no attribute '" + name + "'");
}

bool AddOverflows(int64_t a, int64_t b, int64_t* out) { return __builtin_add_overflow(a, b, out); }

}  // namespace

const Value* FindArg(const CallArgs& args, size_t position, const char* keyword) {
  if (position < args.positional.size()) return &args.positional[position];
  for (const auto& [k, v] : args.keyword) {
    if (k == keyword) return &v;
  }
  return nullptr;
}

Status CheckArgs(const CallArgs& args, const char* function, size_t max_positional,
                 std::initializer_list<const char*> keywords) {
  if (args.positional.size() > max_positional) {
    return Status::Errorf(function, "() takes at most ", max_positional, " argument(s) (", args.positional.size(), " given)");
  }
  for (const auto& [k, v] : args.keyword) {
    bool known = false;
    size_t index = 0;
    for (const char* keyword : keywords) {
      if (k == keyword) {
        known = true;
        if (index < args.positional.size()) return Status::Errorf(function, "() got multiple values for argument '", k, "'");
      }
      ++index;
    }
    if (!known) return Status::Errorf(function, "() got an unexpected keyword argument '", k, "'");
  }
  return OkStatus();
}

Result<Value> GetAttribute(const Value& target, const std::string& name) {
  if (target.is_undefined()) return UndefinedError(target);
  if (auto method = GetMethod(target, name)) return *method;  // getattr() comes first
  if (target.is_dict() || target.is_namespace()) {
    if (const Value* value = target.dict().FindString(name)) return *value;
  }
  return MissingAttribute(target, name);
}

Result<Value> GetItem(const Value& target, const Value& key) {
  if (target.is_undefined()) return UndefinedError(target);
  if (target.is_dict() || target.is_namespace()) {
    if (const Value* value = target.dict().Find(key)) return *value;
  } else if ((target.is_list() || target.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t index = key.as_int();
    if (target.is_list()) {
      const auto n = static_cast<int64_t>(target.list().items.size());
      if (index < 0) index += n;
      if (index >= 0 && index < n) return target.list().items[static_cast<size_t>(index)];
    } else {
      const auto chars = SplitCodePoints(target.str());
      const auto n = static_cast<int64_t>(chars.size());
      if (index < 0) index += n;
      if (index >= 0 && index < n) return Value::String(std::string(chars[static_cast<size_t>(index)]));
    }
    return Value::Undefined(Str("'", TypeName(target), " object' has no element ", key.as_int()));
  }
  if (key.is_string()) {  // Jinja2 falls back to getattr()
    if (auto method = GetMethod(target, key.str())) return *method;
    return MissingAttribute(target, key.str());
  }
  return Value::Undefined(Str("'", TypeName(target), " object' has no element ", key.Repr()));
}

Result<Value> Slice(const Value& target, const Value& start_value, const Value& stop_value, const Value& step_value) {
  if (target.is_undefined()) return UndefinedError(target);
  for (const Value* v : {&start_value, &stop_value, &step_value}) {
    if (!v->is_none() && !v->is_int() && !v->is_bool()) {
      return Status::Error("slice indices must be integers or None");
    }
  }
  if (!target.is_list() && !target.is_string()) return Value::Undefined(Str("'", TypeName(target), "' object is not subscriptable"));
  const int64_t step = step_value.is_none() ? 1 : step_value.as_int();
  if (step == 0) return Status::Error("slice step cannot be zero");
  std::vector<std::string_view> chars;
  if (target.is_string()) chars = SplitCodePoints(target.str());
  const int64_t n = static_cast<int64_t>(target.is_list() ? target.list().items.size() : chars.size());
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](const Value& v, int64_t fallback) {
    if (v.is_none()) return fallback;
    int64_t i = v.as_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t start = adjust(start_value, step < 0 ? n - 1 : 0);
  const int64_t stop = adjust(stop_value, step < 0 ? -1 : n);
  std::vector<size_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picked.push_back(static_cast<size_t>(i));
  if (target.is_list()) {
    std::vector<Value> out;
    out.reserve(picked.size());
    for (size_t i : picked) out.push_back(target.list().items[i]);
    return target.list().is_tuple ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
  }
  std::string out;
  for (size_t i : picked) out.append(chars[i]);
  return Value::String(std::move(out));
}

Result<std::vector<Value>> Iterate(const Value& value) {
  switch (value.type()) {
    case Type::kUndefined:
      return std::vector<Value>{};
    case Type::kList:
      return value.list().items;
    case Type::kDict: {
      std::vector<Value> keys;
      keys.reserve(value.dict().items.size());
      for (const auto& [k, v] : value.dict().items) keys.push_back(k);
      return keys;
    }
    case Type::kString: {
      std::vector<Value> chars;
      for (std::string_view c : SplitCodePoints(value.str())) chars.push_back(Value::String(std::string(c)));
      return chars;
    }
    default:
      return Status::Errorf("'", TypeName(value), "' object is not iterable");
  }
}

Result<bool> Contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Type::kUndefined:
      return false;
    case Type::kString:
      if (!item.is_string()) {
        return Status::Errorf("'in <string>' requires string as left operand, not ", TypeName(item));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Type::kList:
      for (const Value& v : container.list().items) {
        if (ValuesEqual(v, item)) return true;
      }
      return false;
    case Type::kDict:
      if (item.is_list() && !item.list().is_tuple) return Status::Error("unhashable type: 'list'");
      return container.dict().Find(item) != nullptr;
    default:
      return Status::Errorf("argument of type '", TypeName(container), "' is not iterable");
  }
}

Result<int64_t> Length(const Value& value) {
  switch (value.type()) {
    case Type::kUndefined:
      return 0;
    case Type::kString:
      return static_cast<int64_t>(CountCodePoints(value.str()));
    case Type::kList:
      return static_cast<int64_t>(value.list().items.size());
    case Type::kDict:
      return static_cast<int64_t>(value.dict().items.size());
    default:
      return Status::Errorf("object of type '", TypeName(value), "' has no len()");
  }
}

namespace {

Status Unsupported(const std::string& op, const Value& a, const Value& b) {
  if (op == "+" && a.is_string()) return Status::Errorf("can only concatenate str (not \"", TypeName(b), "\") to str");
  if (op == "+" && a.is_list() && !a.list().is_tuple) {
    return Status::Errorf("can only concatenate list (not \"", TypeName(b), "\") to list");
  }
  return Status::Errorf("unsupported operand type(s) for ", op, ": '", TypeName(a), "' and '", TypeName(b), "'");
}

Result<Value> Repeat(const Value& sequence, int64_t times, size_t max_bytes) {
  if (times < 0) times = 0;
  if (sequence.is_string()) {
    if (static_cast<double>(sequence.str().size()) * static_cast<double>(times) > static_cast<double>(max_bytes)) {
      return Status::Errorf("string repetition exceeds ", max_bytes, " bytes");
    }
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += sequence.str();
    return Value::String(std::move(out));
  }
  const auto& items = sequence.list().items;
  if (static_cast<double>(items.size()) * static_cast<double>(times) > 1e6) return Status::Error("list repetition too large");
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return sequence.list().is_tuple ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

double PyFloorMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

// Operator names compare as string_views: a length mismatch rejects without strlen or memcmp.
using namespace std::string_view_literals;

Result<Value> BinaryOp(const std::string& op, const Value& a, const Value& b, size_t max_bytes) {
  if (op == "~"sv) {
    std::string out = a.ToString();
    out += b.ToString();
    if (out.size() > max_bytes) return Status::Errorf("string value exceeds ", max_bytes, " bytes");
    return Value::String(std::move(out));
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (op == "%"sv && a.is_string()) {
    G4_ASSIGN_OR_RETURN(std::string text, PercentFormat(a.str(), b));
    return Value::String(std::move(text));
  }
  if (a.is_number() && b.is_number()) {
    const bool floats = a.is_float() || b.is_float();
    const double x = a.as_double(), y = b.as_double();
    const int64_t i = a.as_int(), j = b.as_int();
    int64_t r = 0;
    if (op == "+"sv) {
      if (floats) return Value::Float(x + y);
      if (AddOverflows(i, j, &r)) return Status::Error("integer overflow");
      return Value::Int(r);
    }
    if (op == "-"sv) {
      if (floats) return Value::Float(x - y);
      if (__builtin_sub_overflow(i, j, &r)) return Status::Error("integer overflow");
      return Value::Int(r);
    }
    if (op == "*"sv) {
      if (floats) return Value::Float(x * y);
      if (__builtin_mul_overflow(i, j, &r)) return Status::Error("integer overflow");
      return Value::Int(r);
    }
    if (op == "/"sv) {
      if (y == 0) return Status::Error(floats ? "float division by zero" : "division by zero");
      return Value::Float(x / y);
    }
    if (op == "//"sv || op == "%"sv) {
      if (floats) {
        if (y == 0) return Status::Error(op == "//"sv ? "float floor division by zero" : "float modulo");
        const double m = PyFloorMod(x, y);
        return Value::Float(op == "%"sv ? m : std::round((x - m) / y));
      }
      if (j == 0) return Status::Error(op == "//"sv ? "integer division or modulo by zero" : "integer modulo by zero");
      if (i == INT64_MIN && j == -1) return Status::Error("integer overflow");
      int64_t q = i / j, m = i % j;
      if (m != 0 && ((m < 0) != (j < 0))) {
        m += j;
        --q;
      }
      return Value::Int(op == "//"sv ? q : m);
    }
    if (op == "**"sv) {
      if (!floats && j >= 0) {
        int64_t result = 1, base = i;
        for (int64_t e = j; e > 0; e >>= 1) {
          if ((e & 1) && __builtin_mul_overflow(result, base, &result)) return Status::Error("integer overflow");
          if (e > 1 && __builtin_mul_overflow(base, base, &base)) return Status::Error("integer overflow");
        }
        return Value::Int(result);
      }
      if (x == 0 && y < 0) return Status::Error("0.0 cannot be raised to a negative power");
      const double p = std::pow(x, y);
      if (std::isnan(p) && !std::isnan(x) && !std::isnan(y)) return Status::Error("complex result of power");
      return Value::Float(p);
    }
  }
  if (op == "+"sv) {
    if (a.is_string() && b.is_string()) {
      if (a.str().size() + b.str().size() > max_bytes) return Status::Errorf("string value exceeds ", max_bytes, " bytes");
      return Value::String(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
      if (a.list().items.size() + b.list().items.size() > 1'000'000) return Status::Error("list too large");
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return a.list().is_tuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
    }
  }
  if (op == "*"sv) {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return Repeat(a, b.as_int(), max_bytes);
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return Repeat(b, a.as_int(), max_bytes);
  }
  return Unsupported(op, a, b);
}

namespace {

void JsonString(const std::string& s, std::string& out) {
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
        if (c < 0x20 || c == 0x7F) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          out += buffer;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

struct JsonWriter {
  int indent;
  std::string item_separator, key_separator;
  bool sort_keys;
  std::string out;

  void Newline(int depth) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(depth), ' ');
  }

  Status Write(const Value& v, int depth) {
    if (depth > 200) return Status::Error("maximum recursion depth exceeded while encoding a JSON object");
    switch (v.type()) {
      case Type::kNone: out += "null"; return OkStatus();
      case Type::kBool: out += v.as_bool() ? "true" : "false"; return OkStatus();
      case Type::kInt: out += std::to_string(v.as_int()); return OkStatus();
      case Type::kFloat: {
        const double d = v.as_double();
        out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : FormatFloat(d);
        return OkStatus();
      }
      case Type::kString: JsonString(v.str(), out); return OkStatus();
      case Type::kList: {
        const auto& items = v.list().items;
        if (items.empty()) {
          out += "[]";
          return OkStatus();
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_separator;
          if (indent >= 0) Newline(depth + 1);
          G4_RETURN_IF_ERROR(Write(items[i], depth + 1));
        }
        if (indent >= 0) Newline(depth);
        out += ']';
        return OkStatus();
      }
      case Type::kDict: {
        std::vector<const std::pair<Value, Value>*> entries;
        for (const auto& entry : v.dict().items) entries.push_back(&entry);
        if (entries.empty()) {
          out += "{}";
          return OkStatus();
        }
        if (sort_keys) {
          Status failure;
          std::stable_sort(entries.begin(), entries.end(), [&](auto* x, auto* y) {
            auto less = ValueLess(x->first, y->first);
            if (!less.ok()) failure = less.status();
            return less.ok() && *less;
          });
          G4_RETURN_IF_ERROR(failure);
        }
        out += '{';
        bool first = true;
        for (const auto* entry : entries) {
          if (!first) out += item_separator;
          first = false;
          if (indent >= 0) Newline(depth + 1);
          const Value& key = entry->first;
          if (key.is_string()) {
            JsonString(key.str(), out);
          } else if (key.is_none()) {
            out += "\"null\"";
          } else if (key.is_bool()) {
            out += key.as_bool() ? "\"true\"" : "\"false\"";
          } else if (key.is_int() || key.is_float()) {
            out += '"';
            G4_RETURN_IF_ERROR(Write(key, depth + 1));
            out += '"';
          } else {
            return Status::Errorf("keys must be str, int, float, bool or None, not ", TypeName(key));
          }
          out += key_separator;
          G4_RETURN_IF_ERROR(Write(entry->second, depth + 1));
        }
        if (indent >= 0) Newline(depth);
        out += '}';
        return OkStatus();
      }
      default:
        return Status::Errorf("Object of type ", TypeName(v), " is not JSON serializable");
    }
  }
};

}  // namespace

Result<std::string> ToJson(const Value& value, int indent, const std::string& item_separator,
                           const std::string& key_separator, bool sort_keys) {
  JsonWriter writer{indent, item_separator, key_separator, sort_keys, {}};
  G4_RETURN_IF_ERROR(writer.Write(value, 0));
  return std::move(writer.out);
}

Result<std::string> PercentFormat(const std::string& format, const Value& args) {
  std::vector<Value> values;
  const Value* mapping = nullptr;
  if (args.is_list() && args.list().is_tuple) {
    values = args.list().items;
  } else if (args.is_dict()) {
    mapping = &args;
    values.push_back(args);
  } else {
    values.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) return Status::Error("incomplete format");
    if (format[i] == '%') {
      out += '%';
      continue;
    }
    const Value* arg = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos || !mapping) return Status::Error("format requires a mapping");
      const Value* found = mapping->dict().FindString(format.substr(i + 1, close - i - 1));
      if (!found) return Status::Errorf("KeyError: '", format.substr(i + 1, close - i - 1), "'");
      arg = found;
      i = close + 1;
    }
    std::string spec = "%";
    while (i < format.size() && std::string_view("-+ #0123456789.").find(format[i]) != std::string_view::npos) spec += format[i++];
    if (i >= format.size()) return Status::Error("incomplete format");
    const char conversion = format[i];
    if (!arg) {
      if (next >= values.size()) return Status::Error("not enough arguments for format string");
      arg = &values[next++];
    }
    char buffer[512];
    if (spec.size() > 12) return Status::Error("format specification too long");
    switch (conversion) {
      case 's':
      case 'r': {
        const std::string text = conversion == 's' ? arg->ToString() : arg->Repr();
        std::string fmt = spec + "s";
        if (spec == "%") {
          out += text;
        } else {
          const int n = std::snprintf(buffer, sizeof(buffer), fmt.c_str(), text.c_str());
          if (n < 0 || static_cast<size_t>(n) >= sizeof(buffer)) return Status::Error("formatted value too long");
          out += buffer;
        }
        break;
      }
      case 'd':
      case 'i': {
        if (!arg->is_number()) return Status::Errorf("%d format: a real number is required, not ", TypeName(*arg));
        const long long v = arg->is_float() ? static_cast<long long>(arg->as_double()) : arg->as_int();
        const int n = std::snprintf(buffer, sizeof(buffer), (spec + "lld").c_str(), v);
        if (n < 0 || static_cast<size_t>(n) >= sizeof(buffer)) return Status::Error("formatted value too long");
        out += buffer;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'g': {
        if (!arg->is_number()) return Status::Errorf("must be real number, not ", TypeName(*arg));
        const int n = std::snprintf(buffer, sizeof(buffer), (spec + conversion).c_str(), arg->as_double());
        if (n < 0 || static_cast<size_t>(n) >= sizeof(buffer)) return Status::Error("formatted value too long");
        out += buffer;
        break;
      }
      default:
        return Status::Errorf("unsupported format character '", std::string(1, conversion), "'");
    }
  }
  if (!mapping && next < values.size()) return Status::Error("not all arguments converted during string formatting");
  return out;
}

}  // namespace g4::jinja
