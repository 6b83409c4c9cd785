#include "grammar/json_schema.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace g4::grammar {
namespace {

using Json = nlohmann::ordered_json;

// GBNF rules for the JSON primitives, added on first use (name -> body, with dependencies).
struct Primitive {
  const char* name;
  const char* body;
  std::vector<const char*> deps;
};
const Primitive kPrimitives[] = {
    {"char", R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))", {}},
    {"string", R"("\"" char* "\"")", {"char"}},
    {"integer", R"("-"? ("0" | [1-9] [0-9]{0,15}))", {}},
    {"number", R"("-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?)", {}},
    {"boolean", R"("true" | "false")", {}},
    {"null", R"("null")", {}},
    {"value", R"(object | array | string | number | boolean | null)",
     {"object", "array", "string", "number", "boolean", "null"}},
    {"object", R"("{" (string ":" value ("," string ":" value)*)? "}")", {"string", "value"}},
    {"array", R"("[" (value ("," value)*)? "]")", {"value"}},
    {"date", R"([0-9]{4} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])))", {}},
    {"time", R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))", {}},
    {"date-time", R"(date "T" time)", {"date", "time"}},
    {"uuid", R"([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})", {}},
    {"email", R"([a-zA-Z0-9_%+-]{1,32} ("." [a-zA-Z0-9_%+-]{1,32}){0,3} "@" [a-zA-Z0-9]{1,20} ("." [a-zA-Z0-9]{1,20}){1,3})", {}},
    // Gemma-4's call syntax (SchemaSyntax::kGemmaCall): strings between <|"|> tokens (stand-in
    // byte FA, tool_call_grammar.h) hold any text without "|>", so that no special token's
    // text (<|"|>, <tool_call|>, <turn|>) can appear inside one and end it early; keys are bare
    // words, or quoted like strings.
    {"g-char", R"([^|])", {}},
    {"g-chars", R"(([^|] | "|"+ [^|>])*)", {}},
    {"g-string", R"("\xFA" g-chars "\xFA")", {"g-chars"}},
    {"g-key", R"([A-Za-z0-9_-]+ | g-string)", {"g-string"}},
    {"g-value", R"(g-object | g-array | g-string | number | boolean | null)",
     {"g-object", "g-array", "g-string", "number", "boolean", "null"}},
    {"g-object", R"("{" (g-key ":" g-value ("," g-key ":" g-value)*)? "}")", {"g-key", "g-value"}},
    {"g-array", R"("[" (g-value ("," g-value)*)? "]")", {"g-value"}},
};

const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly"};
const std::set<std::string> kSupported = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf", "oneOf", "$ref",
    "$defs", "definitions", "items", "minItems", "maxItems", "minLength", "maxLength", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

// A GBNF string literal for `bytes`.
std::string Literal(const std::string& bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string Sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  if (out.empty()) out = "x";
  return out.substr(0, 40);
}

// Numbers of exactly lo.size() digits in [lo, hi] (same length, lo <= hi), as GBNF.
std::string DigitRange(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  if (lo == hi) return Literal(lo);
  const size_t rest = lo.size() - 1;
  const std::string any = rest ? Str(" [0-9]{", rest, "}") : "";
  if (lo[0] == hi[0]) return Literal(lo.substr(0, 1)) + " (" + DigitRange(lo.substr(1), hi.substr(1)) + ")";
  std::vector<std::string> parts;
  char mid_lo = lo[0], mid_hi = hi[0];
  if (lo.substr(1) != std::string(rest, '0')) {
    parts.push_back(Literal(lo.substr(0, 1)) + " (" + DigitRange(lo.substr(1), std::string(rest, '9')) + ")");
    ++mid_lo;
  }
  std::string hi_part;
  if (hi.substr(1) != std::string(rest, '9')) {
    hi_part = Literal(hi.substr(0, 1)) + " (" + DigitRange(std::string(rest, '0'), hi.substr(1)) + ")";
    --mid_hi;
  }
  if (mid_lo <= mid_hi) parts.push_back(Str("[", mid_lo, "-", mid_hi, "]", any));
  if (!hi_part.empty()) parts.push_back(hi_part);
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out;
}

