#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "kernels/cpu_kernels.h"

namespace g4 {

namespace {
// Rows of W per task: large enough to amortise scheduling, small enough to balance 2+ threads.
constexpr int kRowsPerTask = 16;
}  // namespace

void MatMul(const WeightMatrix& w, const float* x, int n, float* y, ThreadPool& pool) {
  const CpuKernels& k = ActiveKernels();
  const int rows = w.rows, cols = w.cols;
  const int64_t n_tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  if (w.type == WeightType::kF32) {
    const float* wd = static_cast<const float*>(w.data);
    pool.ParallelFor(n_tasks, [&](int64_t task, int) {
      int r0 = static_cast<int>(task) * kRowsPerTask, r1 = std::min(rows, r0 + kRowsPerTask);
      for (int i = 0; i < n; ++i)
        for (int r = r0; r < r1; ++r)
          y[static_cast<int64_t>(i) * rows + r] =
              k.dot_f32(wd + static_cast<int64_t>(r) * cols, x + static_cast<int64_t>(i) * cols, cols);
    });
    return;
  }
  const uint16_t* wd = static_cast<const uint16_t*>(w.data);
  if (n == 1) {
    pool.ParallelFor(n_tasks, [&](int64_t task, int) {
      int r0 = static_cast<int>(task) * kRowsPerTask, r1 = std::min(rows, r0 + kRowsPerTask);
      for (int r = r0; r < r1; ++r) y[r] = k.dot_bf16_f32(wd + static_cast<int64_t>(r) * cols, x, cols);
    });
    return;
  }
  // Several rows of x: widen a block of W once, then reuse it for every x row.
  thread_local std::vector<float> block;
  pool.ParallelFor(n_tasks, [&](int64_t task, int) {
    int r0 = static_cast<int>(task) * kRowsPerTask, r1 = std::min(rows, r0 + kRowsPerTask);
    block.resize(static_cast<size_t>(kRowsPerTask) * cols);
    for (int r = r0; r < r1; ++r)
      k.bf16_to_f32(wd + static_cast<int64_t>(r) * cols, block.data() + static_cast<int64_t>(r - r0) * cols, cols);
    for (int i = 0; i < n; ++i) {
      const float* xi = x + static_cast<int64_t>(i) * cols;
      float* yi = y + static_cast<int64_t>(i) * rows;
      for (int r = r0; r < r1; ++r) yi[r] = k.dot_f32(block.data() + static_cast<int64_t>(r - r0) * cols, xi, cols);
    }
  });
}

void DequantizeRow(const WeightMatrix& w, int row, float* out) {
  const int64_t off = static_cast<int64_t>(row) * w.cols;
  if (w.type == WeightType::kF32) {
    std::memcpy(out, static_cast<const float*>(w.data) + off, sizeof(float) * w.cols);
  } else {
    ActiveKernels().bf16_to_f32(static_cast<const uint16_t*>(w.data) + off, out, w.cols);
  }
}

void RmsNorm(const float* x, const float* weight, int dim, float eps, float* out) {
  double ss = 0;
  for (int i = 0; i < dim; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
  if (weight) {
    for (int i = 0; i < dim; ++i) out[i] = x[i] * scale * weight[i];
  } else {
    for (int i = 0; i < dim; ++i) out[i] = x[i] * scale;
  }
}

float GeluTanh(float x) {
  const float kAlpha = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(kAlpha * (x + 0.044715f * x * x * x)));
}

void ApplyRope(float* head, int head_dim, int n_pairs, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int j = 0; j < n_pairs; ++j) {
    float a = head[j], b = head[j + half];
    head[j] = a * cos[j] - b * sin[j];
    head[j + half] = b * cos[j] + a * sin[j];
  }
}

void Softcap(float* x, int64_t n, float softcap) {
  if (softcap <= 0) return;
  const float inv = 1.0f / softcap;
  for (int64_t i = 0; i < n; ++i) x[i] = softcap * std::tanh(x[i] * inv);
}

int64_t ArgMax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

}  // namespace g4
