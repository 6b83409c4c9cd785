// Jinja2's built-in filters and tests (the ones chat templates use), with Hugging Face's tojson.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <unordered_map>

#include "template/interpreter.h"

namespace g4::jinja {
namespace {

using Filter = Result<Value> (*)(Interpreter&, const Value&, CallArgs&);
using Test = Result<bool> (*)(Interpreter&, const Value&, CallArgs&);

Value Arg(const CallArgs& args, size_t position, const char* keyword, Value fallback) {
  const Value* v = FindArg(args, position, keyword);
  return v ? *v : std::move(fallback);
}

std::string PyLower(const std::string& s) { return ChangeCase(s, false); }
std::string PyUpper(const std::string& s) { return ChangeCase(s, true); }

bool IsPySpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f'); }

// `attribute="a.b.0"` lookups of map/sort/selectattr: item first, then attribute.
Result<Value> LookupPath(const Value& item, const Value& path) {
  if (path.is_int()) return GetItem(item, path);
  Value current = item;
  std::string text = path.ToString();
  size_t start = 0;
  while (true) {
    const size_t dot = text.find('.', start);
    std::string part = text.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Value key = Value::String(part);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        part.size() < 18) {
      key = Value::Int(std::atoll(part.c_str()));
    }
    G4_ASSIGN_OR_RETURN(current, GetItem(current, key));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

// Sort key: strings lowercased unless case_sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(PyLower(v.str()));
  return v;
}

Status SortValues(std::vector<Value>& items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status failure;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    auto less = reverse ? ValueLess(keys[b], keys[a]) : ValueLess(keys[a], keys[b]);
    if (!less.ok()) failure = less.status();
    return less.ok() && *less;
  });
  G4_RETURN_IF_ERROR(failure);
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
  return OkStatus();
}

std::string Strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto strip_char = [&](std::string_view c) {
    if (!chars || chars->is_none()) return c.size() == 1 && IsPySpace(c[0]);
    return chars->str().find(c) != std::string::npos;
  };
  auto cps = SplitCodePoints(s);
  size_t begin = 0, end = cps.size();
  while (left && begin < end && strip_char(cps[begin])) ++begin;
  while (right && end > begin && strip_char(cps[end - 1])) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out.append(cps[i]);
  return out;
}

std::string Capitalize(const std::string& s) {
  const auto cps = SplitCodePoints(s);
  if (cps.empty()) return s;
  return PyUpper(std::string(cps[0])) + PyLower(s.substr(cps[0].size()));
}

std::string Title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    if (c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c)) {
      out += c;
      word_start = true;
    } else {
      out += word_start ? PyUpper(std::string(1, c))[0] : PyLower(std::string(1, c))[0];
      word_start = false;
    }
  }
  return out;
}

