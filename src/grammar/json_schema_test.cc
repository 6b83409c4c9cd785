// JSON-schema compilation: hand-checked instances are accepted or refused by the compiled
// grammar, and unsupported keywords are refused by name. (The generated corpus of schemas with an
// independent validator, ajv, runs against a real server: tests/server/structured_output_test.mjs.)
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include "grammar/gbnf_parser.h"
#include "grammar/recognizer.h"

namespace g4::grammar {
namespace {

class Schema {
 public:
  explicit Schema(const std::string& schema) {
    auto gbnf = JsonSchemaTextToGbnf(schema);
    EXPECT_TRUE(gbnf.ok()) << gbnf.status().message();
    if (!gbnf.ok()) return;
    gbnf_ = *gbnf;
    auto g = ParseGbnf(gbnf_);
    EXPECT_TRUE(g.ok()) << g.status().message() << "\n" << gbnf_;
    if (g.ok()) automaton_ = std::make_shared<Automaton>(std::move(g).value());
  }
  bool Accepts(const std::string& json) const {
    if (!automaton_) return false;
    Recognizer r(automaton_);
    return r.AcceptAll(json) && r.IsComplete();
  }
  const std::string& gbnf() const { return gbnf_; }

 private:
  std::string gbnf_;
  std::shared_ptr<Automaton> automaton_;
};

std::string ErrorOf(const std::string& schema) {
  auto gbnf = JsonSchemaTextToGbnf(schema);
  return gbnf.ok() ? "" : gbnf.status().message();
}

TEST(JsonSchema, ObjectsInOrderWithOptionalProperties) {
  Schema s(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
               "tags":{"type":"array","items":{"type":"string"}}},"required":["name"],
               "additionalProperties":false})");
  EXPECT_TRUE(s.Accepts(R"({"name":"Ann"})"));
  EXPECT_TRUE(s.Accepts(R"({"name":"Ann","age":31})"));
  EXPECT_TRUE(s.Accepts(R"({"name":"Ann","tags":["a","b"]})"));
  EXPECT_TRUE(s.Accepts(R"({"name":"A\"n\\n\u00e9","age":-3,"tags":[]})"));
  EXPECT_FALSE(s.Accepts(R"({"age":31})"));                 // required missing
  EXPECT_FALSE(s.Accepts(R"({"age":31,"name":"Ann"})"));    // schema order
  EXPECT_FALSE(s.Accepts(R"({"name":"Ann","x":1})"));       // no additional properties
  EXPECT_FALSE(s.Accepts(R"({"name": "Ann"})"));            // compact: no whitespace
  EXPECT_FALSE(s.Accepts(R"({"name":"Ann","age":1.5})"));   // integer
  EXPECT_FALSE(s.Accepts(R"({"name":"Ann","age":01})"));    // no leading zeros
  EXPECT_FALSE(s.Accepts("{\"name\":\"a\nb\"}"));           // control characters are escaped
  EXPECT_FALSE(s.Accepts(R"({"name":"Ann",})"));
}

TEST(JsonSchema, AllOptionalAndEmpty) {
  Schema s(R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"}}})");
  EXPECT_TRUE(s.Accepts("{}"));
  EXPECT_TRUE(s.Accepts(R"({"b":null})"));
  EXPECT_TRUE(s.Accepts(R"({"a":true,"b":null})"));
  EXPECT_FALSE(s.Accepts(R"({,"b":null})"));
  EXPECT_FALSE(s.Accepts(R"({"b":null,"a":true})"));
}

TEST(JsonSchema, EnumConstAnyOfAndTypeLists) {
  Schema e(R"({"enum":["red","green",3,null,{"k":[1]}]})");
  EXPECT_TRUE(e.Accepts(R"("red")"));
  EXPECT_TRUE(e.Accepts("3"));
  EXPECT_TRUE(e.Accepts("null"));
  EXPECT_TRUE(e.Accepts(R"({"k":[1]})"));
  EXPECT_FALSE(e.Accepts(R"("blue")"));
  Schema c(R"({"const":"x\"y"})");
  EXPECT_TRUE(c.Accepts(R"("x\"y")"));
  Schema a(R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"type":"boolean"},"maxItems":2}]})");
  EXPECT_TRUE(a.Accepts("12"));
  EXPECT_TRUE(a.Accepts("[true,false]"));
  EXPECT_FALSE(a.Accepts("[true,false,true]"));
  Schema t(R"({"type":["string","null"]})");
  EXPECT_TRUE(t.Accepts("null"));
  EXPECT_TRUE(t.Accepts(R"("")"));
  EXPECT_FALSE(t.Accepts("1"));
}

TEST(JsonSchema, ArraysAndStringLengths) {
  Schema s(R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":3},"minItems":2,"maxItems":3})");
  EXPECT_TRUE(s.Accepts(R"(["ab","abc"])"));
  EXPECT_TRUE(s.Accepts(R"(["ab","abc","\n\u0041"])"));  // escapes count as one character
  EXPECT_FALSE(s.Accepts(R"(["ab"])"));
  EXPECT_FALSE(s.Accepts(R"(["ab","ab","ab","ab"])"));
  EXPECT_FALSE(s.Accepts(R"(["a","ab"])"));
  EXPECT_FALSE(s.Accepts(R"(["abcd","ab"])"));
  Schema empty(R"({"type":"array","maxItems":0})");
  EXPECT_TRUE(empty.Accepts("[]"));
  EXPECT_FALSE(empty.Accepts("[1]"));
}

