#include "tokenizer/tokenizer_json.h"

#include <gtest/gtest.h>

#include <string>

namespace g4 {
namespace {

// simdjson reads up to 64 bytes past the end; the zero padding makes that safe.
Result<TokenizerJson> Parse(const std::string& text) {
  const std::string padded = text + std::string(64, '\0');
  return ParseTokenizerJson(padded.data(), text.size());
}

TEST(TokenizerJson, ReadsEverySection) {
  auto json = Parse(
      R"({"added_tokens":[{"id":9,"content":"<s>","special":true,"normalized":false}],
          "normalizer":{"type":"Sequence","normalizers":[
              {"type":"Replace","pattern":{"String":" "},"content":"▁"}]},
          "pre_tokenizer":{"type":"Split","pattern":{"String":" "},"behavior":"MergedWithPrevious"},
          "decoder":{"type":"Sequence","decoders":[
              {"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"}]},
          "model":{"type":"BPE","unk_token":"<unk>","byte_fallback":true,
                   "vocab":{"<unk>":0,"a":1,"b":2,"ab":3},"merges":[["a","b"]]}})");
  ASSERT_TRUE(json.ok()) << json.status().message();
  EXPECT_EQ(json->model.vocab.size(), 4u);
  EXPECT_EQ(json->model.vocab[3].first, "ab");
  EXPECT_EQ(json->model.vocab[3].second, 3);
  ASSERT_EQ(json->model.merges.size(), 1u);
  EXPECT_EQ(json->model.merges[0].first, "a");
  EXPECT_EQ(json->model.merges[0].second, "b");
  ASSERT_TRUE(json->model.unk_token.has_value());
  EXPECT_EQ(*json->model.unk_token, "<unk>");
  EXPECT_TRUE(json->model.byte_fallback);
  EXPECT_FALSE(json->model.fuse_unk);
  ASSERT_EQ(json->added_tokens.size(), 1u);
  EXPECT_EQ(json->added_tokens[0].content, "<s>");
  EXPECT_TRUE(json->added_tokens[0].special);
  EXPECT_EQ(json->max_id, 9);
  ASSERT_EQ(json->normalizer_replacements.size(), 1u);
  EXPECT_EQ(json->normalizer_replacements[0].second, "▁");
  EXPECT_EQ(json->split_after, " ");
  ASSERT_EQ(json->decoder.replacements.size(), 1u);
  EXPECT_TRUE(json->decoder.byte_fallback);
}

TEST(TokenizerJson, ErrorsSayWhichSection) {
  const std::string model = R"("model":{"type":"BPE","vocab":{"a":0},"merges":[]})";
  auto no_decoder = Parse("{" + model + "}");
  ASSERT_FALSE(no_decoder.ok());
  EXPECT_NE(no_decoder.status().message().find("no decoder"), std::string::npos);
  auto bad_decoder = Parse(R"({"decoder":{"type":"Strip"},)" + model + "}");
  ASSERT_FALSE(bad_decoder.ok());
  EXPECT_NE(bad_decoder.status().message().find("\"Strip\""), std::string::npos);
  auto lstrip = Parse(R"({"added_tokens":[{"id":1,"content":"x","lstrip":true}],)" + model + "}");
  ASSERT_FALSE(lstrip.ok());
  EXPECT_NE(lstrip.status().message().find("lstrip"), std::string::npos);
  auto bad_merge = Parse(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a"]}})");
  ASSERT_FALSE(bad_merge.ok());
  EXPECT_NE(bad_merge.status().message().find("merges[0]"), std::string::npos);
}

}  // namespace
}  // namespace g4
