#include "template/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace g4::jinja {
namespace {

const std::string& EmptyString() {
  static const std::string empty;
  return empty;
}

// Reads one UTF-8 code point starting at text[i]; invalid bytes count as one code point each.
uint32_t DecodeAt(std::string_view text, size_t i, size_t* length) {
  const auto byte = static_cast<unsigned char>(text[i]);
  size_t n = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xE ? 3 : (byte >> 3) == 0x1E ? 4 : 1;
  if (i + n > text.size()) n = 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) n = 1;
  }
  *length = n;
  if (n == 1) return byte;
  uint32_t cp = byte & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  return cp;
}

// Python's repr() of a str: picks the quote, escapes what str.isprintable() rejects.
std::string ReprString(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const uint32_t cp = DecodeAt(s, i, &n);
    char buffer[16];
    if (cp == '\\' || cp == static_cast<uint32_t>(quote)) {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
      std::snprintf(buffer, sizeof(buffer), "\\x%02x", static_cast<unsigned>(cp));
      out += buffer;
    } else if (cp == 0x2028 || cp == 0x2029 || (cp >= 0x200B && cp <= 0x200F) || cp == 0xFEFF) {
      std::snprintf(buffer, sizeof(buffer), "\\u%04x", static_cast<unsigned>(cp));
      out += buffer;
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  out += quote;
  return out;
}


// Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic: the scripts
// where str.lower()/upper() commonly meet chat-template input.
uint32_t MapCase(uint32_t cp, bool to_upper) {
  if (to_upper) {
    if (cp >= 'a' && cp <= 'z') return cp - 32;
    if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
    if (cp >= 0x100 && cp <= 0x17F && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
      const bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
      if (odd_upper ? (cp % 2 == 0) : (cp % 2 == 1)) return cp - 1;
      return cp;
    }
    if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
    if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
    if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
    return cp;
  }
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
    const bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (cp == 0x178) return 0xFF;
    if (odd_upper ? (cp % 2 == 1) : (cp % 2 == 0)) return cp + 1;
    return cp;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

}  // namespace

void AppendCodePoint(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string ChangeCase(std::string_view text, bool to_upper) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t n = 0;
    const uint32_t cp = DecodeAt(text, i, &n);
    if (n == 1 && cp >= 0x80) {
      out += text[i];  // invalid byte, kept as is
    } else {
      AppendCodePoint(out, MapCase(cp, to_upper));
    }
    i += n;
  }
  return out;
}

