// Regression tests for what the fuzzers (fuzz/, tools/fuzz.sh) found: each input here once
// crashed, threw or broke an invariant. Kept small and named after the fault.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/hash.h"
#include "io/pack.h"
#include "model/arch/gemma4.h"
#include "model/architecture.h"
#include "model/pack_reader.h"
#include "model/pack_writer.h"
#include "testing/checkpoints.h"
#include "tokenizer/chat_gemma4.h"

namespace g4 {
namespace {

using nlohmann::json;

// chat_output_fuzz: a tool call whose arguments hold invalid UTF-8 made json::dump throw out of
// the output parser. Now the bytes become U+FFFD and the call is still returned.
TEST(FuzzRegression, ToolCallArgumentsWithInvalidUtf8DoNotThrow) {
  const std::string text =
      "<|tool_call>call:f{a\xff:[1,true,null],b:<|\"|>x\xc3<|\"|>}<tool_call|>";
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
  auto plan = PlanFromConfig(*cfg);
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

// ------------------------------------------------------------------------------------------------
// pack_fuzz (packed artifacts). These need a valid header over an edited table, so the table is
// replaced and the header's table size and checksums recomputed, as the fuzzer's knob does.

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint64_t HeaderField(const std::string& file, size_t offset) {
  uint64_t v;
  std::memcpy(&v, file.data() + offset, 8);
  return v;
}

// Rewrites artifact PATH with `edit` applied to its section table; header fields follow.
void EditTable(const std::string& path, const std::function<void(json&)>& edit) {
  std::string file = ReadAll(path);
  const uint64_t table_offset = HeaderField(file, 16), table_bytes = HeaderField(file, 24);
  json table = json::parse(file.substr(table_offset, table_bytes));
  edit(table);
  const std::string text = table.dump();
  file = file.substr(0, table_offset) + text;
  auto put = [&](size_t offset, uint64_t v) { std::memcpy(file.data() + offset, &v, 8); };
  put(24, text.size());
  put(32, Xxh64(text.data(), text.size()));
  put(40, file.size());
  put(56, Xxh64(file.data(), 56));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << file;
}

std::string TextArtifact(const std::string& name) {
  const std::string path = TestTempDir(name) + "/a.g4";
  auto w = PackWriter::Create(path);
  EXPECT_TRUE(w.ok());
  EXPECT_TRUE((*w)->AddText("one", "first section").ok());
  EXPECT_TRUE((*w)->AddText("two", "second section").ok());
  EXPECT_TRUE((*w)->Commit({{"quant", "bf16"}}).ok());
  EXPECT_TRUE(PackFile::Open(path).ok());
  return path;
}

Status OpenStatus(const std::string& path) {
  auto pack = PackFile::Open(path);
  return pack.ok() ? OkStatus() : pack.status();
}

// pack_fuzz: a section at an offset that is not a multiple of the 4 KiB page was accepted; the
// writer never produces one and mapped weights are read with wide loads. Now refused.
TEST(FuzzRegression, PackSectionNotAlignedIsRefused) {
  const std::string path = TextArtifact("pack_unaligned");
  EditTable(path, [](json& t) {
    t["sections"][1]["offset"] = t["sections"][1]["offset"].get<uint64_t>() + 1;
  });
  Status st = OpenStatus(path);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not aligned"), std::string::npos) << st.message();
}

// Found by review while writing pack_fuzz: offset + bytes could wrap around 2^64 and pass the
// bounds check (a section "inside" the file that reads far past the mapping); an offset given
// as a float (1e300: undefined behaviour in the cast) or a negative number was converted.
TEST(FuzzRegression, PackSectionBoundsCannotWrapOrBeNonIntegers) {
  const std::string path = TextArtifact("pack_wrap");
  const std::string good = ReadAll(path);
  for (const json& bytes : {json(~uint64_t{0} - 4095), json(1e300), json(-1), json("12")}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
    EditTable(path, [&](json& t) { t["sections"][0]["bytes"] = bytes; });
    Status st = OpenStatus(path);
    ASSERT_FALSE(st.ok()) << bytes.dump();
    EXPECT_NE(st.message().find("section one"), std::string::npos) << st.message();
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
  EditTable(path, [](json& t) { t["sections"][0]["offset"] = 1e300; });
  EXPECT_FALSE(OpenStatus(path).ok());
}

// Same for the header: table_offset + table_bytes wrapping past 2^64 passed and the table
// checksum was computed over memory past the mapping.
TEST(FuzzRegression, PackTableRangeCannotWrap) {
  const std::string path = TextArtifact("pack_table_wrap");
  std::string file = ReadAll(path);
  const uint64_t huge = ~uint64_t{0} - HeaderField(file, 16) + 2;  // offset + huge wraps to 1
  std::memcpy(file.data() + 24, &huge, 8);
  const uint64_t header_checksum = Xxh64(file.data(), 56);
  std::memcpy(file.data() + 56, &header_checksum, 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << file;
  Status st = OpenStatus(path);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("section table lies outside the file"), std::string::npos)
      << st.message();
}

// Found by review while writing pack_fuzz: artifact and section meta were read with
// json::value(), which throws on a type mismatch (an uncaught exception out of LoadModel) and
// converts out-of-range numbers with undefined behaviour. Each is now a load error.
TEST(FuzzRegression, PackMetaOfTheWrongTypeIsALoadError) {
  const std::string src = TinyCheckpoint("e2b", {.vocab = 512});
  ASSERT_FALSE(src.empty());
  const std::string dir = TestTempDir("pack_meta");
  const std::string good_path = dir + "/good.g4";
  ASSERT_TRUE(PackModel(src, good_path, {}).ok());
  ASSERT_TRUE(LoadPackedModel(good_path, WeightType::kBF16, 1).ok());
  const std::string good = ReadAll(good_path);
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* expect;
  };
  auto first_matrix = [](json& t) -> json& {
    for (json& s : t["sections"])
      if (s["meta"].value("kind", "") == "matrix") return s["meta"];
    return t["sections"][0]["meta"];
  };
  const std::vector<Case> cases = {
      {"quant is a number", [](json& t) { t["meta"]["quant"] = 5; }, "unknown weight format 5"},
      {"tp is a string", [](json& t) { t["meta"]["tp"] = "1"; },
       "tp in the artifact's meta is \"1\""},
      {"embed_scale too large", [](json& t) { t["meta"]["embed_scale"] = 1e300; }, "embed_scale"},
      {"ple_scale is null", [](json& t) { t["meta"]["ple_scale"] = nullptr; }, "ple_scale"},
      {"rows too large", [&](json& t) { first_matrix(t)["rows"] = 1e300; }, "the plan needs"},
      {"rows is a string", [&](json& t) { first_matrix(t)["rows"] = "96"; }, "the plan needs"},
      {"type is an array", [&](json& t) { first_matrix(t)["type"] = json::array(); },
       "the plan needs"},
      {"artifact meta is an array", [](json& t) { t["meta"] = json::array(); },
       "meta is not a JSON object"},
      {"section meta is a number", [](json& t) { t["sections"][3]["meta"] = 7; },
       "meta is not a JSON object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir + "/edited.g4";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
    EditTable(path, c.edit);
    Result<PackedModel> loaded = Status::Error("not run");
    ASSERT_NO_THROW(loaded = LoadPackedModel(path, WeightType::kBF16, 1));
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.status().message().find(c.expect), std::string::npos)
        << loaded.status().message();
  }
}

// pack_fuzz: verifying a zero-byte section hashed an empty list of chunk hashes, whose data()
// is null, and Xxh64 formed null + 8 (undefined; UBSan stops here). Now it counts bytes left.
TEST(FuzzRegression, EmptySectionVerifiesWithoutNullArithmetic) {
  EXPECT_EQ(Xxh64(nullptr, 0), 0xEF46DB3751D8E999ULL);  // XXH64 of the empty input
  EXPECT_EQ(ChunkedChecksum(nullptr, 0), ChunkedChecksum("", 0));
  const std::string path = TestTempDir("pack_empty_section") + "/a.g4";
  auto w = PackWriter::Create(path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->AddText("empty", "").ok());
  ASSERT_TRUE((*w)->AddText("full", "some bytes").ok());
  ASSERT_TRUE((*w)->Commit({{"quant", "bf16"}}).ok());
  auto pack = PackFile::Open(path);
  ASSERT_TRUE(pack.ok()) << pack.status().message();
  ASSERT_EQ((*pack)->sections().size(), 2u);
  for (const PackSection& section : (*pack)->sections()) {
    Status st = (*pack)->Verify(section);
    EXPECT_TRUE(st.ok()) << section.name << ": " << st.message();
  }
}

}  // namespace
}  // namespace g4
