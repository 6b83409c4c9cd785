// The tool-call grammar and the output parser agree: random sentences of the grammar for
// Gemma-4's call syntax (grammar/tool_call_grammar.h), written as the model's tokens would decode
// them, parse back with the server's parser (tokenizer/chat_gemma4.h) into calls whose arguments
// validate against the function's schema. And the grammar refuses what the schema forbids.
#include "grammar/tool_call_grammar.h"

#include <gtest/gtest.h>

#include <random>

#include "grammar/gbnf_parser.h"
#include "grammar/recognizer.h"
#include "tokenizer/chat_gemma4.h"

namespace g4::grammar {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// A small JSON-schema check for the keywords these tests use (written from the JSON Schema
// specification; the server test checks the same with ajv). Returns "" or what is wrong.
std::string Violation(const json& v, const json& s, const std::string& at = "$") {
  if (s.contains("enum")) {
    for (const json& e : s["enum"])
      if (e == v) return "";
    return at + ": not in enum";
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_string()) types.push_back(s["type"]);
    else for (const json& t : s["type"]) types.push_back(t);
    bool ok = false;
    for (const std::string& t : types)
      ok = ok || (t == "string" && v.is_string()) || (t == "integer" && v.is_number_integer()) ||
           (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) ||
           (t == "null" && v.is_null()) || (t == "object" && v.is_object()) || (t == "array" && v.is_array());
    if (!ok) return at + ": wrong type " + v.dump();
  }
  if (v.is_number()) {
    if (s.contains("minimum") && v.get<double>() < s["minimum"].get<double>()) return at + ": below minimum";
    if (s.contains("maximum") && v.get<double>() > s["maximum"].get<double>()) return at + ": above maximum";
  }
  if (v.is_string()) {
    size_t chars = 0;
    for (unsigned char c : v.get<std::string>()) chars += (c & 0xC0) != 0x80;
    if (s.contains("minLength") && chars < s["minLength"].get<size_t>()) return at + ": too short";
    if (s.contains("maxLength") && chars > s["maxLength"].get<size_t>()) return at + ": too long";
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return at + ": too few items";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return at + ": too many items";
    if (s.contains("items"))
      for (size_t i = 0; i < v.size(); ++i)
        if (auto e = Violation(v[i], s["items"], Str(at, "[", i, "]")); !e.empty()) return e;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const json& r : s["required"])
        if (!v.contains(r.get<std::string>())) return at + ": missing " + r.get<std::string>();
    for (const auto& [key, value] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(key)) {
        if (auto e = Violation(value, s["properties"][key], at + "." + key); !e.empty()) return e;
      } else if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
        return at + ": unexpected property " + key;
      }
    }
  }
  return "";
}

// A random sentence of the automaton (bytes; empty if none came out within the length cap).
// Structural bytes are drawn more often than text so that sentences end.
std::string RandomSentence(Automaton& a, std::mt19937& rng, size_t cap = 4000) {
  const std::string structural = "{}[],:";
  int state = a.start();
  std::string out;
  while (out.size() < cap) {
    std::vector<int> options;
    std::vector<double> weights;
    for (int b = 0; b < 256; ++b) {
      if (a.Next(state, static_cast<uint8_t>(b)) == Automaton::kDead) continue;
      double w = b >= 0xF5 || structural.find(static_cast<char>(b)) != std::string::npos ? 40
                 : b >= 0x20 && b < 0x7F                                                 ? 1
                 : b >= 0x80 && b < 0xC0                                                 ? 1  // continuation
                                                                                         : 0.02;
      options.push_back(b);
      weights.push_back(w);
    }
    if (a.CanEnd(state) && (options.empty() || rng() % 4 == 0)) return out;
    if (options.empty()) return "";
    std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
    const int b = options[pick(rng)];
    out += static_cast<char>(b);
    state = a.Next(state, static_cast<uint8_t>(b));
  }
  return "";
}

