// `g4 pack`, `g4 validate` and `g4 doctor` (issue 7), mostly through the g4 binary itself
// ($G4_BINARY_DIR/g4), because what users run is what must work: an artifact's logits equal the
// checkpoint's bit for bit, damaged artifacts are refused, validate catches a corrupted weight
// even when its checksum was fixed up, and doctor names the cause of each broken checkpoint.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/pack.h"
#include "io/safetensors.h"
#include "model/forward.h"
#include "model/loader.h"
#include "model/pack_reader.h"
#include "model/pack_writer.h"
#include "runtime/generate.h"
#include "testing/checkpoints.h"

namespace g4 {
namespace {

std::string G4Binary() {
  const char* env = std::getenv("G4_BINARY_DIR");
#ifdef G4_BINARY_DIR
  return std::string(env && *env ? env : G4_BINARY_DIR) + "/g4";
#else
  return std::string(env ? env : ".") + "/g4";
#endif
}

struct G4Run {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs `g4 ARGS` through the shell.
G4Run RunG4(const std::string& args, const std::string& prefix = "") {
  G4Run r;
  const std::string cmd = prefix + G4Binary() + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

bool Contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

std::vector<float> Logits(const std::string& model_path, WeightType quant, const std::vector<int>& ids) {
  ModelOptions options;
  options.threads = 2;
  options.load.quant = quant;
  auto model = LoadModel(model_path, options);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return {};
  KvCache cache((*model)->plan(), static_cast<int>(ids.size()), 8);
  Activations act;
  auto logits = Prefill(**model, cache, ids, 8, true, act);
  EXPECT_TRUE(logits.ok());
  return logits.ok() ? *logits : std::vector<float>{};
}

const std::vector<int> kIds = {2, 17, 301, 45, 99, 12, 480, 77, 250, 31, 64, 128, 200, 11, 400, 13, 19, 23, 29, 37};

// ------------------------------------------------------------------------------------------------
// Pack

class PackRoundTrip : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(PackRoundTrip, PackedLogitsEqualCheckpointLogitsBitwise) {
  const auto& [preset, quant_name] = GetParam();
  const std::string dir = TinyCheckpoint(preset, {.vocab = 512});
  ASSERT_FALSE(dir.empty());
  WeightType quant;
  ASSERT_TRUE(ParseWeightType(quant_name, &quant));
  const std::string out = TestTempDir("roundtrip_" + preset + quant_name) + "/model.g4";
  PackModelOptions options;
  options.quant = quant;
  options.threads = 2;
  ASSERT_TRUE(PackModel(dir, out, options).ok());
  const auto want = Logits(dir, quant, kIds);
  const auto got = Logits(out, WeightType::kBF16, kIds);  // bf16 = "as packed"
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
  // The artifact carries the tokenizer and config: the CLI loads it alone.
  G4Run r = RunG4("run --model " + out + " --ids 2,17,301 -n 4 --json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Presets, PackRoundTrip,
                         ::testing::Combine(::testing::Values("e2b", "e4b", "12b"), ::testing::Values("bf16", "q8", "q4")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// The address ranges /proc/self/maps lists for `path`.
std::vector<std::pair<uintptr_t, uintptr_t>> MappingsOf(const std::string& path) {
  const std::string want = std::filesystem::canonical(path).string();
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.size() < want.size() ||
        line.compare(line.size() - want.size(), want.size(), want) != 0)
      continue;
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) == 2) out.emplace_back(begin, end);
  }
  return out;
}

// Every matrix of a loaded artifact lives in memory the engine owns, in every format and
// whichever layout the kernels read (bf16, and matrices the row groups do not fit): they are
// read on every token, and these machines page mapped files out, so decode would re-read them
// from disk. Only the PLE table stays mapped (read one row per token).
TEST(PackLoad, EveryMatrixIsCopiedOutOfTheMapping) {
  for (const char* quant : {"bf16", "q8", "q4"}) {
    SCOPED_TRACE(quant);
    const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
    ASSERT_FALSE(dir.empty());
    WeightType type;
    ASSERT_TRUE(ParseWeightType(quant, &type));
    const std::string out = TestTempDir(std::string("owned_") + quant) + "/model.g4";
    PackModelOptions options;
    options.quant = type;
    options.threads = 2;
    ASSERT_TRUE(PackModel(dir, out, options).ok());
    ModelOptions mo;
    mo.threads = 2;
    auto model = LoadModel(out, mo);
    ASSERT_TRUE(model.ok()) << model.status().message();
    const auto ranges = MappingsOf(out);
    auto mapped = [&](const void* p) {
      const auto a = reinterpret_cast<uintptr_t>(p);
      for (const auto& [begin, end] : ranges)
        if (a >= begin && a < end) return true;
      return false;
    };
    // The check can see a mapped pointer: the PLE table is one.
    ASSERT_TRUE(mapped((*model)->weights().ple_table));
    int matrices = 0;
    for (const WeightMatrix* m : (*model)->weights().Matrices()) {
      if (m->empty()) continue;
      ++matrices;
      EXPECT_FALSE(mapped(m->data)) << "a " << WeightTypeName(m->type) << " [" << m->rows << ", "
                                    << m->cols << "] matrix is read from the mapped file";
    }
    EXPECT_GT(matrices, 10);
    // Nothing but the PLE table is counted as mapped.
    const ModelPlan& plan = (*model)->plan();
    EXPECT_EQ((*model)->weights().mapped_bytes,
              static_cast<int64_t>(plan.vocab) * plan.n_layers() * plan.ple_dim *
                  static_cast<int64_t>(DTypeSize((*model)->weights().ple_dtype)));
  }
}

std::string PackedTiny(const std::string& preset, const std::string& name, const std::string& quant = "bf16") {
  const std::string dir = TinyCheckpoint(preset, {.vocab = 512});
  const std::string out = TestTempDir(name) + "/model.g4";
  G4Run r = RunG4("pack --threads 2 --model " + dir + " --quant " + quant + " --out " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

void Patch(const std::string& path, uint64_t offset, const std::vector<uint8_t>& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

uint64_t SectionOffset(const std::string& path, const std::string& name) {
  auto pack = PackFile::Open(path);
  EXPECT_TRUE(pack.ok());
  const PackSection* s = pack.ok() ? (*pack)->Find(name) : nullptr;
  EXPECT_NE(s, nullptr) << name;
  return s ? s->offset : 0;
}

TEST(PackRefuses, TruncatedWrongVersionAndChecksumMismatch) {
  const std::string good = PackedTiny("e2b", "refuse");
  const std::string dir = std::filesystem::path(good).parent_path();
  {
    const std::string p = dir + "/truncated.g4";
    std::filesystem::copy_file(good, p);
    ASSERT_EQ(::truncate(p.c_str(), std::filesystem::file_size(p) / 2), 0);
    G4Run r = RunG4("logits --model " + p + " --ids 2,3 --out " + dir + "/x.npy");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(Contains(r.output, "truncated")) << r.output;
  }
  {
    const std::string p = dir + "/version.g4";
    std::filesystem::copy_file(good, p);
    Patch(p, 8, {99, 0, 0, 0});
    G4Run r = RunG4("logits --model " + p + " --ids 2,3 --out " + dir + "/x.npy");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(Contains(r.output, "format version 99")) << r.output;
  }
  {
    const std::string p = dir + "/flipped.g4";
    std::filesystem::copy_file(good, p);
    Patch(p, SectionOffset(p, "rank0/layers.1.down_proj") + 10, {0xFF, 0x7F});
    G4Run r = RunG4("logits --model " + p + " --ids 2,3 --out " + dir + "/x.npy");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(Contains(r.output, "checksum mismatch in section rank0/layers.1.down_proj")) << r.output;
  }
}

TEST(PackFailure, LeavesNoFile) {
  const std::string src = TinyCheckpoint("e2b", {.vocab = 512});
  const std::string dir = TestTempDir("pack_failure");
  // Simulated full disk half way through.
  PackModelOptions options;
  options.write.fail_after_bytes = 4 << 20;
  Status st = PackModel(src, dir + "/full.g4", options);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(), "no file was left behind")) << st.message();
  // A pack killed by the file-size limit (SIGXFSZ) half way through.
  G4Run r = RunG4("pack --model " + src + " --out " + dir + "/killed.g4", "ulimit -f 2048; ");
  EXPECT_NE(r.exit_code, 0) << r.output;
  // A checkpoint that cannot be read: nothing is created.
  const std::string broken = TestTempDir("pack_failure_src");
  ASSERT_TRUE(CopyCheckpoint(src, broken).ok());
  ASSERT_EQ(::truncate((broken + "/model.safetensors").c_str(), 100000), 0);
  r = RunG4("pack --model " + broken + " --out " + dir + "/broken.g4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.output, "truncated")) << r.output;
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << std::filesystem::directory_iterator(dir)->path();
}

// ------------------------------------------------------------------------------------------------
// Validate

class Validate : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(Validate, PassesOnCheckpointAndArtifactInFreshProcesses) {
  const auto& [preset, quant] = GetParam();
  const std::string dir = TinyCheckpoint(preset, {.vocab = 512});
  G4Run r = RunG4("validate --threads 2 --tokens 16 --json --model " + dir + " --quant " + quant);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "in a fresh process")) << r.output;
  EXPECT_TRUE(Contains(r.output, "float64 reference")) << r.output;
  EXPECT_TRUE(Contains(r.output, "verdict: PASS")) << r.output;
  if (quant != "bf16") {
    // A quantized target is held to the reference on its own blocks, which leaves only its int8
    // activations to differ: much closer than to the checkpoint's weights (q4: KL 0.004-0.013
    // against 0.46-1.4 nats on these presets; q8: 0.008-0.021 against 0.020-0.056).
    EXPECT_TRUE(Contains(r.output, "with the target's own quantized weights")) << r.output;
    const size_t at = r.output.find("{\"");
    ASSERT_NE(at, std::string::npos) << r.output;
    const auto j = nlohmann::json::parse(r.output.substr(at, r.output.find('\n', at) - at));
    const double held_kl = j.at("held_weights").at("mean_kl"), cost_kl = j.at("mean_kl");
    EXPECT_LT(held_kl, (quant == "q4" ? 0.1 : 0.6) * cost_kl) << r.output;
  }
  const std::string artifact = PackedTiny(preset, "validate_" + preset + quant, quant);
  r = RunG4("validate --threads 2 --tokens 16 --model " + dir + " --artifact " + artifact);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "packed artifact, weights " + std::string(quant == "bf16" ? "bf16" : ""))) << r.output;
  EXPECT_TRUE(Contains(r.output, "verdict: PASS")) << r.output;
  if (quant == "bf16") {
    EXPECT_TRUE(Contains(r.output, "SEQ_MATCH")) << r.output;
    r = RunG4("validate --threads 2 --tokens 16 --in-process --model " + dir + " --artifact " + artifact);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, Validate,
                         ::testing::Combine(::testing::Values("e2b", "e4b", "12b"), ::testing::Values("bf16", "q8", "q4")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(ValidateCatches, CorruptedWeightWithFixedChecksumAndPlainFlip) {
  const std::string dir = TinyCheckpoint("e4b", {.vocab = 512});
  const std::string artifact = PackedTiny("e4b", "validate_corrupt");
  // Flip bytes inside a weight, then fix the checksums up: only the numbers can tell now.
  std::vector<uint8_t> junk(64);
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<uint8_t>(0x3F + i * 7);
  Patch(artifact, SectionOffset(artifact, "rank0/layers.0.q_proj") + 256, junk);
  ASSERT_TRUE(RewritePackChecksums(artifact).ok());
  G4Run r = RunG4("validate --threads 2 --tokens 16 --model " + dir + " --artifact " + artifact);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "verdict: FAIL")) << r.output;
  EXPECT_TRUE(Contains(r.output, "max |logit error|")) << r.output;
  // Without the fix-up the fresh process refuses to load it at all.
  Patch(artifact, SectionOffset(artifact, "rank0/layers.2.up_proj") + 8, {0x12, 0x34});
  r = RunG4("validate --threads 2 --tokens 16 --model " + dir + " --artifact " + artifact);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "checksum mismatch in section rank0/layers.2.up_proj")) << r.output;
}

