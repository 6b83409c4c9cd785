#include "tokenizer/chat_gemma4.h"

#include <gtest/gtest.h>

#include "base/mapped_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_assets.h"

namespace g4 {
namespace {

using nlohmann::json;

Gemma4TemplateFeatures BaseFeatures() {
  return Gemma4TemplateFeatures{.think_newline = false,
                                .empty_thought_in_prompt = true,
                                .replay_tool_reasoning = false,
                                .continue_after_tool_response = false};
}

std::string MustRender(const json& messages, const json& tools,
                       const Gemma4ChatOptions& options = {}) {
  auto result = RenderGemma4Chat(messages, tools, options);
  EXPECT_TRUE(result.ok()) << result.status().message();
  return result.ok() ? *result : std::string();
}

std::vector<int> WithBos(std::vector<int> ids) {
  ids.insert(ids.begin(), 2);
  return ids;
}

// Prompts and ids captured from llama-server on a
// real Gemma-4 GGUF. Rendering must give the same text, and encoding it the same ids.
TEST(Gemma4Chat, DocFixturesReproduceIds) {
  G4_REQUIRE_TOKENIZER(tok, "gemma4");
  struct Fixture {
    json messages;
    bool thinking;
    std::vector<int> ids;
  };
  std::vector<Fixture> fixtures = {
      {json::parse(R"([{"role":"user","content":"Hello"}])"),
       false,
       {105, 2364, 107, 9259, 106, 107, 105, 4368, 107, 100, 45518, 107, 101}},
      {json::parse(R"([{"role":"user","content":"Hello"}])"),
       true,
       {105, 9731, 107, 98, 107, 106, 107, 105, 2364, 107, 9259, 106, 107, 105, 4368, 107}},
      {json::parse(
           R"([{"role":"system","content":"Be precise."},{"role":"user","content":"Explain slices."}])"),
       false,
       {105,   9731,   107, 3912, 18997, 236761, 106, 107, 105,   2364, 107, 155122,
        32892, 236761, 106, 107,  105,   4368,   107, 100, 45518, 107,  101}},
  };
  for (const Fixture& f : fixtures) {
    Gemma4ChatOptions options;
    options.enable_thinking = f.thinking;
    std::string prompt = MustRender(f.messages, nullptr, options);
    SCOPED_TRACE(prompt);
    EXPECT_EQ(tok->Encode(prompt), WithBos(f.ids));
    EXPECT_EQ(tok->Decode(WithBos(f.ids)), prompt);
  }
}

// The multi-turn prompt of the llama.cpp fixture block in the golden file.
TEST(Gemma4Chat, MultiTurnFixtureFromGoldenFile) {
  G4_REQUIRE_TOKENIZER(tok, "gemma4");
  auto text = ReadFileToString(testing::SourceDir() + "/tests/data/tokenizer-golden.json");
  ASSERT_TRUE(text.ok()) << text.status().message();
  json golden = json::parse(*text);
  const std::string wanted = "<|turn>user\nCompute 1+1.<turn|>";
  const json* fixture = nullptr;
  for (const json& c : golden["gemma4_llamacpp_fixture"]["cases"])
    if (c["text"].get<std::string>().rfind(wanted, 0) == 0) fixture = &c;
  ASSERT_NE(fixture, nullptr);
  json messages =
      json::parse(R"([{"role":"user","content":"Compute 1+1."},{"role":"assistant","content":"2"},
    {"role":"user","content":"Now double it."},{"role":"assistant","content":"4"},{"role":"user","content":"Why?"}])");
  std::string prompt = MustRender(messages, nullptr);
  EXPECT_EQ(prompt, "<bos>" + (*fixture)["text"].get<std::string>());
  EXPECT_EQ(tok->Encode(prompt), WithBos((*fixture)["ids"].get<std::vector<int>>()));
}

// Prompts rendered by Python Jinja2 from the real templates (tools/make_chat_golden.py): system,
// developer, multi-turn with stripped thinking, content parts, thinking on/off, tool declarations
// (nested schemas), tool calls, tool responses, parallel calls, interleaved reasoning.
TEST(Gemma4Chat, MatchesJinjaRenderedGolden) {
  auto text = ReadFileToString(testing::SourceDir() + "/tests/data/gemma4-chat-golden.json");
  ASSERT_TRUE(text.ok()) << text.status().message();
  json golden = json::parse(*text);
  const Tokenizer* tok = testing::SharedTokenizer("gemma4");
  int compared = 0;
  for (const json& c : golden["cases"]) {
    for (const char* revision : {"base", "interleaved"}) {
      SCOPED_TRACE(Str(c["name"].get<std::string>(), " / ", revision, " / thinking=",
                       c["enable_thinking"], " / gen=", c["add_generation_prompt"]));
      Gemma4ChatOptions options;
      options.enable_thinking = c["enable_thinking"];
      options.add_generation_prompt = c["add_generation_prompt"];
      if (std::string(revision) == "base") options.features = BaseFeatures();
      std::string expected = c["expected"][revision];
      std::string prompt = MustRender(c["messages"], c["tools"], options);
      EXPECT_EQ(prompt, expected);
      ++compared;
      if (tok) {
        // Exactly one <bos>, first; the prompt survives encode/decode unchanged.
        std::vector<int> ids = tok->Encode(prompt);
        ASSERT_FALSE(ids.empty());
        EXPECT_EQ(ids[0], 2);
        EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
        EXPECT_EQ(tok->Decode(ids), prompt);
      }
    }
  }
  EXPECT_EQ(compared, 72);
}

TEST(Gemma4Chat, ThinkingOnOffGenerationPrompt) {
  json messages = json::parse(R"([{"role":"user","content":"Hi"}])");
  Gemma4ChatOptions on;
  on.enable_thinking = true;
  EXPECT_EQ(MustRender(messages, nullptr, on),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n");
  Gemma4ChatOptions off;
  EXPECT_EQ(MustRender(messages, nullptr, off),
            "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  off.features.empty_thought_in_prompt = false;
  EXPECT_EQ(MustRender(messages, nullptr, off), "<bos><|turn>user\nHi<turn|>\n<|turn>model\n");
  on.features.think_newline = false;
  EXPECT_EQ(MustRender(messages, nullptr, on),
            "<bos><|turn>system\n<|think|><turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n");
}

TEST(Gemma4Chat, RejectsWhatItCannotRender) {
  auto error = [](const char* messages_json) {
    auto r = RenderGemma4Chat(json::parse(messages_json), nullptr);
    return r.ok() ? std::string("(rendered)") : r.status().message();
  };
  EXPECT_NE(error("[]").find("non-empty"), std::string::npos);
  EXPECT_NE(
      error(R"([{"role":"user","content":"x"},{"role":"tool","content":"y"}])").find("tool_calls"),
      std::string::npos);
  EXPECT_NE(error(R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])")
                .find("image_url"),
            std::string::npos);
  EXPECT_NE(error(R"([{"role":"wizard","content":"x"}])").find("wizard"), std::string::npos);
  EXPECT_NE(error(R"([{"content":"x"}])").find("role"), std::string::npos);
}

// --- output parsing ---------------------------------------------------------------------------

TEST(Gemma4Output, ReasoningContentAndEnd) {
  ChatOutput out = ParseGemma4Output(
      "<|channel>thought\nLet me think.<channel|>\n\nThe answer is 4.<turn|>ignored");
  EXPECT_EQ(out.reasoning, "Let me think.");
  EXPECT_EQ(out.content, "The answer is 4.");
  EXPECT_TRUE(out.tool_calls.empty());
  // Thinking off: the prompt already closed the channel, so output is plain content.
  out = ParseGemma4Output("Paris is the capital.");
  EXPECT_EQ(out.content, "Paris is the capital.");
  EXPECT_EQ(out.reasoning, "");
  // A stray "<" that starts no marker stays text.
  EXPECT_EQ(ParseGemma4Output("a < b and <c>").content, "a < b and <c>");
}

TEST(Gemma4Output, ToolCalls) {
  ChatOutput out = ParseGemma4Output(
      "<|channel>thought\nNeed "
      "weather.<channel|><|tool_call>call:get_weather{location:<|\"|>Paris, FR<|\"|>,"
      "days:3,detail:{hourly:true,fields:[<|\"|>temp<|\"|>,<|\"|>wind<|\"|>]},ratio:0.5,note:None}<"
      "tool_call|>"
      "<|tool_call>call:get_time{}<tool_call|><|tool_response>");
  EXPECT_EQ(out.reasoning, "Need weather.");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(
      json::parse(out.tool_calls[0].arguments),
      json::parse(
          R"({"location":"Paris, FR","days":3,"detail":{"hourly":true,"fields":["temp","wind"]},
                            "ratio":0.5,"note":null})"));
  EXPECT_EQ(out.tool_calls[1].name, "get_time");
  EXPECT_EQ(out.tool_calls[1].arguments, "{}");
  // A call that cannot be read even by the repair pass stays visible as content.
  out = ParseGemma4Output("<|tool_call>call:broken{x:<tool_call|>");
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_NE(out.content.find("call:broken"), std::string::npos);
  // One the repair pass reads is a tool call.
  out = ParseGemma4Output("<|tool_call>call:repaired{x:<|\"|>unterminated}<tool_call|>");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"x":"unterminated"})");
  EXPECT_EQ(out.content, "");
  // Generation stopped inside a call (stop token before <tool_call|>): still read.
  out = ParseGemma4Output("<|tool_call>call:f{a:1}");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"a":1})");
}

