#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "kernels/cpu_kernels.h"
#include "kernels/quantize.h"

namespace g4 {

namespace {

// Activation rows quantized for q8/q4 products. Grow-only, per calling thread, so steady-state
// decode does not allocate.
struct QuantScratch {
  std::vector<int8_t> q;
  std::vector<float> scale, corr;
};

QuantizedRows QuantizeRows(const float* x, int n, int cols, ThreadPool& pool) {
  thread_local QuantScratch scratch;
  // A thread_local is never captured: workers would see their own. Name the caller's explicitly.
  QuantScratch& s = scratch;
  const size_t nb = static_cast<size_t>(cols) / kQuantBlock;
  if (s.q.size() < static_cast<size_t>(n) * cols) s.q.resize(static_cast<size_t>(n) * cols);
  if (s.scale.size() < n * nb) {
    s.scale.resize(n * nb);
    s.corr.resize(n * nb);
  }
  const CpuKernels& k = ActiveKernels();
  auto row = [&](int64_t i, int) {
    k.quantize_row_q8(x + i * cols, cols, s.q.data() + i * cols, s.scale.data() + i * nb, s.corr.data() + i * nb);
  };
  if (n >= 8) {
    pool.ParallelFor(n, row);
  } else {
    for (int i = 0; i < n; ++i) row(i, 0);
  }
  return QuantizedRows{n, cols, s.q.data(), s.scale.data(), s.corr.data()};
}

// Rows of W per task. Decode (n = 1) streams W once: tasks of ~32 KiB keep both threads busy to
// the end, and the dynamic queue absorbs a core that is slowed by a neighbour. With many x rows
// a task's W rows are reused from cache by every x tile, so a smaller block suffices.
int RowsPerTask(const WeightMatrix& w, int n, int threads) {
  const size_t row_bytes = std::max<size_t>(1, WeightBytes(w.type, 1, w.cols));
  int rows = n == 1 ? static_cast<int>(std::clamp<size_t>(32768 / row_bytes, 4, 256)) : 16;
  // At least ~8 tasks per thread so no thread waits long for the last one.
  while (rows > 4 && (w.rows + rows - 1) / rows < 8 * threads) rows /= 2;
  return std::max(4, rows / 4 * 4);
}

}  // namespace

void MatMul(const WeightMatrix& w, const float* x, int n, float* y, ThreadPool& pool) {
  const CpuKernels& k = ActiveKernels();
  const int rows = w.rows, cols = w.cols;
  const int rows_per_task = RowsPerTask(w, n, pool.size());
  const int64_t n_tasks = (rows + rows_per_task - 1) / rows_per_task;
  auto range = [&](int64_t task, int* r0, int* r1) {
    *r0 = static_cast<int>(task) * rows_per_task;
    *r1 = std::min(rows, *r0 + rows_per_task);
  };
  switch (w.type) {
    case WeightType::kF32: {
      const float* wd = static_cast<const float*>(w.data);
      pool.ParallelFor(n_tasks, [&](int64_t task, int) {
        int r0, r1;
        range(task, &r0, &r1);
        for (int i = 0; i < n; ++i)
          for (int r = r0; r < r1; ++r)
            y[static_cast<int64_t>(i) * rows + r] =
                k.dot_f32(wd + static_cast<int64_t>(r) * cols, x + static_cast<int64_t>(i) * cols, cols);
      });
      return;
    }
    case WeightType::kBF16:
      pool.ParallelFor(n_tasks, [&](int64_t task, int) {
        int r0, r1;
        range(task, &r0, &r1);
        k.matmul_bf16(w, r0, r1, x, n, y, rows);
      });
      return;
    case WeightType::kQ8:
    case WeightType::kQ4: {
      const QuantizedRows xq = QuantizeRows(x, n, cols, pool);
      auto kernel = w.type == WeightType::kQ8 ? k.matmul_q8 : k.matmul_q4;
      pool.ParallelFor(n_tasks, [&](int64_t task, int) {
        int r0, r1;
        range(task, &r0, &r1);
        kernel(w, r0, r1, xq, y, rows);
      });
      return;
    }
  }
}

void DequantizeRow(const WeightMatrix& w, int row, float* out) { DequantizeRowTo(w, row, out); }

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