// ------------------------------------------------------------------------------------------------
// --tp 2 artifacts through the CLI: pack, run, validate (ranks as threads of the fresh process).

std::string PackedTinyTp(const std::string& preset, const std::string& name, int tp,
                         const std::string& quant = "bf16") {
  const std::string dir = TinyCheckpoint(preset, {.vocab = 512});
  const std::string out = TestTempDir(name) + "/model.g4";
  G4Run r = RunG4("pack --threads 2 --tp " + std::to_string(tp) + " --model " + dir + " --quant " +
                  quant + " --out " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "tp " + std::to_string(tp))) << r.output;
  return out;
}

// The "ids" array of `g4 run --json`.
std::string JsonIds(const std::string& output) {
  const size_t begin = output.find("\"ids\":[");
  if (begin == std::string::npos) return "";
  return output.substr(begin, output.find(']', begin) - begin);
}

class ValidateTp2 : public ::testing::TestWithParam<std::string> {};

TEST_P(ValidateTp2, ArtifactRunsAndPassesValidate) {
  const std::string preset = GetParam();
  const std::string dir = TinyCheckpoint(preset, {.vocab = 512});
  const std::string artifact = PackedTinyTp(preset, "validate_tp2_" + preset, 2);
  // `g4 run --tp 2` on the artifact: the greedy tokens of `g4 run` on the checkpoint (tp 1).
  const std::string args = " --threads 2 --ids 2,17,301,45,99,12 -n 24 --ignore-eos --json";
  G4Run want = RunG4("run --model " + dir + args);
  G4Run got = RunG4("run --tp 2 --model " + artifact + args);
  ASSERT_EQ(want.exit_code, 0) << want.output;
  ASSERT_EQ(got.exit_code, 0) << got.output;
  EXPECT_FALSE(JsonIds(want.output).empty()) << want.output;
  EXPECT_EQ(JsonIds(got.output), JsonIds(want.output));
  G4Run r =
      RunG4("validate --threads 2 --tokens 16 --tp 2 --model " + dir + " --artifact " + artifact);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "packed artifact, weights bf16, tp 2 ranks")) << r.output;
  EXPECT_TRUE(Contains(r.output, "in a fresh process")) << r.output;
  EXPECT_TRUE(Contains(r.output, "SEQ_MATCH")) << r.output;
  EXPECT_TRUE(Contains(r.output, "verdict: PASS")) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Presets, ValidateTp2, ::testing::Values("e2b", "e4b", "12b"));