TEST(Gemma4Output, ArgumentSyntax) {
  auto parse = [](const char* s) {
    auto r = ParseGemma4Arguments(s);
    EXPECT_TRUE(r.ok()) << s << ": " << r.status().message();
    return r.ok() ? *r : json();
  };
  EXPECT_EQ(parse("{a:<|\"|>x, y}: z<|\"|>}"), json::parse(R"({"a":"x, y}: z"})"));
  EXPECT_EQ(parse("{<|\"|>quoted key<|\"|>:-2.5e3,b:false,c:[],d:{}}"),
            json::parse(R"({"quoted key":-2500.0,"b":false,"c":[],"d":{}})"));
  EXPECT_EQ(parse("{ a : 1 , b : [ 1 , [2] , {c:null} ] }"),
            json::parse(R"({"a":1,"b":[1,[2],{"c":null}]})"));
  EXPECT_EQ(parse(R"({s:"json \"escaped\"",w:bare words})"),
            json::parse(R"({"s":"json \"escaped\"","w":"bare words"})"));
  EXPECT_FALSE(ParseGemma4Arguments("{a:1").ok());
  EXPECT_FALSE(ParseGemma4Arguments("{a:1}}").ok());
  EXPECT_FALSE(ParseGemma4Arguments("{a}").ok());
}

