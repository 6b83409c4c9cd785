// One row of an embedding-like table as fp32, whatever form the table is held in. Both row
// lookups of the forward pass go through here: the token embedding (§3.1) and the per-layer
// embedding (§3.2).
#pragma once

#include <cstddef>
#include <cstdint>

#include "io/safetensors.h"
#include "kernels/weight_matrix.h"

namespace g4 {

// Either a matrix in kernel format (f32/bf16/q8/q4, either layout, owned or mapped from a pack),
// or a checkpoint's [rows, cols] table left mapped (bf16/f16/f32) that is read one row at a time.
struct RowTable {
  const WeightMatrix* matrix = nullptr;
  const uint8_t* mapped = nullptr;
  DType mapped_dtype = DType::kBF16;
  int cols = 0;
  // Mapped rows are rounded through this format first when it is q8/q4, so that a tensor-parallel
  // rank that maps the table sees the same input as one that dequantizes its quantized matrix.
  WeightType round_to = WeightType::kBF16;
  float scale = 1;  // every value is multiplied by it (sqrt(H) or sqrt(P), rounded as HF does)
};

// Bytes of scratch LookupRow needs for `table`.
size_t RowLookupScratchBytes(const RowTable& table);

// out[cols] = row `row` of the table, widened and scaled. A mapped row is copied under a SIGBUS
// guard: a checkpoint truncated or rewritten on disk while mapped returns false (fail the request,
// not the server). `scratch` holds RowLookupScratchBytes(table) bytes. Allocates nothing.
bool LookupRow(const RowTable& table, int64_t row, uint8_t* scratch, float* out);

}  // namespace g4
