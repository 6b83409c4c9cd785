#include "kernels/row_lookup.h"

#include <cstring>

#include "base/half.h"
#include "base/mapped_file.h"
#include "kernels/cpu_kernels.h"
#include "kernels/quantize.h"

namespace g4 {
namespace {

bool RoundsThroughBlocks(const RowTable& t) {
  return t.round_to == WeightType::kQ8 || t.round_to == WeightType::kQ4;
}

void WidenRow(const uint8_t* src, DType dtype, int cols, float* out) {
  for (int c = 0; c < cols; ++c) {
    if (dtype == DType::kF32) {
      std::memcpy(&out[c], src + c * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, src + c * 2, 2);
      out[c] = dtype == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
    }
  }
}

}  // namespace

size_t RowLookupScratchBytes(const RowTable& t) {
  if (t.matrix) return 0;
  const size_t raw = static_cast<size_t>(t.cols) * DTypeSize(t.mapped_dtype);
  const size_t blocks = RoundsThroughBlocks(t) ? WeightBytes(t.round_to, 1, t.cols) : 0;
  return raw + blocks;
}

bool LookupRow(const RowTable& t, int64_t row, uint8_t* scratch, float* out) {
  if (t.matrix) {
    DequantizeRowTo(*t.matrix, static_cast<int>(row), out);
  } else {
    const size_t raw = static_cast<size_t>(t.cols) * DTypeSize(t.mapped_dtype);
    if (!CopyFromMapping(scratch, t.mapped + static_cast<size_t>(row) * raw, raw)) return false;
    WidenRow(scratch, t.mapped_dtype, t.cols, out);
    if (RoundsThroughBlocks(t)) {
      // Quantize the row as the whole matrix would have been (QuantizeMatrix), then read it back.
      WeightMatrix one{t.round_to, 1, t.cols, scratch + raw, WeightBytes(t.round_to, 1, t.cols)};
      const CpuKernels& k = ActiveKernels();
      auto* quants = const_cast<uint8_t*>(one.quants(0));
      auto* scales = const_cast<uint16_t*>(one.scales(0));
      if (t.round_to == WeightType::kQ8)
        k.quantize_row_q8w(out, t.cols, reinterpret_cast<int8_t*>(quants), scales);
      else
        k.quantize_row_q4w(out, t.cols, quants, scales);
      DequantizeRowTo(one, 0, out);
    }
  }
  for (int c = 0; c < t.cols; ++c) out[c] *= t.scale;
  return true;
}

}  // namespace g4
