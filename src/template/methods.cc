// Python methods of str, dict and list that chat templates call. Methods that mutate a value are
// refused, as Jinja2's ImmutableSandboxedEnvironment refuses them.
#include <algorithm>
#include <string_view>

#include "template/interpreter.h"

namespace g4::jinja {
namespace {

bool IsSpaceChar(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f'); }

std::string StripChars(const std::string& s, const Value* chars, bool left, bool right) {
  auto cps = SplitCodePoints(s);
  auto strip = [&](std::string_view c) {
    if (!chars || chars->is_none()) return c.size() == 1 && IsSpaceChar(c[0]);
    return chars->str().find(c) != std::string::npos;
  };
  size_t b = 0, e = cps.size();
  while (left && b < e && strip(cps[b])) ++b;
  while (right && e > b && strip(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out.append(cps[i]);
  return out;
}

Result<Value> Split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep.is_none() || sep.is_undefined()) {
    // Runs of whitespace, no empty strings.
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && IsSpaceChar(s[i])) ++i;
      if (i >= s.size()) break;
      size_t j = i;
      while (j < s.size() && !IsSpaceChar(s[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto [b, e] : words) parts.push_back(s.substr(b, e - b));
    } else if (!from_right) {
      for (size_t k = 0; k < static_cast<size_t>(maxsplit); ++k) parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
      std::string rest = s.substr(words[static_cast<size_t>(maxsplit)].first);
      while (!rest.empty() && IsSpaceChar(rest.back())) rest.pop_back();
      parts.push_back(rest);
    } else {
      const size_t keep = words.size() - static_cast<size_t>(maxsplit);
      std::string head = s.substr(0, words[keep - 1].second);
      size_t h = 0;
      while (h < head.size() && IsSpaceChar(head[h])) ++h;
      parts.push_back(head.substr(h));
      for (size_t k = keep; k < words.size(); ++k) parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
    }
  } else {
    if (!sep.is_string()) return Status::Errorf("must be str or None, not ", TypeName(sep));
    const std::string& d = sep.str();
    if (d.empty()) return Status::Error("empty separator");
    if (!from_right) {
      size_t pos = 0;
      int64_t done = 0;
      while (maxsplit < 0 || done < maxsplit) {
        const size_t hit = s.find(d, pos);
        if (hit == std::string::npos) break;
        parts.push_back(s.substr(pos, hit - pos));
        pos = hit + d.size();
        ++done;
      }
      parts.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      int64_t done = 0;
      std::vector<std::string> reversed;
      while (maxsplit < 0 || done < maxsplit) {
        if (end < d.size()) break;
        const size_t hit = s.rfind(d, end - d.size());
        if (hit == std::string::npos) break;
        reversed.push_back(s.substr(hit + d.size(), end - hit - d.size()));
        end = hit;
        ++done;
      }
      reversed.push_back(s.substr(0, end));
      parts.assign(reversed.rbegin(), reversed.rend());
    }
  }
  std::vector<Value> values;
  for (auto& p : parts) values.push_back(Value::String(std::move(p)));
  return Value::List(std::move(values));
}

// Byte offset -> code point index, for find()/index().
int64_t CodePointIndex(const std::string& s, size_t byte) {
  return static_cast<int64_t>(CountCodePoints(std::string_view(s).substr(0, byte)));
}

Result<Value> StrFormat(const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}' ) {
      if (i + 1 < format.size() && format[i + 1] == '}') ++i;
      else return Status::Error("Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string::npos) return Status::Error("Single '{' encountered in format string");
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    if (field.find_first_of(":!") != std::string::npos) return Status::Error("format specs in str.format are not supported");
    const Value* arg = nullptr;
    if (field.empty()) {
      if (auto_index >= args.positional.size()) return Status::Error("Replacement index out of range for positional args tuple");
      arg = &args.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t k = static_cast<size_t>(std::atoll(field.c_str()));
      if (field.size() > 9 || k >= args.positional.size()) return Status::Error("Replacement index out of range for positional args tuple");
      arg = &args.positional[k];
    } else {
      for (const auto& [key, value] : args.keyword) {
        if (key == field) arg = &value;
      }
      if (!arg) return Status::Errorf("KeyError: '", field, "'");
    }
    out += arg->ToString();
  }
  return Value::String(std::move(out));
}

bool AllChars(const std::string& s, bool (*pred)(unsigned char)) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (!pred(c)) return false;
  }
  return true;
}