// The repair pass: malformed calls as models write them, read as the model meant them. Strict
// parsing refuses each or misreads it; well-formed input parses the same either way.
TEST(Gemma4Output, RepairsMalformedArguments) {
  const std::pair<const char*, const char*> cases[] = {
      {"{city:'Paris',note:'it\\'s'}", R"({"city":"Paris","note":"it's"})"},                      // single quotes
      {"{city:<|\"|>Paris}", R"({"city":"Paris"})"},                                                 // missing <|"|>
      {"{city:<|\"|>Paris, FR,days:2}", R"({"city":"Paris, FR","days":2})"},                         // ... mid-object
      {"{q:<|\"|>find {x} now}", R"({"q":"find {x} now"})"},                                         // braces inside
      {"{city:Paris, France,days:2,deep:{unit:deg C}}", R"({"city":"Paris, France","days":2,"deep":{"unit":"deg C"}})"},
      {"{a:[1,'two',three four]}", R"({"a":[1,"two","three four"]})"},                                // in lists
      {"{a:1}}", R"({"a":1})"},                                                                       // stray closer
  };
  for (const auto& [text, want] : cases) {
    auto strict = ParseGemma4Arguments(text);
    EXPECT_TRUE(!strict.ok() || *strict != json::parse(want)) << text;
    auto repaired = ParseGemma4ArgumentsLenient(text);
    ASSERT_TRUE(repaired.ok()) << text << ": " << repaired.status().message();
    EXPECT_EQ(*repaired, json::parse(want)) << text;
    ChatOutput out = ParseGemma4Output(Str("<|tool_call>call:f", text, "<tool_call|>"));
    ASSERT_EQ(out.tool_calls.size(), 1u) << text;
    EXPECT_EQ(json::parse(out.tool_calls[0].arguments), json::parse(want)) << text;
  }
  const char* well_formed = "{a:<|\"|>x, y}: z<|\"|>,b:[1,{c:null}],d:bare words}";
  EXPECT_EQ(*ParseGemma4ArgumentsLenient(well_formed), *ParseGemma4Arguments(well_formed));
  EXPECT_FALSE(ParseGemma4ArgumentsLenient("{a:").ok());
  EXPECT_FALSE(ParseGemma4ArgumentsLenient("{a:'open").ok());
}

// Arguments -> Gemma syntax (renderer) -> JSON (parser) gives the arguments back.
TEST(Gemma4Output, ToolCallRoundTrip) {
  json args =
      json::parse(R"({"query":"slices 世界 \"q\"","limit":5,"exact":false,"score":0.25,"big":1e20,
                              "small":1.5e-7,"tags":["a","b"],"filters":{"lang":"en","Nested":{"deep":[1,{"k":null}]}}})");
  json messages = json::array(
      {{{"role", "user"}, {"content", "go"}},
       {{"role", "assistant"},
        {"tool_calls",
         json::array({{{"id", "1"},
                       {"type", "function"},
                       {"function", {{"name", "search"}, {"arguments", args.dump()}}}}})}}});
  std::string prompt = MustRender(messages, nullptr);
  size_t open = prompt.find("<|tool_call>");
  size_t close = prompt.find("<tool_call|>");
  ASSERT_NE(open, std::string::npos);
  ASSERT_NE(close, std::string::npos);
  ChatOutput out = ParseGemma4Output(prompt.substr(open, close + 12 - open));
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "search");
  EXPECT_EQ(json::parse(out.tool_calls[0].arguments), args);
}

