// The g4 binary as users run it: run --json, logits .npy, inspect parameter counts, and the
// errors a user sees for a missing tokenizer or a bad id list.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "io/npy.h"
#include "model/arch/gemma4.h"
#include "model/architecture.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/loader.h"
#include "model/random_prompt.h"
#include "model/synth.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "testing/checkpoints.h"
#include "testing/run_g4.h"

namespace g4 {
namespace {

using RunResult = G4RunResult;

// The median the bench reports (odd counts: the middle; even: the mean of the middle two).
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// `g4 bench --json` on the tiny e2b checkpoint (vocab 512) with `flags`: the parsed report.
nlohmann::json TinyBenchReport(const std::string& flags) {
  const RunResult run = RunG4("bench --model " + TinyCheckpoint("e2b", {.vocab = 512}) + " " + flags + " --json",
                              /*merge_stderr=*/false);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return run.exit_code == 0 ? nlohmann::json::parse(run.output) : nlohmann::json::object();
}

TEST(Cli, RunJsonMatchesTheLibraryAndLogitsWritesNpy) {
  const std::string dir = TinyCheckpoint("e4b");
  ASSERT_FALSE(dir.empty());
  RunResult run = RunG4("run --model " + dir +
                        " --ids 2,9259,1902,236764 -n 12 --ignore-eos --json --threads 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const size_t brace = run.output.find("{\"");
  ASSERT_NE(brace, std::string::npos) << run.output;
  const std::string line = run.output.substr(brace, run.output.find('\n', brace) - brace);
  nlohmann::json j = nlohmann::json::parse(line);
  std::vector<int> ids = j["ids"].get<std::vector<int>>();
  ASSERT_EQ(ids.size(), 12u);
  EXPECT_TRUE(j["text"].is_string());

  auto model = LoadModel(dir);
  ASSERT_TRUE(model.ok());
  KvCache cache((*model)->plan(), 64, 16);
  GenerateOptions options;
  options.max_new_tokens = 12;
  options.ignore_eos = true;
  auto expected = Generate(**model, cache, {2, 9259, 1902, 236764}, options);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(ids, expected->tokens);

  const std::string npy = TestTempDir("cli_logits") + "/l.npy";
  RunResult logits =
      RunG4("logits --model " + dir + " --ids 2,9259,1902 --out " + npy + " --threads 1");
  ASSERT_EQ(logits.exit_code, 0) << logits.output;
  auto arr = ReadNpyF32(npy);
  ASSERT_TRUE(arr.ok()) << arr.status().message();
  ASSERT_EQ(arr->shape, (std::vector<int64_t>{3, (*model)->plan().vocab}));
  KvCache c2((*model)->plan(), 8, 8);
  Activations act;
  auto direct = Prefill(**model, c2, {2, 9259, 1902}, 8, true, act);
  ASSERT_TRUE(direct.ok());
  ApplySoftcapInPlace(direct->data(), static_cast<int>(direct->size()), 30.0f);
  for (size_t i = 0; i < direct->size(); i += 997) ASSERT_FLOAT_EQ(arr->data[i], (*direct)[i]) << i;
  for (float v : arr->data) ASSERT_LE(std::abs(v), 30.0f);  // softcapped
}

TEST(Cli, InspectPrintsTheRealParameterCounts) {
  const std::pair<const char*, const char*> presets[] = {
      {"e2b", "4,647,449,891"}, {"e4b", "7,518,069,034"}, {"12b", "11,907,350,320"}};
  for (const auto& [preset, total] : presets) {
    auto spec = SynthPreset(preset, "full");
    ASSERT_TRUE(spec.ok());
    const std::string dir = TestTempDir(std::string("inspect_") + preset);
    std::ofstream(dir + "/config.json") << SynthConfigJson(*spec, {});
    RunResult r = RunG4("inspect --model " + dir);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("total              ") + total), std::string::npos)
        << r.output;
  }
}

// KV bytes per token per --kv-type, from E2B's shapes by hand: 3 full owner layers of one KV
// head of 512 and 12 sliding ones of 256, K and V: f32 2*4 B, bf16 2*2 B, q8 2*(1 B + a 4-byte
// scale per 32 values). Full: 3*512*8 = 12,288, 3*512*4 = 6,144, 3*2*(512+64) = 3,456; sliding:
// 12*256*8 = 24,576, 12,288, 12*2*(256+32) = 6,912. A bad --kv-type is refused.
TEST(Cli, InspectPrintsKvBytesPerTokenForEveryKvType) {
  auto spec = SynthPreset("e2b", "full");
  ASSERT_TRUE(spec.ok());
  const std::string dir = TestTempDir("inspect_kv_e2b");
  std::ofstream(dir + "/config.json") << SynthConfigJson(*spec, {});
  RunResult r = RunG4("inspect --model " + dir + " --ctx 8192 --kv-type q8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"f32                12,288              24,576",
                           "bf16                6,144              12,288",
                           "q8                  3,456               6,912"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  EXPECT_NE(r.output.find("<- --kv-type"), std::string::npos) << r.output;
  r = RunG4("inspect --model " + dir + " --kv-type q4");
  EXPECT_NE(r.exit_code, 0) << r.output;
}

TEST(Cli, ClearErrorsNotCrashes) {
  const std::string src = TinyCheckpoint("e2b", {.vocab = 512});
  const std::string dir = TestTempDir("cli_no_tokenizer");
  ASSERT_TRUE(CopyCheckpoint(src, dir).ok());
  std::remove((dir + "/tokenizer.json").c_str());
  RunResult r = RunG4("run --model " + dir + " --prompt hi -n 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("tokenizer.json is missing"), std::string::npos) << r.output;

  std::ofstream(dir + "/tokenizer.json") << "";
  r = RunG4("run --model " + dir + " --prompt hi -n 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;

  r = RunG4("run --model " + src + " --ids 2,x,3 -n 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("bad token id list"), std::string::npos) << r.output;

  r = RunG4("run --model " + src + " --ids 2,99999 -n 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("outside the vocabulary"), std::string::npos) << r.output;

  r = RunG4("run --model /nonexistent -n 2 --ids 2");
  EXPECT_EQ(r.exit_code, 1);

  r = RunG4("nosuchcommand");
  EXPECT_EQ(r.exit_code, 2);
}

// g4 bench --tp 2 runs the tensor-parallel path: rank 0 reads its share of the weights per token
// (less than one rank reads), makes one all-reduce after o_proj and one after down_proj per layer
// plus the LM head's all-gather per decoded token, and reports the time in them.
TEST(Cli, BenchTpRunsTheRanksAndReportsCommunication) {
  const std::string dir = TinyCheckpoint("e4b", {.vocab = 512});
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok());
  const std::string flags =
      " --model " + dir +
      " --threads 1 --prefill 16 --contexts 0 --decode-tokens 4 --chunk 16 --mem-bw-mib 16 --json";
  RunResult one = RunG4("bench --tp 1" + flags, /*merge_stderr=*/false);
  RunResult two = RunG4("bench --tp 2" + flags, /*merge_stderr=*/false);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto j1 = nlohmann::json::parse(one.output), j2 = nlohmann::json::parse(two.output);
  EXPECT_EQ(j1["tp"], 1);
  EXPECT_FALSE(j1.contains("decode_comm_ms_per_token_by_ctx"));
  EXPECT_EQ(j2["tp"], 2);
  EXPECT_EQ(j2["decode_collectives_per_token"].get<double>(), 2.0 * config->num_hidden_layers + 1);
  EXPECT_GT(j2["decode_comm_ms_per_token_by_ctx"]["0"].get<double>(), 0);
  EXPECT_GT(j2["prefill_comm_ms_per_token_by_len"]["16"].get<double>(), 0);
  EXPECT_LT(j2["weight_bytes_per_token"].get<double>(),
            0.75 * j1["weight_bytes_per_token"].get<double>());
  EXPECT_GT(j2["decode_tok_s"].get<double>(), 0);
}

// Decode contexts are measured round by round (each round visits every context); a context
// listed twice is measured and reported once, and the text report keeps the order given.
TEST(Cli, BenchMeasuresEveryContextOnceInOrder) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  const std::string flags = " --model " + dir +
                            " --threads 1 --prefill 8 --contexts 12 0 12 --decode-tokens 3 "
                            "--reps 2 --chunk 8 --mem-bw-mib 16";
  RunResult json_run = RunG4("bench" + flags + " --json", /*merge_stderr=*/false);
  ASSERT_EQ(json_run.exit_code, 0) << json_run.output;
  const auto j = nlohmann::json::parse(json_run.output);
  const auto& by_ctx = j["decode_tok_s_by_ctx"];
  ASSERT_EQ(by_ctx.size(), 2u) << by_ctx.dump();
  EXPECT_GT(by_ctx["0"].get<double>(), 0);
  EXPECT_GT(by_ctx["12"].get<double>(), 0);
  EXPECT_EQ(j["decode_tok_s"], by_ctx["0"]);
  // The prefill that filled context 12 is reported as a rate at that length; context 0 had none.
  const auto& fill = j["context_fill_tok_s_by_ctx"];
  ASSERT_EQ(fill.size(), 1u) << fill.dump();
  EXPECT_GT(fill["12"].get<double>(), 0);
  RunResult text = RunG4("bench" + flags);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  const size_t at12 = text.output.find("decode at ctx 12:"),
               at0 = text.output.find("decode at ctx 0:");
  ASSERT_NE(at12, std::string::npos) << text.output;
  ASSERT_NE(at0, std::string::npos) << text.output;
  EXPECT_LT(at12, at0);
  EXPECT_EQ(text.output.find("decode at ctx 12:", at12 + 1), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("prefill filling ctx 12"), std::string::npos) << text.output;
  EXPECT_EQ(text.output.find("prefill filling ctx 0 "), std::string::npos) << text.output;
}

// The format in the report is the one the weights are in: a packed artifact's own, whatever
// --quant says (it used to print the flag's default, bf16, for a q8 artifact).
TEST(Cli, BenchReportsTheFormatTheWeightsAreIn) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  const std::string flags =
      " --threads 1 --prefill 8 --contexts 0 --decode-tokens 2 --reps 1 --mem-bw-mib 16 --json";
  RunResult q4 = RunG4("bench --model " + dir + " --quant q4" + flags, /*merge_stderr=*/false);
  ASSERT_EQ(q4.exit_code, 0) << q4.output;
  EXPECT_EQ(nlohmann::json::parse(q4.output)["quant"], "q4");
  const std::string pack = TestTempDir("cli_bench_pack") + "/e2b-q8.g4";
  RunResult packed = RunG4("pack --threads 1 --model " + dir + " --quant q8 --out " + pack);
  ASSERT_EQ(packed.exit_code, 0) << packed.output;
  RunResult run = RunG4("bench --model " + pack + flags, /*merge_stderr=*/false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto j = nlohmann::json::parse(run.output);
  EXPECT_EQ(j["quant"], "q8");
  EXPECT_EQ(j["weight_bytes_per_token"],
            nlohmann::json::parse(RunG4("bench --model " + dir + " --quant q8" + flags, false)
                                      .output)["weight_bytes_per_token"]);
}

// g4 bench --json-schema decodes with the output held to the schema: what it reports as the
// constrained output is JSON of the schema's shape (checked here by hand, not by the grammar),
// with --spec the same output speculatively; a schema it cannot read or compile is a clear error.
TEST(Cli, BenchJsonSchemaHoldsTheOutputToTheSchema) {
  const std::string model = AssetsDir() + "/models/default";
  if (!std::ifstream(model + "/tokenizer.json")) GTEST_SKIP() << "no default model (tools/setup.sh)";
  const std::string schema_path = TestTempDir("cli_bench_schema") + "/schema.json";
  std::ofstream(schema_path) << R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
      "n":{"type":"integer","minimum":0,"maximum":99},"tags":{"type":"array","items":{"enum":["x","y"]},"maxItems":2}},
      "required":["name","n","tags"],"additionalProperties":false})";
  const std::string flags = " --model " + model +
                            " --threads 1 --prefill 8 --contexts 8 --decode-tokens 60 --reps 1 --mem-bw-mib 16 --json";
  RunResult run = RunG4("bench --json-schema " + schema_path + flags, /*merge_stderr=*/false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto c = nlohmann::json::parse(run.output)["constrained"];
  ASSERT_EQ(c["constrained_finish_reason"], "stop") << c.dump();
  EXPECT_TRUE(c["output_is_complete"].get<bool>());
  const auto out = nlohmann::json::parse(c["output"].get<std::string>());
  ASSERT_TRUE(out.is_object()) << out.dump();
  EXPECT_EQ(out.size(), 3u);
  ASSERT_TRUE(out["name"].is_string());
  EXPECT_LE(out["name"].get<std::string>().size(), 12u);
  ASSERT_TRUE(out["n"].is_number_integer());
  EXPECT_LE(out["n"].get<int>(), 99);
  EXPECT_GE(out["n"].get<int>(), 0);
  ASSERT_TRUE(out["tags"].is_array());
  EXPECT_LE(out["tags"].size(), 2u);
  for (const auto& t : out["tags"]) EXPECT_TRUE(t == "x" || t == "y") << t.dump();
  EXPECT_GT(c["plain_decode_tok_s"].get<double>(), 0);
  EXPECT_GT(c["constrained_decode_tok_s"].get<double>(), 0);
  EXPECT_GT(c["mask_ms_per_token"].get<double>(), 0);

  // With --spec, speculative decode under the same schema: greedy, so the same output token for
  // token (the bench compares the tokens; the text here is the first run's).
  RunResult spec = RunG4("bench --json-schema " + schema_path + flags + " --spec ngram --draft-max 3",
                         /*merge_stderr=*/false);
  ASSERT_EQ(spec.exit_code, 0) << spec.output;
  const auto cs = nlohmann::json::parse(spec.output)["constrained"];
  EXPECT_EQ(cs["output"], c["output"]);
  ASSERT_TRUE(cs.contains("speculative")) << cs.dump();
  EXPECT_TRUE(cs["speculative"]["greedy_output_identical"].get<bool>()) << cs.dump();
  EXPECT_EQ(cs["speculative"]["finish_reason"], "stop");
  EXPECT_EQ(cs["speculative"]["spec"], "ngram");
  EXPECT_GT(cs["speculative"]["decode_tok_s"].get<double>(), 0);
  EXPECT_GT(cs["speculative"]["target_passes"].get<int>(), 0);

  RunResult missing = RunG4("bench --json-schema /nonexistent/s.json" + flags);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("--json-schema: cannot read '/nonexistent/s.json'"), std::string::npos) << missing.output;
  std::ofstream(schema_path) << R"({"type":"object","patternProperties":{"a":{}}})";
  RunResult bad = RunG4("bench --json-schema " + schema_path + flags);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--json-schema '" + schema_path + "': "), std::string::npos) << bad.output;
}

// One untimed prefill and two decode steps come first unless --no-warmup (the first pass after
// a load is slower: first touches of buffers and pages); the report says which it did.
TEST(Cli, BenchWarmsUpFirstUnlessAskedNot) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  const std::string flags = " --model " + dir +
                            " --threads 1 --prefill 4 12 --contexts 0 --decode-tokens 1 "
                            "--chunk 8 --mem-bw-mib 16 --json";
  RunResult warm = RunG4("bench" + flags, /*merge_stderr=*/false);
  RunResult cold = RunG4("bench --no-warmup" + flags, /*merge_stderr=*/false);
  ASSERT_EQ(warm.exit_code, 0) << warm.output;
  ASSERT_EQ(cold.exit_code, 0) << cold.output;
  const auto jw = nlohmann::json::parse(warm.output), jc = nlohmann::json::parse(cold.output);
  EXPECT_EQ(jw["warmup"], true);
  EXPECT_EQ(jc["warmup"], false);
  for (const auto& j : {jw, jc}) {
    EXPECT_GT(j["prefill_tok_s_by_len"]["12"].get<double>(), 0);
    EXPECT_GT(j["decode_tok_s"].get<double>(), 0);
  }
}