Result<Value> StringMethod(Interpreter& interp, const std::string& self, const std::string& name, CallArgs& args) {
  auto arg = [&](size_t i) -> const Value* { return i < args.positional.size() ? &args.positional[i] : nullptr; };
  auto int_arg = [&](size_t i, const char* key, int64_t fallback) {
    const Value* v = FindArg(args, i, key);
    return v && v->is_number() ? v->as_int() : fallback;
  };
  if (name == "startswith" || name == "endswith") {
    const Value* prefix = arg(0);
    if (!prefix) return Status::Errorf(name, "() takes at least 1 argument (0 given)");
    std::vector<Value> options = prefix->is_list() ? prefix->list().items : std::vector<Value>{*prefix};
    for (const Value& o : options) {
      if (!o.is_string()) return Status::Errorf(name, " first arg must be str or a tuple of str, not ", TypeName(o));
      const std::string& p = o.str();
      if (name == "startswith" ? self.rfind(p, 0) == 0
                               : (self.size() >= p.size() && self.compare(self.size() - p.size(), p.size(), p) == 0)) {
        return Value::Bool(true);
      }
    }
    return Value::Bool(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = arg(0);
    if (chars && !chars->is_none() && !chars->is_string()) return Status::Error("strip arg must be None or str");
    return Value::String(StripChars(self, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const Value* sep = FindArg(args, 0, "sep");
    return Split(self, sep ? *sep : Value::None(), int_arg(1, "maxsplit", -1), name == "rsplit");
  }
  if (name == "splitlines") {
    std::vector<Value> lines;
    size_t start = 0;
    for (size_t i = 0; i < self.size(); ++i) {
      if (self[i] == '\n' || self[i] == '\r') {
        lines.push_back(Value::String(self.substr(start, i - start)));
        if (self[i] == '\r' && i + 1 < self.size() && self[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < self.size()) lines.push_back(Value::String(self.substr(start)));
    return Value::List(std::move(lines));
  }
  if (name == "replace" || name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "center") {
    // Same semantics as the filters of those names.
    CallArgs copy = args;
    return RunFilter(interp, name, Value::String(self), copy);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const Value* needle = arg(0);
    if (!needle || !needle->is_string()) return Status::Errorf("must be str, not ", needle ? TypeName(*needle) : "nothing");
    const std::string& n = needle->str();
    if (name == "count") {
      if (n.empty()) return Value::Int(static_cast<int64_t>(CountCodePoints(self)) + 1);
      int64_t count = 0;
      for (size_t pos = self.find(n); pos != std::string::npos; pos = self.find(n, pos + n.size())) ++count;
      return Value::Int(count);
    }
    const size_t hit = (name == "find" || name == "index") ? self.find(n) : self.rfind(n);
    if (hit == std::string::npos) {
      if (name == "index" || name == "rindex") return Status::Error("substring not found");
      return Value::Int(-1);
    }
    return Value::Int(CodePointIndex(self, hit));
  }
  if (name == "join") {
    const Value* items = arg(0);
    if (!items) return Status::Error("join() takes exactly one argument (0 given)");
    G4_ASSIGN_OR_RETURN(std::vector<Value> parts, Iterate(*items));
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!parts[i].is_string()) return Status::Errorf("sequence item ", i, ": expected str instance, ", TypeName(parts[i]), " found");
      if (i) out += self;
      out += parts[i].str();
    }
    return Value::String(std::move(out));
  }
  if (name == "format") return StrFormat(self, args);
  if (name == "isdigit") return Value::Bool(AllChars(self, [](unsigned char c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") return Value::Bool(AllChars(self, [](unsigned char c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; }));
  if (name == "isalnum") {
    return Value::Bool(AllChars(self, [](unsigned char c) { return ((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9'); }));
  }
  if (name == "isspace") return Value::Bool(AllChars(self, [](unsigned char c) { return IsSpaceChar(static_cast<char>(c)); }));
  if (name == "islower" || name == "isupper") {
    CallArgs none;
    return Value::Bool(*RunTest(interp, name == "islower" ? "lower" : "upper", Value::String(self), none));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const Value* affix = arg(0);
    if (!affix || !affix->is_string()) return Status::Errorf(name, "() argument must be str");
    const std::string& a = affix->str();
    if (name == "removeprefix" && self.rfind(a, 0) == 0) return Value::String(self.substr(a.size()));
    if (name == "removesuffix" && !a.empty() && self.size() >= a.size() && self.compare(self.size() - a.size(), a.size(), a) == 0) {
      return Value::String(self.substr(0, self.size() - a.size()));
    }
    return Value::String(self);
  }
  return Status::Errorf("'str' object has no attribute '", name, "'");
}

// string_views: a lookup compares lengths first, and most attribute names (role, content) match none.
using namespace std::string_view_literals;

constexpr std::string_view kStringMethods[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit",
                                      "splitlines", "replace", "upper", "lower", "title", "capitalize", "center",
                                      "find", "rfind", "index", "rindex", "count", "join", "format", "isdigit",
                                      "isalpha", "isalnum", "isspace", "islower", "isupper", "removeprefix",
                                      "removesuffix"};
constexpr std::string_view kUnsafeDictMethods[] = {"pop", "popitem", "update", "setdefault", "clear"};
constexpr std::string_view kUnsafeListMethods[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};

template <size_t N>
bool In(const std::string_view (&names)[N], const std::string& name) {
  return std::any_of(std::begin(names), std::end(names), [&](std::string_view n) { return name == n; });
}

Value Unsafe(const Value& target, const std::string& name) {
  return Value::Undefined(Str("access to attribute '", name, "' of '", TypeName(target), "' object is unsafe."));
}

}  // namespace

std::optional<Value> GetMethod(const Value& target, const std::string& name) {
  if (target.is_string() && In(kStringMethods, name)) {
    const std::string self = target.str();
    return Value::Function(name, [self, name](Interpreter& interp, CallArgs& args) { return StringMethod(interp, self, name, args); });
  }
  if (target.is_dict()) {
    if (In(kUnsafeDictMethods, name)) return Unsafe(target, name);
    if (name == "get"sv) {
      return Value::Function(name, [target](Interpreter&, CallArgs& args) -> Result<Value> {
        if (args.positional.empty() || args.positional.size() > 2) return Status::Error("get expected 1 or 2 arguments");
        const Value* found = target.dict().Find(args.positional[0]);
        if (found) return *found;
        return args.positional.size() > 1 ? args.positional[1] : Value::None();
      });
    }
    if (name == "items"sv || name == "keys"sv || name == "values"sv) {
      return Value::Function(name, [target, name](Interpreter&, CallArgs&) -> Result<Value> {
        std::vector<Value> out;
        for (const auto& [k, v] : target.dict().items) {
          out.push_back(name == "items"sv ? Value::Tuple({k, v}) : name == "keys"sv ? k : v);
        }
        return Value::List(std::move(out));
      });
    }
    if (name == "copy"sv) {
      return Value::Function(name, [target](Interpreter&, CallArgs&) -> Result<Value> {
        Value copy = Value::Dict();
        copy.dict().items = target.dict().items;
        return copy;
      });
    }
  }
  if (target.is_list()) {
    if (In(kUnsafeListMethods, name)) return Unsafe(target, name);
    if (name == "index"sv || name == "count"sv) {
      return Value::Function(name, [target, name](Interpreter&, CallArgs& args) -> Result<Value> {
        if (args.positional.empty()) return Status::Errorf(name, "() takes at least 1 argument");
        const auto& items = target.list().items;
        int64_t count = 0;
        for (size_t i = 0; i < items.size(); ++i) {
          if (!ValuesEqual(items[i], args.positional[0])) continue;
          if (name == "index"sv) return Value::Int(static_cast<int64_t>(i));
          ++count;
        }
        if (name == "index"sv) return Status::Errorf(args.positional[0].Repr(), " is not in list");
        return Value::Int(count);
      });
    }
  }
  return std::nullopt;
}

}  // namespace g4::jinja
