// Regression tests for what the fuzzers (fuzz/, tools/fuzz.sh) found: each input here once
// crashed, threw or broke an invariant. Kept small and named after the fault.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/chat_gemma4.h"

namespace g4 {
namespace {

using nlohmann::json;

// chat_output_fuzz: a tool call whose arguments hold invalid UTF-8 made json::dump throw out of
// the output parser. Now the bytes become U+FFFD and the call is still returned.
TEST(FuzzRegression, ToolCallArgumentsWithInvalidUtf8DoNotThrow) {
  const std::string text = "<|tool_call>call:f{a\xff:[1,true,null],b:<|\"|>x\xc3<|\"|>}<tool_call|>";
  ChatOutput out;
  ASSERT_NO_THROW(out = ParseGemma4Output(text));
  ASSERT_EQ(out.tool_calls.size(), 1u);
  json args = json::parse(out.tool_calls[0].arguments);
  EXPECT_TRUE(args.contains("a\xef\xbf\xbd"));
  EXPECT_EQ(args["b"], "x\xef\xbf\xbd");
}

// chat_output_fuzz: "\xE2\x80" followed by a space was taken for U+2000..U+200A (the third byte
// was not checked to be a continuation byte), so stripping ate a non-whitespace byte pair and
// the one-shot and streamed parses disagreed.
TEST(FuzzRegression, BrokenUnicodeSpaceIsNotWhitespace) {
  ChatOutput out = ParseGemma4Output("\xE2\x80 x");
  EXPECT_EQ(out.content, "\xE2\x80 x");
  EXPECT_EQ(ParseGemma4Output("\xE2\x80\x8A x").content, "x");  // U+200A hair space
}

}  // namespace
}  // namespace g4
