#include "testing/grammars.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"

namespace g4 {

std::string SchemaGbnf(const std::string& schema) {
  auto gbnf = grammar::JsonSchemaTextToGbnf(schema);
  EXPECT_TRUE(gbnf.ok()) << gbnf.status().message();
  return gbnf.ok() ? *gbnf : "root ::= \"x\"\n";
}

std::shared_ptr<grammar::Automaton> GbnfAutomaton(const std::string& gbnf) {
  auto g = grammar::ParseGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) g = grammar::ParseGbnf("root ::= \"x\"\n");
  return std::make_shared<grammar::Automaton>(std::move(g).value());
}

std::shared_ptr<grammar::Automaton> SchemaAutomaton(const std::string& schema) {
  return GbnfAutomaton(SchemaGbnf(schema));
}

const char* const kPersonSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":12},
  "age":{"type":"integer","minimum":0,"maximum":130},
  "email":{"type":"string","format":"email"},
  "tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3},
  "ok":{"type":"boolean"}},
  "required":["name","age","ok"],"additionalProperties":false})";

void CheckPerson(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << text;
  ASSERT_TRUE(j.is_object()) << text;
  ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << text;
  // maxLength counts characters: at most 4 bytes each.
  EXPECT_LE(j["name"].get<std::string>().size(), 12u * 4) << text;
  ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer()) << text;
  EXPECT_GE(j["age"].get<int>(), 0);
  EXPECT_LE(j["age"].get<int>(), 130);
  ASSERT_TRUE(j.contains("ok") && j["ok"].is_boolean()) << text;
  if (j.contains("tags")) {
    ASSERT_TRUE(j["tags"].is_array());
    EXPECT_LE(j["tags"].size(), 3u);
  }
  for (const auto& [k, v] : j.items())
    EXPECT_TRUE(k == "name" || k == "age" || k == "email" || k == "tags" || k == "ok") << k;
}

}  // namespace g4
