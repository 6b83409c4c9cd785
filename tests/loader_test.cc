// LoadModel (model/loader.h): every source form gives the same model, a tensor-parallel rank of
// an artifact holds exactly the bytes the same rank of the checkpoint holds, and bad requests
// are precise errors. (Logits of each form against the reference: engine_vs_reference_test,
// tensor_parallel_test, pack_doctor_validate_test.)
#include "model/loader.h"

#include <gtest/gtest.h>

#include <cstring>

#include "base/mapped_file.h"
#include "model/architecture.h"
#include "model/pack_layout.h"
#include "model/pack_writer.h"
#include "model/tensor_table.h"
#include "testing/checkpoints.h"

namespace g4 {
namespace {

bool SameBytes(const WeightMatrix& a, const WeightMatrix& b) {
  return a.type == b.type && a.rows == b.rows && a.cols == b.cols && a.bytes == b.bytes &&
         std::memcmp(a.data, b.data, a.bytes) == 0;
}

// Every held tensor of the two models' plans is equal, matrices byte for byte.
void ExpectSameWeights(const ModelPlan& full, const Model& a, const Model& b) {
  EXPECT_EQ(PlanToJson(a.plan()), PlanToJson(b.plan()));
  auto& wa = const_cast<ModelWeights&>(a.weights());
  auto& wb = const_cast<ModelWeights&>(b.weights());
  int compared = 0;
  for (const PlannedTensor& t : PlanTensors(full, a.plan())) {
    if (!t.held()) continue;
    SCOPED_TRACE(t.name);
    switch (t.spec->kind) {
      case TensorKind::kMatrix:
        EXPECT_TRUE(SameBytes(*t.spec->matrix(wa, t.layer), *t.spec->matrix(wb, t.layer)));
        break;
      case TensorKind::kVector:
        EXPECT_EQ(*t.spec->vector(wa, t.layer), *t.spec->vector(wb, t.layer));
        break;
      case TensorKind::kScalar:
        EXPECT_EQ(*t.spec->scalar(wa, t.layer), *t.spec->scalar(wb, t.layer));
        break;
      case TensorKind::kTable:
        break;
    }
    ++compared;
  }
  EXPECT_GT(compared, 10);
}

TEST(LoadModel, DirectoryShardedDirectoryAndArtifactGiveTheSameModel) {
  const std::string dir = TinyCheckpoint("e4b", {.vocab = 512});
  const std::string sharded = TinyCheckpoint("e4b", {.vocab = 512, .shards = 3});
  const std::string artifact = TestTempDir("loader-same") + "/m.g4";
  ASSERT_TRUE(PackModel(dir, artifact, {.threads = 1}).ok());
  auto full = LoadModelPlan(dir);
  ASSERT_TRUE(full.ok()) << full.status().message();
  // Row-major layout on all three, so the bytes compare as stored.
  const ModelOptions options{.threads = 1, .kernel_layout = false};
  auto a = LoadModel(dir, options), b = LoadModel(sharded, options), c = LoadModel(artifact, options);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ((*a)->plan().architecture, "gemma4");
  ExpectSameWeights(*full, **a, **b);
  ExpectSameWeights(*full, **a, **c);
}

TEST(LoadModel, ArtifactRankHoldsTheCheckpointRanksBytes) {
  const std::string dir = TinyCheckpoint("e4b", {.vocab = 512});
  auto full = LoadModelPlan(dir);
  ASSERT_TRUE(full.ok());
  for (LmHeadPlacement lm : {LmHeadPlacement::kSplitVocab, LmHeadPlacement::kRank0}) {
    const std::string artifact = TestTempDir(Str("loader-rank-", LmHeadName(lm))) + "/m.g4";
    ASSERT_TRUE(PackModel(dir, artifact, {.quant = WeightType::kQ8, .tp = 2, .lm_head = lm,
                                          .threads = 1})
                    .ok());
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(Str("rank ", r, " lm_head ", LmHeadName(lm)));
      ModelOptions o{.threads = 1, .kernel_layout = false, .rank = r, .tp = 2, .lm_head = lm};
      o.load.quant = WeightType::kQ8;
      auto from_dir = LoadModel(dir, o);
      ASSERT_TRUE(from_dir.ok()) << from_dir.status().message();
      auto from_artifact = LoadModel(artifact, o);
      ASSERT_TRUE(from_artifact.ok()) << from_artifact.status().message();
      EXPECT_EQ((*from_dir)->plan().tp_rank, r);
      ExpectSameWeights(*full, **from_dir, **from_artifact);
    }
  }
}

TEST(LoadModel, BadRequestsArePreciseErrors) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  auto r = LoadModel(dir, {.threads = 1, .rank = 2, .tp = 2});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank 2 of --tp 2 does not exist"), std::string::npos)
      << r.status().message();

  // An unknown model_type names the ones this g4 knows.
  const std::string llama = TestTempDir("loader-llama");
  ASSERT_TRUE(WriteFileAtomic(llama + "/config.json", R"({"model_type": "llama"})").ok());
  r = LoadModel(llama);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("model_type \"llama\" is not supported"), std::string::npos) << m;
  for (const char* known : {"gemma4", "gemma4_unified", "gemma4_text", "gemma4_unified_text"})
    EXPECT_NE(m.find(known), std::string::npos) << m;

  // A --tp 2 artifact is refused at --tp 1 (by name, not misread).
  const std::string artifact = TestTempDir("loader-tp2") + "/m.g4";
  ASSERT_TRUE(PackModel(dir, artifact, {.tp = 2, .threads = 1}).ok());
  r = LoadModel(artifact, {.threads = 1});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("packed with --tp 2"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace g4