TEST(ValidateTp2Checks, CheckpointAndQ8AtTp2Pass) {
  const std::string dir = TinyCheckpoint("e4b", {.vocab = 512});
  G4Run r = RunG4("validate --threads 2 --tokens 16 --tp 2 --model " + dir);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "verdict: PASS")) << r.output;
  const std::string artifact = PackedTinyTp("e4b", "validate_tp2_q8", 2, "q8");
  r = RunG4("validate --threads 2 --tokens 16 --tp 2 --model " + dir + " --artifact " + artifact);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "verdict: PASS")) << r.output;
}

TEST(ValidateTp2Checks, CorruptedRankSectionFails) {
  const std::string dir = TinyCheckpoint("12b", {.vocab = 512});
  const std::string artifact = PackedTinyTp("12b", "validate_tp2_corrupt", 2);
  // A weight of rank 1 only, checksums fixed up: rank 0's sections are intact, the numbers are not.
  std::vector<uint8_t> junk(64);
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<uint8_t>(0x3F + i * 7);
  Patch(artifact, SectionOffset(artifact, "rank1/layers.0.q_proj") + 256, junk);
  ASSERT_TRUE(RewritePackChecksums(artifact).ok());
  G4Run r =
      RunG4("validate --threads 2 --tokens 16 --tp 2 --model " + dir + " --artifact " + artifact);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "verdict: FAIL")) << r.output;
  EXPECT_TRUE(Contains(r.output, "max |logit error|")) << r.output;
  // Without the fix-up rank 1 refuses to load its section, and no rank is left waiting.
  Patch(artifact, SectionOffset(artifact, "rank1/layers.2.up_proj") + 8, {0x12, 0x34});
  r = RunG4("validate --threads 2 --tokens 16 --tp 2 --model " + dir + " --artifact " + artifact);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "checksum mismatch in section rank1/layers.2.up_proj"))
      << r.output;
}

