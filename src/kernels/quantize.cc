#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "kernels/cpu_kernels.h"

namespace g4 {

namespace {

void SourceRow(const void* src, SourceType type, int64_t offset, int n, float* dst) {
  switch (type) {
    case SourceType::kF32:
      std::memcpy(dst, static_cast<const float*>(src) + offset, sizeof(float) * n);
      break;
    case SourceType::kBF16:
      ActiveKernels().bf16_to_f32(static_cast<const uint16_t*>(src) + offset, dst, n);
      break;
    case SourceType::kF16: {
      const uint16_t* p = static_cast<const uint16_t*>(src) + offset;
      for (int i = 0; i < n; ++i) dst[i] = F16ToF32(p[i]);
      break;
    }
  }
}


}  // namespace

void QuantizeMatrix(const void* src, SourceType src_type, int rows, int cols, WeightType type,
                    uint8_t* out, ThreadPool* pool) {
  WeightMatrix w{type, rows, cols, out, WeightBytes(type, rows, cols)};
  constexpr int kRowsPerTask = 64;
  const int64_t n_tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  const CpuKernels& k = ActiveKernels();
  auto task = [&](int64_t t, int) {
    std::vector<float> row(cols);
    const int r0 = static_cast<int>(t) * kRowsPerTask, r1 = std::min(rows, r0 + kRowsPerTask);
    for (int r = r0; r < r1; ++r) {
      const int64_t offset = static_cast<int64_t>(r) * cols;
      switch (type) {
        case WeightType::kF32:
          SourceRow(src, src_type, offset, cols, reinterpret_cast<float*>(out) + offset);
          break;
        case WeightType::kBF16:
          SourceRow(src, src_type, offset, cols, row.data());
          for (int i = 0; i < cols; ++i) reinterpret_cast<uint16_t*>(out)[offset + i] = F32ToBf16(row[i]);
          break;
        case WeightType::kQ8:
          SourceRow(src, src_type, offset, cols, row.data());
          k.quantize_row_q8w(row.data(), cols, const_cast<int8_t*>(reinterpret_cast<const int8_t*>(w.quants(r))),
                             const_cast<uint16_t*>(w.scales(r)));
          break;
        case WeightType::kQ4:
          SourceRow(src, src_type, offset, cols, row.data());
          k.quantize_row_q4w(row.data(), cols, const_cast<uint8_t*>(w.quants(r)), const_cast<uint16_t*>(w.scales(r)));
          break;
      }
    }
  };
  if (pool) {
    pool->ParallelFor(n_tasks, task);
  } else {
    for (int64_t t = 0; t < n_tasks; ++t) task(t, 0);
  }
}

void DequantizeRowTo(const WeightMatrix& w, int row, float* out) {
  const int64_t off = static_cast<int64_t>(row) * w.cols;
  switch (w.type) {
    case WeightType::kF32:
      std::memcpy(out, static_cast<const float*>(w.data) + off, sizeof(float) * w.cols);
      return;
    case WeightType::kBF16:
      ActiveKernels().bf16_to_f32(static_cast<const uint16_t*>(w.data) + off, out, w.cols);
      return;
    case WeightType::kQ8: {
      const int8_t* q = reinterpret_cast<const int8_t*>(w.quants(row));
      const uint16_t* s = w.scales(row);
      for (int b = 0; b < w.blocks(); ++b) {
        const float d = F16ToF32(s[b]);
        for (int i = 0; i < kQuantBlock; ++i) out[b * kQuantBlock + i] = d * q[b * kQuantBlock + i];
      }
      return;
    }
    case WeightType::kQ4: {
      const uint8_t* q = w.quants(row);
      const uint16_t* s = w.scales(row);
      for (int b = 0; b < w.blocks(); ++b) {
        const float d = F16ToF32(s[b]);
        const uint8_t* chunk = q + (b / 2) * 32;
        const int shift = (b % 2) * 4;
        for (int i = 0; i < kQuantBlock; ++i)
          out[b * kQuantBlock + i] = d * static_cast<float>(((chunk[i] >> shift) & 15) - 8);
      }
      return;
    }
  }
}

}  // namespace g4
