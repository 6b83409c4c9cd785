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

}  // namespace
}  // namespace g4