TEST(ValidateTp2Checks, DoctorChecksEveryRankOfATp2Artifact) {
  const std::string artifact = PackedTinyTp("e4b", "doctor_tp2", 2);
  G4Run r = RunG4("doctor --model " + artifact);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "for each of its 2 ranks")) << r.output;
  Patch(artifact, SectionOffset(artifact, "rank1/layers.3.gate_proj") + 8, {0x12, 0x34});
  r = RunG4("doctor --model " + artifact);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "checksum mismatch in section rank1/layers.3.gate_proj"))
      << r.output;
}

TEST(ValidateTp2Checks, RankCountMismatchIsRefused) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  const std::string artifact = PackedTinyTp("e2b", "tp2_mismatch_cli", 2);
  G4Run r = RunG4("validate --threads 2 --model " + dir + " --artifact " + artifact);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "packed with --tp 2 but validate runs --tp 1")) << r.output;
  r = RunG4("logits --threads 2 --model " + artifact + " --ids 2,3 --out " +
            TestTempDir("tp2_mismatch_npy") + "/x.npy");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "packed with --tp 2")) << r.output;
  EXPECT_TRUE(Contains(r.output, "runs --tp 1")) << r.output;
  r = RunG4("run --tp 4 --threads 2 --model " + artifact + " --ids 2,3 -n 2");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "packed with --tp 2")) << r.output;
  EXPECT_TRUE(Contains(r.output, "runs --tp 4")) << r.output;
  EXPECT_FALSE(Contains(r.output, "terminate called")) << r.output;
}