Automaton Compile(const std::vector<ToolCallFunction>& fns, const ToolCallGrammarOptions& options) {
  auto gbnf = ToolCallGbnf(fns, options);
  EXPECT_TRUE(gbnf.ok()) << gbnf.status().message();
  GbnfLimits limits;
  limits.stand_in_bytes = true;
  auto g = ParseGbnf(*gbnf, limits);
  EXPECT_TRUE(g.ok()) << g.status().message() << "\n" << *gbnf;
  return Automaton(std::move(g).value());
}

const char* kWeather = R"({"type":"object","properties":{
  "city":{"type":"string"},"unit":{"enum":["c","f"]},"days":{"type":"integer","minimum":1,"maximum":14}},
  "required":["city","days"],"additionalProperties":false})";
const char* kNested = R"({"type":"object","properties":{
  "user":{"type":"object","properties":{"name":{"type":"string","maxLength":8},
          "tags":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":3}},
          "required":["name","tags"]},
  "ok":{"type":"boolean"},"score":{"type":"number"},"note":{"type":["string","null"]},
  "odd key":{"type":"integer"},"mode":{"const":{"a":[1,"x|y"]}}},
  "required":["user","odd key"]})";

std::vector<ToolCallFunction> Functions() {
  return {{"get_weather", ordered_json::parse(kWeather), true},
          {"update-user", ordered_json::parse(kNested), true},
          {"ping", nullptr, true}};
}