std::string Replace(const std::string& s, const std::string& old, const std::string& replacement, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts between every code point
    auto cps = SplitCodePoints(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      if (i < cps.size()) out.append(cps[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += replacement;
    pos = hit + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string EscapeNonAscii(const std::string& json) {
  std::string out;
  for (std::string_view c : SplitCodePoints(json)) {
    if (c.size() == 1) {
      out.append(c);
      continue;
    }
    uint32_t cp = static_cast<unsigned char>(c[0]) & (0xFF >> (c.size() + 1));
    for (size_t k = 1; k < c.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(c[k]) & 0x3F);
    char buffer[16];
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(buffer, sizeof(buffer), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      std::snprintf(buffer, sizeof(buffer), "\\u%04x", cp);
    }
    out += buffer;
  }
  return out;
}

Result<Value> FilterToJson(Interpreter&, const Value& value, CallArgs& args) {
  G4_RETURN_IF_ERROR(CheckArgs(args, "tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  const Value indent = Arg(args, 1, "indent", Value::None());
  const Value separators = Arg(args, 2, "separators", Value::None());
  int indent_width = -1;
  if (indent.is_int()) indent_width = static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
  else if (!indent.is_none()) return Status::Error("tojson: indent must be an integer");
  std::string item = indent_width >= 0 ? "," : ", ", key = ": ";
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.list().items.size() != 2 || !separators.list().items[0].is_string() ||
        !separators.list().items[1].is_string()) {
      return Status::Error("tojson: separators must be a pair of strings");
    }
    item = separators.list().items[0].str();
    key = separators.list().items[1].str();
  }
  G4_ASSIGN_OR_RETURN(std::string json, ToJson(value, indent_width, item, key, Arg(args, 3, "sort_keys", Value::Bool(false)).Truthy()));
  if (Arg(args, 0, "ensure_ascii", Value::Bool(false)).Truthy()) json = EscapeNonAscii(json);
  return Value::String(std::move(json));
}

Result<Value> FilterDefault(Interpreter&, const Value& value, CallArgs& args) {
  const bool boolean = Arg(args, 1, "boolean", Value::Bool(false)).Truthy();
  if (value.is_undefined() || (boolean && !value.Truthy())) return Arg(args, 0, "default_value", Value::String(""));
  return value;
}

Result<Value> FilterLength(Interpreter&, const Value& value, CallArgs&) {
  G4_ASSIGN_OR_RETURN(int64_t n, Length(value));
  return Value::Int(n);
}

Result<Value> FilterString(Interpreter&, const Value& value, CallArgs&) { return Value::String(value.ToString()); }
Result<Value> FilterUpper(Interpreter&, const Value& value, CallArgs&) { return Value::String(PyUpper(value.ToString())); }
Result<Value> FilterLower(Interpreter&, const Value& value, CallArgs&) { return Value::String(PyLower(value.ToString())); }
Result<Value> FilterCapitalize(Interpreter&, const Value& value, CallArgs&) { return Value::String(Capitalize(value.ToString())); }
Result<Value> FilterTitle(Interpreter&, const Value& value, CallArgs&) { return Value::String(Title(value.ToString())); }
Result<Value> FilterSafe(Interpreter&, const Value& value, CallArgs&) { return value; }
Result<Value> FilterEscape(Interpreter&, const Value& value, CallArgs&) { return Value::String(HtmlEscape(value.ToString())); }

Result<Value> FilterTrim(Interpreter&, const Value& value, CallArgs& args) {
  return Value::String(Strip(value.ToString(), FindArg(args, 0, "chars"), true, true));
}

Result<Value> FilterReplace(Interpreter&, const Value& value, CallArgs& args) {
  if (args.positional.size() < 2) return Status::Error("replace() needs old and new");
  const Value count = Arg(args, 2, "count", Value::None());
  return Value::String(Replace(value.ToString(), args.positional[0].ToString(), args.positional[1].ToString(),
                               count.is_none() ? -1 : count.as_int()));
}

Result<Value> FilterItems(Interpreter&, const Value& value, CallArgs&) {
  if (value.is_undefined()) return Value::List();
  if (!value.is_dict()) return Status::Error("Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [k, v] : value.dict().items) pairs.push_back(Value::Tuple({k, v}));
  return Value::List(std::move(pairs));
}

Result<Value> FilterDictSort(Interpreter&, const Value& value, CallArgs& args) {
  G4_RETURN_IF_ERROR(CheckArgs(args, "dictsort", 3, {"case_sensitive", "by", "reverse"}));
  if (!value.is_dict()) return Status::Error("dictsort: value is not a mapping");
  const bool case_sensitive = Arg(args, 0, "case_sensitive", Value::Bool(false)).Truthy();
  const std::string by = Arg(args, 1, "by", Value::String("key")).ToString();
  if (by != "key" && by != "value") return Status::Error("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> pairs, keys;
  for (const auto& [k, v] : value.dict().items) {
    pairs.push_back(Value::Tuple({k, v}));
    keys.push_back(SortKey(by == "key" ? k : v, case_sensitive));
  }
  G4_RETURN_IF_ERROR(SortValues(pairs, keys, Arg(args, 2, "reverse", Value::Bool(false)).Truthy()));
  return Value::List(std::move(pairs));
}

Result<Value> FilterJoin(Interpreter& interp, const Value& value, CallArgs& args) {
  G4_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  const std::string separator = Arg(args, 0, "d", Value::String("")).ToString();
  const Value* attribute = FindArg(args, 1, "attribute");
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    if (attribute && !attribute->is_none()) {
      G4_ASSIGN_OR_RETURN(Value v, LookupPath(items[i], *attribute));
      out += v.ToString();
    } else {
      out += items[i].ToString();
    }
    if (out.size() > interp.max_output_bytes()) return Status::Error("join result too large");
  }
  return Value::String(std::move(out));
}

Result<Value> FilterFirst(Interpreter&, const Value& value, CallArgs&) {
  G4_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> FilterLast(Interpreter&, const Value& value, CallArgs&) {
  if (!value.is_list() && !value.is_string()) {
    if (value.is_undefined()) return Status::Error(value.str());
    return Status::Errorf("'", TypeName(value), "' object is not reversible");
  }
  G4_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

Result<Value> FilterList(Interpreter&, const Value& value, CallArgs&) {
  G4_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  return Value::List(std::move(items));
}

Result<Value> FilterReverse(Interpreter&, const Value& value, CallArgs&) {
  if (value.is_string()) {
    auto cps = SplitCodePoints(value.str());
    std::string out;
    for (size_t i = cps.size(); i-- > 0;) out.append(cps[i]);
    return Value::String(std::move(out));
  }
  G4_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

// map / select / reject / selectattr / rejectattr.
Result<Value> FilterMap(Interpreter& interp, const Value& value, CallArgs& args) {
  if (!value.Truthy()) return Value::List();  // Jinja2: `if value:` before iterating
  G4_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  std::vector<Value> out;
  for (const auto& [k, v] : args.keyword) {
    if (k == "attribute") {
      const Value* fallback = FindArg(args, 99, "default");
      for (const Value& item : items) {
        G4_ASSIGN_OR_RETURN(Value mapped, LookupPath(item, v));
        out.push_back(mapped.is_undefined() && fallback ? *fallback : mapped);
      }
      return Value::List(std::move(out));
    }
  }
  if (args.positional.empty()) return Status::Error("map requires a filter argument");
  const std::string name = args.positional[0].ToString();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    CallArgs call = rest;
    G4_ASSIGN_OR_RETURN(Value mapped, interp.ApplyFilter(name, item, call));
    out.push_back(std::move(mapped));
  }
  return Value::List(std::move(out));
}

Result<Value> SelectOrReject(Interpreter& interp, const Value& value, CallArgs& args, bool by_attribute, bool keep) {
  if (!value.Truthy()) return Value::List();  // Jinja2: `if value:` before iterating
  G4_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) return Status::Error("selectattr/rejectattr need an attribute");
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) test = args.positional[next++].ToString();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  rest.keyword = args.keyword;
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attribute) { G4_ASSIGN_OR_RETURN(subject, LookupPath(item, attribute)); }
    bool passed = subject.Truthy();
    if (!test.empty()) {
      CallArgs call = rest;
      G4_ASSIGN_OR_RETURN(passed, interp.ApplyTest(test, subject, call));
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}
Result<Value> FilterSelect(Interpreter& i, const Value& v, CallArgs& a) { return SelectOrReject(i, v, a, false, true); }
Result<Value> FilterReject(Interpreter& i, const Value& v, CallArgs& a) { return SelectOrReject(i, v, a, false, false); }
Result<Value> FilterSelectAttr(Interpreter& i, const Value& v, CallArgs& a) { return SelectOrReject(i, v, a, true, true); }
Result<Value> FilterRejectAttr(Interpreter& i, const Value& v, CallArgs& a) { return SelectOrReject(i, v, a, true, false); }

Result<Value> FilterInt(Interpreter&, const Value& value, CallArgs& args) {
  const Value fallback = Arg(args, 0, "default", Value::Int(0));
  if (value.is_undefined()) return Status::Error(value.str());
  if (value.is_number()) {
    const double d = value.as_double();
    if (value.is_float() && (std::isnan(d) || std::isinf(d) || std::fabs(d) > 9e18)) return fallback;
    return Value::Int(value.is_float() ? static_cast<int64_t>(d) : value.as_int());
  }
  if (value.is_string()) {
    const std::string text = Strip(value.str(), nullptr, true, true);
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(text.c_str(), &end, 10);
    if (!text.empty() && *end == '\0' && errno == 0) return Value::Int(i);
    const double d = std::strtod(text.c_str(), &end);
    if (!text.empty() && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9e18) return Value::Int(static_cast<int64_t>(d));
  }
  return fallback;
}

Result<Value> FilterFloat(Interpreter&, const Value& value, CallArgs& args) {
  const Value fallback = Arg(args, 0, "default", Value::Float(0.0));
  if (value.is_undefined()) return Status::Error(value.str());
  if (value.is_number()) return Value::Float(value.as_double());
  if (value.is_string()) {
    const std::string text = Strip(value.str(), nullptr, true, true);
    char* end = nullptr;
    const double d = std::strtod(text.c_str(), &end);
    if (!text.empty() && *end == '\0') return Value::Float(d);
  }
  return fallback;
}

Result<Value> FilterAbs(Interpreter&, const Value& value, CallArgs&) {
  if (value.is_float()) return Value::Float(std::fabs(value.as_double()));
  if (value.is_number()) {
    if (value.as_int() == INT64_MIN) return Status::Error("integer overflow");
    return Value::Int(std::llabs(value.as_int()));
  }
  return Status::Errorf("bad operand type for abs(): '", TypeName(value), "'");
}

Result<Value> FilterRound(Interpreter&, const Value& value, CallArgs& args) {
  const int64_t precision = Arg(args, 0, "precision", Value::Int(0)).as_int();
  const std::string method = Arg(args, 1, "method", Value::String("common")).ToString();
  if (!value.is_number()) return Status::Errorf("type ", TypeName(value), " doesn't define __round__ method");
  if (method != "common" && method != "ceil" && method != "floor") return Status::Error("method must be common, ceil or floor");
  if (!value.is_float() && method == "common") return Value::Int(value.as_int());
  const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -300, 300)));
  const double x = value.as_double() * scale;
  double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
  return Value::Float(r / scale);
}

Result<Value> FilterIndent(Interpreter&, const Value& value, CallArgs& args) {
  const Value width = Arg(args, 0, "width", Value::Int(4));
  const bool first = Arg(args, 1, "first", Value::Bool(false)).Truthy();
  const bool blank = Arg(args, 2, "blank", Value::Bool(false)).Truthy();
  const std::string indentation = width.is_string() ? width.str() : std::string(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 256)), ' ');
  std::string s = value.ToString() + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += indentation;
    out += lines[i];
  }
  if (first) out = indentation + out;
  return Value::String(std::move(out));
}