// ------------------------------------------------------------------------------------------------
// Doctor

TEST(Doctor, HealthyCheckpointPasses) {
  G4Run r = RunG4("doctor --model " + TinyCheckpoint("e2b", {.vocab = 512}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "OK    forward")) << r.output;
  EXPECT_TRUE(Contains(r.output, "0 FAIL")) << r.output;
}

struct Broken {
  std::string name;
  std::function<void(const std::string& src, const std::string& dst)> make;
  int exit_code;
  std::vector<std::string> expect;  // substrings of the finding
};

TEST(Doctor, NamesTheCauseOfEachBrokenCheckpoint) {
  const std::string src = TinyCheckpoint("e2b", {.vocab = 512});
  const std::string prefix = "model.language_model.";
  const std::string scalar = prefix + "layers.3.layer_scalar", q = prefix + "layers.2.self_attn.q_proj.weight";
  const std::string assets = std::filesystem::path(TestTokenizerPath()).parent_path();
  const std::vector<Broken> cases = {
      {"missing_tokenizer",
       [](auto s, auto d) {
         ASSERT_TRUE(CopyCheckpoint(s, d).ok());
         std::filesystem::remove(d + "/tokenizer.json");
       },
       1, {"FAIL  tokenizer", "tokenizer.json is missing"}},
      {"empty_tokenizer",
       [](auto s, auto d) {
         ASSERT_TRUE(CopyCheckpoint(s, d).ok());
         std::ofstream(d + "/tokenizer.json", std::ios::trunc).flush();
       },
       1, {"FAIL  tokenizer", "is empty"}},
      {"gemma3_tokenizer",
       [&](auto s, auto d) {
         ASSERT_TRUE(CopyCheckpoint(s, d).ok());
         std::filesystem::copy_file(assets + "/gemma3.json", d + "/tokenizer.json",
                                    std::filesystem::copy_options::overwrite_existing);
       },
       1, {"FAIL  tokenizer", "Gemma-3"}},
      {"no_layer_scalar",
       [&](auto s, auto d) { ASSERT_TRUE(RewriteCheckpoint(s, d, [&](TensorToWrite& t) { return t.name != scalar; }).ok()); }, 1,
       {"FAIL  layer_scalar", scalar}},
      {"layer_scalar_ones",
       [](auto s, auto d) {
         ASSERT_TRUE(CopyCheckpoint(s, d, [](const std::string& name, std::vector<float>& v) {
                       if (name.find("layer_scalar") == std::string::npos) return false;
                       for (auto& x : v) x = 1.0f;
                       return true;
                     }).ok());
       },
       0, {"WARN  layer_scalar", "exactly 1.0"}},
      {"wrong_shape",
       [&](auto s, auto d) {
         ASSERT_TRUE(RewriteCheckpoint(s, d, [&](TensorToWrite& t) {
                       if (t.name == q) std::swap(t.shape[0], t.shape[1]);
                       return true;
                     }).ok());
       },
       1, {"FAIL  weights", "wrong shape", q}},
      {"truncated_shard",
       [](auto s, auto d) {
         ASSERT_TRUE(CopyCheckpoint(s, d).ok());
         ASSERT_EQ(::truncate((d + "/model.safetensors").c_str(), 100000), 0);
       },
       1, {"FAIL  weights", "truncated", "model.safetensors"}},
      {"nan_weight",
       [](auto s, auto d) {
         ASSERT_TRUE(CopyCheckpoint(s, d, [](const std::string& name, std::vector<float>& v) {
                       if (name.find("layers.4.mlp.down_proj") == std::string::npos) return false;
                       v[v.size() / 3] = std::nanf("");
                       return true;
                     }).ok());
       },
       1, {"FAIL  nan/inf", "layers.4.mlp.down_proj", "NaN"}},
  };
  for (const Broken& b : cases) {
    SCOPED_TRACE(b.name);
    const std::string d = TestTempDir("doctor_" + b.name);
    b.make(src, d);
    G4Run r = RunG4("doctor --model " + d);
    EXPECT_EQ(r.exit_code, b.exit_code) << r.output;
    for (const std::string& e : b.expect) EXPECT_TRUE(Contains(r.output, e)) << "missing \"" << e << "\" in:\n" << r.output;
    EXPECT_FALSE(Contains(r.output, "terminate called")) << r.output;
  }
}

}  // namespace
}  // namespace g4
