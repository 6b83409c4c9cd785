// Regression tests for what the fuzzers (fuzz/, tools/fuzz.sh) found: each input here once
// crashed, threw or broke an invariant. Kept small and named after the fault.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "model/arch/gemma4.h"
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

// A valid text-only config (the tiny E2B shape), for the config regressions below.
json TinyTextConfig() {
  return json::parse(R"({"model_type":"gemma4_text","vocab_size":512,"hidden_size":96,
    "intermediate_size":192,"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":1,
    "head_dim":16,"global_head_dim":32,"sliding_window":8,"num_kv_shared_layers":0,
    "hidden_size_per_layer_input":24,"vocab_size_per_layer_input":512,
    "hidden_activation":"gelu_pytorch_tanh",
    "layer_types":["sliding_attention","sliding_attention","sliding_attention","full_attention"]})");
}

Status PlanStatus(const json& config, const std::string& generation = "") {
  auto cfg = ParseGemma4Config(config.dump(), generation, "fuzz");
  if (!cfg.ok()) return cfg.status();
  auto plan = BuildGemma4Plan(*cfg);
  return plan.ok() ? OkStatus() : plan.status();
}

TEST(FuzzRegression, ConfigBaselineIsAccepted) { EXPECT_TRUE(PlanStatus(TinyTextConfig()).ok()); }

// config_fuzz: text_config.model_type that is not a string made json::value() throw.
TEST(FuzzRegression, NonStringTextModelTypeIsAnError) {
  json outer = {{"model_type", "gemma4"}, {"text_config", TinyTextConfig()}};
  outer["text_config"]["model_type"] = 5;
  Status st = PlanStatus(outer);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("model_type"), std::string::npos) << st.message();
}

// config_fuzz: widths whose products overflow int (layers x PLE width, 2 x intermediate for
// double-wide MLPs, heads x head_dim) were accepted and overflowed in the plan (UBSan); and
// 2^31 passed the integer range check. Each is now an error naming the field at load.
TEST(FuzzRegression, ConfigWidthsThatOverflowAreErrors) {
  json c = TinyTextConfig();
  c["hidden_size_per_layer_input"] = 2000000000;
  Status st = PlanStatus(c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("hidden_size_per_layer_input"), std::string::npos) << st.message();

  c = TinyTextConfig();
  c["num_attention_heads"] = 65536;
  c["num_key_value_heads"] = 65536;
  c["head_dim"] = 65536;
  st = PlanStatus(c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("query width"), std::string::npos) << st.message();

  c = TinyTextConfig();
  c["hidden_size"] = 2147483648LL;
  st = PlanStatus(c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("hidden_size"), std::string::npos) << st.message();

  c = TinyTextConfig();
  c["intermediate_size"] = 2000000000;
  c["use_double_wide_mlp"] = true;
  c["num_kv_shared_layers"] = 1;
  EXPECT_FALSE(PlanStatus(c).ok());

  st = PlanStatus(TinyTextConfig(), R"({"eos_token_id": [1, 4294967297]})");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("eos_token_id"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace g4