// Non-negative integers in [lo, hi], written without leading zeros.
std::string NonNegativeRange(int64_t lo, int64_t hi) {
  const std::string los = std::to_string(lo), his = std::to_string(hi);
  std::vector<std::string> parts;
  for (size_t len = los.size(); len <= his.size(); ++len) {
    const std::string a = len == los.size() ? los : (len == 1 ? "0" : "1" + std::string(len - 1, '0'));
    const std::string b = len == his.size() ? his : std::string(len, '9');
    parts.push_back("(" + DigitRange(a, b) + ")");
  }
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out;
}

bool IsBareKey(const std::string& key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-';
  });
}

// `text` between Gemma's string quotes, or an error when it holds "|>" (g-chars above).
Result<std::string> GemmaQuoted(const std::string& text) {
  if (text.find("|>") != std::string::npos)
    return Status::Errorf("the string '", text, "' holds \"|>\", which Gemma's call syntax cannot quote");
  return std::string(R"("\xFA" )") + Literal(text) + R"( "\xFA")";
}

// A JSON value written in Gemma's call syntax, as a GBNF sequence (enum and const values).
Result<std::string> GemmaValue(const Json& v) {
  if (v.is_string()) return GemmaQuoted(v.get<std::string>());
  if (v.is_object()) {
    std::string out = R"("{")";
    bool first = true;
    for (const auto& [key, value] : v.items()) {
      std::string k;
      if (IsBareKey(key)) {
        k = Literal(key);
      } else {
        G4_ASSIGN_OR_RETURN(k, GemmaQuoted(key));
      }
      G4_ASSIGN_OR_RETURN(const std::string item, GemmaValue(value));
      out += Str(first ? " " : R"( "," )", k, R"( ":" )", item);
      first = false;
    }
    return out + R"( "}")";
  }
  if (v.is_array()) {
    std::string out = R"("[")";
    for (size_t i = 0; i < v.size(); ++i) {
      G4_ASSIGN_OR_RETURN(const std::string item, GemmaValue(v[i]));
      out += Str(i ? R"( "," )" : " ", item);
    }
    return out + R"( "]")";
  }
  return Literal(v.dump());
}

class Compiler {
 public:
  Compiler(SchemaSyntax syntax, std::string prefix) : syntax_(syntax), prefix_(std::move(prefix)) {}

  // The expression for `root` (its rules are added to rules()).
  Result<std::string> Add(const Json& root) {
    root_ = &root;
    ref_rules_.clear();  // $refs are relative to their own root
    return Visit(root, "#", "root");
  }
  const std::map<std::string, std::string>& rules() const { return rules_; }

