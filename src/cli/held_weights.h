// The weights a q8/q4 target really holds, for the float64 reference to run on (g4 validate's
// held-weights oracle). Against the checkpoint's bf16 weights, a quantized engine differs by its
// weights' rounding and its activations' rounding together; on a wide random network either is
// amplified into logits that no longer agree (docs/validate.md), and a check against them cannot
// tell a right kernel from a wrong one. Against the reference run on the very blocks the target
// holds, only the engine's own arithmetic is left to differ.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/weight_matrix.h"
#include "model/forward.h"
#include "model/plan.h"
#include "reference/reference.h"

namespace g4::cli {

class HeldWeights {
 public:
  // Loads `source` (a checkpoint directory or artifact of the model `full`) at `quant` as the
  // probe does, each of the `tp` ranks in turn (every rank quantizes its own slices, or reads
  // them from its artifact section), in the row-major layout.
  HeldWeights(const HeldWeights&) = delete;
  HeldWeights& operator=(const HeldWeights&) = delete;

  static Result<std::unique_ptr<HeldWeights>> Load(const std::string& source, const ModelPlan& full,
                                                   WeightType quant, int tp, int threads);

  // For ReferenceOptions::replace_rows: a reader of matrix `name`'s rows as the ranks hold them
  // (dequantized; exact in float), or an empty reader where every rank holds the checkpoint's
  // values (bf16/f32 matrices). Valid while this object lives.
  reference::RowReader Rows(const std::string& name) const;

  // How many matrices are held in another format than the checkpoint's.
  int replaced_count() const { return static_cast<int>(matrices_.size()); }

 private:
  HeldWeights() = default;
  // One rank's part of a matrix: rows/columns [begin, begin + n) of the whole.
  struct Piece {
    const WeightMatrix* matrix = nullptr;
    int64_t row_begin = 0, n_rows = 0, col_begin = 0, n_cols = 0;
  };
  struct Held {
    int64_t cols = 0;  // the whole matrix's width
    std::vector<Piece> pieces;
  };
  std::vector<std::unique_ptr<Model>> ranks_;
  std::map<std::string, Held> matrices_;  // only matrices held quantized somewhere
};

}  // namespace g4::cli
