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

void QuantizeRowQ8W(const float* x, int cols, int8_t* q, uint16_t* scales) {
  for (int b = 0; b < cols / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0;
    for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    scales[b] = F32ToF16(amax / 127.0f);
    const float d = F16ToF32(scales[b]);
    const float inv = d > 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < kQuantBlock; ++i)
      q[b * kQuantBlock + i] = static_cast<int8_t>(std::clamp(std::nearbyint(xb[i] * inv), -127.0f, 127.0f));
  }
}

// q4 block: plain absmax scaling (d = -m/8) wastes most of the 16 levels on Gaussian weights, so
// try a range of grid widths and keep the least-squares optimum: for each candidate the ints are
// fixed by rounding, then the scale is refit as d = sum(w q) / sum(q^2), and the candidate with the
// smallest squared error wins (as llama.cpp's make_qx_quants does for its k-quants).
void QuantizeBlockQ4(const float* x, float* best_d, int* best_q) {
  float m = 0;
  for (int i = 0; i < kQuantBlock; ++i)
    if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
  if (m == 0) {
    *best_d = 0;
    for (int i = 0; i < kQuantBlock; ++i) best_q[i] = 0;
    return;
  }
  float best_err = INFINITY;
  *best_d = 0;
  std::fill(best_q, best_q + kQuantBlock, 0);
  int q[kQuantBlock];
  for (int step = -8; step <= 16; ++step) {
    const float inv = (-8.0f + 0.25f * step) / m;  // m maps to -8 + step/4 levels
    double wq = 0, qq = 0;
    for (int i = 0; i < kQuantBlock; ++i) {
      q[i] = static_cast<int>(std::clamp(std::nearbyint(x[i] * inv), -8.0f, 7.0f));
      wq += static_cast<double>(x[i]) * q[i];
      qq += static_cast<double>(q[i]) * q[i];
    }
    if (qq == 0) continue;
    const float d = RoundToF16(static_cast<float>(wq / qq));
    double err = 0;
    for (int i = 0; i < kQuantBlock; ++i) err += (x[i] - d * q[i]) * (x[i] - d * q[i]);
    if (err < best_err) {
      best_err = static_cast<float>(err);
      *best_d = d;
      std::copy(q, q + kQuantBlock, best_q);
    }
  }
}

void QuantizeRowQ4W(const float* x, int cols, uint8_t* q, uint16_t* scales) {
  std::memset(q, 0, cols / 2);
  for (int b = 0; b < cols / kQuantBlock; ++b) {
    float d = 0;
    int qi[kQuantBlock] = {};
    QuantizeBlockQ4(x + b * kQuantBlock, &d, qi);
    scales[b] = F32ToF16(d);
    uint8_t* chunk = q + (b / 2) * 32;
    const int shift = (b % 2) * 4;
    for (int i = 0; i < kQuantBlock; ++i) chunk[i] |= static_cast<uint8_t>((qi[i] + 8) << shift);
  }
}

}  // namespace

void QuantizeMatrix(const void* src, SourceType src_type, int rows, int cols, WeightType type,
                    uint8_t* out, ThreadPool* pool) {
  WeightMatrix w{type, rows, cols, out, WeightBytes(type, rows, cols)};
  constexpr int kRowsPerTask = 64;
  const int64_t n_tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
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
          QuantizeRowQ8W(row.data(), cols, const_cast<int8_t*>(reinterpret_cast<const int8_t*>(w.quants(r))),
                         const_cast<uint16_t*>(w.scales(r)));
          break;
        case WeightType::kQ4:
          SourceRow(src, src_type, offset, cols, row.data());
          QuantizeRowQ4W(row.data(), cols, const_cast<uint8_t*>(w.quants(r)), const_cast<uint16_t*>(w.scales(r)));
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
