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


// Row-major q4: element c of a row is in the 32-byte chunk c / 64, low nibble for the first 32.
inline int RowMajorNibble(const uint8_t* row, int c) {
  const uint8_t byte = row[c / 64 * 32 + c % 32];
  return c % 64 < 32 ? byte & 15 : byte >> 4;
}

// Byte offset, within its group's quants, of column `c` of row `i` of the group, and (q4) the
// nibble shift (layout in weight_matrix.h).
inline size_t GroupOffset(WeightType type, int i, int c, int* shift) {
  const int b = c / kQuantBlock, k = c % kQuantBlock, step = k / 4, j = k % 4;
  if (type == WeightType::kQ8) {
    *shift = 0;
    return static_cast<size_t>(b) * 512 + step * 64 + 4 * i + j;
  }
  *shift = step < 4 ? 0 : 4;
  return static_cast<size_t>(b) * 256 + (step % 4) * 64 + 4 * i + j;
}

}  // namespace

bool CanUseRowGroups(const WeightMatrix& w) {
  return (w.type == WeightType::kQ8 || w.type == WeightType::kQ4) &&
         w.layout == WeightLayout::kRows && w.rows > 0 && w.rows % kRowGroup == 0;
}

void ToRowGroups(WeightMatrix* w, uint8_t* out, ThreadPool* pool) {
  const WeightType type = w->type;
  const int nb = w->blocks();
  const size_t group_quants = w->quant_row_bytes() * kRowGroup;
  const size_t group_scales = static_cast<size_t>(nb) * kRowGroup;  // fp16 values
  const size_t quant_bytes = w->quant_row_bytes() * w->rows;
  const uint8_t* src_q = static_cast<const uint8_t*>(w->data);
  const uint16_t* src_s = reinterpret_cast<const uint16_t*>(src_q + quant_bytes);
  uint16_t* dst_s = reinterpret_cast<uint16_t*>(out + quant_bytes);
  const int groups = w->rows / kRowGroup;
  auto task = [&](int64_t g, int) {
    // A group keeps its byte range, so `out` may be w->data: copy the group out first.
    std::vector<uint8_t> q(src_q + g * group_quants, src_q + (g + 1) * group_quants);
    std::vector<uint16_t> sc(src_s + g * group_scales, src_s + (g + 1) * group_scales);
    uint8_t* dq = out + g * group_quants;
    if (type == WeightType::kQ4) std::memset(dq, 0, group_quants);
    for (int i = 0; i < kRowGroup; ++i) {
      const uint8_t* row = q.data() + i * w->quant_row_bytes();
      for (int c = 0; c < w->cols; ++c) {
        int shift;
        const size_t at = GroupOffset(type, i, c, &shift);
        if (type == WeightType::kQ8) {
          dq[at] = static_cast<uint8_t>(row[c] ^ 0x80);  // int8 q -> unsigned q + 128
        } else {
          dq[at] = static_cast<uint8_t>(dq[at] | RowMajorNibble(row, c) << shift);
        }
      }
      for (int b = 0; b < nb; ++b) dst_s[g * group_scales + b * kRowGroup + i] = sc[i * nb + b];
    }
  };
  if (pool) {
    pool->ParallelFor(groups, task);
  } else {
    for (int64_t g = 0; g < groups; ++g) task(g, 0);
  }
  w->data = out;
  w->layout = WeightLayout::kRowGroups16;
}

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
  if (w.layout == WeightLayout::kRowGroups16) {
    const int first = row / kRowGroup * kRowGroup, i = row % kRowGroup;
    const uint8_t* q = w.quants(first);
    const uint16_t* s = w.scales(first);
    for (int c = 0; c < w.cols; ++c) {
      int shift;
      const uint8_t byte = q[GroupOffset(w.type, i, c, &shift)];
      const int v = w.type == WeightType::kQ8 ? static_cast<int>(byte) - 128
                                              : (byte >> shift & 15) - 8;
      out[c] = F16ToF32(s[c / kQuantBlock * kRowGroup + i]) * static_cast<float>(v);
    }
    return;
  }
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
