// Loading a `g4 pack` artifact back (sections: model/pack_layout.h) without conversion: the
// matrices point into the mapping, only the small norm vectors are copied. LoadModel
// (model/loader.h) calls it for an artifact.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "kernels/weight_matrix.h"
#include "model/plan.h"
#include "model/weights.h"

namespace g4 {

struct PackedModel {
  ModelPlan plan;
  std::unique_ptr<ModelWeights> weights;
  WeightType quant = WeightType::kBF16;
};

// Maps artifact PATH, verifies the checksums of rank `rank`'s and the shared sections (in parallel
// over `threads`), checks the stored rank plan against the config and binds that rank's weights.
// `tp` and `lm_head` are what the command runs with: an artifact packed for another rank count or
// LM-head placement is refused, naming both. `requested` kBF16 means "as packed"; q8/q4 must
// match the artifact's format (an artifact is never converted at load: repack instead).
Result<PackedModel> LoadPackedModel(const std::string& path, WeightType requested, int threads,
                                    int rank = 0, int tp = 1,
                                    LmHeadPlacement lm_head = LmHeadPlacement::kSplitVocab);

}  // namespace g4