  Result<std::string> Run(const Json& root) {
    G4_ASSIGN_OR_RETURN(const std::string expr, Add(root));
    std::string out = "root ::= " + expr + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  bool gemma() const { return syntax_ == SchemaSyntax::kGemmaCall; }
  // The primitive's name in this syntax ("string" -> "g-string").
  std::string P(const std::string& json_name) const {
    if (gemma() && (json_name == "string" || json_name == "char" || json_name == "value" ||
                    json_name == "object" || json_name == "array"))
      return "g-" + json_name;
    return json_name;
  }
  std::string Quote() const { return gemma() ? R"("\xFA")" : R"("\"")"; }
  Result<std::string> Key(const std::string& name) const {
    if (!gemma()) return Literal(Json(name).dump());
    if (IsBareKey(name)) return Literal(name);
    return GemmaQuoted(name);
  }
  Result<std::string> ValueLiteral(const Json& v) const {
    if (!gemma()) return Literal(v.dump());
    return GemmaValue(v);
  }

  void UsePrimitive(const std::string& name) {
    for (const Primitive& p : kPrimitives) {
      if (name != p.name) continue;
      if (rules_.count(name)) return;
      rules_[name] = p.body;
      for (const char* d : p.deps) UsePrimitive(d);
      return;
    }
  }
  std::string NewRule(const std::string& hint, const std::string& body) {
    std::string name = "r-" + prefix_ + Sanitize(hint);
    if (rules_.count(name) || std::any_of(std::begin(kPrimitives), std::end(kPrimitives),
                                          [&](const Primitive& p) { return name == p.name; }))
      name += Str("-", ++counter_);
    rules_[name] = body;
    return name;
  }

  Result<std::optional<int64_t>> IntegerKeyword(const Json& s, const char* key, const std::string& at) {
    if (!s.contains(key)) return std::optional<int64_t>();
    const Json& v = s[key];
    if (!v.is_number()) return Status::Errorf(at, ": '", key, "' must be a number");
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > 1e15) return Status::Errorf(at, ": '", key, "' is out of the supported range (|x| <= 1e15)");
    return std::optional<int64_t>(static_cast<int64_t>(d));
  }