TEST(JsonSchema, IntegerBounds) {
  Schema s(R"({"type":"integer","minimum":-15,"maximum":123})");
  for (int v = -30; v <= 200; ++v) EXPECT_EQ(s.Accepts(std::to_string(v)), v >= -15 && v <= 123) << v;
  EXPECT_FALSE(s.Accepts("-0"));
  EXPECT_FALSE(s.Accepts("007"));
  Schema x(R"({"type":"integer","exclusiveMinimum":99,"exclusiveMaximum":1001})");
  for (int v = 0; v <= 1100; ++v) EXPECT_EQ(x.Accepts(std::to_string(v)), v >= 100 && v <= 1000) << v;
  Schema lo(R"({"type":"integer","minimum":7})");
  EXPECT_TRUE(lo.Accepts("7"));
  EXPECT_TRUE(lo.Accepts("12345678"));
  EXPECT_FALSE(lo.Accepts("6"));
  EXPECT_FALSE(lo.Accepts("-8"));
  Schema neg(R"({"type":"integer","maximum":-10})");
  EXPECT_TRUE(neg.Accepts("-10"));
  EXPECT_TRUE(neg.Accepts("-99999"));
  EXPECT_FALSE(neg.Accepts("-9"));
  EXPECT_FALSE(neg.Accepts("0"));
}

TEST(JsonSchema, Formats) {
  Schema d(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(d.Accepts(R"("2024-02-28")"));
  EXPECT_TRUE(d.Accepts(R"("1999-12-31")"));
  EXPECT_FALSE(d.Accepts(R"("2024-02-30")"));
  EXPECT_FALSE(d.Accepts(R"("2024-04-31")"));
  EXPECT_FALSE(d.Accepts(R"("2024-13-01")"));
  Schema dt(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(dt.Accepts(R"("2024-01-05T23:59:01Z")"));
  EXPECT_TRUE(dt.Accepts(R"("2024-01-05T10:00:00.123+02:00")"));
  EXPECT_FALSE(dt.Accepts(R"("2024-01-05T24:00:00Z")"));
  Schema u(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(u.Accepts(R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(u.Accepts(R"("123e4567e89b12d3a456426614174000")"));
  Schema m(R"({"type":"string","format":"email"})");
  EXPECT_TRUE(m.Accepts(R"("ann.lee@example.com")"));
  EXPECT_FALSE(m.Accepts(R"("ann@localhost")"));
  EXPECT_FALSE(m.Accepts(R"(".ann@example.com")"));
}

TEST(JsonSchema, RefsAndRecursion) {
  Schema s(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
              "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},
              "$ref":"#/$defs/node"})");
  EXPECT_TRUE(s.Accepts(R"({"v":1})"));
  EXPECT_TRUE(s.Accepts(R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4}]}]})"));
  EXPECT_FALSE(s.Accepts(R"({"v":1,"kids":[{"w":2}]})"));
  Schema any(R"({"type":"object"})");
  EXPECT_TRUE(any.Accepts(R"({"a":[1,{"b":null}],"c":"d","e":-1.5e+3})"));
  EXPECT_FALSE(any.Accepts(R"([1])"));
}

TEST(JsonSchema, JsonObjectGrammar) {
  auto g = ParseGbnf(JsonObjectGbnf());
  ASSERT_TRUE(g.ok()) << g.status().message();
  Recognizer r(std::make_shared<Automaton>(std::move(g).value()));
  EXPECT_TRUE(r.AcceptAll(R"({"a":{"b":[true,false,null,"x",0.5]}})"));
  EXPECT_TRUE(r.IsFinished());
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  EXPECT_EQ(ErrorOf(R"({"type":"string","pattern":"^a+$"})"), "#: unsupported JSON-schema keyword 'pattern'");
  EXPECT_EQ(ErrorOf(R"({"type":"object","properties":{"x":{"type":"array","uniqueItems":true}}})"),
            "#/properties/x: unsupported JSON-schema keyword 'uniqueItems'");
  EXPECT_EQ(ErrorOf(R"({"type":"string","format":"ipv4"})"),
            "#: unsupported format 'ipv4' (supported: date, time, date-time, uuid, email)");
  EXPECT_EQ(ErrorOf(R"({"type":"number","maximum":3})"),
            "#: 'maximum' on a number is not supported (integers take bounds; numbers only minimum 0)");
  EXPECT_EQ(ErrorOf(R"({"type":"object","required":["a"]})"), "#: required property 'a' is not in 'properties'");
  EXPECT_EQ(ErrorOf(R"({"$ref":"#/$defs/missing"})"), "#: $ref '#/$defs/missing' points to nothing");
  EXPECT_EQ(ErrorOf(R"({"type":"strin"})"), "#: unknown type 'strin'");
  EXPECT_EQ(ErrorOf("{"), "the schema is not valid JSON");
  EXPECT_EQ(ErrorOf("false"), "#: the schema 'false' cannot be satisfied");
}

}  // namespace
}  // namespace g4::grammar