// Streaming: any split of the text gives the same result as parsing it whole, and no delta ever
// shows part of a marker.
TEST(Gemma4Output, StreamingMatchesWholeAtEverySplit) {
  const std::string text =
      "<|channel>thought\nStep 1 < 2.\nStep 2.<channel|>  Answer: <b>4</b>. "
      "<|tool_call>call:f{x:<|\"|>a<|\"|>,y:[1,2]}<tool_call|> done<turn|>";
  ChatOutput whole = ParseGemma4Output(text);
  EXPECT_EQ(whole.reasoning, "Step 1 < 2.\nStep 2.");
  EXPECT_EQ(whole.content, "Answer: <b>4</b>.  done");
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  for (size_t chunk = 1; chunk <= 7; ++chunk) {
    Gemma4OutputParser parser;
    ChatOutput joined;
    for (size_t i = 0; i < text.size(); i += chunk) {
      ChatOutput delta = parser.Push(std::string_view(text).substr(i, chunk));
      for (const std::string* s : {&delta.content, &delta.reasoning}) {
        EXPECT_EQ(s->find("<|"), std::string::npos) << "chunk " << chunk << ": " << *s;
        EXPECT_EQ(s->find("channel"), std::string::npos) << "chunk " << chunk << ": " << *s;
      }
      joined.content += delta.content;
      joined.reasoning += delta.reasoning;
      joined.tool_calls.insert(joined.tool_calls.end(), delta.tool_calls.begin(),
                               delta.tool_calls.end());
    }
    ChatOutput rest = parser.Finish();
    joined.content += rest.content;
    joined.reasoning += rest.reasoning;
    EXPECT_TRUE(parser.done());
    EXPECT_EQ(joined.content, whole.content) << "chunk " << chunk;
    EXPECT_EQ(joined.reasoning, whole.reasoning) << "chunk " << chunk;
    ASSERT_EQ(joined.tool_calls.size(), 1u);
    EXPECT_EQ(joined.tool_calls[0].arguments, whole.tool_calls[0].arguments);
  }
  // A held-back partial marker that never completes is released by Finish().
  Gemma4OutputParser parser;
  EXPECT_EQ(parser.Push("x <|chan").content, "x ");
  EXPECT_EQ(parser.Finish().content, "<|chan");
}

}  // namespace
}  // namespace g4
