// `g4 run` and `g4 bench` with --spec as users run them: the same ids as plain decoding, the
// speculative counters in --json, and a clear error for what is not there yet.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/checkpoints.h"
#include "testing/run_g4.h"

namespace g4 {
namespace {

nlohmann::json LastJsonLine(const std::string& output) {
  const size_t brace = output.rfind("\n{\"");
  const size_t start = brace == std::string::npos ? output.find("{\"") : brace + 1;
  if (start == std::string::npos) return {};
  return nlohmann::json::parse(output.substr(start, output.find('\n', start) - start), nullptr, false);
}

TEST(SpeculativeCli, RunGivesThePlainIdsWithEitherDrafter) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  const std::string draft = TinyCheckpoint("e2b", {.seed = 2, .vocab = 512});
  ASSERT_FALSE(dir.empty() || draft.empty());
  const std::string base = "run --model " + dir +
                           " --ids 2,17,40,99,17,40,99,5,17,40 -n 24 --ignore-eos --json --threads 1";
  const G4RunResult plain = RunG4(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto expected = LastJsonLine(plain.output)["ids"];
  ASSERT_EQ(expected.size(), 24u);
  for (const std::string& spec :
       std::vector<std::string>{"--spec ngram --draft-max 3", "--spec ngram --draft-adaptive",
                                "--spec draft --draft " + draft, "--spec draft --draft " + dir,
                                "--spec draft --draft " + dir + " --draft-p-min 0.5"}) {
    const G4RunResult run = RunG4(base + " " + spec);
    ASSERT_EQ(run.exit_code, 0) << spec << "\n" << run.output;
    const nlohmann::json j = LastJsonLine(run.output);
    EXPECT_EQ(j["ids"], expected) << spec;
    ASSERT_TRUE(j.contains("speculative")) << run.output;
    EXPECT_GT(j["speculative"]["drafted"].get<int>(), 0) << spec;
    EXPECT_GE(j["speculative"]["tokens_per_target_pass"].get<double>(), 1.0) << spec;
  }
}

TEST(SpeculativeCli, MtpGivesThePlainIdsOnEveryPreset) {
  for (const char* preset : {"e2b", "e4b", "12b"}) {
    SCOPED_TRACE(preset);
    const std::string dir = TinyCheckpoint(preset, {.vocab = 512});
    const std::string assistant = TinyAssistant(preset);
    // Past the sliding window (8-16 on the tiny presets), so rollback and the W-1 mask matter.
    const std::string base = "run --model " + dir +
                             " --ids 2,17,40,99,17,40,99,5,17,40 -n 40 --ignore-eos --json --threads 1";
    // The cache's element format changes what the assistant reads: bf16 and q8 too.
    for (const std::string kv : {"f32", "bf16", "q8"}) {
      if (kv != "f32" && std::string(preset) != "e2b") continue;  // seconds, not minutes
      const std::string with_kv = base + " --kv-type " + kv;
      const G4RunResult plain = RunG4(with_kv);
      ASSERT_EQ(plain.exit_code, 0) << plain.output;
      const auto expected = LastJsonLine(plain.output)["ids"];
      ASSERT_EQ(expected.size(), 40u);
      int drafted_max3 = 0, drafted_q4 = 0;
      for (const std::string flags :
           {" --draft-max 3", " --draft-max 1 --draft-adaptive", " --draft-max 3 --draft-p-min 0.5",
            " --draft-max 3 --draft-quant q4"}) {
        if (kv != "f32" && flags != " --draft-max 3") continue;
        const std::string spec = "--spec mtp --draft " + assistant + flags;
        const G4RunResult run = RunG4(with_kv + " " + spec);
        ASSERT_EQ(run.exit_code, 0) << spec << "\n" << run.output;
        const nlohmann::json j = LastJsonLine(run.output);
        EXPECT_EQ(j["ids"], expected) << kv << spec;
        ASSERT_TRUE(j.contains("speculative")) << run.output;
        const int drafted = j["speculative"]["drafted"].get<int>();
        EXPECT_GT(drafted, 0) << spec;
        if (flags == " --draft-max 3") drafted_max3 = drafted;
        if (flags.find("q4") != std::string::npos) drafted_q4 = drafted;
        // The unsure steps' drafts are cut (the cut itself: Assistant.MinProbability...).
        if (flags.find("p-min") != std::string::npos) {
          EXPECT_LT(drafted, drafted_max3) << spec;
        }
      }
      if (kv != "f32") continue;
      // The assistant packed at q4 drafts as its directory does with --draft-quant q4.
      const std::string artifact =
          TestTempDir(std::string(preset) + "-assistant-pack") + "/a.g4pack";
      const G4RunResult pack = RunG4("pack --model " + assistant + " --quant q4 --out " + artifact);
      ASSERT_EQ(pack.exit_code, 0) << pack.output;
      const G4RunResult packed =
          RunG4(with_kv + " --spec mtp --draft " + artifact + " --draft-max 3");
      ASSERT_EQ(packed.exit_code, 0) << packed.output;
      EXPECT_EQ(LastJsonLine(packed.output)["ids"], expected);
      EXPECT_EQ(LastJsonLine(packed.output)["speculative"]["drafted"].get<int>(), drafted_q4);
      // Two tensor-parallel ranks: the assistant runs on both (E4B's KV heads and the 12B's
      // sliding ones are split over them; E2B's one head is on each).
      const std::string tp = with_kv + " --tp 2 --spec mtp --draft " + assistant + " --draft-max 3";
      const G4RunResult run = RunG4(tp);
      ASSERT_EQ(run.exit_code, 0) << tp << "\n" << run.output;
      const nlohmann::json j = LastJsonLine(run.output);
      EXPECT_EQ(j["ids"], expected) << tp;
      EXPECT_GT(j["speculative"]["drafted"].get<int>(), 0) << tp;
    }
  }
}

TEST(SpeculativeCli, ClearErrors) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  ASSERT_FALSE(dir.empty());
  const std::string base = "run --model " + dir + " --ids 2,17 -n 4 --threads 1 ";
  struct Case {
    std::string flags, message;
  };
  for (const Case& c :
       {Case{"--spec mtp", "--spec mtp needs --draft ASSISTANT_DIR"},
        Case{"--spec draft", "--spec draft needs --draft MODEL"},
        Case{"--draft " + dir, "--draft needs --spec draft"},
        Case{"--spec ngram --draft-max 0", "--draft-max must be between 1 and 64"},
        Case{"--spec ngram --ngram-min 3 --ngram-max 2", "--ngram-min must be"},
        Case{"--spec draft --draft " + dir + " --draft-p-min 1.5",
             "--draft-p-min must be between 0 and 1"},
        Case{"--spec ngram --draft-p-min 0.5", "--draft-p-min needs a drafter with probabilities"},
        Case{"--spec draft --draft /nonexistent/model", "/nonexistent/model"},
        Case{"--spec mtp --draft " + dir, "model_type must be gemma4_assistant"},
        Case{"--tp 2 --spec draft --draft " + dir, "--spec draft does not run tensor parallel"},
        Case{"--draft-quant q8", "--draft-quant needs --spec mtp"},
        Case{"--spec draft --draft " + dir + " --draft-quant q4",
             "--draft-quant is for --spec mtp"},
        Case{"--spec mtp --draft " + dir + " --draft-quant q5", "--draft-quant"}}) {
    const G4RunResult run = RunG4(base + c.flags);
    EXPECT_NE(run.exit_code, 0) << c.flags;
    EXPECT_NE(run.output.find(c.message), std::string::npos) << c.flags << "\n" << run.output;
  }
  // An assistant artifact is one rank: every rank of a tensor-parallel target loads it whole.
  const std::string assistant = TinyAssistant("e2b", "errors");
  const G4RunResult pack = RunG4("pack --model " + assistant + " --tp 2 --out " +
                                 TestTempDir("assistant-tp-pack") + "/a.g4pack");
  EXPECT_NE(pack.exit_code, 0);
  EXPECT_NE(pack.output.find("an assistant artifact holds one rank"), std::string::npos)
      << pack.output;
  // An assistant given as the model (it has no tokenizer) is told where it goes.
  for (const char* command : {"run --prompt hi -n 1", "chat"}) {
    const G4RunResult run = RunG4(std::string(command) + " --model " + assistant);
    EXPECT_NE(run.exit_code, 0) << command;
    EXPECT_NE(run.output.find("is an assistant drafter, not a model to run on its own: pass it as "
                              "--spec mtp --draft"),
              std::string::npos)
        << command << "\n"
        << run.output;
  }
}

TEST(SpeculativeCli, BenchJsonHasTheVerifyCostAndCounters) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  ASSERT_FALSE(dir.empty());
  const G4RunResult run =
      RunG4("bench --model " + dir + " --threads 1 --prefill 8 --contexts 16 --decode-tokens 8 "
            "--mem-bw-mib 8 --no-warmup --json --spec draft --draft " + dir + " --draft-max 2");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json j = LastJsonLine(run.output)["speculative"];
  ASSERT_TRUE(j.is_object()) << run.output;
  EXPECT_EQ(j["verify_cost_by_rows"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["verify_cost_by_rows"]["1"].get<double>(), 1.0);
  EXPECT_TRUE(j["greedy_output_identical"].get<bool>());
  EXPECT_GT(j["acceptance_rate"].get<double>(), 0.8) << "the model drafting for itself";
  for (const char* key : {"tokens_per_target_pass", "draft_time_share", "plain_decode_tok_s",
                          "spec_decode_tok_s"})
    EXPECT_TRUE(j.contains(key)) << key;
}

}  // namespace
}  // namespace g4
