// Conversion of checkpoint tensors into the engine's weight formats (layouts in weight_matrix.h),
// and the inverse for one row (embedding lookup from the tied, possibly quantized, matrix).
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/weight_matrix.h"

namespace g4 {

enum class SourceType { kF32, kBF16, kF16 };

// Writes the [rows, cols] row-major tensor `src` as `type` into out[WeightBytes(type, rows, cols)].
// q8: d = max|w| / 127, q = round(w / d), rounding with the stored fp16 d. q4: per block the
// least-squares scale over a search of grid widths (quantize.cc), q in [-8, 7] stored as q + 8.
// Threaded over rows.
void QuantizeMatrix(const void* src, SourceType src_type, int rows, int cols, WeightType type,
                    uint8_t* out, ThreadPool* pool);

// Whether `w` can be reordered into 16-row groups (q8/q4, rows a multiple of 16, row-major now).
bool CanUseRowGroups(const WeightMatrix& w);
// Writes w's bytes in the row-group layout (weight_matrix.h) to out[w->bytes], which may be
// w->data itself, and points w at it. Same values, same size.
void ToRowGroups(WeightMatrix* w, uint8_t* out, ThreadPool* pool);

// Row `row` of a q8/q4/bf16/f32 matrix (either layout) as floats.
void DequantizeRowTo(const WeightMatrix& w, int row, float* out);

}  // namespace g4