Result<Value> FilterUnique(Interpreter&, const Value& value, CallArgs& args) {
  G4_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  const bool case_sensitive = Arg(args, 0, "case_sensitive", Value::Bool(false)).Truthy();
  const Value* attribute = FindArg(args, 1, "attribute");
  std::vector<Value> seen, out;
  for (const Value& item : items) {
    Value key = item;
    if (attribute && !attribute->is_none()) { G4_ASSIGN_OR_RETURN(key, LookupPath(item, *attribute)); }
    key = SortKey(key, case_sensitive);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return ValuesEqual(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::List(std::move(out));
}

Result<Value> FilterSort(Interpreter&, const Value& value, CallArgs& args) {
  G4_RETURN_IF_ERROR(CheckArgs(args, "sort", 3, {"reverse", "case_sensitive", "attribute"}));
  G4_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  const bool reverse = Arg(args, 0, "reverse", Value::Bool(false)).Truthy();
  const bool case_sensitive = Arg(args, 1, "case_sensitive", Value::Bool(false)).Truthy();
  const Value* attribute = FindArg(args, 2, "attribute");
  std::vector<Value> keys;
  for (const Value& item : items) {
    Value key = item;
    if (attribute && !attribute->is_none()) { G4_ASSIGN_OR_RETURN(key, LookupPath(item, *attribute)); }
    keys.push_back(SortKey(key, case_sensitive));
  }
  G4_RETURN_IF_ERROR(SortValues(items, keys, reverse));
  return Value::List(std::move(items));
}

Result<Value> FilterSum(Interpreter&, const Value& value, CallArgs& args) {
  G4_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  const Value* attribute = FindArg(args, 0, "attribute");
  Value total = Arg(args, 1, "start", Value::Int(0));
  for (const Value& item : items) {
    Value v = item;
    if (attribute && !attribute->is_none()) { G4_ASSIGN_OR_RETURN(v, LookupPath(item, *attribute)); }
    G4_ASSIGN_OR_RETURN(total, BinaryOp("+", total, v, size_t{1} << 26));
  }
  return total;
}

Result<Value> MinMax(const Value& value, CallArgs& args, bool want_max) {
  G4_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  const bool case_sensitive = Arg(args, 0, "case_sensitive", Value::Bool(false)).Truthy();
  const Value* attribute = FindArg(args, 1, "attribute");
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value key = items[i];
    if (attribute && !attribute->is_none()) { G4_ASSIGN_OR_RETURN(key, LookupPath(items[i], *attribute)); }
    key = SortKey(key, case_sensitive);
    if (i == 0) {
      best_key = key;
      continue;
    }
    G4_ASSIGN_OR_RETURN(bool better, want_max ? ValueLess(best_key, key) : ValueLess(key, best_key));
    if (better) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}
Result<Value> FilterMin(Interpreter&, const Value& v, CallArgs& a) { return MinMax(v, a, false); }
Result<Value> FilterMax(Interpreter&, const Value& v, CallArgs& a) { return MinMax(v, a, true); }

Result<Value> FilterBatch(Interpreter&, const Value& value, CallArgs& args) {
  G4_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  const int64_t size = Arg(args, 0, "linecount", Value::Int(1)).as_int();
  if (size <= 0) return Status::Error("batch size must be positive");
  const Value* fill = FindArg(args, 1, "fill_with");
  std::vector<Value> out, current;
  for (const Value& item : items) {
    current.push_back(item);
    if (static_cast<int64_t>(current.size()) == size) {
      out.push_back(Value::List(std::move(current)));
      current.clear();
    }
  }
  if (!current.empty()) {
    if (fill && !fill->is_none()) {
      while (static_cast<int64_t>(current.size()) < size) current.push_back(*fill);
    }
    out.push_back(Value::List(std::move(current)));
  }
  return Value::List(std::move(out));
}

Result<Value> FilterWordCount(Interpreter&, const Value& value, CallArgs&) {
  const std::string s = value.ToString();
  int64_t words = 0;
  bool in_word = false;
  for (char c : s) {
    const bool word_char = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                           static_cast<unsigned char>(c) >= 0x80;
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::Int(words);
}

Result<Value> FilterCenter(Interpreter&, const Value& value, CallArgs& args) {
  const std::string s = value.ToString();
  const int64_t width = std::min<int64_t>(Arg(args, 0, "width", Value::Int(80)).as_int(), 1 << 20);
  const auto n = static_cast<int64_t>(CountCodePoints(s));
  if (width <= n) return Value::String(s);
  const int64_t pad = width - n;
  const int64_t left = pad / 2 + (pad & width & 1);  // CPython's str.center
  return Value::String(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(pad - left), ' '));
}

Result<Value> FilterTruncate(Interpreter&, const Value& value, CallArgs& args) {
  const std::string s = value.ToString();
  const int64_t length = Arg(args, 0, "length", Value::Int(255)).as_int();
  const bool killwords = Arg(args, 1, "killwords", Value::Bool(false)).Truthy();
  const std::string end = Arg(args, 2, "end", Value::String("...")).ToString();
  const Value leeway_value = Arg(args, 3, "leeway", Value::Int(5));
  const int64_t leeway = leeway_value.is_none() ? 5 : leeway_value.as_int();
  const auto cps = SplitCodePoints(s);
  const auto n = static_cast<int64_t>(cps.size());
  const auto end_n = static_cast<int64_t>(CountCodePoints(end));
  if (length < end_n) return Status::Error("expected length >= len(end)");
  if (n <= length + leeway) return Value::String(s);
  std::string head;
  for (int64_t i = 0; i < length - end_n && i < n; ++i) head.append(cps[static_cast<size_t>(i)]);
  if (killwords) return Value::String(head + end);
  const size_t space = head.rfind(' ');
  if (space != std::string::npos) head.resize(space);
  return Value::String(head + end);
}

Result<Value> FilterFormat(Interpreter&, const Value& value, CallArgs& args) {
  if (!args.keyword.empty()) {
    Value mapping = Value::Dict();
    for (const auto& [k, v] : args.keyword) mapping.dict().Set(Value::String(k), v);
    G4_ASSIGN_OR_RETURN(std::string out, PercentFormat(value.ToString(), mapping));
    return Value::String(std::move(out));
  }
  G4_ASSIGN_OR_RETURN(std::string out, PercentFormat(value.ToString(), Value::Tuple(args.positional)));
  return Value::String(std::move(out));
}

Result<Value> FilterAttr(Interpreter&, const Value& value, CallArgs& args) {
  if (args.positional.empty()) return Status::Error("attr needs a name");
  if (auto method = GetMethod(value, args.positional[0].ToString())) return *method;
  return Value::Undefined(Str("'", TypeName(value), " object' has no attribute '", args.positional[0].ToString(), "'"));
}

const std::unordered_map<std::string, Filter>& Filters() {
  static const std::unordered_map<std::string, Filter> table = {
      {"tojson", FilterToJson}, {"default", FilterDefault}, {"d", FilterDefault}, {"length", FilterLength},
      {"count", FilterLength}, {"string", FilterString}, {"upper", FilterUpper}, {"lower", FilterLower},
      {"capitalize", FilterCapitalize}, {"title", FilterTitle}, {"safe", FilterSafe}, {"escape", FilterEscape},
      {"e", FilterEscape}, {"forceescape", FilterEscape}, {"trim", FilterTrim}, {"replace", FilterReplace},
      {"items", FilterItems}, {"dictsort", FilterDictSort}, {"join", FilterJoin}, {"first", FilterFirst},
      {"last", FilterLast}, {"list", FilterList}, {"reverse", FilterReverse}, {"map", FilterMap},
      {"select", FilterSelect}, {"reject", FilterReject}, {"selectattr", FilterSelectAttr},
      {"rejectattr", FilterRejectAttr}, {"int", FilterInt}, {"float", FilterFloat}, {"abs", FilterAbs},
      {"round", FilterRound}, {"indent", FilterIndent}, {"unique", FilterUnique}, {"sort", FilterSort},
      {"sum", FilterSum}, {"min", FilterMin}, {"max", FilterMax}, {"batch", FilterBatch},
      {"wordcount", FilterWordCount}, {"center", FilterCenter}, {"truncate", FilterTruncate},
      {"format", FilterFormat}, {"attr", FilterAttr},
  };
  return table;
}

// ---- tests ----

Result<bool> CompareTest(const Value& value, CallArgs& args, const char* op) {
  if (args.positional.empty()) return Status::Errorf("test needs an argument");
  const Value& other = args.positional[0];
  const std::string o = op;
  if (o == "==") return ValuesEqual(value, other);
  if (o == "!=") return !ValuesEqual(value, other);
  if (o == "<") return ValueLess(value, other);
  if (o == ">") return ValueLess(other, value);
  G4_ASSIGN_OR_RETURN(bool less, o == "<=" ? ValueLess(value, other) : ValueLess(other, value));
  return less || ValuesEqual(value, other);
}

// Test names compare as string_views: a length mismatch rejects without strlen or memcmp.
using namespace std::string_view_literals;

Result<bool> RunTestImpl(Interpreter&, const std::string& name, const Value& v, CallArgs& args) {
  if (name == "defined"sv) return !v.is_undefined();
  if (name == "undefined"sv) return v.is_undefined();
  if (name == "none"sv) return v.is_none();
  if (name == "boolean"sv) return v.is_bool();
  if (name == "true"sv) return v.is_bool() && v.as_bool();
  if (name == "false"sv) return v.is_bool() && !v.as_bool();
  if (name == "integer"sv) return v.is_int();
  if (name == "float"sv) return v.is_float();
  if (name == "number"sv) return v.is_number();
  if (name == "string"sv) return v.is_string();
  if (name == "mapping"sv) return v.is_dict();
  if (name == "iterable"sv) return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence"sv) return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable"sv) return v.is_callable();
  if (name == "escaped"sv) return false;
  if (name == "lower"sv || name == "upper"sv) {
    const std::string s = v.ToString();
    bool cased = false;
    for (char c : s) {
      if ((name == "lower"sv && c >= 'A' && c <= 'Z') || (name == "upper"sv && c >= 'a' && c <= 'z')) return false;
      cased = cased || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    }
    return cased;
  }
  if (name == "odd"sv || name == "even"sv || name == "divisibleby"sv) {
    if (v.is_undefined()) return Status::Error(v.str());
    if (!v.is_int() && !v.is_bool()) return Status::Errorf("test '", name, "' needs an integer, got ", TypeName(v));
    int64_t divisor = 2;
    if (name == "divisibleby"sv) {
      if (args.positional.empty() || !args.positional[0].is_number() || args.positional[0].is_float()) {
        return Status::Error("divisibleby needs an integer argument");
      }
      divisor = args.positional[0].as_int();
      if (divisor == 0) return Status::Error("integer modulo by zero");
    }
    const int64_t m = divisor == -1 ? 0 : v.as_int() % divisor;
    return name == "odd"sv ? m != 0 : m == 0;
  }
  if (name == "sameas"sv) {
    if (args.positional.empty()) return Status::Error("sameas needs an argument");
    const Value& o = args.positional[0];
    if (v.type() != o.type()) return false;
    if (v.is_none() || v.is_bool()) return ValuesEqual(v, o);
    if (v.is_list()) return &v.list() == &o.list();
    if (v.is_dict() || v.is_namespace()) return &v.dict() == &o.dict();
    return false;
  }
  if (name == "eq"sv || name == "equalto"sv || name == "==") return CompareTest(v, args, "==");
  if (name == "ne"sv || name == "!=") return CompareTest(v, args, "!=");
  if (name == "lt"sv || name == "lessthan"sv || name == "<") return CompareTest(v, args, "<");
  if (name == "le"sv || name == "<=") return CompareTest(v, args, "<=");
  if (name == "gt"sv || name == "greaterthan"sv || name == ">") return CompareTest(v, args, ">");
  if (name == "ge"sv || name == ">=") return CompareTest(v, args, ">=");
  if (name == "in"sv) {
    if (args.positional.empty()) return Status::Error("in needs an argument");
    return Contains(args.positional[0], v);
  }
  if (name == "filter"sv) return v.is_string() && Filters().count(v.str()) > 0;
  if (name == "test"sv) return v.is_string() && HasTest(v.str());
  return Status::Errorf("no test named '", name, "'");
}

}  // namespace

bool HasTest(const std::string& name) {
  static const char* const kTests[] = {
      "defined", "undefined", "none", "boolean", "true", "false", "integer", "float", "number", "string",
      "mapping", "iterable", "sequence", "callable", "escaped", "lower", "upper", "odd", "even", "divisibleby",
      "sameas", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">",
      "ge", ">=", "in", "filter", "test"};
  for (const char* t : kTests) {
    if (name == t) return true;
  }
  return false;
}

bool HasFilter(const std::string& name) { return Filters().count(name) > 0; }

Result<Value> RunFilter(Interpreter& interp, const std::string& name, const Value& value, CallArgs& args) {
  auto it = Filters().find(name);
  if (it == Filters().end()) return Status::Errorf("no filter named '", name, "'");
  G4_RETURN_IF_ERROR(interp.Charge(1));
  return it->second(interp, value, args);
}

Result<bool> RunTest(Interpreter& interp, const std::string& name, const Value& value, CallArgs& args) {
  return RunTestImpl(interp, name, value, args);
}

}  // namespace g4::jinja
