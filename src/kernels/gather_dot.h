// Scores a gathered subset of a table's rows against one vector, straight from the weights: the
// assistant drafter's centroid head (docs/gemma4.md §10.3) scores 4,096 of 262,144 rows per step.
#pragma once

#include <cstdint>

#include "kernels/weight_matrix.h"

namespace g4 {

// out[j] = sum_c W[ids[j], c] * x[c] for j < n, with the table's dot-product kernel
// (dot_f32 / dot_bf16_f32 of the active kernel table), prefetching the rows a few ids ahead.
// W is f32 or bf16 in row layout (the formats the assistant keeps); ids are in [0, W.rows).
// Runs on the calling thread (the assistant's 4,096 rows are 1 MiB, ~0.1 ms).
void GatherDot(const WeightMatrix& w, const int32_t* ids, int n, const float* x, float* out);

}  // namespace g4
