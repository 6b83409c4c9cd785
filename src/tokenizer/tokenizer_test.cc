#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "base/mapped_file.h"
#include "testing/checkpoints.h"
#include "tokenizer_assets.h"

namespace g4 {
namespace {

using nlohmann::json;

const json& Golden() {
  static json golden = [] {
    auto text = ReadFileToString(testing::SourceDir() + "/tests/data/tokenizer-golden.json");
    if (!text.ok()) {
      fprintf(stderr, "%s\n", text.status().message().c_str());
      std::abort();
    }
    return json::parse(*text);
  }();
  return golden;
}

std::vector<int> Ids(const json& array) { return array.get<std::vector<int>>(); }

std::string Hex(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

// The 27 golden cases were produced by HF tokenizers 0.23.2 on Google's Gemma-3 tokenizer.json.
TEST(TokenizerGolden, Gemma3AllCases) {
  G4_REQUIRE_TOKENIZER(tok, "gemma3");
  const json& cases = Golden()["cases"];
  ASSERT_EQ(cases.size(), 27u);
  for (const json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::string text = c["text"];
    ASSERT_EQ(Hex(text), c["text_utf8_hex"].get<std::string>());
    std::vector<int> ids = tok->Encode(text);
    EXPECT_EQ(ids, Ids(c["ids"]));
    EXPECT_EQ(tok->Encode(text, /*add_bos=*/true), Ids(c["ids_with_bos"]));
    ASSERT_EQ(c["tokens"].size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i)
      EXPECT_EQ(tok->Piece(ids[i]), c["tokens"][i].get<std::string>());
    EXPECT_EQ(tok->Decode(Ids(c["ids"])), c["decoded"].get<std::string>());
    EXPECT_EQ(tok->Decode(Ids(c["ids"]), /*skip_special=*/true),
              c["decoded_skip_special"].get<std::string>());
    if (c["roundtrip_exact"].get<bool>()) {
      EXPECT_EQ(tok->Decode(ids), text);
    }
  }
}

// Three cases carry ids from the Gemma-4-renamed file: Gemma-3 markers are plain text there and
// Gemma-4 markers are special.
TEST(TokenizerGolden, Gemma4SynthCases) {
  G4_REQUIRE_TOKENIZER(tok, "gemma4");
  int checked = 0;
  for (const json& c : Golden()["cases"]) {
    if (!c.contains("gemma4_synth_ids")) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<int> expected = Ids(c["gemma4_synth_ids"]);
    EXPECT_EQ(tok->Encode(c["text"].get<std::string>()), expected);
    EXPECT_EQ(tok->Decode(expected), c["text"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

// 14 cases captured from llama.cpp running a real Gemma-4 GGUF: plain-text ones tokenize the same
// with the Gemma-3 file; the marker ones need the Gemma-4 special tokens.
TEST(TokenizerGolden, Gemma4LlamaCppFixture) {
  G4_REQUIRE_TOKENIZER(tok4, "gemma4");
  G4_REQUIRE_TOKENIZER(tok3, "gemma3");
  const json& cases = Golden()["gemma4_llamacpp_fixture"]["cases"];
  ASSERT_EQ(cases.size(), 14u);
  int plain = 0, marked = 0;
  for (const json& c : cases) {
    std::string text = c["text"];
    SCOPED_TRACE(text);
    ASSERT_EQ(Hex(text), c["text_utf8_hex"].get<std::string>());
    std::vector<int> expected = Ids(c["ids"]);
    EXPECT_EQ(tok4->Encode(text), expected);
    EXPECT_EQ(tok4->Decode(expected), text);
    bool has_markers = text.find("<|") != std::string::npos || text.find("|>") != std::string::npos;
    if (has_markers) {
      ++marked;
      EXPECT_NE(tok3->Encode(text), expected) << "Gemma-3 must read Gemma-4 markers as text";
    } else {
      ++plain;
      EXPECT_EQ(tok3->Encode(text), expected);
    }
  }
  EXPECT_EQ(plain, 8);
  EXPECT_EQ(marked, 6);
}

TEST(Tokenizer, SpecialIdsAndLookups) {
  G4_REQUIRE_TOKENIZER(tok, "gemma4");
  EXPECT_EQ(tok->bos_id(), 2);
  EXPECT_EQ(tok->eos_id(), 1);
  EXPECT_EQ(tok->vocab_size(), 262144);
  EXPECT_EQ(tok->Find("<|turn>"), 105);
  EXPECT_EQ(tok->Find("▁hello"), 29104);
  EXPECT_EQ(tok->Find("<0x0A>"), 248);
  EXPECT_FALSE(tok->Find("<start_of_turn>").has_value());
  EXPECT_TRUE(tok->IsSpecial(106));
  EXPECT_TRUE(tok->IsSpecial(52));     // <|"|>
  EXPECT_FALSE(tok->IsSpecial(107));   // "\n" is added but not special
  EXPECT_FALSE(tok->IsSpecial(9259));  // "Hello"
  EXPECT_FALSE(tok->IsSpecial(-1));
  EXPECT_EQ(tok->Piece(262144), "");
  EXPECT_EQ(tok->Piece(-5), "");
  EXPECT_TRUE(CheckGemma4Tokenizer(*tok).ok()) << CheckGemma4Tokenizer(*tok).message();
  EXPECT_EQ(Gemma4StopTokenIds(*tok), (std::vector<int>{1, 106, 50}));
}

TEST(Tokenizer, CheckNamesGemma3File) {
  G4_REQUIRE_TOKENIZER(tok, "gemma3");
  Status status = CheckGemma4Tokenizer(*tok);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("Gemma-3"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("<start_of_turn>"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(tok->path()), std::string::npos) << status.message();
}

// HF's ByteFallback decoder: a valid run of byte tokens is UTF-8; a run with any invalid byte
// becomes one U+FFFD per byte (checked with tokenizers 0.23.2: "\ufffd"x4 + "Hello").
TEST(Tokenizer, DecodeByteRuns) {
  G4_REQUIRE_TOKENIZER(tok, "gemma4");
  auto byte = [](int b) { return 238 + b; };
  EXPECT_EQ(tok->Decode({byte(0xE4), byte(0xB8), byte(0x96), 9259}), "世Hello");
  EXPECT_EQ(tok->Decode({byte(0xE4), byte(0xB8), byte(0x96), byte(0xFF), 9259}),
            "\uFFFD\uFFFD\uFFFD\uFFFDHello");
  // A skipped special token does not end a run; an out-of-range id is dropped.
  EXPECT_EQ(tok->Decode({byte(0xE4), 2, byte(0xB8), 999999, byte(0x96)}, /*skip_special=*/true),
            "世");
  EXPECT_EQ(tok->Decode({byte(0xE4), 2, byte(0xB8), byte(0x96)}), "\uFFFD<bos>\uFFFD\uFFFD");
  EXPECT_EQ(tok->Decode({236743, 138}), "   ");  // "▁" and the added "▁▁" both decode to spaces
}

TEST(Tokenizer, EncodeAddedTokensBeforeNormalization) {
  G4_REQUIRE_TOKENIZER(tok, "gemma4");
  // The added token "▁▁" (138) matches a literal "▁▁" in the text, never two spaces.
  EXPECT_EQ(tok->Encode("▁▁x"), (std::vector<int>{138, 236781}));
  EXPECT_EQ(tok->Encode("  two"), (std::vector<int>{138, 13498}));
  EXPECT_EQ(tok->Encode("<|turn>user\n<bos>x"), (std::vector<int>{105, 2364, 107, 2, 236781}));
  EXPECT_TRUE(tok->Encode("").empty());
  // Invalid UTF-8 is encoded byte by byte rather than dropped.
  std::vector<int> ids =
      tok->Encode(std::string("a\xFF"
                              "b",
                              3));
  EXPECT_EQ(ids, (std::vector<int>{236746, 238 + 0xFF, 236763}));
}

TEST(IncrementalDecoder, StreamEqualsDecodeAndNeverSplitsCharacters) {
  G4_REQUIRE_TOKENIZER(tok, "gemma4");
  std::mt19937 rng(1234);
  std::vector<int> interesting = {2, 105, 106, 107, 138, 236743, 9259, 29104, 100, 101, 52, 262143};
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int> ids;
    int n = 1 + rng() % 40;
    for (int i = 0; i < n; ++i) {
      switch (rng() % 4) {
        case 0:
          ids.push_back(238 + rng() % 256);
          break;  // any byte
        case 1:
          ids.push_back(238 + 0x80 + rng() % 64);
          break;  // continuation byte
        case 2:
          ids.push_back(interesting[rng() % interesting.size()]);
          break;
        default:
          ids.push_back(rng() % 262144);
          break;
      }
    }
    for (bool skip : {false, true}) {
      IncrementalDecoder stream(*tok, skip);
      std::string joined;
      for (int id : ids) {
        std::string chunk = stream.Add(id);
        EXPECT_TRUE(IsValidUtf8(chunk));
        joined += chunk;
      }
      joined += stream.Flush();
      EXPECT_EQ(joined, tok->Decode(ids, skip)) << "trial " << trial;
    }
  }
  // An emoji spelled as four byte tokens comes out whole, at the first non-byte token.
  std::vector<int> rocket = tok->Encode("🚀");
  std::string bytes = "\xF0\x9F\x9A\x80";
  IncrementalDecoder stream(*tok);
  for (unsigned char b : bytes) EXPECT_EQ(stream.Add(238 + b), "");
  EXPECT_EQ(stream.Add(9259), "🚀Hello");
  EXPECT_EQ(stream.Flush(), "");
  EXPECT_EQ(tok->Decode(rocket), "🚀");
}

// A hand-made BPE file pins the merge order: lowest rank first, leftmost among equal ranks,
// byte fallback for unknown characters, and the normalizer/pre-tokenizer/decoder pipeline.
class TinyTokenizer : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& contents) {
    std::string path = TestTempDir("tiny_tokenizer_" + name) + "/tokenizer.json";  // one fresh dir per file
    EXPECT_TRUE(WriteFileAtomic(path, contents).ok());
    return path;
  }
  static std::string Json(const std::string& merges, const std::string& extra_vocab = "") {
    std::string vocab =
        R"("<unk>":0,"a":1,"b":2,"c":3,"ab":4,"bc":5,"abc":6,"aa":7,"▁":8,"▁a":9)" + extra_vocab;
    for (int b = 0; b < 256; ++b) {
      char piece[16];
      snprintf(piece, sizeof piece, "<0x%02X>", b);
      vocab += Str(",\"", piece, "\":", 100 + b);
    }
    return Str(
        R"({"version":"1.0","added_tokens":[{"id":50,"content":"<s>","special":true,"normalized":false,"lstrip":false,"rstrip":false,"single_word":false}],
      "normalizer":{"type":"Replace","pattern":{"String":" "},"content":"▁"},
      "pre_tokenizer":{"type":"Split","pattern":{"String":" "},"behavior":"MergedWithPrevious","invert":false},
      "decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"}]},
      "model":{"type":"BPE","unk_token":"<unk>","byte_fallback":true,"fuse_unk":true,"vocab":{)",
        vocab, R"(},"merges":)", merges, "}}");
  }
  std::unique_ptr<Tokenizer> LoadJson(const std::string& name, const std::string& contents) {
    auto result = Tokenizer::Load(Write(name, contents));
    EXPECT_TRUE(result.ok()) << result.status().message();
    return result.ok() ? std::move(result).value() : nullptr;
  }
};

TEST_F(TinyTokenizer, MergeRankThenLeftmost) {
  // "bc" outranks "ab": abc -> a + bc -> abc.
  auto t1 = LoadJson("t1.json", Json(R"([["b","c"],["a","b"],["a","bc"]])"));
  ASSERT_TRUE(t1);
  EXPECT_EQ(t1->Encode("abc"), (std::vector<int>{6}));
  // "ab" outranks "bc", and nothing merges ab + c.
  auto t2 = LoadJson("t2.json", Json(R"([["a","b"],["b","c"],["a","bc"]])"));
  ASSERT_TRUE(t2);
  EXPECT_EQ(t2->Encode("abc"), (std::vector<int>{4, 3}));
  // Equal ranks: the leftmost pair merges first ("a b" string form of merges).
  auto t3 = LoadJson("t3.json", Json(R"(["a a"])"));
  ASSERT_TRUE(t3);
  EXPECT_EQ(t3->Encode("aaa"), (std::vector<int>{7, 1}));
  EXPECT_EQ(t3->Encode("aaaa"), (std::vector<int>{7, 7}));
  // Unknown character -> UTF-8 bytes; added token matched on the raw text; space -> ▁.
  auto t4 = LoadJson("t4.json", Json(R"([["▁","a"]])"));
  ASSERT_TRUE(t4);
  EXPECT_EQ(t4->Encode("a é<s> a"), (std::vector<int>{1, 8, 100 + 0xC3, 100 + 0xA9, 50, 9}));
  EXPECT_EQ(t4->Decode({1, 8, 100 + 0xC3, 100 + 0xA9, 50, 9}), "a é<s> a");
  EXPECT_EQ(t4->Decode({1, 50, 9}, /*skip_special=*/true), "a a");
}

TEST_F(TinyTokenizer, LoadErrorsNameThePathAndTheProblem) {
  struct Case {
    std::string name, contents, expect;
  };
  std::vector<Case> cases = {
      {"empty.json", "", "empty"},
      {"notjson.json", "{\"model\": [1, 2", "not valid JSON"},
      {"unigram.json", R"({"model":{"type":"Unigram","vocab":[]}})", "BPE"},
      {"novocab.json", R"({"model":{"type":"BPE","merges":[]}})", "vocab"},
      {"badmerge.json", Json(R"([["a","zz"]])"), "merges[0]"},
      {"regex.json",
       R"({"normalizer":{"type":"Replace","pattern":{"Regex":" +"},"content":"▁"},)" +
           Json("[]").substr(1),
       "literal"},
  };
  for (const Case& c : cases) {
    std::string path = Write(c.name, c.contents);
    auto result = Tokenizer::Load(path);
    ASSERT_FALSE(result.ok()) << c.name;
    EXPECT_NE(result.status().message().find(path), std::string::npos) << result.status().message();
    EXPECT_NE(result.status().message().find(c.expect), std::string::npos)
        << result.status().message();
  }
  auto missing = Tokenizer::Load("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/tokenizer.json"), std::string::npos);
  EXPECT_NE(missing.status().message().find("not found"), std::string::npos);
}

}  // namespace
}  // namespace g4