// Every sentence parses into calls to the functions, each validating against its schema.
void ExpectSentencesParseAndValidate(const ToolCallGrammarOptions& options, int sentences, size_t* max_calls) {
  const std::vector<ToolCallFunction> fns = Functions();
  Automaton a = Compile(fns, options);
  std::mt19937 rng(11);
  int produced = 0;
  *max_calls = 0;
  for (int i = 0; i < sentences * 4 && produced < sentences; ++i) {
    const std::string bytes = RandomSentence(a, rng);
    if (bytes.empty()) continue;
    ++produced;
    const std::string text = ExpandStandIns(bytes);
    Gemma4OutputParser parser(/*keep_malformed_calls=*/false, options.in_thought);
    ChatOutput out = parser.Push(text);
    ChatOutput rest = parser.Finish();
    out.tool_calls.insert(out.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
    if (options.require_call) {
      ASSERT_GE(out.tool_calls.size(), 1u) << text;
    }
    if (!options.parallel) {
      ASSERT_LE(out.tool_calls.size(), 1u) << text;
    }
    *max_calls = std::max(*max_calls, out.tool_calls.size());
    // Nothing of a call leaks into the content.
    ASSERT_EQ(out.content.find("call:"), std::string::npos) << text;
    for (const ChatToolCall& call : out.tool_calls) {
      const json args = json::parse(call.arguments, nullptr, false);
      ASSERT_TRUE(args.is_object()) << call.arguments << "\nfrom " << text;
      const ToolCallFunction* fn = nullptr;
      for (const ToolCallFunction& f : fns)
        if (f.name == call.name) fn = &f;
      ASSERT_NE(fn, nullptr) << call.name;
      if (fn->parameters.is_null()) {
        EXPECT_TRUE(args.empty()) << call.arguments;
      } else {
        EXPECT_EQ(Violation(args, json::parse(fn->parameters.dump())), "") << call.arguments << "\nfrom " << text;
      }
    }
  }
  EXPECT_GE(produced, sentences / 2);
}

TEST(ToolCallGrammar, ForcedSentencesParseBackToValidArguments) {
  size_t max_calls = 0;
  ExpectSentencesParseAndValidate({.require_call = true, .parallel = true}, 150, &max_calls);
  EXPECT_GE(max_calls, 2u);  // parallel calls do occur
}

TEST(ToolCallGrammar, NotParallelMeansOneCall) {
  size_t max_calls = 0;
  ExpectSentencesParseAndValidate({.require_call = true, .parallel = false}, 60, &max_calls);
  EXPECT_EQ(max_calls, 1u);
}

TEST(ToolCallGrammar, StrictUnderAutoAllowsTextThenCalls) {
  size_t max_calls = 0;
  ExpectSentencesParseAndValidate({.require_call = false, .parallel = true, .allow_thought = true}, 100,
                                  &max_calls);
  EXPECT_GE(max_calls, 1u);
}

TEST(ToolCallGrammar, InThoughtClosesTheChannelFirst) {
  size_t max_calls = 0;
  ExpectSentencesParseAndValidate({.require_call = true, .parallel = false, .in_thought = true}, 40, &max_calls);
  EXPECT_EQ(max_calls, 1u);
}

TEST(ToolCallGrammar, RefusesWhatTheSchemaForbids) {
  Automaton a = Compile(Functions(), {.require_call = true, .parallel = false});
  auto accepts = [&](const std::string& text) {
    std::string bytes;  // the model's text with the markers as their stand-in bytes
    for (size_t i = 0; i < text.size();) {
      bool marker = false;
      for (const StandIn& s : kStandIns)
        if (text.compare(i, s.text.size(), s.text) == 0) {
          bytes += static_cast<char>(s.byte);
          i += s.text.size();
          marker = true;
          break;
        }
      if (!marker) bytes += text[i++];
    }
    const int state = a.Walk(a.start(), bytes);
    return state != Automaton::kDead && a.CanEnd(state);
  };
  const std::string q = "<|\"|>";
  EXPECT_TRUE(accepts("<|tool_call>call:get_weather{city:" + q + "Paris" + q + ",days:3}<tool_call|>"));
  EXPECT_TRUE(accepts("<|tool_call>call:get_weather{city:" + q + "a|b<c>" + q + ",unit:" + q + "f" + q + ",days:14}<tool_call|>"));
  EXPECT_TRUE(accepts("<|tool_call>call:ping{}<tool_call|>"));
  EXPECT_TRUE(accepts("<|tool_call>call:update-user{user:{name:" + q + "x" + q + ",tags:[" + q + "t" + q +
                      "]},<|\"|>odd key<|\"|>:-7}<tool_call|>"));
  EXPECT_FALSE(accepts("<|tool_call>call:get_weather{city:" + q + "Paris" + q + "}<tool_call|>"));  // days required
  EXPECT_FALSE(accepts("<|tool_call>call:get_weather{city:" + q + "Paris" + q + ",days:15}<tool_call|>"));
  EXPECT_FALSE(accepts("<|tool_call>call:get_weather{city:" + q + "Paris" + q + ",days:" + q + "3" + q + "}<tool_call|>"));
  EXPECT_FALSE(accepts("<|tool_call>call:get_weather{city:" + q + "Paris" + q + ",unit:" + q + "k" + q + ",days:3}<tool_call|>"));
  EXPECT_FALSE(accepts("<|tool_call>call:get_weather{city:" + q + "a|>b" + q + ",days:3}<tool_call|>"));  // "|>" in text
  EXPECT_FALSE(accepts("<|tool_call>call:get_weather{city:Paris,days:3}<tool_call|>"));  // unquoted string
  EXPECT_FALSE(accepts("<|tool_call>call:nope{}<tool_call|>"));
  EXPECT_FALSE(accepts("<|tool_call>call:update-user{user:{name:" + q + "123456789" + q + ",tags:[" + q + "t" + q +
                       "]},<|\"|>odd key<|\"|>:1}<tool_call|>"));  // maxLength 8
  // One call only when not parallel.
  EXPECT_FALSE(accepts("<|tool_call>call:ping{}<tool_call|><|tool_call>call:ping{}<tool_call|>"));
}

TEST(ToolCallGrammar, ErrorsNameTheFunction) {
  auto bad = ToolCallGbnf({{"f", ordered_json::parse(R"({"type":"object","properties":{"s":{"pattern":"x"}}})"), true}}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("function 'f'"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("pattern"), std::string::npos) << bad.status().message();
  auto not_object = ToolCallGbnf({{"f", ordered_json::parse(R"({"type":"string"})"), true}}, {});
  ASSERT_FALSE(not_object.ok());
  EXPECT_NE(not_object.status().message().find("object schema"), std::string::npos);
}

}  // namespace
}  // namespace g4::grammar
