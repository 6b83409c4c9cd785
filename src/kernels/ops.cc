#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
    k.quantize_row_q8(x + i * cols, cols, s.q.data() + i * cols, s.scale.data() + i * nb,
                      s.corr.data() + i * nb);
  };
  if (n >= 8) {
    pool.ParallelFor(n, row);
  } else {
    for (int i = 0; i < n; ++i) row(i, 0);
  }
  return QuantizedRows{n, cols, s.q.data(), s.scale.data(), s.corr.data()};
}

// Row-group matrices are split at group boundaries.
int AlignRows(const WeightMatrix& w, int rows) {
  return w.layout == WeightLayout::kRowGroups16 ? std::max(kRowGroup, rows / kRowGroup * kRowGroup)
                                                : rows;
}

// Decode (n = 1) streams W once: tasks of ~128 KiB, and at least 8 per thread so both threads
// stay busy to the end and the dynamic queue absorbs a core slowed by a neighbour. (600 MB
// q4/q8 matrix-vector on 2 threads, g4_microbench BM_Decode: 16-19 GB/s with 32 KiB tasks,
// 23-27 GB/s with 128-256 KiB; the threads then alternate less often between rows.)
int DecodeRowsPerTask(const WeightMatrix& w, int threads) {
  const size_t row_bytes = std::max<size_t>(1, WeightBytes(w.type, 1, w.cols));
  int rows = static_cast<int>(std::clamp<size_t>(131072 / row_bytes, 4, 1024));
  // At least ~8 tasks per thread so no thread waits long for the last one.
  while (rows > 4 && (w.rows + rows - 1) / rows < 8 * threads) rows /= 2;
  return AlignRows(w, std::max(4, rows / 4 * 4));
}

// Many x rows (prefill, batched decode): tasks are (block of W rows) x (block of x rows), sized
// so both blocks stay in L2 (~128 KiB of W, 64 x rows) while the register tiles pass over them.
// Without the x blocking a wide input (down_proj: 512 x 12288) is re-read from memory by every
// task.
constexpr int kXRowsPerTask = 64;
int PrefillRowsPerTask(const WeightMatrix& w) {
  const size_t row_bytes = std::max<size_t>(1, WeightBytes(w.type, 1, w.cols));
  return AlignRows(
      w, std::max(8, static_cast<int>(std::clamp<size_t>(131072 / row_bytes, 8, 512)) / 8 * 8));
}

}  // namespace

void MatMul(const WeightMatrix& w, const float* x, int n, float* y, ThreadPool& pool) {
  const CpuKernels& k = ActiveKernels();
  const int rows = w.rows, cols = w.cols;
  const int rows_per_task = n == 1 ? DecodeRowsPerTask(w, pool.size()) : PrefillRowsPerTask(w);
  const int64_t row_tasks = (rows + rows_per_task - 1) / rows_per_task;
  const int x_tasks = (n + kXRowsPerTask - 1) / kXRowsPerTask;
  // Task t: W rows block t % row_tasks, x rows block t / row_tasks.
  struct Range {
    int r0, r1, i0, i1;
  };
  auto range = [&](int64_t task) {
    Range g;
    g.r0 = static_cast<int>(task % row_tasks) * rows_per_task;
    g.r1 = std::min(rows, g.r0 + rows_per_task);
    g.i0 = static_cast<int>(task / row_tasks) * kXRowsPerTask;
    g.i1 = std::min(n, g.i0 + kXRowsPerTask);
    return g;
  };
  const int64_t n_tasks = row_tasks * x_tasks;
  switch (w.type) {
    case WeightType::kF32: {
      const float* wd = static_cast<const float*>(w.data);
      pool.ParallelFor(n_tasks, [&](int64_t task, int) {
        const Range g = range(task);
        for (int i = g.i0; i < g.i1; ++i)
          for (int r = g.r0; r < g.r1; ++r)
            y[static_cast<int64_t>(i) * rows + r] = k.dot_f32(
                wd + static_cast<int64_t>(r) * cols, x + static_cast<int64_t>(i) * cols, cols);
      });
      return;
    }
    case WeightType::kBF16:
      pool.ParallelFor(n_tasks, [&](int64_t task, int) {
        const Range g = range(task);
        k.matmul_bf16(w, g.r0, g.r1, x + static_cast<int64_t>(g.i0) * cols, g.i1 - g.i0,
                      y + static_cast<int64_t>(g.i0) * rows, rows);
      });
      return;
    case WeightType::kQ8:
    case WeightType::kQ4: {
      const QuantizedRows xq = QuantizeRows(x, n, cols, pool);
      const int nb = cols / kQuantBlock;
      auto kernel = w.type == WeightType::kQ8 ? k.matmul_q8 : k.matmul_q4;
      if (w.layout != WeightLayout::kRows && w.layout != k.LayoutFor(w.type)) {
        std::fprintf(stderr, "g4: internal error: a row-group matrix given to the %s kernels\n",
                     k.name);
        std::abort();
      }
      pool.ParallelFor(n_tasks, [&](int64_t task, int) {
        const Range g = range(task);
        const QuantizedRows sub{g.i1 - g.i0, cols, xq.q + static_cast<int64_t>(g.i0) * cols,
                                xq.scale + static_cast<int64_t>(g.i0) * nb,
                                xq.corr + static_cast<int64_t>(g.i0) * nb};
        kernel(w, g.r0, g.r1, sub, y + static_cast<int64_t>(g.i0) * rows, rows);
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

void GeluTanhMul(float* gate, const float* up, int64_t n, ThreadPool& pool) {
  const CpuKernels& k = ActiveKernels();
  constexpr int64_t kChunk = 16384;  // below this a pool hand-off costs more than it saves
  if (n <= kChunk) {
    k.gelu_tanh_mul(gate, up, n);
    return;
  }
  pool.ParallelFor((n + kChunk - 1) / kChunk, [&](int64_t t, int) {
    const int64_t begin = t * kChunk;
    k.gelu_tanh_mul(gate + begin, up + begin, std::min(kChunk, n - begin));
  });
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
