// cli/held_weights: g4 validate's held-weights oracle reads the q8/q4 matrices a target really
// holds. Each row it hands the reference must be that row of the checkpoint, rounded: a row or
// column put in the wrong place (a rank's slice misplaced, a replicated tensor counted twice, the
// wrong tensor under a name) leaves errors as large as the weights themselves, far above the
// rounding of either format. An artifact's blocks are read as packed.
#include "cli/held_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/architecture.h"
#include "model/tensor_table.h"
#include "testing/checkpoints.h"
#include "testing/run_g4.h"

namespace g4::cli {
namespace {

// Largest relative RMS error of one row against the checkpoint's: q8 rounds to 1/254 of the
// block's largest value (RMS about 0.3% of a Gaussian row's RMS), q4 to about a sixteenth
// (measured ~10% on Gaussian blocks). A misplaced row or column gives about 140%.
double MaxRowError(const TensorView& stored, const reference::RowReader& rows) {
  const int64_t n_rows = stored.shape[0], cols = stored.shape[1];
  std::vector<float> got(static_cast<size_t>(n_rows * cols), NAN);
  rows(0, static_cast<int>(n_rows), got.data());
  double worst = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    double err = 0, ref = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double w = stored.ValueAt(r * cols + c), e = got[r * cols + c] - w;
      err += e * e;
      ref += w * w;
    }
    worst = std::max(worst, ref > 0 ? std::sqrt(err / ref) : (err > 0 || std::isnan(err) ? INFINITY : 0.0));
  }
  return worst;
}

struct Case {
  WeightType quant;
  double bound;
};

TEST(HeldWeights, EveryRowIsTheCheckpointRowRoundedAtTp1AndTp2) {
  const std::string dir = TinyCheckpoint("e4b", {.vocab = 512});
  auto full = LoadModelPlan(dir);
  ASSERT_TRUE(full.ok());
  auto store = TensorStore::OpenDir(dir);
  ASSERT_TRUE(store.ok());
  const std::string prefix = (*store)->Find("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  for (const Case c : {Case{WeightType::kQ8, 0.01}, Case{WeightType::kQ4, 0.2}}) {
    for (int tp : {1, 2}) {
      const std::string what = std::string(WeightTypeName(c.quant)) + " tp " + std::to_string(tp);
      auto held = HeldWeights::Load(dir, *full, c.quant, tp, 2);
      ASSERT_TRUE(held.ok()) << what << ": " << held.status().message();
      int checked = 0;
      for (const PlannedTensor& t : PlanTensors(*full)) {
        if (!t.held() || t.spec->kind != TensorKind::kMatrix) continue;
        const reference::RowReader rows = (*held)->Rows(t.name);
        if (!rows) continue;
        ++checked;
        const double err = MaxRowError(*(*store)->Find(prefix + t.name), rows);
        EXPECT_LE(err, c.bound) << what << " " << t.name;
        EXPECT_GT(err, 0) << what << " " << t.name << ": held exactly, not quantized";
      }
      EXPECT_EQ(checked, (*held)->replaced_count()) << what;
      EXPECT_GE(checked, 10) << what;
    }
  }
}

// An artifact's q4 blocks are what the same machine's load-time quantization gives.
TEST(HeldWeights, ArtifactBlocksEqualTheCheckpointQuantizedAtLoad) {
  const std::string dir = TinyCheckpoint("e2b", {.vocab = 512});
  const std::string artifact = TestTempDir("held_weights_q4") + "/model.g4";
  const G4RunResult r = RunG4("pack --threads 2 --model " + dir + " --quant q4 --out " + artifact);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto full = LoadModelPlan(dir);
  ASSERT_TRUE(full.ok());
  auto from_dir = HeldWeights::Load(dir, *full, WeightType::kQ4, 1, 2);
  auto from_artifact = HeldWeights::Load(artifact, *full, WeightType::kQ4, 1, 2);
  ASSERT_TRUE(from_dir.ok() && from_artifact.ok());
  ASSERT_EQ((*from_dir)->replaced_count(), (*from_artifact)->replaced_count());
  for (const PlannedTensor& t : PlanTensors(*full)) {
    if (!t.held() || t.spec->kind != TensorKind::kMatrix) continue;
    const reference::RowReader a = (*from_dir)->Rows(t.name), b = (*from_artifact)->Rows(t.name);
    ASSERT_EQ(static_cast<bool>(a), static_cast<bool>(b)) << t.name;
    if (!a) continue;
    const size_t n = static_cast<size_t>(t.shape[0] * t.shape[1]);
    std::vector<float> va(n), vb(n);
    a(0, static_cast<int>(t.shape[0]), va.data());
    b(0, static_cast<int>(t.shape[0]), vb.data());
    EXPECT_EQ(va, vb) << t.name;
  }
}

}  // namespace
}  // namespace g4::cli
