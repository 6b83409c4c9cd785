#include "cli/held_weights.h"

#include <algorithm>

#include "kernels/quantize.h"
#include "model/loader.h"
#include "model/tensor_table.h"

namespace g4::cli {

Result<std::unique_ptr<HeldWeights>> HeldWeights::Load(const std::string& source, const ModelPlan& full,
                                                       WeightType quant, int tp, int threads) {
  auto held = std::unique_ptr<HeldWeights>(new HeldWeights());
  for (int rank = 0; rank < tp; ++rank) {
    ModelOptions options;
    options.threads = threads;
    options.load.quant = quant;
    options.kernel_layout = false;  // row-major: DequantizeRowTo reads either layout, this is cheaper
    options.rank = rank;
    options.tp = tp;
    G4_ASSIGN_OR_RETURN(auto model, LoadModel(source, options));
    // The table's slots take a mutable ModelWeights; they only say where a matrix lives.
    auto& weights = const_cast<ModelWeights&>(model->weights());
    for (const PlannedTensor& t : PlanTensors(full, model->plan())) {
      if (!t.held() || t.spec->kind != TensorKind::kMatrix) continue;
      const WeightMatrix* m = t.spec->matrix(weights, t.layer);
      if (m->rows != t.slice.n_rows || m->cols != t.slice.n_cols)
        return Status::Errorf("held weights: ", t.name, " is ", m->rows, "x", m->cols, " on rank ", rank,
                              ", its slice ", t.slice.n_rows, "x", t.slice.n_cols);
      Held& matrix = held->matrices_[t.name];
      matrix.cols = t.shape[1];
      const Piece piece{m, t.slice.row_begin, t.slice.n_rows, t.slice.col_begin, t.slice.n_cols};
      auto& pieces = matrix.pieces;
      const bool seen = std::any_of(pieces.begin(), pieces.end(), [&](const Piece& p) {
        return p.row_begin == piece.row_begin && p.n_rows == piece.n_rows && p.col_begin == piece.col_begin &&
               p.n_cols == piece.n_cols;
      });  // replicated on several ranks: the same values
      if (!seen) pieces.push_back(piece);
    }
    held->ranks_.push_back(std::move(model));
  }
  // Matrices every rank holds as the checkpoint stores them need no reader.
  for (auto it = held->matrices_.begin(); it != held->matrices_.end();) {
    const auto& pieces = it->second.pieces;
    const bool quantized = std::any_of(pieces.begin(), pieces.end(), [](const Piece& p) {
      return p.matrix->type == WeightType::kQ8 || p.matrix->type == WeightType::kQ4;
    });
    it = quantized ? std::next(it) : held->matrices_.erase(it);
  }
  return held;
}

reference::RowReader HeldWeights::Rows(const std::string& name) const {
  const auto it = matrices_.find(name);
  if (it == matrices_.end()) return nullptr;
  const Held* held = &it->second;
  return [held](int64_t first, int rows, float* out) {
    for (const Piece& p : held->pieces) {
      const int64_t begin = std::max(first, p.row_begin), end = std::min(first + rows, p.row_begin + p.n_rows);
      // A piece's row is p.n_cols (= its matrix's cols) wide: dequantized straight into place.
      for (int64_t r = begin; r < end; ++r)
        DequantizeRowTo(*p.matrix, static_cast<int>(r - p.row_begin), out + (r - first) * held->cols + p.col_begin);
    }
  };
}

}  // namespace g4::cli