// The contexts take turns every --window tokens and the weights are read alone after each turn;
// the report's tok/s, paired bandwidth fractions and context ratios all follow from the windows
// it lists (recomputed here: 5 tokens in windows of 2 make 2 + 2 + 1 per repetition).
TEST(Cli, BenchPairsDecodeWindowsWithReadsAndContexts) {
  const auto j = TinyBenchReport(
      "--threads 1 --prefill 8 --contexts 12 0 --decode-tokens 5 --window 2 --reps 2 --chunk 8 --mem-bw-mib 16");
  ASSERT_TRUE(j.contains("decode_windows_by_ctx"));
  EXPECT_EQ(j["decode_window_tokens"], 2);
  const auto tok0 = j["decode_windows_by_ctx"]["0"]["tok_s"].get<std::vector<double>>();
  const auto tok12 = j["decode_windows_by_ctx"]["12"]["tok_s"].get<std::vector<double>>();
  const auto read0 = j["decode_windows_by_ctx"]["0"]["read_gb_s"].get<std::vector<double>>();
  ASSERT_EQ(tok0.size(), 6u);
  ASSERT_EQ(tok12.size(), 6u);
  ASSERT_EQ(read0.size(), 6u);
  std::vector<double> ratios, fractions;
  const double gb_per_token = j["weight_bytes_per_token"].get<double>() / 1e9;
  for (size_t k = 0; k < 6; ++k) {
    ratios.push_back(tok12[k] / tok0[k]);
    fractions.push_back(tok0[k] * gb_per_token / read0[k]);
  }
  EXPECT_NEAR(j["decode_ctx_ratio_by_ctx"]["12"].get<double>(), Median(ratios), 1e-9);
  EXPECT_DOUBLE_EQ(j["decode_ctx_ratio_by_ctx"]["0"].get<double>(), 1.0);
  EXPECT_NEAR(j["decode_read_fraction"].get<double>(), Median(fractions), 1e-9);
  EXPECT_EQ(j["decode_read_fraction"], j["decode_read_fraction_by_ctx"]["0"]);
  // tok/s of a repetition = its 5 tokens over the sum of its windows' seconds; the best is kept.
  const int per_window[3] = {2, 2, 1};
  for (const auto& [key, tok] : {std::pair{"0", tok0}, std::pair{"12", tok12}}) {
    double best = 0;
    for (int r = 0; r < 2; ++r) {
      double seconds = 0;
      for (int w = 0; w < 3; ++w) seconds += per_window[w] / tok[r * 3 + w];
      best = std::max(best, 5 / seconds);
    }
    EXPECT_NEAR(j["decode_tok_s_by_ctx"][key].get<double>(), best, 1e-9 * best) << key;
  }
  EXPECT_GE(j["weight_read_gb_s"].get<double>(), *std::max_element(read0.begin(), read0.end()));
}

