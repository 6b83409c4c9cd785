#include "server/chat_bridge.h"

#include <gtest/gtest.h>

namespace g4 {
namespace {

TEST(ChatOutputSplitter, ToolCallsBecomeOpenAiToolCallsEvenWhenSplitAcrossPieces) {
  ChatOutputSplitter s;
  const std::string out =
      "<|channel>thought\nNeed weather.<channel|><|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:2}"
      "<tool_call|>";
  ChatDelta all;
  for (size_t i = 0; i < out.size(); i += 3) {  // 3-byte pieces cut every marker somewhere
    ChatDelta d = s.Add(out.substr(i, 3));
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  ChatDelta d = s.Finish();
  all.reasoning += d.reasoning;
  all.content += d.content;
  EXPECT_EQ(all.reasoning, "Need weather.");
  EXPECT_EQ(all.content, "");
  ASSERT_EQ(s.ToolCalls().size(), 1u);
  const auto& call = s.ToolCalls()[0];
  EXPECT_EQ(call["id"], "call_0");
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(nlohmann::json::parse(call["function"]["arguments"].get<std::string>()),
            (nlohmann::json{{"city", "Paris"}, {"days", 2}}));
}

TEST(ChatOutputSplitter, PlainContentPassesThrough) {
  ChatOutputSplitter s;
  ChatDelta a = s.Add("Hello ");
  ChatDelta b = s.Add("world");
  ChatDelta c = s.Finish();
  EXPECT_EQ(a.content + b.content + c.content, "Hello world");
  EXPECT_TRUE(s.ToolCalls().empty());
}

std::string Feed(ChatOutputSplitter& s, const std::string& text) {
  std::string content = s.Add(text).content;
  return content + s.Finish().content;
}

TEST(ChatOutputSplitter, ForcedCallKeepsMalformedArgumentsVerbatim) {
  // What a random model writes after a forced "<|tool_call>call:lookup{": not Gemma argument
  // syntax. Forced, it is still a call to `lookup`, its arguments the model's text as written.
  const std::string out = "<|tool_call>call:lookup{ zq,, \xC3\xA9t\xC3\xA9 ]]<tool_call|>";
  ChatOutputSplitter forced(/*forced_call=*/true);
  EXPECT_EQ(Feed(forced, out), "");
  ASSERT_EQ(forced.ToolCalls().size(), 1u);
  EXPECT_EQ(forced.ToolCalls()[0]["function"]["name"], "lookup");
  EXPECT_EQ(forced.ToolCalls()[0]["function"]["arguments"], "{ zq,, \xC3\xA9t\xC3\xA9 ]]");

  // Not forced (tool_choice auto): the same text is not a call and stays visible as content.
  ChatOutputSplitter free_choice;
  EXPECT_EQ(Feed(free_choice, out), "<|tool_call>call:lookup{ zq,, \xC3\xA9t\xC3\xA9 ]]");
  EXPECT_TRUE(free_choice.ToolCalls().empty());
}

TEST(ChatOutputSplitter, ForcedCallCutShortStillNamesTheFunction) {
  // max_tokens ran out inside the call: the name and the partial arguments come back.
  ChatOutputSplitter forced(true);
  EXPECT_EQ(Feed(forced, "<|tool_call>call:lookup{city:<|\"|>Par"), "");
  ASSERT_EQ(forced.ToolCalls().size(), 1u);
  EXPECT_EQ(forced.ToolCalls()[0]["function"]["name"], "lookup");
  EXPECT_EQ(forced.ToolCalls()[0]["function"]["arguments"], "{city:<|\"|>Par");

  // Valid arguments parse to JSON whether forced or not.
  ChatOutputSplitter ok(true);
  Feed(ok, "<|tool_call>call:lookup{city:<|\"|>Paris<|\"|>}<tool_call|>");
  ASSERT_EQ(ok.ToolCalls().size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(ok.ToolCalls()[0]["function"]["arguments"].get<std::string>()),
            (nlohmann::json{{"city", "Paris"}}));
}

}  // namespace
}  // namespace g4