const Value* DictData::Find(const Value& key) const {
  if (key.is_string()) return FindString(key.str());
  for (const auto& [k, v] : items) {
    if (ValuesEqual(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictData::FindString(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void DictData::Set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (ValuesEqual(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::Undefined(std::string name) {
  Value v;
  if (!name.empty()) v.ptr_ = std::make_shared<std::string>(std::move(name));
  return v;
}
Value Value::None() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.bool_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.int_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.type_ = Type::kFloat;
  v.float_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}
Value Value::List(std::vector<Value> items) {
  Value v;
  v.type_ = Type::kList;
  auto list = std::make_shared<ListData>();
  list->items = std::move(items);
  v.ptr_ = std::move(list);
  return v;
}
Value Value::Tuple(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.list().is_tuple = true;
  return v;
}
Value Value::Dict() {
  Value v;
  v.type_ = Type::kDict;
  v.ptr_ = std::make_shared<DictData>();
  return v;
}
Value Value::Namespace() {
  Value v = Dict();
  v.type_ = Type::kNamespace;
  return v;
}
Value Value::Function(std::string name, NativeFunction function) {
  Value v;
  v.type_ = Type::kCallable;
  v.ptr_ = std::make_shared<CallableData>(CallableData{std::move(name), std::move(function)});
  return v;
}

const std::string& Value::str() const {
  if ((type_ == Type::kString || type_ == Type::kUndefined) && ptr_) return *static_cast<const std::string*>(ptr_.get());
  return EmptyString();
}

bool Value::Truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
      return bool_;
    case Type::kInt:
      return int_ != 0;
    case Type::kFloat:
      return float_ != 0;
    case Type::kString:
      return !str().empty();
    case Type::kList:
      return !list().items.empty();
    case Type::kDict:
      return !dict().items.empty();
    case Type::kNamespace:
    case Type::kCallable:
      return true;
  }
  return false;
}

std::string FormatFloat(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  if (ec != std::errc()) return "nan";
  std::string text(buffer, end);  // [-]d[.ddd]e[+-]XX
  const bool negative = text[0] == '-';
  if (negative) text.erase(0, 1);
  const size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits = text.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  std::string out = negative ? "-" : "";
  // Python's repr switches to exponent form outside 1e-4 <= |x| < 1e16.
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_text[16];
    std::snprintf(exp_text, sizeof(exp_text), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp_text;
  }
  if (exponent < 0) {
    out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
    out += digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(exponent) + 1) + "." + digits.substr(static_cast<size_t>(exponent) + 1);
  }
  return out;
}

std::string Value::ToString() const {
  switch (type_) {
    case Type::kUndefined:
      return "";
    case Type::kString:
      return str();
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (type_) {
    case Type::kUndefined:
      return "Undefined";
    case Type::kNone:
      return "None";
    case Type::kBool:
      return bool_ ? "True" : "False";
    case Type::kInt:
      return std::to_string(int_);
    case Type::kFloat:
      return FormatFloat(float_);
    case Type::kString:
      return ReprString(str());
    case Type::kList: {
      std::string out = list().is_tuple ? "(" : "[";
      for (size_t i = 0; i < list().items.size(); ++i) {
        if (i) out += ", ";
        out += list().items[i].Repr();
      }
      if (list().is_tuple && list().items.size() == 1) out += ",";
      return out + (list().is_tuple ? ")" : "]");
    }
    case Type::kDict:
    case Type::kNamespace: {
      std::string out = type_ == Type::kNamespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : dict().items) {
        if (!first) out += ", ";
        first = false;
        out += k.Repr() + ": " + v.Repr();
      }
      return out + (type_ == Type::kNamespace ? "}>" : "}");
    }
    case Type::kCallable:
      return "<function " + callable().name + ">";
  }
  return "";
}

bool ValuesEqual(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Type::kUndefined:
    case Type::kNone:
      return true;
    case Type::kString:
      return a.str() == b.str();
    case Type::kList: {
      const auto& x = a.list();
      const auto& y = b.list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!ValuesEqual(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Type::kDict: {
      const auto& x = a.dict();
      const auto& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.Find(k);
        if (!other || !ValuesEqual(v, *other)) return false;
      }
      return true;
    }
    case Type::kNamespace:
      return &a.dict() == &b.dict();
    case Type::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

Result<bool> ValueLess(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order = code point order
  if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (ValuesEqual(x[i], y[i])) continue;
      return ValueLess(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return Status::Errorf("'<' not supported between instances of '", TypeName(a), "' and '", TypeName(b), "'");
}

const char* TypeName(const Value& value) {
  switch (value.type()) {
    case Type::kUndefined:
      return "Undefined";
    case Type::kNone:
      return "NoneType";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "str";
    case Type::kList:
      return value.list().is_tuple ? "tuple" : "list";
    case Type::kDict:
      return "dict";
    case Type::kNamespace:
      return "Namespace";
    case Type::kCallable:
      return "function";
  }
  return "object";
}

std::vector<std::string_view> SplitCodePoints(std::string_view text) {
  std::vector<std::string_view> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t n = 0;
    DecodeAt(text, i, &n);
    out.push_back(text.substr(i, n));
    i += n;
  }
  return out;
}

size_t CountCodePoints(std::string_view text) {
  size_t count = 0;
  for (size_t i = 0; i < text.size();) {
    size_t n = 0;
    DecodeAt(text, i, &n);
    i += n;
    ++count;
  }
  return count;
}

}  // namespace g4::jinja