  Result<std::string> Integer(const Json& s, const std::string& at) {
    const int64_t kMax = 999999999999999;  // 15 digits
    int64_t lo = -kMax, hi = kMax;
    bool bounded = false;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(key)) continue;
      const Json& v = s[key];
      if (!v.is_number()) return Status::Errorf(at, ": '", key, "' must be a number");
      const double d = v.get<double>();
      if (!std::isfinite(d) || std::fabs(d) > 1e15)
        return Status::Errorf(at, ": '", key, "' is out of the supported range (|x| <= 1e15)");
      bounded = true;
      const std::string k = key;
      if (k == "minimum") lo = std::max(lo, static_cast<int64_t>(std::ceil(d)));
      if (k == "exclusiveMinimum") lo = std::max(lo, static_cast<int64_t>(std::floor(d)) + 1);
      if (k == "maximum") hi = std::min(hi, static_cast<int64_t>(std::floor(d)));
      if (k == "exclusiveMaximum") hi = std::min(hi, static_cast<int64_t>(std::ceil(d)) - 1);
    }
    if (!bounded) {
      UsePrimitive("integer");
      return std::string("integer");
    }
    if (lo > hi) return Status::Errorf(at, ": no integer satisfies the bounds");
    std::vector<std::string> parts;
    if (lo < 0) parts.push_back("\"-\" (" + NonNegativeRange(std::max<int64_t>(1, -std::min<int64_t>(hi, -1)), -lo) + ")");
    if (hi >= 0) parts.push_back("(" + NonNegativeRange(std::max<int64_t>(lo, 0), hi) + ")");
    std::string body;
    for (size_t i = 0; i < parts.size(); ++i) body += (i ? " | " : "") + parts[i];
    return NewRule("int", body);
  }

  Result<std::string> String(const Json& s, const std::string& at) {
    if (s.contains("format")) {
      if (!s["format"].is_string()) return Status::Errorf(at, ": 'format' must be a string");
      const std::string f = s["format"];
      if (f != "date" && f != "time" && f != "date-time" && f != "uuid" && f != "email")
        return Status::Errorf(at, ": unsupported format '", f, "' (supported: date, time, date-time, uuid, email)");
      if (s.contains("minLength") || s.contains("maxLength"))
        return Status::Errorf(at, ": 'minLength'/'maxLength' together with 'format' are not supported");
      UsePrimitive(f);
      return Quote() + " " + f + " " + Quote();
    }
    int64_t min = 0, max = -1;
    for (const char* key : {"minLength", "maxLength"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0)
        return Status::Errorf(at, ": '", key, "' must be a non-negative integer");
      if (s[key].get<int64_t>() > 10000) return Status::Errorf(at, ": '", key, "' above 10000 is not supported");
      (std::string(key) == "minLength" ? min : max) = s[key].get<int64_t>();
    }
    if (max >= 0 && max < min) return Status::Errorf(at, ": 'maxLength' is below 'minLength'");
    UsePrimitive(P("string"));
    if (min == 0 && max < 0) return P("string");
    UsePrimitive(P("char"));
    return NewRule("str", Str(Quote(), " ", P("char"), "{", min, ",", max >= 0 ? std::to_string(max) : "", "} ", Quote()));
  }

  Result<std::string> Array(const Json& s, const std::string& at, const std::string& hint) {
    std::string item = P("value");
    if (s.contains("items")) {
      G4_ASSIGN_OR_RETURN(item, Visit(s["items"], at + "/items", hint + "-item"));
    } else {
      UsePrimitive(item);
    }
    int64_t min = 0, max = -1;
    for (const char* key : {"minItems", "maxItems"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0)
        return Status::Errorf(at, ": '", key, "' must be a non-negative integer");
      if (s[key].get<int64_t>() > 1000) return Status::Errorf(at, ": '", key, "' above 1000 is not supported");
      (std::string(key) == "minItems" ? min : max) = s[key].get<int64_t>();
    }
    if (max >= 0 && max < min) return Status::Errorf(at, ": 'maxItems' is below 'minItems'");
    if (max == 0) return std::string(R"("[]")");
    const std::string more = Str("(\",\" ", item, "){", std::max<int64_t>(min - 1, 0), ",",
                                 max > 0 ? std::to_string(max - 1) : "", "}");
    const std::string list = item + " " + more;
    return NewRule(hint, "\"[\" " + (min == 0 ? "(" + list + ")?" : list) + " \"]\"");
  }

  Result<std::string> Object(const Json& s, const std::string& at, const std::string& hint) {
    const bool has_props = s.contains("properties");
    if (has_props && !s["properties"].is_object()) return Status::Errorf(at, ": 'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Status::Errorf(at, ": 'required' must be an array of names");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) return Status::Errorf(at, ": 'required' must be an array of names");
        if (!has_props || !s["properties"].contains(r.get<std::string>()))
          return Status::Errorf(at, ": required property '", r.get<std::string>(), "' is not in 'properties'");
        required.insert(r.get<std::string>());
      }
    }
    const Json* additional = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (!has_props || s["properties"].empty()) {
      if (additional && additional->is_boolean() && !additional->get<bool>()) return std::string(R"("{}")");
      std::string value = P("value");
      if (additional && additional->is_object()) {
        G4_ASSIGN_OR_RETURN(value, Visit(*additional, at + "/additionalProperties", hint + "-value"));
      } else {
        UsePrimitive(value);
      }
      const std::string key = gemma() ? "g-key" : "string";
      UsePrimitive(key);
      return NewRule(hint, Str("\"{\" (", key, " \":\" ", value, " (\",\" ", key, " \":\" ", value, ")*)? \"}\""));
    }
    if (additional && !additional->is_boolean() && !additional->is_object())
      return Status::Errorf(at, ": 'additionalProperties' must be a boolean or a schema");
    if (additional && additional->is_object()) {
      G4_ASSIGN_OR_RETURN(std::string ignored, Visit(*additional, at + "/additionalProperties", hint + "-extra"));
      (void)ignored;  // checked for unsupported keywords; only declared properties are produced
    }
    std::vector<std::string> kv;
    std::vector<bool> req;
    for (const auto& [name, sub] : s["properties"].items()) {
      G4_ASSIGN_OR_RETURN(const std::string value, Visit(sub, at + "/properties/" + name, hint + "-" + name));
      auto key = Key(name);
      if (!key.ok()) return Status::Errorf(at, "/properties/", name, ": ", key.status().message());
      kv.push_back(*key + " \":\" " + value);
      req.push_back(required.count(name) > 0);
    }
    // rest(i, first): properties i.. in order; `first`: nothing written yet (no comma before).
    const int n = static_cast<int>(kv.size());
    std::vector<std::array<std::string, 2>> rest(n + 1);
    rest[n] = {"", ""};
    for (int i = n - 1; i >= 0; --i)
      for (int first = 0; first < 2; ++first) {
        const std::string take = (first ? "" : "\",\" ") + kv[i] + (rest[i + 1][0].empty() ? "" : " " + rest[i + 1][0]);
        if (req[i]) {
          rest[i][first] = take;
        } else {
          const std::string skip = rest[i + 1][first].empty() ? "\"\"" : rest[i + 1][first];
          rest[i][first] = NewRule(Str(hint, "-", i, first ? "-first" : "-more"), take + " | " + skip);
        }
        if (rest[i][first].size() > 200) rest[i][first] = NewRule(Str(hint, "-", i, first ? "-first" : "-more"), rest[i][first]);
      }
    return NewRule(hint, "\"{\" " + (rest[0][1].empty() ? "" : rest[0][1] + " ") + "\"}\"");
  }

  Result<std::string> Ref(const std::string& ref, const std::string& at) {
    const auto known = ref_rules_.find(ref);
    if (known != ref_rules_.end()) return known->second;
    if (ref.empty() || ref[0] != '#') return Status::Errorf(at, ": only local $ref ('#...') is supported, not '", ref, "'");
    const Json* target = root_;
    std::string pointer = ref.substr(1);
    size_t pos = 0;
    while (pos < pointer.size()) {
      if (pointer[pos] != '/') return Status::Errorf(at, ": bad $ref '", ref, "'");
      size_t end = pointer.find('/', pos + 1);
      if (end == std::string::npos) end = pointer.size();
      std::string token = pointer.substr(pos + 1, end - pos - 1);
      for (size_t k; (k = token.find("~1")) != std::string::npos;) token.replace(k, 2, "/");
      for (size_t k; (k = token.find("~0")) != std::string::npos;) token.replace(k, 2, "~");
      if (!target->is_object() || !target->contains(token))
        return Status::Errorf(at, ": $ref '", ref, "' points to nothing");
      target = &(*target)[token];
      pos = end;
    }
    const std::string name = NewRule("ref-" + (pointer.empty() ? std::string("root") : pointer.substr(pointer.rfind('/') + 1)), "");
    ref_rules_[ref] = name;
    G4_ASSIGN_OR_RETURN(const std::string body, Visit(*target, ref, name));
    rules_[name] = body;
    return name;
  }

  Result<std::string> Visit(const Json& s, const std::string& at, const std::string& hint) {
    if (++depth_ > 64) return Status::Errorf(at, ": schema nested too deeply");
    struct Leave { int& d; ~Leave() { --d; } } leave{depth_};
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Status::Errorf(at, ": the schema 'false' cannot be satisfied");
      UsePrimitive(P("value"));
      return P("value");
    }
    if (!s.is_object()) return Status::Errorf(at, ": a schema must be an object or a boolean");
    for (const auto& [key, v] : s.items())
      if (!kSupported.count(key) && !kAnnotations.count(key))
        return Status::Errorf(at, ": unsupported JSON-schema keyword '", key, "'");
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) return Status::Errorf(at, ": '$ref' must be a string");
      for (const auto& [key, v] : s.items())
        if (kSupported.count(key) && key != "$ref" && key != "$defs" && key != "definitions")
          return Status::Errorf(at, ": '$ref' together with '", key, "' is not supported");
      return Ref(s["$ref"].get<std::string>(), at);
    }
    for (const char* key : {"enum", "const"}) {
      if (!s.contains(key)) continue;
      std::vector<Json> values;
      if (std::string(key) == "const") {
        values.push_back(s[key]);
      } else {
        if (!s[key].is_array() || s[key].empty()) return Status::Errorf(at, ": 'enum' must be a non-empty array");
        for (const Json& v : s[key]) values.push_back(v);
      }
      std::string body;
      for (size_t i = 0; i < values.size(); ++i) {
        auto literal = ValueLiteral(values[i]);
        if (!literal.ok()) return Status::Errorf(at, ": ", literal.status().message());
        body += (i ? " | " : "") + *literal;
      }
      return NewRule(hint, body);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_array() || s[key].empty()) return Status::Errorf(at, ": '", key, "' must be a non-empty array");
      for (const auto& [other, v] : s.items())
        if (kSupported.count(other) && other != key && other != "$defs" && other != "definitions")
          return Status::Errorf(at, ": '", key, "' together with '", other, "' is not supported");
      std::string body;
      for (size_t i = 0; i < s[key].size(); ++i) {
        G4_ASSIGN_OR_RETURN(const std::string alt, Visit(s[key][i], Str(at, "/", key, "/", i), Str(hint, "-", i)));
        body += (i ? " | " : "") + alt;
      }
      return NewRule(hint, body);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      if (s["type"].is_string()) types.push_back(s["type"]);
      else if (s["type"].is_array())
        for (const Json& t : s["type"]) {
          if (!t.is_string()) return Status::Errorf(at, ": 'type' must be a string or an array of strings");
          types.push_back(t);
        }
      else return Status::Errorf(at, ": 'type' must be a string or an array of strings");
      if (types.empty()) return Status::Errorf(at, ": 'type' is an empty array (no value can match)");
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      types.push_back("string");
    } else {
      UsePrimitive(P("value"));
      return P("value");
    }
    std::string body;
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string& t = types[i];
      std::string alt;
      if (t == "string") {
        G4_ASSIGN_OR_RETURN(alt, String(s, at));
      } else if (t == "integer") {
        G4_ASSIGN_OR_RETURN(alt, Integer(s, at));
      } else if (t == "number") {
        for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"})
          if (s.contains(key) && !(std::string(key) == "minimum" && s[key].is_number() && s[key].get<double>() == 0))
            return Status::Errorf(at, ": '", key, "' on a number is not supported (integers take bounds; numbers only minimum 0)");
        UsePrimitive("number");
        alt = s.contains("minimum") ? NewRule("nonneg", R"(("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?)")
                                    : std::string("number");
      } else if (t == "boolean" || t == "null") {
        UsePrimitive(t);
        alt = t;
      } else if (t == "object") {
        G4_ASSIGN_OR_RETURN(alt, Object(s, at, hint));
      } else if (t == "array") {
        G4_ASSIGN_OR_RETURN(alt, Array(s, at, hint));
      } else {
        return Status::Errorf(at, ": unknown type '", t, "'");
      }
      body += (i ? " | " : "") + alt;
    }
    return types.size() == 1 ? body : NewRule(hint, body);
  }

  const SchemaSyntax syntax_;
  const std::string prefix_;  // before every rule name this compiler makes ("r-PREFIX...")
  const Json* root_ = nullptr;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  int counter_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema) {
  return Compiler(SchemaSyntax::kJson, "").Run(schema);
}

Result<SchemaRules> JsonSchemaRules(const nlohmann::ordered_json& schema, SchemaSyntax syntax,
                                    const std::string& prefix) {
  Compiler compiler(syntax, prefix);
  SchemaRules out;
  G4_ASSIGN_OR_RETURN(out.expression, compiler.Add(schema));
  out.rules = compiler.rules();
  return out;
}

Result<std::string> JsonSchemaTextToGbnf(std::string_view schema_json) {
  const Json schema = Json::parse(schema_json, nullptr, false);
  if (schema.is_discarded()) return Status::Error("the schema is not valid JSON");
  return JsonSchemaToGbnf(schema);
}

std::string JsonObjectGbnf() {
  std::string out = "root ::= object\n";
  for (const char* name : {"object", "value", "array", "string", "char", "number", "boolean", "null"})
    for (const Primitive& p : kPrimitives)
      if (std::string(name) == p.name) out += std::string(p.name) + " ::= " + p.body + "\n";
  return out;
}

}  // namespace g4::grammar
