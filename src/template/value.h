// The values a Jinja template computes with, modelled on the Python objects Jinja2 sees when
// Hugging Face renders a chat template: None, bool, int, float, str, list/tuple, dict (insertion
// ordered), namespace, callables, and Jinja2's default Undefined. Printing, truthiness, equality
// and ordering follow Python so that renders are byte-identical.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace g4::jinja {

class Value;
class Interpreter;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;  // prints as (a, b); otherwise identical to a list here
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order, keys unique
  const Value* Find(const Value& key) const;
  const Value* FindString(std::string_view key) const;
  void Set(Value key, Value value);
};

// Positional and keyword arguments of a call, already evaluated.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  int line = 0;
};

using NativeFunction = std::function<Result<Value>(Interpreter&, CallArgs&)>;

struct CallableData {
  std::string name;
  NativeFunction function;
};

enum class Type : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kNamespace,  // namespace(): a dict whose attributes templates may assign
  kCallable,
};

class Value {
 public:
  Value() = default;  // Undefined
  static Value Undefined(std::string name = {});
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value List(std::vector<Value> items = {});
  static Value Tuple(std::vector<Value> items);
  static Value Dict();
  static Value Namespace();
  static Value Function(std::string name, NativeFunction function);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kBool || type_ == Type::kInt || type_ == Type::kFloat; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_namespace() const { return type_ == Type::kNamespace; }
  bool is_mapping() const { return type_ == Type::kDict; }
  bool is_callable() const { return type_ == Type::kCallable; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return type_ == Type::kBool ? (bool_ ? 1 : 0) : int_; }
  double as_double() const { return type_ == Type::kFloat ? float_ : static_cast<double>(as_int()); }
  const std::string& str() const;  // the string, or an Undefined's name
  ListData& list() const { return *static_cast<ListData*>(ptr_.get()); }
  DictData& dict() const { return *static_cast<DictData*>(ptr_.get()); }  // kDict and kNamespace
  const CallableData& callable() const { return *static_cast<const CallableData*>(ptr_.get()); }

  // Python truthiness.
  bool Truthy() const;
  // Python str(): what {{ value }} prints.
  std::string ToString() const;
  // Python repr(), used for elements inside printed lists and dicts.
  std::string Repr() const;

 private:
  Type type_ = Type::kUndefined;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  // One pointer, read by type_: std::string, ListData, DictData or CallableData. Values are
  // copied constantly, so a copy is one reference-count increment.
  std::shared_ptr<void> ptr_;
};

// Python ==, across int/float/bool numerically, lists/dicts element-wise.
bool ValuesEqual(const Value& a, const Value& b);
// Python <; fails (TypeError) for values Python cannot order.
Result<bool> ValueLess(const Value& a, const Value& b);
// The Python name of a value's type, for error messages ("str", "int", "dict", ...).
const char* TypeName(const Value& value);
// Python repr(float): shortest round-trip digits, "1.0", "1e-05", "inf".
std::string FormatFloat(double value);

// UTF-8 helpers: Python strings index by code point.
std::vector<std::string_view> SplitCodePoints(std::string_view text);
size_t CountCodePoints(std::string_view text);
// Appends code point `cp` as UTF-8.
void AppendCodePoint(std::string& out, uint32_t cp);
// str.lower() / str.upper() (simple case mapping, common scripts).
std::string ChangeCase(std::string_view text, bool to_upper);

}  // namespace g4::jinja