// g4 bench --streams decodes N sequences a row each per forward pass: every count listed, in
// order, with its windows paired with a prefill; the first stream's batched tokens are those of
// its prompt decoded here alone, and the bench's own check of every stream agrees.
TEST(Cli, BenchStreamsDecodesSequencesBatchedInTurnsWithPrefill) {
  const auto report = TinyBenchReport(
      "--threads 1 --prefill 8 --contexts 6 --decode-tokens 7 --window 3 --streams 3 1 --chunk 8 --mem-bw-mib 16");
  ASSERT_TRUE(report.contains("streams"));
  const auto& s = report["streams"];
  EXPECT_EQ(s["context"], 6);
  EXPECT_EQ(s["prefill_tokens"], 8);
  ASSERT_EQ(s["by_streams"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& row = s["by_streams"][i];
    const int n = i == 0 ? 3 : 1;
    EXPECT_EQ(row["streams"], n);
    // One untimed step, then 6 timed steps in windows of 3.
    const auto agg = row["window_aggregate_tok_s"].get<std::vector<double>>();
    const auto pre = row["window_prefill_tok_s"].get<std::vector<double>>();
    ASSERT_EQ(agg.size(), 2u);
    ASSERT_EQ(pre.size(), 2u);
    std::vector<double> ratios;
    for (size_t k = 0; k < 2; ++k) ratios.push_back(agg[k] / pre[k]);
    EXPECT_NEAR(row["aggregate_over_prefill"].get<double>(), Median(ratios), 1e-9);
    // n tokens a step: the aggregate over both windows is 6n tokens over their seconds.
    const double total = 6.0 * n / (3.0 * n / agg[0] + 3.0 * n / agg[1]);
    EXPECT_NEAR(row["aggregate_tok_s"].get<double>(), total, 1e-9 * total);
    EXPECT_NEAR(row["per_stream_tok_s"].get<double>(), total / n, 1e-9 * total);
  }
  const auto& check = s["greedy_check"];
  EXPECT_EQ(check["streams"], 3);
  EXPECT_EQ(check["tokens"], 9);
  EXPECT_EQ(check["matching"], 9);

  // Stream 0's prompt (seed 1000: 6 tokens of context, then the first token fed), decoded here
  // in one prefill and single rows.
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  auto model = LoadModel(dir);
  ASSERT_TRUE(model.ok());
  const std::vector<int> prompt = RandomPromptIds(7, 512, 1000);
  KvCache cache((*model)->plan(), 16, 8);
  Activations act;
  std::vector<float> logits(512);
  std::vector<BatchRow> rows;
  for (int i = 0; i < 7; ++i) rows.push_back({prompt[i], i, &cache, i == 6});
  std::vector<int> expected;
  for (int t = 0; t < 3; ++t) {
    ASSERT_TRUE((*model)->Forward(rows, act, logits.data()).ok());
    expected.push_back(static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    rows = {{expected.back(), 7 + t, &cache, true}};
  }
  EXPECT_EQ(check["first_stream_batched"].get<std::vector<int>>(), expected);

  EXPECT_NE(RunG4("bench --model " + dir + " --streams 0").exit_code, 0);
  RunResult tp = RunG4("bench --model " + dir + " --streams 2 --tp 2");
  EXPECT_NE(tp.exit_code, 0);
  EXPECT_NE(tp.output.find("--streams is measured without --tp"), std::string::npos) << tp.output;
}

}  // namespace
}  // namespace g4
